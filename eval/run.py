#!/usr/bin/env python3
"""Fact-retention evaluation: how many planted facts survive compaction.

For a set of seeded threads (eval/generate.py) and compression ratios
(max_input_tokens = thread_tokens / ratio) this runs

  compactd   $COMPACTD_BIN compact --input THREAD.json --max-input-tokens N --format openai
  truncate   keep the system message plus the newest messages that fit (naive)
  langchain  langchain_core.messages.trim_messages(strategy="last", include_system=True,
             start_on="human", allow_partial=False) with an exact o200k counter

and measures, per run: facts kept (all `check` strings of a fact present in the
prompt's text), per kind and per position; prompt tokens (exact o200k with the
OpenAI chat framing below) and budget use; orphaned tool calls/results; runs
over budget; failures.

Outputs eval/results/results.json, table.md and retention.png, and prints the table.

Token counting (one counter for everything: thread size, budgets, both
baselines' trimming, and the measurement of every result):
  o200k_base, exact, through tiktoken's own BPE implementation. tiktoken
  normally downloads o200k_base.tiktoken; here the file comes from the
  `bpe-openai` PyPI package (bpe_openai/data/o200k_base.tiktoken.gz), is
  decompressed into a private TIKTOKEN_CACHE_DIR under the name tiktoken looks
  for, and tiktoken itself checks it against OpenAI's published SHA-256
  (446a9538...1a2d) before use.  No network access is needed.
  Chat framing (OpenAI's published rule, as in compactd's docs/providers.md): 3 tokens of
  reply priming per request; per message 4 + content tokens (+1 + name tokens
  when `name` is set); per tool call 10 + tokens of its id, name and
  arguments; a tool message also pays for its tool_call_id.

Usage:
  python eval/run.py --quick                 # 3 threads (3 domains x 480 msgs x 1 seed)
  python eval/run.py                         # 12 threads (3 domains x {480,2000} x 2 seeds)
  COMPACTD_BIN=target/release/compactd python eval/run.py
  python eval/run.py --generator alt         # held-out threads from eval/generate_alt.py
                                             # (domains oncall,mlops,legal,shop; results in eval/results/alt/)
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import importlib.resources
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import generate as gen  # noqa: E402

KINDS = list(gen.KINDS)
BUCKETS = ["early", "middle", "late"]
SYSTEMS = ["compactd", "truncate", "langchain"]
DEFAULT_RATIOS = [4, 10, 20, 40]

O200K_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"


# --------------------------------------------------------------------------
# Exact o200k counting, offline
# --------------------------------------------------------------------------

def load_o200k():
    """tiktoken's o200k_base, with its BPE file taken from the bpe-openai wheel."""
    cache = os.environ.get("COMPACTD_EVAL_TIKTOKEN_CACHE") or os.path.join(tempfile.gettempdir(), "compactd-eval-tiktoken")
    os.makedirs(cache, exist_ok=True)
    path = os.path.join(cache, hashlib.sha1(O200K_URL.encode()).hexdigest())  # the name tiktoken's cache uses
    ok = False
    if os.path.exists(path):
        with open(path, "rb") as fh:
            ok = hashlib.sha256(fh.read()).hexdigest() == O200K_SHA256
    if not ok:
        data = gzip.decompress((importlib.resources.files("bpe_openai") / "data" / "o200k_base.tiktoken.gz").read_bytes())
        if hashlib.sha256(data).hexdigest() != O200K_SHA256:
            raise SystemExit("bpe-openai's o200k_base.tiktoken does not match OpenAI's published SHA-256")
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    os.environ["TIKTOKEN_CACHE_DIR"] = cache
    import tiktoken  # noqa: E402  (after TIKTOKEN_CACHE_DIR is set)
    enc = tiktoken.get_encoding("o200k_base")  # verifies the SHA-256 itself; no download since the cache hits
    return enc


def cross_check(enc, texts):
    """Counts from tiktoken and from bpe-openai's own Rust tokenizer must agree exactly."""
    import bpe_openai
    other = bpe_openai.get_encoding("o200k_base")
    bad = [t[:60] for t in texts if len(enc.encode_ordinary(t)) != len(other.encode(t, disallowed_special=()))]
    return len(texts), bad


class Counter:
    def __init__(self, enc):
        self.enc = enc

    def text(self, s) -> int:
        return len(self.enc.encode_ordinary(s)) if s else 0

    def content(self, c) -> int:
        if c is None:
            return 0
        if isinstance(c, str):
            return self.text(c)
        if isinstance(c, list):
            n = 0
            for p in c:
                if isinstance(p, dict):
                    for key in ("text", "refusal"):
                        if isinstance(p.get(key), str):
                            n += self.text(p[key])
                elif isinstance(p, str):
                    n += self.text(p)
            return n
        return self.text(json.dumps(c))

    def message(self, m: dict) -> int:
        n = 4 + self.content(m.get("content"))
        if m.get("name"):
            n += 1 + self.text(m["name"])
        for tc in m.get("tool_calls") or []:
            fn = tc.get("function") or {}
            args = fn.get("arguments", "")
            if not isinstance(args, str):
                args = json.dumps(args)
            n += 10 + self.text(tc.get("id", "")) + self.text(fn.get("name", "")) + self.text(args)
        if m.get("role") == "tool":
            n += self.text(m.get("tool_call_id", ""))
        return n

    def messages(self, msgs) -> int:
        return 3 + sum(self.message(m) for m in msgs)


# --------------------------------------------------------------------------
# Measurements on a result
# --------------------------------------------------------------------------

def _json_strings(v, out):
    if isinstance(v, str):
        out.append(v)
    elif isinstance(v, dict):
        for x in v.values():
            _json_strings(x, out)
    elif isinstance(v, list):
        for x in v:
            _json_strings(x, out)


def prompt_text(msgs) -> str:
    """All message contents and tool-call names/arguments.  JSON arguments and JSON
    tool contents are also decoded, so re-serialised JSON (other escaping) still matches."""
    parts = []
    for m in msgs:
        parts.append(gen.message_text(m))
        for tc in m.get("tool_calls") or []:
            a = (tc.get("function") or {}).get("arguments")
            if isinstance(a, str) and a[:1] in "{[":
                try:
                    _json_strings(json.loads(a), parts)
                except ValueError:
                    pass
        c = m.get("content")
        if isinstance(c, str) and c[:1] in "{[" and "\\" in c:
            try:
                _json_strings(json.loads(c), parts)
            except ValueError:
                pass
    return "\n".join(parts)


def facts_kept(text: str, facts):
    kept = {}
    for f in facts:
        kept[f["id"]] = all(c in text for c in f["check"])
    return kept


def orphans(msgs):
    """(results without an earlier call in the prompt, calls without a later result)."""
    open_calls = {}
    orphan_results = 0
    for m in msgs:
        if m.get("role") == "assistant":
            for tc in m.get("tool_calls") or []:
                open_calls[tc.get("id")] = open_calls.get(tc.get("id"), 0) + 1
        elif m.get("role") == "tool":
            cid = m.get("tool_call_id")
            if open_calls.get(cid, 0) > 0:
                open_calls[cid] -= 1
            else:
                orphan_results += 1
    return orphan_results, sum(open_calls.values())


# --------------------------------------------------------------------------
# Systems
# --------------------------------------------------------------------------

def run_truncate(msgs, counts, budget):
    keep_sys = bool(msgs) and msgs[0].get("role") == "system"
    total = 3 + (counts[0] if keep_sys else 0)
    kept = []
    for i in range(len(msgs) - 1, 0 if keep_sys else -1, -1):
        if total + counts[i] > budget:
            break
        kept.append(i)
        total += counts[i]
    idx = ([0] if keep_sys else []) + kept[::-1]
    return [msgs[i] for i in idx], {}


def run_langchain(msgs, counts, budget):
    from langchain_core.messages import convert_to_messages, trim_messages
    lc = convert_to_messages([dict(m, id=f"m{i}") for i, m in enumerate(msgs)])

    def token_counter(ms):  # exact: the per-message o200k counts of the original dicts
        return 3 + sum(counts[int(m.id[1:])] for m in ms)

    out = trim_messages(lc, max_tokens=budget, token_counter=token_counter, strategy="last",
                        include_system=True, start_on="human", allow_partial=False)
    return [msgs[int(m.id[1:])] for m in out], {}


def _candidates(obj, path, out, depth=0):
    """Every `messages` array of role-bearing dicts, with its JSON path and whether its
    parent looks like a request body (has `model`).  JSON strings are searched too
    (a provider payload may be serialised as a string)."""
    if depth > 10:
        return
    if isinstance(obj, dict):
        v = obj.get("messages")
        if isinstance(v, list) and v and all(isinstance(m, dict) and "role" in m for m in v):
            out.append((f"{path}.messages" if path else "messages", v, "model" in obj))
        for k, x in obj.items():
            if k != "messages":
                _candidates(x, f"{path}.{k}" if path else str(k), out, depth + 1)
    elif isinstance(obj, list):
        for i, x in enumerate(obj[:50]):
            _candidates(x, f"{path}[{i}]", out, depth + 1)
    elif isinstance(obj, str) and obj[:1] == "{" and '"messages"' in obj:
        try:
            _candidates(json.loads(obj), f"{path}<json>", out, depth + 1)
        except ValueError:
            pass


def is_openai_chat(msgs) -> bool:
    """Chat Completions shape: tool messages carry tool_call_id + content, tool calls carry function."""
    for m in msgs:
        if m.get("role") not in ("system", "developer", "user", "assistant", "tool"):
            return False
        if m.get("role") == "tool" and ("tool_call_id" not in m or "content" not in m):
            return False
        for tc in m.get("tool_calls") or []:
            if not isinstance(tc, dict) or "function" not in tc:
                return False
    return True


def find_messages(out):
    """-> (json_path, messages, is_openai_shape).  Prefers an OpenAI-shaped array under
    `request`, then one whose parent has `model`, then any OpenAI-shaped one."""
    cands = []
    if isinstance(out, dict) and "request" in out:
        _candidates(out["request"], "request", cands)
    _candidates({k: v for k, v in out.items() if k != "request"} if isinstance(out, dict) else out, "", cands)
    if not cands:
        return None, None, False
    ranked = sorted(enumerate(cands), key=lambda ic: (not is_openai_chat(ic[1][1]), not ic[1][0].startswith("request"),
                                                    not ic[1][2], ic[0]))
    path, msgs, _ = ranked[0][1]
    return path, msgs, is_openai_chat(msgs)


def find_key(obj, names, depth=0):
    """First value of any key in `names` (dotted paths allowed) anywhere in obj."""
    if depth > 8:
        return None
    if isinstance(obj, dict):
        for n in names:
            cur = obj
            for part in n.split("."):
                cur = cur.get(part) if isinstance(cur, dict) else None
                if cur is None:
                    break
            if cur is not None and not isinstance(cur, (dict, list)):
                return cur
        for v in obj.values():
            r = find_key(v, names, depth + 1)
            if r is not None:
                return r
    elif isinstance(obj, list):
        for v in obj:
            r = find_key(v, names, depth + 1)
            if r is not None:
                return r
    return None


def small_report(report):
    """The scalar-ish parts of compactd's report, for results.json."""
    if not isinstance(report, dict):
        return report
    out = {}
    for k, v in report.items():
        s = json.dumps(v)
        out[k] = v if len(s) <= 4000 else f"<{len(s)} bytes omitted>"
    return out


def run_compactd(binary, input_path, budget, extra_args, timeout, save_path=None):
    cmd = [binary, "compact", "--input", input_path, "--max-input-tokens", str(budget), "--format", "openai", *extra_args]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, {"status": "failed", "reason": f"timeout after {timeout}s", "cmd": " ".join(cmd)}
    if save_path:
        with open(save_path, "w", encoding="utf-8") as fh:
            fh.write(p.stdout)
    if p.returncode != 0:
        reason = {2: "bad input (exit 2)", 3: "budget cannot be met (exit 3)"}.get(p.returncode, f"exit {p.returncode}")
        return None, {"status": "failed", "reason": reason, "exit_code": p.returncode,
                      "stderr": p.stderr[-3000:], "cmd": " ".join(cmd)}
    try:
        out = json.loads(p.stdout)
    except ValueError as e:
        return None, {"status": "failed", "reason": f"stdout is not JSON: {e}", "stdout_head": p.stdout[:500]}
    path, msgs, openai_shape = find_messages(out)
    if msgs is None:
        return None, {"status": "failed", "reason": "no messages array found in compactd's output",
                      "top_keys": list(out) if isinstance(out, dict) else type(out).__name__}
    report = out.get("report") if isinstance(out, dict) else None
    info = {"messages_path": path, "openai_shape": openai_shape, "report": small_report(report),
            "reported_tokens_after": find_key(report, ["tokens_after"]),
            "reported_budget_target": find_key(report, ["budget.target", "target"]),
            "reported_target_use": find_key(report, ["target_use"]),
            "request_has_tools": bool(find_key(out.get("request"), ["tools"])) if isinstance(out, dict) else False,
            "stderr_tail": p.stderr[-500:] if p.stderr else ""}
    return msgs, info


# --------------------------------------------------------------------------
# Orchestration
# --------------------------------------------------------------------------

def thread_stats(msgs, counts):
    tool_tokens = [counts[i] for i, m in enumerate(msgs) if m["role"] == "tool"]
    return {"messages": len(msgs), "tokens": 3 + sum(counts),
            "tool_share": round(sum(tool_tokens) / max(1, sum(counts)), 3),
            "tool_tokens_median": statistics.median(tool_tokens) if tool_tokens else 0,
            "tool_tokens_p10": sorted(tool_tokens)[len(tool_tokens) // 10] if tool_tokens else 0,
            "tool_tokens_p90": sorted(tool_tokens)[(9 * len(tool_tokens)) // 10] if tool_tokens else 0,
            "tool_tokens_max": max(tool_tokens) if tool_tokens else 0}


def evaluate(system, msgs, facts, counter, budget, result_msgs, info, elapsed):
    rec = {"system": system, "status": info.get("status", "ok"), "seconds": round(elapsed, 3)}
    rec.update({k: v for k, v in info.items() if k != "status"})
    by_kind = {k: [0, 0] for k in KINDS}
    by_bucket = {b: [0, 0] for b in BUCKETS}
    if result_msgs is None:
        kept = {f["id"]: False for f in facts}
        rec.update({"tokens": None, "budget_use": None, "over_budget": None, "orphan_results": None,
                    "orphan_calls": None, "messages_kept": None})
    else:
        text = prompt_text(result_msgs)
        kept = facts_kept(text, facts)
        tokens = counter.messages(result_msgs)
        o_res, o_calls = orphans(result_msgs)
        rec.update({"tokens": tokens, "budget_use": round(tokens / budget, 4), "over_budget": tokens > budget,
                    "orphan_results": o_res, "orphan_calls": o_calls, "messages_kept": len(result_msgs)})
    for f in facts:
        by_kind[f["kind"]][1] += 1
        by_bucket[f["bucket"]][1] += 1
        if kept[f["id"]]:
            by_kind[f["kind"]][0] += 1
            by_bucket[f["bucket"]][0] += 1
    rec["facts_total"] = len(facts)
    rec["facts_kept"] = sum(kept.values())
    rec["by_kind"] = by_kind
    rec["by_bucket"] = by_bucket
    rec["lost"] = [f["id"] for f in facts if not kept[f["id"]]]
    return rec


def aggregate(runs, systems, ratios):
    agg = []
    for s in systems:
        for r in ratios:
            rs = [x for x in runs if x["system"] == s and x["ratio"] == r and x["status"] != "skipped"]
            if not rs:
                continue
            ok = [x for x in rs if x["status"] == "ok"]
            tot = sum(x["facts_total"] for x in rs)
            kept = sum(x["facts_kept"] for x in rs)
            row = {"system": s, "ratio": r, "runs": len(rs), "failed": len(rs) - len(ok),
                   "facts_total": tot, "facts_kept": kept, "kept_pct": 100.0 * kept / tot if tot else None,
                   "kept_pct_ok_runs": (100.0 * sum(x["facts_kept"] for x in ok) / sum(x["facts_total"] for x in ok)) if ok else None}
            for k in KINDS:
                t = sum(x["by_kind"][k][1] for x in rs)
                row[f"kind_{k}"] = 100.0 * sum(x["by_kind"][k][0] for x in rs) / t if t else None
            for b in BUCKETS:
                t = sum(x["by_bucket"][b][1] for x in rs)
                row[f"bucket_{b}"] = 100.0 * sum(x["by_bucket"][b][0] for x in rs) / t if t else None
            uses = [x["budget_use"] for x in ok]
            row["budget_use_mean"] = statistics.mean(uses) if uses else None
            row["budget_use_max"] = max(uses) if uses else None
            row["orphans"] = sum(x["orphan_results"] + x["orphan_calls"] for x in ok)
            row["orphan_results"] = sum(x["orphan_results"] for x in ok)
            row["orphan_calls"] = sum(x["orphan_calls"] for x in ok)
            row["runs_with_orphans"] = sum(1 for x in ok if x["orphan_results"] + x["orphan_calls"])
            row["over_budget"] = sum(1 for x in ok if x["over_budget"])
            agg.append(row)
    return agg


def breakdown(runs, systems, ratios, key):
    """kept % per system x ratio x value of `key` (domain or size); failures count as 0 kept."""
    out = []
    vals = sorted({x[key] for x in runs}, key=lambda v: (isinstance(v, str), v))
    for s in systems:
        for r in ratios:
            row = {"system": s, "ratio": r}
            for v in vals:
                rs = [x for x in runs if x["system"] == s and x["ratio"] == r and x[key] == v and x["status"] != "skipped"]
                tot = sum(x["facts_total"] for x in rs)
                row[str(v)] = 100.0 * sum(x["facts_kept"] for x in rs) / tot if tot else None
            out.append(row)
    return out, [str(v) for v in vals]


def fmt_pct(v):
    return "–" if v is None else f"{v:.1f}"


def render_table(agg, cfg, skipped_note, extra_tables=()):
    lines = [f"Facts kept (% of planted facts whose check strings all appear in the prompt) over "
             f"{cfg['n_threads']} threads{' from the held-out alt generator' if cfg.get('generator') == 'alt' else ''} "
             f"({', '.join(cfg['domains'])}; sizes {cfg['sizes']}; seeds {cfg['seeds']}); "
             f"{cfg['facts_per_run']} facts per system x ratio. A failed run counts as 0 kept.", ""]
    head = ["system", "ratio", "kept %"] + KINDS + ["budget use", "orphans", "over budget", "failed"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "|".join(["---"] * 2 + ["---:"] * (len(head) - 2)) + "|")
    for r in agg:
        use = "–" if r["budget_use_mean"] is None else f"{r['budget_use_mean']:.2f} (max {r['budget_use_max']:.2f})"
        cells = [r["system"], f"{r['ratio']}:1", fmt_pct(r["kept_pct"])] + [fmt_pct(r[f"kind_{k}"]) for k in KINDS] + \
                [use, f"{r['orphans']} ({r['orphan_results']}r/{r['orphan_calls']}c)", f"{r['over_budget']}/{r['runs'] - r['failed']}",
                 f"{r['failed']}/{r['runs']}"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "By position of the fact in the thread (kept %):", ""]
    lines.append("| system | ratio | early | middle | late |")
    lines.append("|---|---|---:|---:|---:|")
    for r in agg:
        lines.append(f"| {r['system']} | {r['ratio']}:1 | " + " | ".join(fmt_pct(r[f'bucket_{b}']) for b in BUCKETS) + " |")
    for title, rows, cols in extra_tables:
        lines += ["", f"{title}:", "", "| system | ratio | " + " | ".join(cols) + " |", "|---|---|" + "---:|" * len(cols)]
        for r in rows:
            lines.append(f"| {r['system']} | {r['ratio']}:1 | " + " | ".join(fmt_pct(r[c]) for c in cols) + " |")
    lines += ["", "budget use = result tokens / max_input_tokens (exact o200k, OpenAI chat framing), mean over runs that "
                  "returned a prompt; orphans = tool results with no earlier call in the prompt (r) + tool calls with no "
                  "later result (c), summed over runs; over budget = runs whose prompt exceeds max_input_tokens."]
    if skipped_note:
        lines += ["", skipped_note]
    return "\n".join(lines) + "\n"


def plot(agg, systems, ratios, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7.5, 4.6), dpi=130)
    style = {"compactd": ("tab:blue", "o", "-", 7), "truncate": ("tab:gray", "s", "--", -13),
             "langchain": ("tab:orange", "^", ":", 7)}
    for s in systems:
        rows = [r for r in agg if r["system"] == s and r["kept_pct"] is not None]
        if not rows:
            continue
        c, mk, ls, dy = style.get(s, (None, "o", "-", 7))
        ax.plot([r["ratio"] for r in rows], [r["kept_pct"] for r in rows], marker=mk, color=c, linestyle=ls,
                label=s, linewidth=2, markersize=7 if s != "langchain" else 6)
        for r in rows:
            note = f"{r['kept_pct']:.0f}" + (f" ({r['failed']}/{r['runs']} failed)" if r["failed"] else "")
            ax.annotate(note, (r["ratio"], r["kept_pct"]), textcoords="offset points", xytext=(0, dy),
                        ha="center", fontsize=8, color=c)
    ax.set_xscale("log")
    ax.set_xticks(ratios)
    ax.set_xticklabels([f"{r}:1" for r in ratios])
    ax.minorticks_off()
    ax.set_ylim(-6, 105)
    ax.set_xlabel("compression ratio (thread tokens / max_input_tokens)")
    ax.set_ylabel("planted facts kept (%)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def parse_list(s, typ=int):
    return [typ(x) for x in s.split(",") if x.strip()]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="3 domains x 480 messages x seed 1")
    ap.add_argument("--generator", choices=["main", "alt"], default="main",
                    help="thread generator: main = eval/generate.py, alt = the held-out eval/generate_alt.py")
    ap.add_argument("--domains", default=None, help="default: coding,data,support (main) or oncall,mlops,legal,shop (alt)")
    ap.add_argument("--sizes", default=None, help="messages per thread, comma separated (default 480,2000)")
    ap.add_argument("--seeds", default=None, help="comma separated (default 1,2)")
    ap.add_argument("--ratios", default=",".join(map(str, DEFAULT_RATIOS)))
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--compactd-bin", default=os.environ.get("COMPACTD_BIN"), help="default: $COMPACTD_BIN")
    ap.add_argument("--compactd-arg", action="append", default=[],
                    help="extra argument for `compactd compact` (repeatable), e.g. --compactd-arg=--model=gpt-4o")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per compactd call")
    ap.add_argument("--out-dir", default=None, help="default: eval/results (main) or eval/results/alt (alt)")
    ap.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "compactd-eval"),
                    help="generated threads and raw compactd outputs (large; outside the repo by default)")
    a = ap.parse_args(argv)
    if a.generator == "alt":
        import generate_alt as tgen
        if list(tgen.KINDS) != KINDS:
            raise SystemExit("generate_alt.KINDS differs from generate.KINDS")
    else:
        tgen = gen
    if a.domains is None:
        a.domains = "coding,data,support" if a.generator == "main" else ",".join(tgen.DOMAINS)
    if a.out_dir is None:
        a.out_dir = os.path.join(HERE, "results") if a.generator == "main" else os.path.join(HERE, "results", "alt")

    domains = [d for d in a.domains.split(",") if d]
    sizes = parse_list(a.sizes) if a.sizes else ([480] if a.quick else [480, 2000])
    seeds = parse_list(a.seeds) if a.seeds else ([1] if a.quick else [1, 2])
    ratios = parse_list(a.ratios)
    systems = [s for s in a.systems.split(",") if s]
    for s in systems:
        if s not in SYSTEMS:
            raise SystemExit(f"unknown system {s!r}; choose from {SYSTEMS}")

    skipped_note = ""
    binary = a.compactd_bin
    if "compactd" in systems:
        if not binary:
            skipped_note = ("compactd: SKIPPED (COMPACTD_BIN is not set). Build it and run "
                            "`COMPACTD_BIN=target/release/compactd python eval/run.py` to add its rows.")
            print(skipped_note, file=sys.stderr)
        else:
            resolved = shutil.which(binary) or (binary if os.path.isfile(binary) else None)
            if not resolved or not os.access(resolved, os.X_OK):
                raise SystemExit(f"COMPACTD_BIN={binary!r} is not an executable file")
            binary = os.path.abspath(resolved)

    os.makedirs(a.out_dir, exist_ok=True)
    os.makedirs(os.path.join(a.workdir, "threads"), exist_ok=True)
    os.makedirs(os.path.join(a.workdir, "compactd"), exist_ok=True)

    enc = load_o200k()
    counter = Counter(enc)
    import tiktoken
    import langchain_core
    import bpe_openai
    versions = {"python": sys.version.split()[0], "tiktoken": tiktoken.__version__,
                "bpe_openai": getattr(bpe_openai, "__version__", "?"), "langchain_core": langchain_core.__version__}
    compactd_version = None
    if binary and "compactd" in systems:
        try:
            v = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30)
            compactd_version = (v.stdout or v.stderr).strip()[:200]
        except Exception as e:  # noqa: BLE001
            compactd_version = f"unknown ({e})"

    runs = []
    threads = []
    sample_texts = []
    t_start = time.time()
    for domain in domains:
        for size in sizes:
            for seed in seeds:
                name = f"{domain}_{size}_s{seed}" if a.generator == "main" else f"alt-{domain}_{size}_s{seed}"
                t0 = time.time()
                thread = tgen.generate(seed, domain, size)
                msgs, facts = thread["messages"], thread["facts"]
                input_path = os.path.join(a.workdir, "threads", f"{name}.messages.json")
                with open(input_path, "w", encoding="utf-8") as fh:
                    json.dump(msgs, fh, ensure_ascii=False)
                with open(os.path.join(a.workdir, "threads", f"{name}.json"), "w", encoding="utf-8") as fh:
                    json.dump(thread, fh, ensure_ascii=False)
                counts = [counter.message(m) for m in msgs]
                st = thread_stats(msgs, counts)
                sample_texts += [m["content"] for m in msgs[::max(1, len(msgs) // 50)] if isinstance(m.get("content"), str)]
                threads.append({"name": name, "domain": domain, "size": size, "seed": seed, **st,
                                "facts": len(facts), "facts_by_kind": thread["meta"]["facts_by_kind"],
                                "facts_by_bucket": thread["meta"]["facts_by_bucket"], "input": input_path})
                print(f"[{name}] {st['messages']} messages, {st['tokens']:,} tokens (tool share {st['tool_share']:.0%}, "
                      f"tool msg median {st['tool_tokens_median']:.0f} tok), {len(facts)} facts "
                      f"(generated+counted in {time.time() - t0:.1f}s)", flush=True)
                for ratio in ratios:
                    budget = st["tokens"] // ratio
                    for system in systems:
                        base = {"thread": name, "domain": domain, "size": size, "seed": seed, "ratio": ratio,
                                "thread_tokens": st["tokens"], "max_input_tokens": budget}
                        if system == "compactd" and not binary:
                            runs.append({**base, "system": system, "status": "skipped"})
                            continue
                        t1 = time.time()
                        if system == "truncate":
                            res, info = run_truncate(msgs, counts, budget)
                        elif system == "langchain":
                            res, info = run_langchain(msgs, counts, budget)
                        else:
                            save = os.path.join(a.workdir, "compactd", f"{name}_r{ratio}.json")
                            res, info = run_compactd(binary, input_path, budget, a.compactd_arg, a.timeout, save)
                        rec = evaluate(system, msgs, facts, counter, budget, res, info, time.time() - t1)
                        runs.append({**base, **rec})
                        status = rec["status"] if rec["status"] != "failed" else f"FAILED: {rec.get('reason')}"
                        use = "" if rec["budget_use"] is None else f"use {rec['budget_use']:.2f}, "
                        orph = "" if rec["orphan_results"] is None else f"orphans {rec['orphan_results']}r/{rec['orphan_calls']}c, "
                        print(f"   {ratio:>3}:1 budget {budget:>7,}  {system:<9} kept {rec['facts_kept']:>3}/{rec['facts_total']:<3} "
                              f"{use}{orph}{rec['seconds']:.1f}s {'' if status == 'ok' else status}", flush=True)

    n_checked, bad = cross_check(enc, sample_texts[:800])
    if bad:
        print(f"WARNING: tiktoken and bpe-openai disagree on {len(bad)} of {n_checked} sample texts", file=sys.stderr)

    ran_systems = [s for s in systems if any(r["system"] == s and r["status"] != "skipped" for r in runs)]
    agg = aggregate(runs, ran_systems, ratios)
    cfg = {"domains": domains, "sizes": sizes, "seeds": seeds, "ratios": ratios, "systems": systems,
           "n_threads": len(threads), "facts_per_run": sum(t["facts"] for t in threads),
           "compactd_bin": binary, "compactd_args": a.compactd_arg, "compactd_version": compactd_version,
           "generator_version": tgen.GEN_VERSION, "versions": versions,
           "tokenizer": {"encoding": "o200k_base", "implementation": "tiktoken (BPE file from bpe-openai, SHA-256 verified)",
                         "sha256": O200K_SHA256, "cross_check_vs_bpe_openai": {"texts": n_checked, "mismatches": len(bad)},
                         "chat_framing": "3/request + 4/message (+1+name) + content; tool call 10 + id + name + arguments; "
                                         "tool message + tool_call_id"},
           "elapsed_seconds": round(time.time() - t_start, 1)}
    if a.generator != "main":   # (main's results.json keeps its original keys)
        cfg["generator"] = a.generator
    by_domain, dcols = breakdown(runs, ran_systems, ratios, "domain")
    by_size, scols = breakdown(runs, ran_systems, ratios, "size")
    extra = [("Kept % by domain", by_domain, dcols), ("Kept % by thread size (messages)", by_size, scols)]
    table = render_table(agg, cfg, skipped_note, extra)
    with open(os.path.join(a.out_dir, "results.json"), "w", encoding="utf-8") as fh:
        json.dump({"config": cfg, "threads": threads, "aggregate": agg, "by_domain": by_domain, "by_size": by_size,
                   "runs": runs}, fh, indent=1)
    with open(os.path.join(a.out_dir, "table.md"), "w", encoding="utf-8") as fh:
        fh.write(table)
    title = (f"Planted-fact retention, {len(threads)} thread{'s' if len(threads) != 1 else ''} "
             f"({'/'.join(domains)}, {'+'.join(map(str, sizes))} msgs, seeds {','.join(map(str, seeds))})")
    plot(agg, ran_systems, ratios, os.path.join(a.out_dir, "retention.png"), title)
    print()
    print(table)
    print(f"wrote {a.out_dir}/results.json, table.md, retention.png "
          f"(threads and raw outputs in {a.workdir}) in {time.time() - t_start:.0f}s")


if __name__ == "__main__":
    main()
