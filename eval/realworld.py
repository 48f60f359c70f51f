#!/usr/bin/env python3
"""compactd on real agent logs, next to keep-the-newest truncation, LangChain
`trim_messages` and observation masking on the same budgets.

Logs: every `*.json` in tests/data/ (public logs, see tests/data/README.md) and
in ../shared/realworld/ when that directory exists; `--logs` replaces both
(files or directories, repeatable). A log is an OpenAI Chat Completions
`messages` array or an Anthropic Messages body ({model, max_tokens, messages}
with tool_use/tool_result blocks). Identical logs are evaluated once.

Budgets: 1/4, 1/10 and 1/40 of the log's size (exact o200k with the chat
framing of eval/run.py), never below 8,000 (`--min-budget`); equal budgets are
run once. `--budgets` gives fixed budgets instead.

Systems, per log x budget:
  compactd   `$COMPACTD_BIN compact --input LOG --max-input-tokens N --format F --model M`
             for F in openai, anthropic, responses (M = gpt-4o for the OpenAI
             formats, claude-sonnet-4-5 for anthropic). Exit 2/3, a timeout or
             unparsable output is a row with the error, never a crash.
  truncate   system message + the newest messages that fit (eval/run.py)
  langchain  langchain_core trim_messages(strategy="last", start_on="human") (eval/run.py)
  masking    observation masking: the oldest tool results' content becomes
             "[tool result cleared]" until the request fits, newest last; if
             masking all of them is not enough, the oldest messages are then
             dropped as truncate does.
  bm25       BM25 retrieval baseline: the system message and the newest
             turns up to half the budget, then the older turns (an assistant
             turn with its tool results is one) that rank_bm25's Okapi ranks
             highest for the latest user message, while they fit, in order.
  The peers read OpenAI messages only; an Anthropic-body log is run through
  compactd only.

Measured per row:
  tokens     OpenAI formats and the peers: exact o200k recount of the request
             (chat framing of eval/run.py; Responses items counted with the
             same per-item framing). Anthropic: compactd's own count
             (`report.tokens_after`), there is no offline Claude tokenizer.
  service    compactd's `report.tokens_after`, `report.budget.target` and
             target use (tokens_after / target).
  valid      the body obeys its provider's pairing rules: OpenAI - every
             assistant tool call is answered by the tool messages right after
             it and no tool message answers anything else; Anthropic - roles
             alternate, starting with user, and every tool_use is answered by
             a tool_result in the next user message, every tool_result answers
             the assistant message just before; Responses - every
             function_call has a later function_call_output with its call_id
             and every output a call.
  within     tokens <= budget (OpenAI formats: both the recount and the
             service's count).
  user kept  share of the log's human messages (role user; tool results are
             not user messages) whose text - the first 200 characters of a
             longer one - is in the prompt, verbatim or quoted (whitespace
             runs normalised).
  calls seen share of the log's tool calls whose name and every argument
             value (first 200 characters of a long one) are in the prompt.

Outputs eval/results/realworld/results.json and table.md, and prints the table.

Usage:
  COMPACTD_BIN=target/release/compactd python eval/realworld.py
  python eval/realworld.py --logs tests/data/swe_agent_marshmallow.json --budgets 8000 --formats openai
  scripts/eval-realworld.sh        # builds the binary, makes the venv, runs this
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import run  # noqa: E402  (eval/run.py: o200k counting, peers, orphan check, output parsing)

FORMATS = ["openai", "anthropic", "responses"]
SYSTEMS = ["compactd", "truncate", "langchain", "masking", "bm25"]
DEFAULT_RATIOS = [4, 10, 40]
MODELS = {"openai": "gpt-4o", "responses": "gpt-4o", "anthropic": "claude-sonnet-4-5"}
MASK = "[tool result cleared]"
PREFIX = 200
NOT_LOGS = {"sources", "meta"}  # tests/data/sources.json, ../shared/realworld/meta.json


def default_log_paths():
    paths = sorted(glob.glob(os.path.join(REPO, "tests", "data", "*.json")))
    shared = os.path.normpath(os.path.join(REPO, "..", "shared", "realworld"))
    if os.path.isdir(shared):
        paths += sorted(glob.glob(os.path.join(shared, "*.json")))
    return paths


def expand(specs):
    out = []
    for s in specs:
        out += sorted(glob.glob(os.path.join(s, "*.json"))) if os.path.isdir(s) else [s]
    return out


# --------------------------------------------------------------------------
# Reading logs
# --------------------------------------------------------------------------

def is_anthropic_body(d) -> bool:
    return isinstance(d, dict) and isinstance(d.get("messages"), list) and any(
        isinstance(m.get("content"), list) and any(isinstance(b, dict) and b.get("type") in
                                                    ("tool_use", "tool_result", "thinking", "redacted_thinking")
                                                    for b in m["content"])
        for m in d["messages"])


def load_log(path):
    """-> (kind, data) with kind "openai" (messages list) or "anthropic" (body), or (None, reason)."""
    try:
        with open(path, encoding="utf-8") as fh:
            d = json.load(fh)
    except (OSError, ValueError) as e:
        return None, f"unreadable: {e}"
    if isinstance(d, list) and d and all(isinstance(m, dict) and "role" in m for m in d) and run.is_openai_chat(d):
        return "openai", d
    if isinstance(d, dict) and isinstance(d.get("messages"), list) and run.is_openai_chat(d["messages"]) \
            and not is_anthropic_body(d):
        return "openai", d["messages"]
    if is_anthropic_body(d):
        return "anthropic", d
    return None, "neither an OpenAI messages array nor an Anthropic Messages body"


def text_of(content) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content
                         if isinstance(p, str) or (isinstance(p, dict) and p.get("type") in (None, "text", "input_text", "output_text")))
    return json.dumps(content, ensure_ascii=False)


def log_items(kind, data):
    """(human message texts, tool calls as (name, arguments-object-or-string)) of a log."""
    humans, calls = [], []
    if kind == "openai":
        for m in data:
            if m.get("role") == "user":
                t = text_of(m.get("content"))
                if t.strip():
                    humans.append(t)
            for tc in m.get("tool_calls") or []:
                fn = tc.get("function") or {}
                calls.append((fn.get("name", ""), fn.get("arguments", "")))
    else:
        for m in data["messages"]:
            c = m.get("content")
            if m.get("role") == "user":
                if isinstance(c, str):
                    if c.strip():
                        humans.append(c)
                else:
                    t = "\n".join(b.get("text", "") for b in c if isinstance(b, dict) and b.get("type") == "text")
                    if t.strip():
                        humans.append(t)
            elif isinstance(c, list):
                for b in c:
                    if isinstance(b, dict) and b.get("type") == "tool_use":
                        calls.append((b.get("name", ""), b.get("input", {})))
    return humans, calls


def anthropic_tokens(counter, body) -> int:
    """o200k size of an Anthropic body (only to size the budgets of an Anthropic-body log)."""
    n = 3
    for m in body.get("messages", []):
        n += 4
        c = m.get("content")
        if isinstance(c, str):
            n += counter.text(c)
            continue
        for b in c or []:
            t = b.get("type")
            if t == "text":
                n += counter.text(b.get("text", ""))
            elif t == "thinking":
                n += counter.text(b.get("thinking", ""))
            elif t == "tool_use":
                n += 10 + counter.text(b.get("name", "")) + counter.text(json.dumps(b.get("input", {}), ensure_ascii=False))
            elif t == "tool_result":
                n += 4 + counter.text(text_of(b.get("content")))
    return n


# --------------------------------------------------------------------------
# Prompt text and survival
# --------------------------------------------------------------------------

_WS = re.compile(r"\s+")


def norm(s: str) -> str:
    return _WS.sub(" ", s).strip()


def _scalars(v, out):
    """Strings and numbers of a JSON value (numbers too: a tool_use `input` keeps them unquoted)."""
    if isinstance(v, str):
        out.append(v)
    elif isinstance(v, bool) or v is None:
        return
    elif isinstance(v, (int, float)):
        out.append(str(v))
    elif isinstance(v, dict):
        # Structure words ("type": "text", "role": "user") are not text the
        # model reads; kept, they would split two text blocks of one message.
        for k, x in v.items():
            if k not in ("type", "role"):
                _scalars(x, out)
    elif isinstance(v, list):
        for x in v:
            _scalars(x, out)


def body_text(obj) -> str:
    """Every string (and number) in a request body; JSON-looking strings (arguments, outputs) also decoded."""
    parts = []
    _scalars(obj, parts)
    extra = []
    for s in parts:
        if s[:1] in "{[":
            try:
                _scalars(json.loads(s), extra)
            except ValueError:
                pass
    return "\n".join(parts + extra)


def needle(s: str) -> str:
    s = norm(s)
    return s[:PREFIX] if len(s) > PREFIX else s


def arg_values(args):
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip()[:1] in "{[" else args
        except ValueError:
            return [args]
    vals = []

    def walk(v):
        if isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)
        elif isinstance(v, bool) or v is None:
            return
        elif isinstance(v, (int, float)):
            vals.append(str(v))
        elif isinstance(v, str) and v.strip():
            vals.append(v)
    walk(args)
    return vals


def survival(humans, calls, prompt: str):
    hay = norm(prompt)
    kept_h = sum(1 for h in humans if needle(h) in hay)
    seen_c = 0
    for name, args in calls:
        if name and norm(name) not in hay:
            continue
        if all(needle(v) in hay for v in arg_values(args)):
            seen_c += 1
    return kept_h, seen_c


# --------------------------------------------------------------------------
# Validity of a provider body
# --------------------------------------------------------------------------

def validate_openai(msgs):
    errs = []
    i = 0
    while i < len(msgs):
        m = msgs[i]
        if m.get("role") == "tool":
            errs.append(f"messages[{i}]: tool message {m.get('tool_call_id')!r} does not follow its call")
            i += 1
            continue
        calls = [tc.get("id") for tc in m.get("tool_calls") or []] if m.get("role") == "assistant" else []
        i += 1
        answered = []
        while i < len(msgs) and msgs[i].get("role") == "tool":
            cid = msgs[i].get("tool_call_id")
            if cid not in calls or cid in answered:
                errs.append(f"messages[{i}]: tool message {cid!r} answers no call of the assistant message before it")
            answered.append(cid)
            i += 1
        missing = [c for c in calls if c not in answered]
        if missing:
            errs.append(f"calls without a result right after them: {missing[:3]}")
    return errs


def validate_anthropic(body):
    errs = []
    msgs = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(msgs, list) or not msgs:
        return ["no messages"]
    if msgs[0].get("role") != "user":
        errs.append("first message is not from the user")
    for i, m in enumerate(msgs):
        if i and m.get("role") == msgs[i - 1].get("role"):
            errs.append(f"messages[{i}]: two {m.get('role')} messages in a row")
        c = m.get("content")
        if c in ("", []) or c is None:
            errs.append(f"messages[{i}]: empty content")
        blocks = c if isinstance(c, list) else []
        if m.get("role") == "assistant":
            uses = [b.get("id") for b in blocks if b.get("type") == "tool_use"]
            nxt = msgs[i + 1] if i + 1 < len(msgs) else None
            nb = nxt.get("content") if nxt and isinstance(nxt.get("content"), list) else []
            results = [b.get("tool_use_id") for b in nb if b.get("type") == "tool_result"]
            missing = [u for u in uses if u not in results]
            if missing and nxt is not None:
                errs.append(f"messages[{i}]: tool_use without a tool_result in the next message: {missing[:3]}")
            elif missing:
                errs.append(f"messages[{i}]: tool_use left pending at the end: {missing[:3]}")
        else:
            prev = msgs[i - 1] if i else None
            pb = prev.get("content") if prev and isinstance(prev.get("content"), list) else []
            uses = [b.get("id") for b in pb if b.get("type") == "tool_use"]
            for b in blocks:
                if b.get("type") == "tool_result" and b.get("tool_use_id") not in uses:
                    errs.append(f"messages[{i}]: tool_result {b.get('tool_use_id')!r} answers no tool_use just before")
    return errs


def validate_responses(body):
    items = body.get("input") if isinstance(body, dict) else None
    if not isinstance(items, list):
        return ["no input items"]
    errs, open_calls = [], {}
    for i, it in enumerate(items):
        t = it.get("type")
        if t == "function_call":
            open_calls[it.get("call_id")] = i
        elif t == "function_call_output":
            if it.get("call_id") not in open_calls:
                errs.append(f"input[{i}]: function_call_output {it.get('call_id')!r} has no earlier function_call")
            else:
                del open_calls[it.get("call_id")]
    if open_calls:
        errs.append(f"function_call without output: {list(open_calls)[:3]}")
    return errs


def responses_tokens(counter, body) -> int:
    """o200k of a Responses body with the chat framing: 3 per request, 4 per message item
    (+ instructions as one), function calls 10 + call_id + name + arguments, outputs 4 + call_id + output."""
    n = 3
    if body.get("instructions"):
        n += 4 + counter.text(body["instructions"])
    for it in body.get("input", []):
        t = it.get("type", "message")
        if t == "function_call":
            n += 10 + counter.text(it.get("call_id", "")) + counter.text(it.get("name", "")) + counter.text(it.get("arguments", ""))
        elif t == "function_call_output":
            out = it.get("output", "")
            n += 4 + counter.text(it.get("call_id", "")) + counter.text(out if isinstance(out, str) else text_of(out))
        elif t == "message":
            n += 4 + counter.text(text_of(it.get("content")))
        else:  # reasoning and other items
            n += 4 + counter.text(body_text(it))
    return n


# --------------------------------------------------------------------------
# Systems
# --------------------------------------------------------------------------

def run_masking(msgs, counts, counter, budget):
    total = 3 + sum(counts)
    out = [dict(m) for m in msgs]
    cnt = list(counts)
    masked = 0
    for i, m in enumerate(out):
        if total <= budget:
            break
        if m.get("role") == "tool":
            new = dict(m, content=MASK)
            c = counter.message(new)
            total += c - cnt[i]
            out[i], cnt[i] = new, c
            masked += 1
    info = {"masked": masked}
    if total > budget:
        res, _ = run.run_truncate(out, cnt, budget)
        info["dropped"] = len(out) - len(res)
        out = res
    return out, info


def _bm25_words(s: str):
    return re.findall(r"\w+", s.lower())


def _unit_text(m) -> str:
    calls = " ".join(json.dumps(tc.get("function") or {}, ensure_ascii=False) for tc in m.get("tool_calls") or [])
    return f"{text_of(m.get('content'))} {calls}"


def units_of(msgs):
    """Indices of `msgs` in units that stay valid alone: a message, or an
    assistant message with the tool results that answer it."""
    units, i = [], 0
    while i < len(msgs):
        j = i + 1
        if msgs[i].get("role") == "assistant" and msgs[i].get("tool_calls"):
            while j < len(msgs) and msgs[j].get("role") == "tool":
                j += 1
        units.append(list(range(i, j)))
        i = j
    return units


def run_bm25(msgs, counts, counter, budget):
    """BM25 retrieval baseline at the same tokens: the system message, the
    newest units up to half the budget, then the older units rank_bm25's
    Okapi scores highest for the latest user message, while they fit, all
    in their original order. Units are whole, so pairs stay valid."""
    from rank_bm25 import BM25Okapi

    units = units_of(msgs)
    keep, total = set(), 3
    if units and msgs[0].get("role") == "system":
        keep.add(0)
        total += counts[0]
        units = units[1:]

    def cost(u):
        return sum(counts[i] for i in u)

    newest = []
    for u in reversed(units):
        if total + cost(u) > budget or (newest and total + cost(u) > budget // 2):
            break
        newest.append(u)
        total += cost(u)
    for u in newest:
        keep.update(u)
    query = next((text_of(m.get("content")) for m in reversed(msgs) if m.get("role") == "user"), "")
    rest = [u for u in units if u[0] not in keep]
    if rest and query:
        docs = [_bm25_words(" ".join(_unit_text(msgs[i]) for i in u)) or ["_"] for u in rest]
        scores = BM25Okapi(docs).get_scores(_bm25_words(query))
        for _, u in sorted(zip(scores, rest), key=lambda x: (-x[0], -x[1][0])):
            if total + cost(u) <= budget:
                keep.update(u)
                total += cost(u)
    out = [msgs[i] for i in sorted(keep)]
    return out, {"newest_units": len(newest)}


def last_line(s: str) -> str:
    lines = [ln for ln in (s or "").strip().splitlines() if ln.strip()]
    return lines[-1].strip()[:300] if lines else ""


def first_line(s: str) -> str:
    lines = [ln for ln in (s or "").strip().splitlines() if ln.strip()]
    return lines[0].strip()[:300] if lines else ""


def run_compactd(binary, path, budget, fmt, timeout, save=None):
    cmd = [binary, "compact", "--input", path, "--max-input-tokens", str(budget), "--format", fmt, "--model", MODELS[fmt]]
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, {"status": "failed", "exit_code": None, "error": f"timeout after {timeout}s", "seconds": timeout}
    info = {"exit_code": p.returncode, "seconds": round(time.time() - t0, 2)}
    if save:
        with open(save, "w", encoding="utf-8") as fh:
            fh.write(p.stdout)
    if p.returncode != 0:
        kind = {1: "internal error", 2: "bad input", 3: "budget cannot be met"}.get(
            p.returncode, "killed by a signal" if p.returncode < 0 else "error")
        err = f"exit {p.returncode} ({kind}): {last_line(p.stderr)}"
        panic = re.search(r"panicked at ([^\n]+?):\n([^\n]+)", p.stderr or "")
        if panic:
            err += f" [panic at {panic.group(1)}: {panic.group(2).strip()[:200]}]"
        info.update(status="failed", error=err, panicked=bool(panic), stderr_tail=p.stderr[-2000:])
        return None, info
    try:
        out = json.loads(p.stdout)
    except ValueError as e:
        info.update(status="failed", error=f"stdout is not JSON: {e}")
        return None, info
    report = out.get("report") or {}
    budget_obj = report.get("budget") if isinstance(report.get("budget"), dict) else {}
    info.update(status="ok", tokens_after=report.get("tokens_after"), tokens_before=report.get("tokens_before"),
                target=budget_obj.get("target"), limit=budget_obj.get("limit", budget_obj.get("max_input_tokens")),
                reported_target_use=report.get("target_use"), warnings=report.get("warnings"),
                stderr_tail=p.stderr[-500:] if p.stderr else "")
    return out.get("request"), info


# --------------------------------------------------------------------------
# Orchestration
# --------------------------------------------------------------------------

def budgets_for(tokens, ratios, min_budget):
    out = []
    for r in ratios:
        b = max(min_budget, tokens // r)
        if b not in out:
            out.append(b)
    return out


def pct(a, b):
    return None if not b else round(100.0 * a / b, 1)


def fmt_num(v, nd=0):
    if v is None:
        return "–"
    return f"{v:,.{nd}f}" if isinstance(v, float) else f"{v:,}"


def fmt_pct(v):
    return "–" if v is None else f"{v:.0f}%"


def summarize(rows):
    """Per system x format: counts and means over all cells (a failed cell keeps 0%)."""
    out = []
    keys = []
    for r in rows:
        if r["status"] != "skipped" and (r["system"], r["format"]) not in keys:
            keys.append((r["system"], r["format"]))
    for system, fmt in keys:
        rs = [r for r in rows if r["system"] == system and r["format"] == fmt and r["status"] != "skipped"]
        ok = [r for r in rs if r["status"] == "ok"]

        def mean(key, zero_failed=False):
            vals = [r.get(key) for r in (rs if zero_failed else ok)]
            vals = [0.0 if v is None else v for v in vals] if zero_failed else [v for v in vals if v is not None]
            return sum(vals) / len(vals) if vals else None
        out.append({"system": system, "format": fmt, "cells": len(rs), "ok": len(ok),
                    "refused": sum(1 for r in rs if r.get("exit_code") == 3),
                    "errors": sum(1 for r in rs if r["status"] == "failed" and r.get("exit_code") != 3),
                    "valid": sum(1 for r in ok if r.get("valid")), "within": sum(1 for r in ok if r.get("within_budget")),
                    "budget_pct": mean("budget_pct"), "user_kept_pct": mean("user_kept_pct", True),
                    "calls_seen_pct": mean("calls_seen_pct", True)})
    return out


def render_table(logs, rows):
    out = ["Real agent logs (tests/data/ and ../shared/realworld/): compactd in each output format next to "
           "keep-the-newest truncation, LangChain `trim_messages`, observation masking and a BM25 retrieval baseline on the same budgets "
           "(1/4, 1/10, 1/40 of the log, at least 8,000 tokens).", ""]
    out.append("| log | source | messages | tokens | user msgs | tool calls |")
    out.append("|---|---|---:|---:|---:|---:|")
    for lg in logs:
        out.append(f"| {lg['name']} | {lg['dir']} | {lg['messages']} | {lg['tokens']:,} | {lg['humans']} | {lg['calls']} |")
    out += ["", "Summary over all log x budget cells (failures count as 0 kept):", "",
            "| system | format | cells | returned a body | refused (exit 3) | crashed / other error | valid | within budget "
            "| mean % budget | mean user kept | mean calls seen |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for s in summarize(rows):
        out.append(f"| {s['system']} | {s['format']} | {s['cells']} | {s['ok']} | {s['refused']} | {s['errors']} | "
                   f"{s['valid']}/{s['ok']} | {s['within']}/{s['ok']} | {fmt_pct(s['budget_pct'])} | "
                   f"{fmt_pct(s['user_kept_pct'])} | {fmt_pct(s['calls_seen_pct'])} |")
    out += ["", "| log | budget | system | format | tokens | % budget | target use | valid | user kept | calls seen | result |",
            "|---|---:|---|---|---:|---:|---:|---|---:|---:|---|"]
    for r in rows:
        if r["status"] == "skipped":
            continue
        use = "–" if r.get("target_use") is None else f"{100 * r['target_use']:.0f}%"
        valid = "–" if r.get("valid") is None else ("yes" if r["valid"] else "NO")
        if r["status"] == "ok":
            res = "ok" if r.get("within_budget") else "OVER BUDGET"
            if r.get("note"):
                res += f" ({r['note']})"
        else:
            err = r.get("error") or ""
            res = "FAILED: " + (err if len(err) <= 170 else err[:169] + "…").replace("|", "\\|")
        bpct = "–" if r.get("budget_pct") is None else f"{r['budget_pct']:.0f}%"
        ukept = "–" if r.get("user_kept_pct") is None else f"{r['user_kept_pct']:.0f}%"
        cseen = "–" if r.get("calls_seen_pct") is None else f"{r['calls_seen_pct']:.0f}%"
        out.append(f"| {r['log']} | {r['budget']:,} | {r['system']} | {r['format']} | {fmt_num(r.get('tokens'))} | "
                   f"{bpct} | {use} | {valid} | {ukept} | {cseen} | {res} |")
    out += ["", "tokens = exact o200k recount of the request (chat framing of eval/run.py) for the OpenAI formats and "
                "the peers; compactd's own count for anthropic. target use = compactd's tokens_after / its target. "
                "valid = the provider's tool-pairing and role rules hold. user kept = the log's human messages whose "
                "text (first 200 characters) is in the prompt, verbatim or quoted; calls seen = tool calls whose name "
                "and argument values are in the prompt.", "",
            "Regenerate: `scripts/eval-realworld.sh` (or `COMPACTD_BIN=target/release/compactd python eval/realworld.py`)."]
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--logs", action="append", default=None, help="log file or directory (repeatable); default: "
                    "tests/data/*.json and ../shared/realworld/*.json")
    ap.add_argument("--ratios", default=",".join(map(str, DEFAULT_RATIOS)))
    ap.add_argument("--min-budget", type=int, default=8000)
    ap.add_argument("--budgets", default=None, help="fixed budgets (comma separated) instead of the ratios")
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--compactd-bin", default=os.environ.get("COMPACTD_BIN"), help="default: $COMPACTD_BIN")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per compactd call")
    ap.add_argument("--out-dir", default=os.path.join(HERE, "results", "realworld"))
    ap.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "compactd-eval-realworld"),
                    help="raw compactd outputs")
    a = ap.parse_args(argv)

    formats = [f for f in a.formats.split(",") if f]
    systems = [s for s in a.systems.split(",") if s]
    for f in formats:
        if f not in FORMATS:
            raise SystemExit(f"unknown format {f!r}; choose from {FORMATS}")
    for s in systems:
        if s not in SYSTEMS:
            raise SystemExit(f"unknown system {s!r}; choose from {SYSTEMS}")
    binary = a.compactd_bin
    skipped_note = ""
    if "compactd" in systems:
        if not binary:
            skipped_note = "compactd: SKIPPED (no --compactd-bin and COMPACTD_BIN is not set)"
            print(skipped_note, file=sys.stderr)
        else:
            resolved = shutil.which(binary) or (binary if os.path.isfile(binary) else None)
            if not resolved or not os.access(resolved, os.X_OK):
                raise SystemExit(f"compactd binary {binary!r} is not an executable file "
                                 f"(build it with `cargo build --release --locked --bin compactd`)")
            binary = os.path.abspath(resolved)

    paths = expand(a.logs) if a.logs else default_log_paths()
    if not paths:
        raise SystemExit("no logs found")
    os.makedirs(a.out_dir, exist_ok=True)
    os.makedirs(a.workdir, exist_ok=True)
    counter = run.Counter(run.load_o200k())
    ratios = run.parse_list(a.ratios)
    fixed = run.parse_list(a.budgets) if a.budgets else None

    compactd_version = None
    if binary and "compactd" in systems:
        try:
            v = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30)
            compactd_version = (v.stdout or v.stderr).strip()[:200]
        except Exception as e:  # noqa: BLE001
            compactd_version = f"unknown ({e})"

    logs, rows, seen = [], [], {}
    t_start = time.time()
    for path in paths:
        kind, data = load_log(path)
        name = os.path.basename(path)[:-5] if path.endswith(".json") else os.path.basename(path)
        if kind is None:
            if name not in NOT_LOGS:
                print(f"[{name}] skipped: {data}", file=sys.stderr)
            continue
        digest = hashlib.sha256(json.dumps(data, sort_keys=True, ensure_ascii=False).encode()).hexdigest()
        if digest in seen:
            print(f"[{name}] skipped: same content as {seen[digest]}", file=sys.stderr)
            continue
        seen[digest] = name
        humans, calls = log_items(kind, data)
        if kind == "openai":
            counts = [counter.message(m) for m in data]
            tokens = 3 + sum(counts)
            n_msgs = len(data)
        else:
            counts = None
            tokens = anthropic_tokens(counter, data)
            n_msgs = len(data["messages"])
        where = os.path.relpath(os.path.dirname(os.path.abspath(path)), REPO)
        logs.append({"name": name, "path": os.path.relpath(os.path.abspath(path), REPO), "dir": where, "kind": kind, "messages": n_msgs, "tokens": tokens,
                     "humans": len(humans), "calls": len(calls), "sha256": digest})
        budgets = fixed or budgets_for(tokens, ratios, a.min_budget)
        print(f"[{name}] {kind}, {n_msgs} messages, {tokens:,} tokens, {len(humans)} user messages, "
              f"{len(calls)} tool calls; budgets {budgets}", flush=True)
        for budget in budgets:
            base = {"log": name, "log_kind": kind, "log_tokens": tokens, "budget": budget}
            for system in systems:
                if system != "compactd" and kind != "openai":
                    continue  # the peers read OpenAI messages
                for fmt in (formats if system == "compactd" else ["openai"]):
                    rec = dict(base, system=system, format=fmt)
                    if system == "compactd" and not binary:
                        rows.append(dict(rec, status="skipped"))
                        continue
                    t0 = time.time()
                    if system == "compactd":
                        save = os.path.join(a.workdir, f"{name}_{budget}_{fmt}.json")
                        req, info = run_compactd(binary, os.path.abspath(path), budget, fmt, a.timeout, save)
                        rec.update(info)
                        if req is not None:
                            if fmt == "openai":
                                msgs = req.get("messages") if isinstance(req, dict) else None
                                errs = validate_openai(msgs) if isinstance(msgs, list) else ["no messages array"]
                                recount = counter.messages(msgs) if isinstance(msgs, list) else None
                            elif fmt == "responses":
                                errs = validate_responses(req)
                                recount = responses_tokens(counter, req) if isinstance(req, dict) else None
                            else:
                                errs = validate_anthropic(req)
                                recount = None
                            svc = info.get("tokens_after")
                            tokens_used = recount if recount is not None else svc
                            within = all(x is None or x <= budget for x in (recount, svc)) and tokens_used is not None
                            kept_h, seen_c = survival(humans, calls, body_text(req))
                            rec.update(tokens=tokens_used, recount_o200k=recount, valid=not errs, validity_errors=errs[:5],
                                       within_budget=within,
                                       target_use=(round(svc / info["target"], 4) if svc and info.get("target") else None))
                    else:
                        if system == "truncate":
                            res, extra = run.run_truncate(data, counts, budget)
                        elif system == "langchain":
                            res, extra = run.run_langchain(data, counts, budget)
                        elif system == "bm25":
                            res, extra = run_bm25(data, counts, counter, budget)
                        else:
                            res, extra = run_masking(data, counts, counter, budget)
                        rec.update(status="ok", seconds=round(time.time() - t0, 3), **extra)
                        errs = validate_openai(res)
                        o_res, o_calls = run.orphans(res)
                        t = counter.messages(res)
                        kept_h, seen_c = survival(humans, calls, run.prompt_text(res))
                        rec.update(tokens=t, valid=not errs, validity_errors=errs[:5], orphan_results=o_res,
                                   orphan_calls=o_calls, within_budget=t <= budget, messages_kept=len(res))
                        if not res or len(res) <= (1 if data and data[0].get("role") == "system" else 0):
                            rec["note"] = "nothing but the system message fits"
                    if rec.get("status") == "ok":
                        rec.update(budget_pct=pct(rec["tokens"], budget), user_kept=kept_h, user_total=len(humans),
                                   user_kept_pct=pct(kept_h, len(humans)), calls_seen=seen_c, calls_total=len(calls),
                                   calls_seen_pct=pct(seen_c, len(calls)))
                    rows.append(rec)
                    tag = rec["status"] if rec["status"] != "failed" else f"FAILED {rec.get('error')}"
                    print(f"   {budget:>7,} {system:<9} {fmt:<9} tokens {fmt_num(rec.get('tokens')):>7} "
                          f"valid {rec.get('valid')} user {rec.get('user_kept', '-')}/{len(humans)} "
                          f"calls {rec.get('calls_seen', '-')}/{len(calls)}  {tag}", flush=True)

    table = render_table(logs, rows)
    if skipped_note:
        table += "\n" + skipped_note + "\n"
    cfg = {"ratios": ratios, "min_budget": a.min_budget, "budgets": fixed, "formats": formats, "systems": systems,
           "models": MODELS, "compactd_bin": binary and os.path.relpath(binary, REPO), "compactd_version": compactd_version, "timeout": a.timeout,
           "mask_placeholder": MASK, "prefix_chars": PREFIX, "elapsed_seconds": round(time.time() - t_start, 1)}
    with open(os.path.join(a.out_dir, "results.json"), "w", encoding="utf-8") as fh:
        json.dump({"config": cfg, "logs": logs, "summary": summarize(rows), "rows": rows}, fh, indent=1,
                  ensure_ascii=False)
        fh.write("\n")
    with open(os.path.join(a.out_dir, "table.md"), "w", encoding="utf-8") as fh:
        fh.write(table)
    print()
    print(table)
    print(f"wrote {a.out_dir}/results.json and table.md (raw compactd outputs in {a.workdir})")


if __name__ == "__main__":
    main()
