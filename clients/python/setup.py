"""Generates the gRPC modules (`compactd.v1.compactd_pb2*`, with type stubs)
from the repository's proto at build time, into the wheel being built."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
PROTO_FILE = Path("compactd") / "v1" / "compactd.proto"


def proto_root() -> Path:
    # `proto` is a link to the repository's proto/ (kept in sdists as files).
    for root in (HERE / "proto", HERE.parent.parent / "proto"):
        if (root / PROTO_FILE).is_file():
            return root
    raise SystemExit(f"compactd: {PROTO_FILE} not found next to {HERE}: build from the compactd repository")


class BuildWithStubs(build_py):
    def run(self):
        super().run()
        from grpc_tools import protoc  # a build requirement (pyproject.toml)

        out = Path(self.build_lib)
        (out / "compactd" / "v1").mkdir(parents=True, exist_ok=True)
        root = proto_root()
        args = [
            "grpc_tools.protoc",
            f"-I{root}",
            f"--python_out={out}",
            f"--pyi_out={out}",
            f"--grpc_python_out={out}",
            str(root / PROTO_FILE),
        ]
        if protoc.main(args) != 0:
            raise SystemExit("compactd: protoc failed on " + str(root / PROTO_FILE))
        (out / "compactd" / "v1" / "__init__.py").write_text('"""Generated from proto/compactd/v1/compactd.proto."""\n')


setup(cmdclass={"build_py": BuildWithStubs})
