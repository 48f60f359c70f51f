#!/usr/bin/env python3
"""Cold path at scale: one whole `compactd compact` process (start, read,
parse, count, plan, render, print) on threads of 2, 36 and 144 MB, next to
LangChain `trim_messages` in-process on the same thread and budget.

Threads: the OpenAI `messages` logs in ../shared/realworld/ and tests/data/
(real text, unchanged) laid end to end until the size is reached; the first
system message is kept once, tool-call ids get a per-copy suffix so every
call still has exactly one result. Budget: 128,000 tokens (gpt-4o, o200k).

compactd: `$COMPACTD_BIN compact --input F --format openai --model gpt-4o
--max-input-tokens 128000`, wall time and peak RSS of the child (wait4).
The output is checked: within the budget and no orphaned tool message.

LangChain, in-process (its import excluded), two counters:
  approx  `json.load` + `convert_to_messages` + `trim_messages(strategy="last",
          include_system=True, start_on="human", token_counter=count_tokens_approximately)`
          (langchain's own cheap counter, not exact: the fastest peer)
  exact   the same with tiktoken o200k, each message counted once and memoized
          (what an exact budget costs in Python)

Prints a markdown table (times, ratios, RSS / payload, growth exponent of the
compactd time between the smallest and largest size) and writes
eval/results/coldscale.json.

Usage:
  COMPACTD_BIN=target/release/compactd .venv/bin/python eval/coldscale.py
  .venv/bin/python eval/coldscale.py --sizes 2,36 --repeat 1
"""

import argparse
import json
import math
import os
import pathlib
import statistics
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEFAULT_BUDGET = 128_000
BUDGET = DEFAULT_BUDGET
MODEL = "gpt-4o"


def source_logs():
    """OpenAI-shaped logs (lists of role-bearing dicts) from the shared and test data."""
    logs = []
    for d in (ROOT.parent / "shared" / "realworld", ROOT / "tests" / "data"):
        if not d.is_dir():
            continue
        for p in sorted(d.glob("*.json")):
            try:
                v = json.loads(p.read_text())
            except (ValueError, UnicodeDecodeError):
                continue
            if isinstance(v, list) and v and all(isinstance(m, dict) and "role" in m for m in v):
                logs.append(v)
    if not logs:
        sys.exit("no OpenAI messages logs found in ../shared/realworld or tests/data")
    return logs


def build_thread(mb, logs):
    """Messages of about `mb` MB of JSON: the logs end to end, ids made unique per copy."""
    target = int(mb * 1_000_000)
    out, size, copy = [], 0, 0
    system = next((m for lg in logs for m in lg if m.get("role") == "system"), None)
    if system is not None:
        out.append(system)
        size += len(json.dumps(system))
    while size < target:
        for lg in logs:
            copy += 1
            for m in lg:
                if m.get("role") == "system":
                    continue
                m = dict(m)
                if m.get("tool_calls"):
                    m["tool_calls"] = [
                        dict(c, id=f"{c.get('id')}-{copy}") for c in m["tool_calls"]
                    ]
                if m.get("tool_call_id"):
                    m["tool_call_id"] = f"{m['tool_call_id']}-{copy}"
                out.append(m)
                size += len(json.dumps(m)) + 2
            if size >= target:
                break
    # End on an assistant reply without calls so nothing is left pending.
    while out and not (out[-1].get("role") == "assistant" and not out[-1].get("tool_calls")):
        out.pop()
    return out


def run_compactd(binary, path):
    """Wall seconds, peak RSS bytes and the parsed output of one cold process (fork + wait4)."""
    pid = os.fork()
    if pid == 0:
        fd = os.open(str(path) + ".out", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(fd, 1)
        nul = os.open(os.devnull, os.O_WRONLY)
        os.dup2(nul, 2)
        os.execv(binary, [binary, "compact", "--input", str(path), "--format", "openai",
                          "--model", MODEL, "--max-input-tokens", str(BUDGET)])
    start = time.perf_counter()
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"compactd exited {os.waitstatus_to_exitcode(status)} on {path}")
    with open(str(path) + ".out") as f:
        doc = json.load(f)
    return wall, usage.ru_maxrss * 1024, doc


def check_output(doc):
    """Within the budget and valid for the provider (eval/realworld.py's pairing check)."""
    sys.path.insert(0, str(ROOT / "eval"))
    from realworld import validate_openai
    errors = validate_openai(doc["request"]["messages"])
    if errors:
        sys.exit(f"invalid request: {errors[:3]}")
    used = doc["report"]["tokens_after"]
    if used > BUDGET:
        sys.exit(f"over budget: {used} > {BUDGET}")
    return used


def run_langchain(path, exact):
    from langchain_core.messages import convert_to_messages, trim_messages
    from langchain_core.messages.utils import count_tokens_approximately

    if exact:
        sys.path.insert(0, str(ROOT / "eval"))
        from run import load_o200k  # tiktoken with its BPE file from the bpe-openai wheel, offline
        enc = load_o200k()
        memo = {}

        def one(m):
            k = id(m)
            if k not in memo:
                text = m.content if isinstance(m.content, str) else json.dumps(m.content)
                calls = getattr(m, "tool_calls", None) or []
                n = 4 + len(enc.encode_ordinary(text))
                for c in calls:
                    n += len(enc.encode_ordinary(c["name"] + json.dumps(c["args"])))
                memo[k] = n
            return memo[k]

        def counter(ms):
            return 3 + sum(one(m) for m in ms)
    else:
        counter = count_tokens_approximately

    start = time.perf_counter()
    with open(path) as f:
        msgs = json.load(f)
    lc = convert_to_messages(msgs)
    out = trim_messages(lc, max_tokens=BUDGET, token_counter=counter, strategy="last",
                        include_system=True, start_on="human", allow_partial=False)
    wall = time.perf_counter() - start
    return wall, len(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="2,36,144", help="thread sizes in MB")
    ap.add_argument("--repeat", type=int, default=3, help="runs per cell (median); 1 at >= 100 MB")
    ap.add_argument("--no-exact", action="store_true", help="skip the exact-count LangChain run")
    ap.add_argument("--budget", type=int, default=DEFAULT_BUDGET, help="max input tokens (128,000)")
    ap.add_argument("--out", default=str(ROOT / "eval" / "results" / "coldscale.json"))
    args = ap.parse_args()
    global BUDGET
    BUDGET = args.budget
    binary = os.environ.get("COMPACTD_BIN", str(ROOT / "target" / "release" / "compactd"))
    if not os.path.exists(binary):
        sys.exit(f"{binary} not found: cargo build --release --bin compactd")
    sizes = [float(s) for s in args.sizes.split(",")]
    logs = source_logs()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for mb in sizes:
            msgs = build_thread(mb, logs)
            path = pathlib.Path(tmp) / f"thread-{mb:g}mb.json"
            path.write_text(json.dumps(msgs))
            payload = path.stat().st_size
            reps = 1 if mb >= 100 else args.repeat
            cd = [run_compactd(binary, path) for _ in range(reps)]
            used = check_output(cd[0][2])
            cd_time = statistics.median(c[0] for c in cd)
            cd_rss = max(c[1] for c in cd)
            os.unlink(str(path) + ".out")
            approx = statistics.median(run_langchain(path, False)[0] for _ in range(reps))
            exact = None if args.no_exact else run_langchain(path, True)[0]
            row = {
                "mb": payload / 1e6, "messages": len(msgs), "compactd_s": cd_time,
                "compactd_rss_mb": cd_rss / 1e6, "rss_over_payload": cd_rss / payload,
                "tokens_after": used, "langchain_approx_s": approx,
                "langchain_exact_s": exact,
                # compactd's time over the peer's: below 1 is faster.
                "time_over_approx": cd_time / approx,
                "time_over_exact": cd_time / exact if exact else None,
            }
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    # Growth exponent: least-squares slope of log(time) on log(size), and
    # step by step (a fixed start-up cost flattens the first step).
    exponent, steps = None, []
    if len(rows) >= 2:
        xs = [math.log(r["mb"]) for r in rows]
        ys = [math.log(r["compactd_s"]) for r in rows]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        exponent = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
        steps = [(a["mb"], b["mb"], math.log(b["compactd_s"] / a["compactd_s"]) / math.log(b["mb"] / a["mb"]))
                 for a, b in zip(rows, rows[1:])]
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"budget": BUDGET, "rows": rows, "exponent": exponent,
                               "steps": steps}, indent=1))
    print("| thread | messages | compactd (whole process) | peak RSS | RSS / payload "
          "| trim_messages, exact o200k | compactd / it | trim_messages, approx. counter | compactd / it |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ex = (f"{r['langchain_exact_s']:.2f} s | {r['time_over_exact']:.1f}×"
              if r["langchain_exact_s"] else "– | –")
        print(f"| {r['mb']:.0f} MB | {r['messages']:,} | {r['compactd_s']:.2f} s "
              f"| {r['compactd_rss_mb']:.0f} MB | {r['rss_over_payload']:.1f}× "
              f"| {ex} | {r['langchain_approx_s']:.2f} s | {r['time_over_approx']:.1f}× |")
    if exponent is not None:
        print(f"\ngrowth exponent of compactd time (least squares, {rows[0]['mb']:.0f}–{rows[-1]['mb']:.0f} MB): "
              f"{exponent:.2f}; step by step: "
              + ", ".join(f"{a:.0f}→{b:.0f} MB {e:.2f}" for a, b, e in steps))


if __name__ == "__main__":
    main()
