#!/usr/bin/env python3
"""Load on real server processes: the numbers in docs/operations.md's Sizing
and docs/performance.md's "Calls in flight" section, each next to a named
baseline in the same run.

  race    Two `compactd serve` processes on one moto S3 + KMS (moto with its
          S3 writes made atomic, as the Rust tests start it), 32 concurrent
          Compacts of one thread per round with the version both replicas
          last saw, half to each. Prints per round the answers by replica
          and the slowest call. Baseline: `--baseline-bin`, an older build,
          in the same run. The thread grows by 16 turns with long tool
          results each round, so every round compacts and writes artifacts.
  memory  64 concurrent compacting Renders of a public log (a thread id
          each) against one `serve --dev`, for each `in_flight_bytes`
          given. Prints peak RSS, and the peak above the same 64 Renders one
          after another (what the calls in flight held).
  cpu     Server CPU time (utime + stime from /proc) of one request of
          100,000 short messages: Compact and compacting Render, with and
          without a tool call in every turn. Baseline: `--baseline-bin`.

Usage (release builds; an older build checked out with `git worktree add`):
  .venv/bin/python eval/load.py race --baseline-bin /path/to/old/compactd
  .venv/bin/python eval/load.py memory --in-flight 0,4194304
  .venv/bin/python eval/load.py cpu --baseline-bin /path/to/old/compactd
"""

import argparse
import collections
import concurrent.futures as cf
import json
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
import grpc  # noqa: E402
from compactd.v1 import compactd_pb2 as pb, compactd_pb2_grpc as rpc  # noqa: E402

OPTS = [("grpc.max_send_message_length", 256 << 20), ("grpc.max_receive_message_length", 256 << 20)]
# The public Claude Code log; a checkout without ../shared has its own.
LOG = next(p for p in (ROOT.parent / "shared" / "realworld" / "cc_explore.json",
                       ROOT / "tests" / "data" / "claude_code_rust_port.json") if p.exists())


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(port):
    for _ in range(600):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    sys.exit(f"nothing answered on port {port}")


def serve(binary, data_dir, env=None):
    """A `serve --dev` process on a free port; returns (process, address)."""
    e = {k: v for k, v in os.environ.items() if not k.startswith(("COMPACTD", "AWS_"))}
    e["HOME"] = str(data_dir)
    e.update(env or {})
    p = subprocess.Popen([binary, "serve", "--dev", "--listen", "127.0.0.1:0", "--data-dir", str(data_dir)],
                         env=e, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline().strip()
    if not line.startswith("compactd listening on "):
        sys.exit(f"{binary} did not start: {line!r}")
    return p, line.removeprefix("compactd listening on ")


def proc_cpu(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_mb(pid, key):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(key):
            return int(line.split()[1]) / 1024
    return 0.0


def moto():
    """moto in server mode with atomic S3 writes (testkit/src/moto.rs's wrapper)."""
    src = (ROOT / "testkit" / "src" / "moto.rs").read_text()
    wrapper = src.split('const ATOMIC_WRITES: &str = r#"')[1].split('"#;')[0]
    port = free_port()
    p = subprocess.Popen([sys.executable, "-c", wrapper, "-H", "127.0.0.1", "-p", str(port)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(port)
    return p, f"http://127.0.0.1:{port}"


def race_thread(turns):
    out = []
    for n in range(1, turns + 1):
        body = "".join(f"turn {n} line {i}: replica race batch finished {n * 100 + i}\n" for i in range(1500))
        out.append(pb.Message(id=f"u{n}", role=pb.ROLE_USER, turn=n, text=f"Step {n}: check shard {n}."))
        out.append(pb.Message(id=f"a{n}", role=pb.ROLE_ASSISTANT, turn=n,
                              tool_calls=[pb.ToolCall(id=f"c{n}", name="read_file", arguments_json="{}")]))
        out.append(pb.Message(id=f"t{n}", role=pb.ROLE_TOOL, turn=n, tool_result=pb.ToolResultEnvelope(
            tool_name="read_file", tool_call_id=f"c{n}", outcome=pb.OUTCOME_SUCCESS, content_text=body)))
        out.append(pb.Message(id=f"b{n}", role=pb.ROLE_ASSISTANT, turn=n, text=f"Shard {n} is fine."))
    return pb.Thread(id="race", messages=out)


def race_once(binary, rounds):
    import boto3
    m, endpoint = moto()
    aws = dict(endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
               aws_secret_access_key="testing")
    boto3.client("s3", **aws).create_bucket(Bucket="compactd-race")
    key = boto3.client("kms", **aws).create_key()["KeyMetadata"]["Arn"]
    env = {"COMPACTD__ARTIFACTS__BACKEND": "s3", "COMPACTD__ARTIFACTS__S3__BUCKET": "compactd-race",
           "COMPACTD__ARTIFACTS__KMS__KEY_ID": key, "AWS_ENDPOINT_URL": endpoint,
           "AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    policy = pb.PolicyOverrides(keep_recent_turns=1, keep_tool_io_pairs=0, enable_compress=False,
                                enable_clear=False, enable_retention=False, externalize_threshold_tokens=500)
    with tempfile.TemporaryDirectory() as tmp:
        servers = [serve(binary, pathlib.Path(tmp) / str(i), env) for i in range(2)]
        stubs = [rpc.CompactionServiceStub(grpc.insecure_channel(a, options=OPTS)) for _, a in servers]
        version = 0
        try:
            for rnd in range(rounds):
                thread = race_thread((rnd + 1) * 16)

                def one(i, version=version, thread=thread):
                    req = pb.CompactRequest(thread=thread, model="gpt-4o", max_input_tokens=8000,
                                            policy=policy, expected_version=version)
                    t = time.perf_counter()
                    try:
                        out = stubs[i % 2].Compact(req, timeout=40)
                        return i % 2, time.perf_counter() - t, "OK", out.version
                    except grpc.RpcError as e:
                        return i % 2, time.perf_counter() - t, e.code().name, None

                with cf.ThreadPoolExecutor(32) as ex:
                    res = list(ex.map(one, range(32)))
                answers = collections.Counter(f"replica {r}: {code}" for r, _, code, _ in res)
                slowest = [max(t for r, t, _, _ in res if r == k) for k in (0, 1)]
                print(f"  round {rnd} ({len(thread.messages) // 4} turns): {dict(sorted(answers.items()))}; "
                      f"slowest {slowest[0]:.2f} s / {slowest[1]:.2f} s", flush=True)
                version = max((v for *_, v in res if v is not None), default=version)
        finally:
            for p, _ in servers:
                p.terminate()
            m.terminate()


def renders(stubs, body, ids, concurrency):
    def one(i):
        t = time.perf_counter()
        stubs[i % len(stubs)].Render(pb.RenderRequest(
            input=pb.ProviderInput(thread_id=f"t{i}", json=body, format=pb.OUTPUT_FORMAT_OPENAI_CHAT),
            compact_first=True, model="gpt-4o", max_input_tokens=16000,
            format=pb.OUTPUT_FORMAT_OPENAI_CHAT), timeout=120)
        return time.perf_counter() - t

    with cf.ThreadPoolExecutor(concurrency) as ex:
        return max(ex.map(one, ids))


def memory(binary, in_flight, calls, logs):
    """`logs`: OpenAI `messages` files laid end to end, tool-call ids suffixed per file."""
    messages = []
    for k, path in enumerate(logs):
        for m in json.loads(pathlib.Path(path).read_text()):
            m = dict(m)
            if m.get("tool_calls"):
                m["tool_calls"] = [dict(c, id=f"{c.get('id')}-{k}") for c in m["tool_calls"]]
            if m.get("tool_call_id"):
                m["tool_call_id"] = f"{m['tool_call_id']}-{k}"
            messages.append(m)
    body = json.dumps(messages)
    names = " + ".join(pathlib.Path(p).name for p in logs)
    print(f"{calls} compacting Renders of {names} ({len(body)} bytes), a thread id each")
    for budget in in_flight:
        peaks = {}
        for concurrency in (1, calls):
            with tempfile.TemporaryDirectory() as tmp:
                p, addr = serve(binary, tmp, {"COMPACTD__IN_FLIGHT_BYTES": str(budget)})
                stubs = [rpc.CompactionServiceStub(grpc.insecure_channel(addr, options=OPTS)) for _ in range(8)]
                idle = proc_mb(p.pid, "VmRSS")
                slowest = renders(stubs, body, range(calls), concurrency)
                peaks[concurrency] = (idle, proc_mb(p.pid, "VmHWM"), slowest)
                p.terminate()
        (idle, seq, _), (_, conc, slowest) = peaks[1], peaks[calls]
        print(f"  in_flight_bytes {budget}: idle {idle:.0f} MB; peak {conc:.0f} MB at {calls} at once "
              f"(slowest {slowest:.2f} s), {seq:.0f} MB one after another: {conc - seq:.0f} MB held by "
              f"the calls in flight, {(seq - idle) / calls:.1f} MB kept per thread", flush=True)


def tiny_thread(tid, n, tools):
    msgs = []
    for i in range(n):
        turn = i // 4 + 1 if tools else i // 2 + 1
        if not tools:
            role = pb.ROLE_USER if i % 2 == 0 else pb.ROLE_ASSISTANT
            msgs.append(pb.Message(id=f"m{i}", role=role, text=f"ok {i}", turn=turn))
        elif i % 4 == 0:
            msgs.append(pb.Message(id=f"m{i}", role=pb.ROLE_USER, text=f"go {i}", turn=turn))
        elif i % 4 == 1:
            msgs.append(pb.Message(id=f"m{i}", role=pb.ROLE_ASSISTANT, turn=turn,
                                   tool_calls=[pb.ToolCall(id=f"c{i}", name="ls", arguments_json="{}")]))
        elif i % 4 == 2:
            msgs.append(pb.Message(id=f"m{i}", role=pb.ROLE_TOOL, turn=turn, tool_result=pb.ToolResultEnvelope(
                tool_name="ls", tool_call_id=f"c{i - 1}", outcome=pb.OUTCOME_SUCCESS, content_text=f"f{i}")))
        else:
            msgs.append(pb.Message(id=f"m{i}", role=pb.ROLE_ASSISTANT, text=f"ok {i}", turn=turn))
    return pb.Thread(id=tid, messages=msgs)


def cpu(binary, messages, repeat):
    with tempfile.TemporaryDirectory() as tmp:
        p, addr = serve(binary, tmp)
        stub = rpc.CompactionServiceStub(grpc.insecure_channel(addr, options=OPTS))
        try:
            for tools in (False, True):
                for kind in ("Compact", "Render"):
                    seen = []
                    for r in range(repeat):
                        t = tiny_thread(f"{kind}-{tools}-{r}", messages, tools)
                        c0, w0 = proc_cpu(p.pid), time.perf_counter()
                        if kind == "Compact":
                            stub.Compact(pb.CompactRequest(thread=t, model="gpt-4o", max_input_tokens=128000),
                                         timeout=300)
                        else:
                            stub.Render(pb.RenderRequest(thread=t, compact_first=True, model="gpt-4o",
                                                         max_input_tokens=128000,
                                                         format=pb.OUTPUT_FORMAT_OPENAI_CHAT), timeout=300)
                        seen.append((proc_cpu(p.pid) - c0, time.perf_counter() - w0))
                    shape = "a tool call in every turn" if tools else "user/assistant"
                    print(f"  {kind}, {messages} messages, {shape}: CPU "
                          + ", ".join(f"{c:.2f}" for c, _ in seen) + " s; wall "
                          + ", ".join(f"{w:.2f}" for _, w in seen) + " s", flush=True)
        finally:
            p.terminate()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["race", "memory", "cpu"])
    ap.add_argument("--bin", default=os.environ.get("COMPACTD_BIN", str(ROOT / "target" / "release" / "compactd")))
    ap.add_argument("--baseline-bin", help="an older build, run first in the same sitting (race, cpu)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--in-flight", default="0,67108864,4194304", help="in_flight_bytes values (memory)")
    ap.add_argument("--calls", type=int, default=64)
    ap.add_argument("--logs", default=str(LOG), help="comma-separated OpenAI messages logs, end to end (memory)")
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    binaries = [b for b in (args.baseline_bin, args.bin) if b]
    for b in binaries:
        if not os.path.exists(b):
            sys.exit(f"{b} not found: cargo build --release --bin compactd")
    if args.what == "memory":
        memory(args.bin, [int(x) for x in args.in_flight.split(",")], args.calls, args.logs.split(","))
        return
    for b in binaries:
        print(f"{b}:", flush=True)
        if args.what == "race":
            race_once(b, args.rounds)
        else:
            cpu(b, args.messages, args.repeat)


if __name__ == "__main__":
    main()
