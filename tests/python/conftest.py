"""Shared fixtures: the generated gRPC modules and one real `compactd serve`.

The stubs are generated from `proto/` with grpcio-tools at test time (nothing
generated is checked in). The server is the binary under test (`COMPACTD_BIN`,
default `target/debug/compactd`) started with `compactd serve --dev --listen
127.0.0.1:0`: dev mode, loopback only, no credentials, and no configuration
taken from the environment.
"""

import importlib
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path

import grpc
import pytest

REPO = Path(__file__).resolve().parents[2]
PROTO_ROOT = REPO / "proto"
PROTO_FILE = PROTO_ROOT / "compactd" / "v1" / "compactd.proto"
STARTUP_TIMEOUT_S = 60
MAX_MESSAGE_BYTES = 64 * 1024 * 1024


@pytest.fixture(scope="session")
def api(tmp_path_factory):
    """Generated `compactd_pb2` and `compactd_pb2_grpc` modules."""
    out = tmp_path_factory.mktemp("stubs")
    cmd = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"--python_out={out}",
        f"--grpc_python_out={out}",
        str(PROTO_FILE),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"protoc failed:\n{done.stderr}"
    sys.path.insert(0, str(out))
    try:
        pb2 = importlib.import_module("compactd.v1.compactd_pb2")
        pb2_grpc = importlib.import_module("compactd.v1.compactd_pb2_grpc")
    finally:
        sys.path.remove(str(out))
    return pb2, pb2_grpc


def _binary():
    path = Path(os.environ.get("COMPACTD_BIN", "target/debug/compactd"))
    if not path.is_absolute():
        # Relative to the working directory when it exists there, else to the repo.
        path = path if path.exists() else REPO / path
    if not path.exists():
        pytest.fail(f"compactd binary not found at {path}: run `cargo build --bin compactd` or set COMPACTD_BIN")
    return path.resolve()


@pytest.fixture(scope="session")
def server_addr(tmp_path_factory):
    """Starts `compactd serve` on a free loopback port; yields `host:port`."""
    data_dir = tmp_path_factory.mktemp("data")
    log_path = data_dir.parent / "compactd-server.log"
    log = open(log_path, "wb")
    # No config from the environment: the one-command start (`--dev`, loopback).
    env = {k: v for k, v in os.environ.items() if not (k.startswith("COMPACTD__") or k == "COMPACTD_CONFIG")}
    proc = subprocess.Popen(
        [str(_binary()), "serve", "--dev", "--listen", "127.0.0.1:0", "--data-dir", str(data_dir)],
        stdout=subprocess.PIPE,
        stderr=log,
        env=env,
    )
    lines = queue.Queue()

    def read_stdout():
        for raw in proc.stdout:
            lines.put(raw.decode("utf-8", "replace").rstrip("\n"))
        lines.put(None)

    threading.Thread(target=read_stdout, daemon=True).start()
    try:
        try:
            first = lines.get(timeout=STARTUP_TIMEOUT_S)
        except queue.Empty:
            first = None
        prefix = "compactd listening on "
        if first is None or not first.startswith(prefix):
            raise AssertionError(
                f"server did not report its address (got {first!r}); log:\n" + log_path.read_text(errors="replace")
            )
        addr = first[len(prefix) :].strip()
        assert addr.startswith("127.0.0.1:"), addr
        yield addr
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)
        log.close()


@pytest.fixture(scope="session")
def stub(api, server_addr):
    """A `CompactionServiceStub` connected to the server."""
    _, pb2_grpc = api
    channel = grpc.insecure_channel(
        server_addr,
        options=[
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ],
    )
    grpc.channel_ready_future(channel).result(timeout=STARTUP_TIMEOUT_S)
    yield pb2_grpc.CompactionServiceStub(channel)
    channel.close()
