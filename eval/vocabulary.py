"""How many of the SDKs' request item and block types a compactd binary
takes and gives back intact, one conversation per union member (built from
the SDK's own type definitions by tests/python/test_provider_vocabulary.py),
through `compactd compact` at a generous budget in the conversation's own
format, the tool-output delimiter off.

    .venv/bin/python eval/vocabulary.py --bin target/debug/compactd [--bin OTHER]

Prints, per binary and family: intact (the item comes back JSON-equal),
altered (accepted, but not as it came), refused (an error), and the refused
and altered types.
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "python"))
import test_provider_vocabulary as v  # noqa: E402


def conversations():
    for member, td in sorted(v.RESPONSES_MEMBERS.items()):
        kind = v._type_of(td)
        items, item = v._responses_conversation(kind, td)
        yield "responses", member, {"model": "gpt-4o", "input": items}, item
    for kind in sorted(v.CHAT_PARTS):
        part = v.instance(v.CHAT_PARTS[kind])
        part["type"] = kind
        messages = [{"role": "user", "content": [{"type": "text", "text": "see"}, part]}]
        yield "openai", f"part {kind}", {"model": "gpt-4o", "messages": messages}, part
    for member in sorted(v.CHAT_MESSAGES):
        messages, m = v._chat_conversation(member)
        yield "openai", member, {"model": "gpt-4o", "messages": messages}, m
    for kind in sorted(v.ANTHROPIC_BLOCKS):
        messages, block = v._anthropic_conversation(kind)
        body = {"model": "claude-sonnet-4-5", "max_tokens": 1024, "messages": messages}
        yield "anthropic", f"block {kind}", body, block


def contains(body, fmt, item):
    if fmt == "responses":
        return item in body["input"]
    if fmt == "openai" and "role" in item:
        return item in body["messages"]
    blocks = [b for m in body["messages"] if isinstance(m.get("content"), list) for b in m["content"]]
    return item in blocks


def run(binary, tmp):
    config = Path(tmp) / "config.yaml"
    config.write_text("policy:\n  render:\n    delimit_tool_output: false\n")
    tally = {}
    for fmt, name, body, item in conversations():
        path = Path(tmp) / "in.json"
        path.write_text(json.dumps(body))
        r = subprocess.run(
            [binary, "compact", "--input", str(path), "--format", fmt, "--omit-pending-calls",
             "--max-input-tokens", "1000000", "--config", str(config)],
            capture_output=True, text=True,
        )
        t = tally.setdefault(fmt, {"intact": [], "altered": [], "refused": []})
        if r.returncode != 0:
            t["refused"].append(name)
            continue
        out = json.loads(r.stdout)["request"]
        t["intact" if contains(out, fmt, item) else "altered"].append(name)
    return tally


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", action="append", required=True)
    args = ap.parse_args()
    for binary in args.bin:
        with tempfile.TemporaryDirectory() as tmp:
            tally = run(binary, tmp)
        total = {k: sum(len(t[k]) for t in tally.values()) for k in ("intact", "altered", "refused")}
        print(f"{binary}: {sum(total.values())} types: {total['intact']} intact, "
              f"{total['altered']} altered, {total['refused']} refused")
        for fmt, t in tally.items():
            print(f"  {fmt}: {len(t['intact'])} intact, {len(t['altered'])} altered, {len(t['refused'])} refused")
            for k in ("altered", "refused"):
                if t[k]:
                    print(f"    {k}: {', '.join(t[k])}")


if __name__ == "__main__":
    main()
