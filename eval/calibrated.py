#!/usr/bin/env python3
"""The Anthropic form of the public logs against their OpenAI form at the same
budget, once compactd has learned the provider's count from its usage reports.

Each log (tests/data/ and ../shared/realworld/, as eval/realworld.py reads
them) is replayed through the Python client against one `compactd serve
--dev`: eight growing prefixes, then the whole log, each rendered within the
same budget (1/4, 1/10 and 1/40 of the log's o200k size, at least 8,000).

  openai       format openai, gpt-4o: counted exactly (o200k); no reports.
  anthropic    format anthropic, claude-sonnet-4-5: after each render the
               body's count by the stand-in Messages API of
               tests/python/fake_cache.py (its own documented tokenizer) goes
               back as `usage` with the next call, so from the fourth call on
               the budget is held by the learned bound.
  estimate     format anthropic, claude-opus-4-1 (another model family, never
               reported on): today's conservative estimate, for the same run.
  openai_equal format openai, gpt-4o, at the budget times the log's o200k
               count over the stand-in's count of the same text: the room
               the provider's own tokenizer leaves at that budget, in o200k.
               The Anthropic form cannot keep more than this even counted
               exactly; the gap between the two is what calibration costs.

On the whole log's body: user kept and calls seen as eval/realworld.py
measures them, and the stand-in's count of the Anthropic bodies against the
budget (the promise holds by the provider's count). The calibration is the
tenant's: it carries from one log to the next, as it would in production.

Usage:
  COMPACTD_BIN=target/release/compactd .venv/bin/python eval/calibrated.py
Writes eval/results/calibrated/results.json and table.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "python"))

import load  # noqa: E402
import realworld  # noqa: E402
import run  # noqa: E402
from fake_cache import AnthropicCache, count  # noqa: E402

STEPS = 8
FORMS = {
    "openai": ("openai", "gpt-4o"),
    "anthropic": ("anthropic", "claude-sonnet-4-5"),
    "estimate": ("anthropic", "claude-opus-4-1"),
    "openai_equal": ("openai", "gpt-4o"),
}


def stand_in_count(body) -> int:
    return sum(count(text) for text, _ in AnthropicCache.blocks(body))


def prefixes(kind, data):
    msgs = data if kind == "openai" else data["messages"]
    n = len(msgs)
    cuts = sorted({max(1, n * k // STEPS) for k in range(1, STEPS)} | {n})
    for c in cuts:
        yield c == n, (msgs[:c] if kind == "openai" else {**data, "messages": msgs[:c]})


def replay(client, kind, data, form, budget, thread_id):
    fmt, model = FORMS[form]
    usage, out = None, None
    for last, conversation in prefixes(kind, data):
        r = client.render(
            conversation,
            thread_id=thread_id,
            model=model,
            budget=budget,
            format=fmt,
            usage=usage if form == "anthropic" else None,
            omit_pending_calls=True,
        )
        if fmt == "anthropic":
            provider = stand_in_count(r.body)
            usage = {"input_tokens": provider, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}
        else:
            provider = None
        out = (r, provider)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--compactd-bin", default=os.environ.get("COMPACTD_BIN"))
    ap.add_argument("--logs", action="append", default=None)
    ap.add_argument("--out-dir", default=os.path.join(HERE, "results", "calibrated"))
    a = ap.parse_args(argv)
    if not a.compactd_bin or not os.access(a.compactd_bin, os.X_OK):
        raise SystemExit("set COMPACTD_BIN (or --compactd-bin) to a built compactd binary")
    from compactd import Client

    counter = run.Counter(run.load_o200k())
    paths = realworld.expand(a.logs) if a.logs else realworld.default_log_paths()
    rows, seen = [], set()
    with tempfile.TemporaryDirectory() as data_dir:
        proc, addr = load.serve(os.path.abspath(a.compactd_bin), data_dir)
        try:
            with Client(addr) as client:
                for path in paths:
                    kind, data = realworld.load_log(path)
                    name = os.path.basename(path)[:-5]
                    key = json.dumps(data, sort_keys=True)
                    if kind is None or key in seen:
                        continue
                    seen.add(key)
                    humans, calls = realworld.log_items(kind, data)
                    tokens = (
                        3 + sum(counter.message(m) for m in data)
                        if kind == "openai"
                        else realworld.anthropic_tokens(counter, data)
                    )
                    text = realworld.body_text(data)
                    room = counter.text(text) / max(1, count(text))
                    for budget in realworld.budgets_for(tokens, realworld.DEFAULT_RATIOS, 8000):
                        row = {"log": name, "budget": budget, "humans": len(humans), "calls": len(calls),
                               "room": round(room, 3)}
                        for form in FORMS:
                            tid = f"{name}-{budget}-{form}"
                            b = int(budget * room) if form == "openai_equal" else budget
                            r, provider = replay(client, kind, data, form, b, tid)
                            kept, seen_c = realworld.survival(humans, calls, realworld.body_text(r.body))
                            row[form] = {
                                "tokens": r.tokens,
                                "provider_tokens": provider,
                                "counting": r.counting,
                                "scale": r.count_scale,
                                "user_kept": realworld.pct(kept, len(humans)),
                                "calls_seen": realworld.pct(seen_c, len(calls)),
                            }
                        rows.append(row)
                        print(json.dumps(row), flush=True)
        finally:
            proc.terminate()
            proc.wait(timeout=15)
    os.makedirs(a.out_dir, exist_ok=True)
    with open(os.path.join(a.out_dir, "results.json"), "w") as fh:
        json.dump(rows, fh, indent=1)
    table = render(rows)
    with open(os.path.join(a.out_dir, "table.md"), "w") as fh:
        fh.write(table)
    print(table)


def render(rows):
    def mean(form, k):
        vals = [r[form][k] for r in rows if r[form][k] is not None]
        return sum(vals) / len(vals) if vals else 0.0

    def gap(a, b):
        return (f"user kept {mean(a, 'user_kept') - mean(b, 'user_kept'):+.1f} points, "
                f"calls seen {mean(a, 'calls_seen') - mean(b, 'calls_seen'):+.1f} points")

    over = sum(
        1 for r in rows for f in ("anthropic", "estimate") if (r[f]["provider_tokens"] or 0) > r["budget"]
    )
    rooms = [r["room"] for r in rows]
    out = [
        "Anthropic form against OpenAI form at the same budget (eval/calibrated.py): "
        "`anthropic` is counted with the bound learned from the stand-in provider's usage reports, "
        "`estimate` with the conservative estimate (a model family never reported on), "
        "`openai_equal` is the OpenAI form at the room the stand-in's tokenizer leaves at that budget "
        f"({min(rooms):.2f}-{max(rooms):.2f} of it, by the log's o200k count over the stand-in's), all in one run.",
        "",
        "| form | cells | mean user kept | mean calls seen | over budget by the provider's count |",
        "|---|---:|---:|---:|---:|",
    ]
    for f in FORMS:
        o = sum(1 for r in rows if (r[f]["provider_tokens"] or 0) > r["budget"])
        out.append(f"| {f} | {len(rows)} | {mean(f, 'user_kept'):.1f}% | {mean(f, 'calls_seen'):.1f}% | "
                   f"{o if FORMS[f][0] == 'anthropic' else '–'} |")
    out += [
        "",
        f"Anthropic (calibrated) minus OpenAI: {gap('anthropic', 'openai')}; "
        f"minus OpenAI at equal room: {gap('anthropic', 'openai_equal')}; "
        f"estimate minus OpenAI: {gap('estimate', 'openai')}. Anthropic bodies over budget: {over}.",
        "",
        "| log | budget | room | openai user / calls | openai_equal user / calls | anthropic user / calls (scale) "
        "| estimate user / calls | anthropic provider tokens |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        o, q, c, e = r["openai"], r["openai_equal"], r["anthropic"], r["estimate"]
        out.append(
            f"| {r['log']} | {r['budget']:,} | {r['room']:.2f} | {o['user_kept']}% / {o['calls_seen']}% | "
            f"{q['user_kept']}% / {q['calls_seen']}% | "
            f"{c['user_kept']}% / {c['calls_seen']}% ({c['counting']} {c['scale']:.3f}) | "
            f"{e['user_kept']}% / {e['calls_seen']}% | {c['provider_tokens']:,} |"
        )
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    main()
