#!/usr/bin/env python3
"""compactd on compaction-conformance-kit (PyPI, MIT; no model calls), beside
the kit's own reference compactors and a BM25 retrieval baseline.

The kit plants typed canaries (safety rules, hard constraints, facts, goal
state, preferences) in sessions of short turns, compacts each session five
times in a row (round k+1 compacts round k's text) and checks which canaries
are still in the text. Budgets are characters, a fixed fraction of the
original transcript. Its leaderboard ranks compliance with the budget first,
then survival in the last round, then how many of 64 updated values come
back as the current value alone.

Systems added to the kit's eight:

  compactd        an adapter around `compactd compact --format openai`. The
                  kit's text (`[role] text` lines, the form the kit itself
                  writes transcripts in) is read back into messages, so
                  round k+1 hands compactd the messages it returned in round
                  k. The character budget becomes max_input_tokens by the
                  input's own characters per o200k token, then the adapter
                  looks for the largest max_input_tokens whose rendered text
                  fits the cap (at most six runs per round; a round where
                  none fits returns nothing). The rendered prompt is written back as
                  `[role] text` lines: system prompt, summaries, recall and
                  turns, everything compactd would send.
  bm25            the newest turns (up to half the cap) plus the earlier
                  turns BM25 (rank_bm25's Okapi) ranks highest for the last
                  user turn, in their original order, within the cap.

Usage: python eval/kit.py --compactd-bin target/release/compactd [--config F]
Writes eval/results/kit/{results.json,table.md}.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

try:
    from compaction_kit.benchmark import run_budget_benchmark, budget_benchmark_to_markdown
    from compaction_kit.cli import COMPACTORS
    from compaction_kit.compacted import CompactedContext
    from compaction_kit.compactors import _turns_to_text
    from compaction_kit.corpus import build_random_session
    from compaction_kit.runner import run_conformance
    from compaction_kit.session import Turn
    from compaction_kit.versioning import kit_version
    from rank_bm25 import BM25Okapi
except ImportError as e:  # a missing dependency is an error, never a skip
    raise SystemExit(f"eval/kit.py needs the test venv (scripts/venv.sh): {e}")

import run as ev  # noqa: E402  (o200k, offline)

ROLES = ("system", "user", "assistant", "tool")
LINE = re.compile(r"^\[(system|user|assistant|tool)\] ", re.M)
BUDGETS = (0.10, 0.20, 0.30)
SEEDS = (1, 2, 3, 4)
ROUNDS = 5
# compactd runs per round while the adapter looks for the largest budget that fits.
SEARCH_STEPS = 6


def text_to_messages(text: str) -> list[dict]:
    """`[role] text` lines back into messages; a line without a role tag
    continues the message before it. A tool turn has no call to answer, so
    it is the user's."""
    msgs: list[dict] = []
    starts = [m.start() for m in LINE.finditer(text)]
    if not starts or starts[0] != 0:
        starts = [0, *starts]
    for i, s in enumerate(starts):
        chunk = text[s: starts[i + 1] if i + 1 < len(starts) else len(text)].rstrip("\n")
        m = LINE.match(chunk)
        role, body = (m.group(1), chunk[m.end():]) if m else ("user", chunk)
        msgs.append({"role": "user" if role == "tool" else role, "content": said(body)})
    return msgs


# A user message as compactd delimits it by default (docs/configuration.md,
# `delimit_user_content`): the block is the rendering, the words are the
# message. Read back as the words, so round k+1 does not wrap round k's
# wrapper again; the rendered text, wrappers included, is what the budget
# is measured on.
USER_BLOCK = re.compile(r'<user_context id=([0-9a-f]{16})(?: source="[^"]*")?>\n(.*)\n</user_context id=\1>', re.S)


def said(body: str) -> str:
    m = USER_BLOCK.fullmatch(body)
    return m.group(2) if m else body


def content_text(c) -> str:
    if isinstance(c, str):
        return c
    if isinstance(c, list):
        return "\n".join(p.get("text", "") for p in c if isinstance(p, dict))
    return ""


def messages_to_text(msgs: list[dict]) -> str:
    lines = []
    for m in msgs:
        text = content_text(m.get("content"))
        for tc in m.get("tool_calls") or []:
            fn = tc.get("function") or {}
            text += f"\n{fn.get('name', '')}({fn.get('arguments', '')})"
        lines.append(f"[{m.get('role', 'user')}] {text}")
    return "\n".join(lines)


class CompactdCompactor:
    name = "compactd"

    def __init__(self, binary: str, counter, config: str | None, stats: dict):
        self.binary = binary
        self.counter = counter
        self.config = config
        self.stats = stats

    def _run(self, path: str, tokens: int) -> str | None:
        cmd = [self.binary, "compact", "--input", path, "--max-input-tokens", str(tokens), "--format", "openai"]
        if self.config:
            cmd += ["--config", self.config]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            self.stats["failures"] = self.stats.get("failures", 0) + 1
            self.stats.setdefault("errors", []).append(p.stderr.strip()[-300:])
            return None
        return messages_to_text(json.loads(p.stdout)["request"]["messages"])

    def compact(self, turns: list[Turn], round_num: int = 1, budget_chars: int | None = None) -> CompactedContext:
        # The kit hands a round's text back as one system turn.
        if len(turns) == 1 and LINE.match(turns[0].text):
            text = turns[0].text
        else:
            text = _turns_to_text(turns)
        msgs = text_to_messages(text)
        tokens_in = self.counter.messages(msgs)
        if budget_chars is None:
            budget_chars = 10 * len(text)
        # The largest max_input_tokens whose rendered text fits the cap:
        # first at the input's own characters per token, then by bisection
        # between what fitted and what did not.
        fits, over = 16, None
        tokens = max(16, int(budget_chars * tokens_in / max(1, len(text))))
        best = ""
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, encoding="utf-8") as fh:
            json.dump(msgs, fh, ensure_ascii=False)
            path = fh.name
        try:
            for _ in range(SEARCH_STEPS):
                got = self._run(path, tokens)
                self.stats["runs"] = self.stats.get("runs", 0) + 1
                if got is not None and len(got) <= budget_chars:
                    fits, best = tokens, got
                    if len(got) > 0.97 * budget_chars:
                        break
                else:
                    over = tokens
                nxt = (fits + over) // 2 if over else int(fits * budget_chars / max(1, len(got or best) or 1))
                if nxt in (fits, over) or nxt <= 16:
                    break
                tokens = max(nxt, fits + 1)
        finally:
            os.unlink(path)
        self.stats["calls"] = self.stats.get("calls", 0) + 1
        return CompactedContext(text=best, compactor_name=self.name, round_num=round_num)


def _words(s: str) -> list[str]:
    return re.findall(r"\w+", s.lower())


class Bm25Compactor:
    """The newest turns, then the earlier turns that best match the last
    user turn, in their original order, within the character cap."""

    name = "bm25"

    def compact(self, turns: list[Turn], round_num: int = 1, budget_chars: int | None = None) -> CompactedContext:
        msgs = text_to_messages(_turns_to_text(turns))
        lines = [f"[{m['role']}] {m['content']}" for m in msgs]
        cap = budget_chars if budget_chars is not None else sum(len(x) + 1 for x in lines)
        keep: set[int] = set()
        used = 0

        def take(i: int) -> bool:
            nonlocal used
            cost = len(lines[i]) + (1 if keep else 0)
            if used + cost > cap:
                return False
            keep.add(i)
            used += cost
            return True

        for i in range(len(lines) - 1, -1, -1):
            if used >= cap // 2 or not take(i):
                break
        query = next((m["content"] for m in reversed(msgs) if m["role"] == "user"), "")
        rest = [i for i in range(len(lines)) if i not in keep]
        if rest and query:
            bm = BM25Okapi([_words(lines[i]) or ["_"] for i in rest])
            scores = bm.get_scores(_words(query))
            for _, i in sorted(zip(scores, rest), key=lambda x: (-x[0], -x[1])):
                take(i)
        text = "\n".join(lines[i] for i in sorted(keep))
        return CompactedContext(text=text, compactor_name=self.name, round_num=round_num)


def per_round(factory, budget: float) -> list[float]:
    """Canary survival per round over the randomized seeds."""
    held = [0] * ROUNDS
    total = 0
    for seed in SEEDS:
        session, canaries = build_random_session(seed)
        run = run_conformance(session, factory(), rounds=ROUNDS, canaries=canaries, budget_fraction=budget)
        for k, r in enumerate(run.rounds):
            held[k] += sum(r.survived.values())
        total += len(canaries)
    return [h / total for h in held]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--compactd-bin", default=os.environ.get("COMPACTD_BIN", "target/release/compactd"))
    ap.add_argument("--config", help="compactd YAML config for the adapter")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "kit"))
    a = ap.parse_args(argv)
    if not os.access(a.compactd_bin, os.X_OK):
        raise SystemExit(f"no compactd binary at {a.compactd_bin}")
    counter = ev.Counter(ev.load_o200k())
    stats: dict = {}
    factories = dict(COMPACTORS)
    factories["compactd"] = lambda: CompactdCompactor(a.compactd_bin, counter, a.config, stats)
    factories["bm25"] = Bm25Compactor
    payload = run_budget_benchmark(factories, budgets=BUDGETS, seeds=SEEDS, rounds=ROUNDS)
    rounds = {f"{b:.0%}": {n: [round(x, 3) for x in per_round(factories[n], b)] for n in ("compactd", "bm25")}
              for b in BUDGETS}
    payload["per_round_survival"] = rounds
    payload["compactd_adapter"] = {k: v for k, v in stats.items() if k != "errors"}
    payload["compactd_errors"] = stats.get("errors", [])[:5]
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "results.json"), "w", encoding="utf-8") as fh:
        json.dump(payload, fh, indent=1)
    md = [budget_benchmark_to_markdown(payload), "",
          f"compaction-conformance-kit {kit_version()}; seeds {list(SEEDS)}, {ROUNDS} rounds.", "",
          "## Canary survival per round (randomized sessions)", "",
          "| budget | system | " + " | ".join(f"round {k + 1}" for k in range(ROUNDS)) + " |",
          "| --- | --- | " + " | ".join("---:" for _ in range(ROUNDS)) + " |"]
    for b, by in rounds.items():
        for n, xs in by.items():
            md.append(f"| {b} | {n} | " + " | ".join(f"{x:.0%}" for x in xs) + " |")
    md += ["", f"Adapter: {json.dumps(payload['compactd_adapter'])}"]
    with open(os.path.join(a.out, "table.md"), "w", encoding="utf-8") as fh:
        fh.write("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
