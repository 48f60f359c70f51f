#!/usr/bin/env python3
"""Converts public agent logs into the inputs under tests/data/ (stdlib only).

The committed JSON files are what the tests read; this script documents, and
can redo, the mapping from each source format. Text is never edited: message
text, tool arguments and tool output are copied byte for byte; only the
envelope changes. `sources.json` names the repository, commit and path of
every source and what was trimmed.

Usage (SOURCE is the file as stored in its repository):

  convert.py swe-agent   SOURCE.traj   OUT.json
  convert.py openhands   SOURCE.json   OUT.json
  convert.py claude-code SOURCE.jsonl  OUT.json [--anthropic OUT.anthropic.json] [--model M]
  convert.py tau-bench   SOURCE.json   OUT.json --task-id N [--trial K]

Output: an OpenAI Chat Completions `messages` array, i.e. a JSON list of
{role, content, tool_calls?, tool_call_id?}; tool calls are
{id, type: "function", function: {name, arguments}} with `arguments` a JSON
string; every tool result is a `tool` message right after the assistant
message that made the call. With --anthropic, also an Anthropic Messages body
{model, max_tokens, messages} with `tool_use` / `tool_result` blocks (and
`thinking` blocks with their `signature` when the source has them).

Mappings
--------
SWE-agent `.traj` (function-calling configs): the `history` list is already
  in chat form. role/content are kept; assistant `tool_calls` are kept
  (id, type, function.name, function.arguments); a `tool` entry's
  `tool_call_ids[0]` becomes `tool_call_id`. The bookkeeping fields
  (`thought`, `action`, `agent`, `message_type`, `is_demo`, `cache_control`)
  are dropped: `thought` repeats `content`. Ids are kept even where the
  trajectory reuses one for a later call (each is answered before reuse).

OpenHands event stream (`tests/runtime/trajs/*.json`, a list of events):
  - a `message` action from `source: user` -> user message (`args.content`);
  - an action with `tool_call_metadata` -> assistant message: `content` is
    the model response's message content, `tool_calls` its tool calls
    (several events share one model response when it made several calls;
    the calls are merged into one assistant message, in order);
  - the observation whose `tool_call_metadata.tool_call_id` matches -> tool
    message. Its text is what OpenHands shows the model: for an `edit`
    observation from the ACI editor, `extras.formatted_output_and_error`;
    for a `run` observation, `content` followed by `extras.metadata.suffix`
    (the "[The command completed with exit code 0.]" line); otherwise
    `content`;
  - a `message` action from `source: agent` without tool call -> assistant
    message (`args.content`);
  - state changes, `null` observations and `finish` without text are dropped.
  OpenHands does not log its system prompt; none is invented.

Claude Code session (`~/.claude/projects/*/SESSION.jsonl`): one JSON object a
  line; only `type: user` / `type: assistant` lines are read (queue
  operations, summaries, file-history snapshots are dropped), in file order,
  sidechain lines skipped.
  - Claude Code writes one line per content block; consecutive assistant
    lines with the same `message.id` are one API message and are merged.
  - OpenAI form: assistant `text` blocks are joined with "\\n\\n" into
    `content` (null when there is none); `tool_use` -> tool call with
    `arguments = json.dumps(input, ensure_ascii=False)`; `thinking` /
    `redacted_thinking` blocks are not part of Chat Completions and are left
    out. A user line with a string content (the typed request, or a hook's
    feedback with `isMeta`) -> user message; `tool_result` blocks -> tool
    messages (`content` a string as in the source; a list of text blocks is
    joined with "\\n\\n"); other user blocks (text) -> a user message.
  - Anthropic form: blocks are kept as they are (`text`, `tool_use`,
    `thinking` with `signature`, `tool_result` with its `content` and
    `is_error`); consecutive user lines are merged into one user message
    (all results of a parallel batch answer it in the next user turn), a
    string content becoming one text block. The transcript has no system
    prompt and no `max_tokens`; `max_tokens` is set to 8192.

tau-bench `historical_trajectories/*.json`: a list of results; `traj` of the
  result with the given `task_id` (and trial) is already a Chat Completions
  message list. It is copied; the `name` field of `tool` messages is
  dropped (not part of the Chat Completions tool message).

Trimming (`--keep-first N` / `--keep-last N`, counted in output messages):
  keeps the first user message, cuts whole turns only (an assistant message
  with calls always keeps all its results), and never starts the kept tail
  with a tool message.
"""

from __future__ import annotations

import argparse
import json
import sys


# --------------------------------------------------------------------------
# SWE-agent
# --------------------------------------------------------------------------

def swe_agent(traj: dict) -> list[dict]:
    out = []
    for h in traj["history"]:
        role = h["role"]
        if role == "tool":
            ids = h.get("tool_call_ids") or [h.get("tool_call_id")]
            out.append({"role": "tool", "tool_call_id": ids[0], "content": h["content"]})
            continue
        m = {"role": role, "content": h["content"]}
        if h.get("tool_calls"):
            m["tool_calls"] = [{"id": tc["id"], "type": tc.get("type", "function"),
                                "function": {"name": tc["function"]["name"],
                                             "arguments": tc["function"]["arguments"]}}
                               for tc in h["tool_calls"]]
        out.append(m)
    return out


# --------------------------------------------------------------------------
# OpenHands
# --------------------------------------------------------------------------

def _oh_result_text(ev: dict) -> str:
    extras = ev.get("extras") or {}
    if ev.get("observation") == "edit" and extras.get("formatted_output_and_error") is not None:
        return extras["formatted_output_and_error"]
    text = ev.get("content") or ""
    if ev.get("observation") == "run":
        text += (extras.get("metadata") or {}).get("suffix") or ""
    return text


def openhands(events: list[dict]) -> list[dict]:
    out: list[dict] = []
    response_msg: dict[str, dict] = {}   # model response id -> assistant message
    for ev in events:
        meta = ev.get("tool_call_metadata")
        if "action" in ev:
            if meta:
                resp = meta["model_response"]
                msg = resp["choices"][0]["message"]
                if resp["id"] not in response_msg:
                    a = {"role": "assistant", "content": msg.get("content"), "tool_calls": []}
                    response_msg[resp["id"]] = a
                    out.append(a)
                a = response_msg[resp["id"]]
                for tc in msg.get("tool_calls") or []:
                    if tc["id"] == meta["tool_call_id"]:
                        a["tool_calls"].append({"id": tc["id"], "type": "function",
                                                "function": {"name": tc["function"]["name"],
                                                             "arguments": tc["function"]["arguments"]}})
            elif ev["action"] == "message":
                role = "user" if ev.get("source") == "user" else "assistant"
                out.append({"role": role, "content": ev["args"]["content"]})
        elif "observation" in ev and meta:
            out.append({"role": "tool", "tool_call_id": meta["tool_call_id"], "content": _oh_result_text(ev)})
    # A call that never got an observation (e.g. `finish`) is left out; an
    # assistant message left with neither text nor calls goes with it.
    answered = {m["tool_call_id"] for m in out if m["role"] == "tool"}
    kept = []
    for a in out:
        if a["role"] == "assistant" and "tool_calls" in a:
            a["tool_calls"] = [tc for tc in a["tool_calls"] if tc["id"] in answered]
            if not a["tool_calls"]:
                del a["tool_calls"]
                if not a.get("content"):
                    continue
        kept.append(a)
    return kept


# --------------------------------------------------------------------------
# Claude Code
# --------------------------------------------------------------------------

def _cc_entries(lines: list[dict]) -> list[dict]:
    """User/assistant entries with assistant lines of one API message merged."""
    entries: list[dict] = []
    for ln in lines:
        if ln.get("type") not in ("user", "assistant") or ln.get("isSidechain"):
            continue
        msg = ln["message"]
        if ln["type"] == "assistant":
            prev = entries[-1] if entries else None
            if prev and prev["role"] == "assistant" and prev["id"] == msg.get("id"):
                prev["content"].extend(msg["content"])
                continue
            entries.append({"role": "assistant", "id": msg.get("id"), "model": msg.get("model"),
                            "content": list(msg["content"])})
        else:
            entries.append({"role": "user", "content": msg["content"], "meta": bool(ln.get("isMeta"))})
    return entries


def _joined(content) -> str:
    if isinstance(content, str):
        return content
    return "\n\n".join(b["text"] for b in content if b.get("type") == "text")


def claude_code_openai(lines: list[dict]) -> list[dict]:
    out = []
    for e in _cc_entries(lines):
        if e["role"] == "assistant":
            texts = [b["text"] for b in e["content"] if b["type"] == "text"]
            calls = [{"id": b["id"], "type": "function",
                      "function": {"name": b["name"], "arguments": json.dumps(b["input"], ensure_ascii=False)}}
                     for b in e["content"] if b["type"] == "tool_use"]
            m = {"role": "assistant", "content": "\n\n".join(texts) if texts else None}
            if calls:
                m["tool_calls"] = calls
            out.append(m)
        elif isinstance(e["content"], str):
            out.append({"role": "user", "content": e["content"]})
        else:
            other = []
            for b in e["content"]:
                if b.get("type") == "tool_result":
                    out.append({"role": "tool", "tool_call_id": b["tool_use_id"], "content": _joined(b.get("content", ""))})
                else:
                    other.append(b)
            texts = [b["text"] for b in other if b.get("type") == "text"]
            if texts:
                out.append({"role": "user", "content": "\n\n".join(texts)})
    return out


def claude_code_anthropic(lines: list[dict], model: str | None = None, max_tokens: int = 8192) -> dict:
    msgs: list[dict] = []
    first_model = None
    for e in _cc_entries(lines):
        if e["role"] == "assistant":
            first_model = first_model or e.get("model")
            msgs.append({"role": "assistant", "content": e["content"]})
            continue
        blocks = [{"type": "text", "text": e["content"]}] if isinstance(e["content"], str) else list(e["content"])
        if msgs and msgs[-1]["role"] == "user":
            msgs[-1]["content"].extend(blocks)
        else:
            msgs.append({"role": "user", "content": blocks})
    return {"model": model or first_model, "max_tokens": max_tokens, "messages": msgs}


# --------------------------------------------------------------------------
# tau-bench
# --------------------------------------------------------------------------

def tau_bench(results: list[dict], task_id: int, trial: int | None = None) -> list[dict]:
    for r in results:
        if r.get("task_id") == task_id and (trial is None or r.get("trial") == trial):
            out = []
            for m in r["traj"]:
                m = dict(m)
                if m.get("role") == "tool":
                    m.pop("name", None)
                out.append(m)
            return out
    raise SystemExit(f"task_id {task_id} not found")


# --------------------------------------------------------------------------
# Trimming and checks
# --------------------------------------------------------------------------

def trim(msgs: list[dict], keep_first: int | None, keep_last: int | None) -> list[dict]:
    """First `keep_first` and last `keep_last` messages, moved to turn boundaries."""
    n = len(msgs)
    if keep_first is None and keep_last is None:
        return msgs
    head = min(keep_first or 0, n)
    while head < n and msgs[head].get("role") == "tool":   # finish the results of the last kept call
        head += 1
    tail_start = max(head, n - (keep_last or 0))
    while tail_start < n and msgs[tail_start].get("role") == "tool":
        tail_start += 1
    first_user = next(i for i, m in enumerate(msgs) if m.get("role") == "user")
    kept = msgs[:head] + msgs[tail_start:]
    if first_user >= head and first_user < tail_start:
        kept = msgs[:head] + [msgs[first_user]] + msgs[tail_start:]
    return kept


def check_pairs(msgs: list[dict]) -> None:
    """Every call answered by a later tool message, every result after its call."""
    open_calls: dict[str, int] = {}
    for i, m in enumerate(msgs):
        if m.get("role") == "assistant":
            for tc in m.get("tool_calls") or []:
                open_calls[tc["id"]] = i
        elif m.get("role") == "tool":
            if m["tool_call_id"] not in open_calls:
                raise SystemExit(f"message {i}: result for {m['tool_call_id']!r} has no open call")
            del open_calls[m["tool_call_id"]]
    if open_calls:
        raise SystemExit(f"calls without a result: {sorted(open_calls)}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kind", choices=["swe-agent", "openhands", "claude-code", "tau-bench"])
    ap.add_argument("source")
    ap.add_argument("out")
    ap.add_argument("--anthropic", help="claude-code: also write an Anthropic Messages body here")
    ap.add_argument("--model", help="claude-code --anthropic: model field (default: the session's)")
    ap.add_argument("--task-id", type=int)
    ap.add_argument("--trial", type=int)
    ap.add_argument("--keep-first", type=int)
    ap.add_argument("--keep-last", type=int)
    a = ap.parse_args(argv)
    with open(a.source, encoding="utf-8") as fh:
        raw = fh.read()
    if a.kind == "swe-agent":
        msgs = swe_agent(json.loads(raw))
    elif a.kind == "openhands":
        msgs = openhands(json.loads(raw))
    elif a.kind == "tau-bench":
        msgs = tau_bench(json.loads(raw), a.task_id, a.trial)
    else:
        lines = [json.loads(l) for l in raw.splitlines() if l.strip()]
        msgs = claude_code_openai(lines)
        if a.anthropic:
            with open(a.anthropic, "w", encoding="utf-8") as fh:
                json.dump(claude_code_anthropic(lines, a.model), fh, ensure_ascii=False, indent=1)
                fh.write("\n")
    msgs = trim(msgs, a.keep_first, a.keep_last)
    check_pairs(msgs)
    with open(a.out, "w", encoding="utf-8") as fh:
        json.dump(msgs, fh, ensure_ascii=False, indent=1)
        fh.write("\n")
    print(f"{a.out}: {len(msgs)} messages", file=sys.stderr)


if __name__ == "__main__":
    main()
