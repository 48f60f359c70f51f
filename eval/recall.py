#!/usr/bin/env python3
"""Recall evaluation: what of the part of a thread that does not fit can the
model still reach?  Compares compactd with and without its recall block,
keep-the-newest truncation, LangChain `trim_messages`, observation
masking (oldest tool results replaced by a placeholder until the request
fits, then truncation) and a BM25 retrieval baseline (the newest turns,
then the older turns BM25 ranks highest for the latest user message, at
the same tokens; eval/realworld.py) on the threads of both generators (eval/generate.py
and the held-out eval/generate_alt.py).  The public agent logs are
evaluated by eval/realworld.py (user requests kept, at least 8,000 tokens)
and tests/recall.rs (lost paths, ids and errors; questions about them).

Per thread and compression ratio (max_input_tokens = thread tokens / ratio):

  facts kept      planted facts whose check strings are all in the prompt
  asked           a fact asked about in a new last user turn is in the
                  prompt.  The question is the fact's description with its
                  value blanked ("deploy result contains the ticket …"),
                  so it names the subject, never the answer; up to
                  --questions facts per thread, from its first two thirds.
  refs reachable  planted paths, identifiers and errors that are in the
                  prompt, or (compactd) in the top 5 passages SearchContext
                  returns for a query naming them (`compactd compact
                  --search-queries`); an error with a name and a code
                  counts when both are among those passages
  requests kept   user messages whose opening (first 100 characters,
                  whitespace collapsed) is in the prompt
  budget use      prompt tokens / max_input_tokens (exact o200k)

Usage: scripts/eval-recall.sh (release build, test venv), or
  python eval/recall.py --compactd-bin target/release/compactd [--quick]
Writes eval/results/recall/{results.json,table.md}.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import generate as gen  # noqa: E402
import generate_alt as gen_alt  # noqa: E402
import realworld  # noqa: E402
import run as ev  # noqa: E402

SYSTEMS = ["compactd", "compactd-no-recall", "truncate", "langchain", "masking", "bm25"]
REF_KINDS = ("path", "identifier", "error")


def collapse(s: str) -> str:
    return " ".join(s.split())


def user_openings(msgs):
    out = []
    for m in msgs:
        if m.get("role") != "user":
            continue
        t = collapse(gen.message_text(m))
        if t:
            out.append(t[:100])
    return out


def question_for(fact):
    masked = fact["text"]
    for c in fact["check"]:
        masked = masked.replace(c, "…")
    if any(c in masked for c in fact["check"]) or "…" not in masked:
        return None
    return f"Before you go on: earlier there was this — \"{collapse(masked)}\". What was it exactly?"


def run_system(system, binary, msgs, counts, budget, path, counter, queries=None):
    if system == "masking":
        return realworld.run_masking(msgs, counts, counter, budget)[0], None
    if system == "bm25":
        return realworld.run_bm25(msgs, counts, counter, budget)[0], None
    if system == "truncate":
        return ev.run_truncate(msgs, counts, budget)[0], None
    if system == "langchain":
        return ev.run_langchain(msgs, counts, budget)[0], None
    extra = ["--no-recall"] if system == "compactd-no-recall" else []
    if queries:
        qpath = path + ".queries"
        with open(qpath, "w", encoding="utf-8") as fh:
            fh.write("\n".join(queries) + "\n")
        extra += ["--search-queries", qpath]
    import subprocess
    cmd = [binary, "compact", "--input", path, "--max-input-tokens", str(budget), "--format", "openai", *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        print(f"   compactd failed (exit {p.returncode}): {p.stderr[-300:]}", file=sys.stderr)
        return None, None
    out = json.loads(p.stdout)
    _, res, _ = ev.find_messages(out)
    return res, out.get("search")


def write(path, msgs):
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(msgs, fh, ensure_ascii=False)


def evaluate_thread(name, msgs, facts, a, counter, binary, workdir, rows):
    counts = [counter.message(m) for m in msgs]
    tokens = 3 + sum(counts)
    path = os.path.join(workdir, f"{name}.json")
    write(path, msgs)
    openings = user_openings(msgs)
    refs = [f for f in facts if f["kind"] in REF_KINDS]
    queries = [" ".join(f["check"]) for f in refs]
    rng = random.Random(name)
    askable = [f for f in facts if f["position"] < 2 * len(msgs) // 3 and question_for(f)]
    asked = rng.sample(askable, min(a.questions, len(askable)))
    for ratio in a.ratios:
        budget = tokens // ratio
        for system in a.systems:
            t0 = time.time()
            res, search = run_system(system, binary, msgs, counts, budget, path, counter,
                                     queries if system == "compactd" else None)
            row = {"thread": name, "ratio": ratio, "system": system, "budget": budget}
            if res is None:
                row["failed"] = True
                rows.append(row)
                continue
            text = ev.prompt_text(res)
            flat = collapse(text)
            row["tokens"] = counter.messages(res)
            row["budget_use"] = row["tokens"] / budget
            row["facts"] = [len(facts), sum(all(c in text for c in f["check"]) for f in facts)]
            row["requests"] = [len(openings), sum(o in flat for o in openings)]
            found = 0
            for k, f in enumerate(refs):
                if all(c in text for c in f["check"]):
                    found += 1
                elif search and k < len(search):
                    top = "\n".join(p["text"] for p in search[k]["passages"][:5])
                    if all(c in top for c in f["check"]):
                        found += 1
            row["refs"] = [len(refs), found]
            hits = 0
            for f in asked:
                q = {"role": "user", "content": question_for(f)}
                qmsgs = msgs + [q]
                qpath = os.path.join(workdir, f"{name}.q.json")
                write(qpath, qmsgs)
                qres, _ = run_system(system, binary, qmsgs, counts + [counter.message(q)], budget, qpath, counter)
                if qres is not None:
                    qtext = ev.prompt_text(qres)
                    hits += all(c in qtext for c in f["check"])
            row["asked"] = [len(asked), hits]
            row["seconds"] = round(time.time() - t0, 1)
            rows.append(row)
            print(f"  {name} {ratio}:1 {system:<19} facts {row['facts'][1]}/{row['facts'][0]} asked {hits}/{len(asked)} "
                  f"refs {found}/{len(refs)} requests {row['requests'][1]}/{row['requests'][0]} "
                  f"use {row['budget_use']:.2f} ({row['seconds']}s)", flush=True)


def pct(pairs):
    tot = sum(p[0] for p in pairs)
    return None if tot == 0 else 100.0 * sum(p[1] for p in pairs) / tot


def table(rows, ratios, systems, title):
    lines = [title, "", "| system | ratio | facts kept | asked, in prompt | refs in prompt or top-5 search | "
             "user requests kept | budget use | failed |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for s in systems:
        for r in ratios:
            rs = [x for x in rows if x["system"] == s and x["ratio"] == r]
            ok = [x for x in rs if not x.get("failed")]
            if not rs:
                continue
            cells = []
            for key in ("facts", "asked", "refs", "requests"):
                v = pct([x[key] for x in ok if key in x])
                cells.append("–" if v is None else f"{v:.1f}%")
            use = sum(x["budget_use"] for x in ok) / len(ok) if ok else None
            lines.append(f"| {s} | {r}:1 | " + " | ".join(cells) +
                         f" | {'–' if use is None else f'{use:.2f}'} | {len(rs) - len(ok)}/{len(rs)} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--compactd-bin", default=os.environ.get("COMPACTD_BIN"), required=False)
    ap.add_argument("--quick", action="store_true", help="one thread per domain of each generator, 480 messages")
    ap.add_argument("--ratios", default="10,30")
    ap.add_argument("--questions", type=int, default=6, help="facts asked about per thread")
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--out-dir", default=os.path.join(HERE, "results", "recall"))
    ap.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "compactd-eval-recall"))
    a = ap.parse_args(argv)
    a.ratios = ev.parse_list(a.ratios)
    a.systems = [s for s in a.systems.split(",") if s]
    if any(s.startswith("compactd") for s in a.systems) and not a.compactd_bin:
        raise SystemExit("--compactd-bin (or COMPACTD_BIN) is required for the compactd rows")
    os.makedirs(a.out_dir, exist_ok=True)
    os.makedirs(a.workdir, exist_ok=True)
    counter = ev.Counter(ev.load_o200k())
    binary = os.path.abspath(a.compactd_bin) if a.compactd_bin else None
    sizes = [480] if a.quick else [480, 2000]
    seeds = [1]
    generated = []
    t_start = time.time()
    for label, g, domains in (("main", gen, ["coding", "data", "support"]), ("alt", gen_alt, list(gen_alt.DOMAINS))):
        for d in domains:
            for size in sizes:
                for seed in seeds:
                    t = g.generate(seed, d, size)
                    evaluate_thread(f"{label}-{d}-{size}-s{seed}", t["messages"], t["facts"], a, counter, binary,
                                    a.workdir, generated)
    out = table(generated, a.ratios, a.systems,
                f"Generated threads ({len({r['thread'] for r in generated})}: both generators, "
                f"{'+'.join(map(str, sizes))} messages, {a.questions} questions each):")
    with open(os.path.join(a.out_dir, "results.json"), "w", encoding="utf-8") as fh:
        json.dump({"ratios": a.ratios, "systems": a.systems, "questions": a.questions, "generated": generated, "elapsed_seconds": round(time.time() - t_start, 1)}, fh, indent=1)
    with open(os.path.join(a.out_dir, "table.md"), "w", encoding="utf-8") as fh:
        fh.write(out)
    print()
    print(out)


if __name__ == "__main__":
    main()
