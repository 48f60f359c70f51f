"""What a client sends when compactd cannot answer (`on_unavailable="original"`).

On UNAVAILABLE, DEADLINE_EXCEEDED or RESOURCE_EXHAUSTED the conversation is
rendered here, without the server: the original, in its own shape, when it
fits the budget by a local count; else the newest part of it that fits and
reads as a valid conversation (it starts at a user message, keeps the system
prompt, and keeps every tool call with its result). docs/python.md, "When
compactd is unavailable".

The local count is conservative and needs no tokenizer: a JSON value costs
its compact UTF-8 JSON bytes, non-ASCII bytes counted twice, divided by 3
(by 2 for Claude, whose tokenizer emits more tokens for the same text), plus
8 tokens a message and 8 for the reply's priming. On English prose and code
that is about 1.5x OpenAI's o200k count (2.3x for Claude); a CJK character
(3 bytes) counts 2 tokens (3 for Claude).
"""

from __future__ import annotations

import json
import math
import threading
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import grpc

# The codes a call falls open on: compactd is down, slow or overloaded.
# Every other code (invalid input, authentication, a pending call) raises.
FALL_OPEN_CODES = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED}
)
ON_UNAVAILABLE = ("original", "raise")

# Tokens a message costs beyond its JSON, and the reply's priming: the
# server's conservative framing (per message and reply priming, 8 each).
PER_MESSAGE_TOKENS = 8
PRIMING_TOKENS = 8
# Anthropic's default `max_tokens`, as the server renders it.
DEFAULT_MAX_TOKENS = 4096
# Keys compactd reads as marks on a message and never sends on.
_MARK_KEYS = ("protected", "label", "metadata", "created_at", "timestamp")


def check_on_unavailable(value: Any) -> str:
    """`value` if it is one of ON_UNAVAILABLE, else ValueError naming it."""
    if not isinstance(value, str) or value not in ON_UNAVAILABLE:
        raise ValueError(f"on_unavailable must be one of {', '.join(map(repr, ON_UNAVAILABLE))}, not {value!r}")
    return value


_counts: Dict[str, int] = {}
_counts_lock = threading.Lock()


def fail_open_counts() -> Dict[str, int]:
    """Calls in this process that fell open (the original conversation sent
    because compactd could not answer), by status code name
    (`{"UNAVAILABLE": 3}`); a copy."""
    with _counts_lock:
        return dict(_counts)


def count_fail_open(code: str) -> None:
    with _counts_lock:
        _counts[code] = _counts.get(code, 0) + 1


def local_tokens(value: Any, claude: bool = False) -> int:
    """The local count of a JSON value (module docstring)."""
    if value is None:
        return 0
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    size = len(text.encode("utf-8", "surrogatepass"))
    ascii_bytes = len(text.encode("ascii", "ignore"))
    weighted = ascii_bytes + 2 * (size - ascii_bytes)
    return math.ceil(weighted / (2 if claude else 3))


def message_tokens(item: Any, claude: bool = False) -> int:
    return local_tokens(item, claude) + PER_MESSAGE_TOKENS


# -- Shapes: where a turn starts, and which calls and results pair up.


def _is_head(item: Any, shape: str) -> bool:
    """A system or developer message leading the conversation (kept always)."""
    if shape == "anthropic" or not isinstance(item, Mapping):
        return False
    return item.get("role") in ("system", "developer") and item.get("type", "message") == "message"


def opens_turn(item: Any, shape: str) -> bool:
    """Whether a kept part may start at `item`: a user message (Anthropic:
    one without tool results; Responses: a message item)."""
    if not isinstance(item, Mapping) or item.get("role") != "user":
        return False
    if shape == "responses":
        return item.get("type", "message") == "message"
    if shape == "anthropic":
        content = item.get("content")
        if isinstance(content, list):
            return not any(isinstance(b, Mapping) and "tool_use_id" in b for b in content)
    return True


def calls_and_results(item: Any, shape: str) -> Tuple[List[str], List[str]]:
    """The ids of the tool calls `item` makes and of the calls it answers."""
    calls: List[str] = []
    results: List[str] = []
    if not isinstance(item, Mapping):
        return calls, results
    if shape == "responses":
        kind = str(item.get("type", ""))
        if kind == "mcp_approval_request" and "id" in item:
            calls.append(str(item["id"]))
        elif kind == "mcp_approval_response" and "approval_request_id" in item:
            results.append(str(item["approval_request_id"]))
        elif "call_id" in item and kind.endswith("_call"):
            calls.append(str(item["call_id"]))
        elif "call_id" in item and kind.endswith("_output"):
            results.append(str(item["call_id"]))
    elif shape == "anthropic":
        content = item.get("content")
        for b in content if isinstance(content, list) else []:
            if not isinstance(b, Mapping):
                continue
            if str(b.get("type", "")).endswith("tool_use") and "id" in b:
                calls.append(str(b["id"]))
            if "tool_use_id" in b:
                results.append(str(b["tool_use_id"]))
    else:
        for c in item.get("tool_calls") or []:
            if isinstance(c, Mapping) and "id" in c:
                calls.append(str(c["id"]))
        if item.get("role") == "tool" and "tool_call_id" in item:
            results.append(str(item["tool_call_id"]))
    return calls, results


@dataclass
class Selection:
    """The part of a conversation's items to send: `items[:head]` (leading
    system messages) and `items[start:]`; `fits` whether that is within the
    budget by the local count, `tokens` its count."""

    head: int
    start: int
    fits: bool
    tokens: int
    tokens_whole: int


def select(items: Sequence[Any], shape: str, budget: int, fixed: int, claude: bool = False) -> Selection:
    """The newest valid part of `items` that fits `budget` with `fixed`
    tokens (system prompt, tools) besides; the whole when it fits or
    `budget` is 0 (unknown window).

    A part starts at a user message and never splits a call from its
    result. When no such part fits, the smallest one (from the newest user
    message that opens one) is chosen, `fits=False`; when none exists at all
    (no user message), the whole."""
    n = len(items)
    counts = [message_tokens(i, claude) for i in items]
    head = 0
    while head < n and _is_head(items[head], shape):
        head += 1
    base = fixed + PRIMING_TOKENS + sum(counts[:head])
    suffix = [0] * (n + 1)
    for i in range(n - 1, -1, -1):
        suffix[i] = suffix[i + 1] + counts[i]
    whole = base + suffix[head]
    if budget <= 0 or whole <= budget:
        return Selection(head, head, True, whole, whole)
    # A cut at i splits a pair when its call is before i and its result at
    # or after it: mark those cuts (c, r] through a difference array.
    call_at: Dict[str, int] = {}
    split = [0] * (n + 2)
    for i, item in enumerate(items):
        calls, results = calls_and_results(item, shape)
        for r in results:
            c = call_at.get(r)
            if c is not None and c < i:
                split[c + 1] += 1
                split[i + 1] -= 1
        for c in calls:
            call_at.setdefault(c, i)
    cuts = []
    open_pairs = 0
    for i in range(n):
        open_pairs += split[i]
        if i > head and open_pairs == 0 and opens_turn(items[i], shape):
            cuts.append(i)
    for i in cuts:
        if base + suffix[i] <= budget:
            return Selection(head, i, True, base + suffix[i], whole)
    if cuts:
        return Selection(head, cuts[-1], False, base + suffix[cuts[-1]], whole)
    return Selection(head, head, False, whole, whole)


# -- The body, as the server would lay it out for the shape.


def _unmarked(item: Any) -> Any:
    if isinstance(item, Mapping):
        return {k: v for k, v in item.items() if k not in _MARK_KEYS}
    return item


def _plain_text(items: Sequence[Any]) -> bool:
    """Chat messages of text only (no tool calls, results or parts)."""
    return all(
        isinstance(m, Mapping)
        and m.get("role") in ("user", "assistant", "system", "developer")
        and isinstance(m.get("content"), str)
        and set(m) - set(_MARK_KEYS) <= {"role", "content"}
        for m in items
    )


@dataclass
class Local:
    """A conversation rendered without the server."""

    body: Dict[str, Any]
    selection: Selection
    sent: int
    total: int


def render_locally(
    body: Mapping[str, Any],
    *,
    shape: str,
    format: str,
    model: str,
    budget: int,
    max_output_tokens: Optional[int],
    prompt_cache_key: Optional[str],
    safety_identifier: Optional[str],
) -> Optional[Local]:
    """The request body for `format` from the conversation's `body` (in
    `shape`): its newest valid part within `budget`. None when the body
    cannot be laid out in `format` without the server: another shape than
    the conversation's, except text-only Chat messages for Anthropic or
    Responses; the neutral format."""
    key = "input" if shape == "responses" else "messages"
    items = body.get(key)
    if items is None:
        items = body.get("messages" if key == "input" else "input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    items = list(items) if isinstance(items, list) else []
    if format == "neutral" or (format != shape and not (shape == "openai" and _plain_text(items))):
        return None
    claude = format == "anthropic" or "claude" in model.lower()
    system_key = "instructions" if shape == "responses" else "system"
    system = body.get(system_key)
    if system is None and shape == "responses":
        system = body.get("system")
    tools = body.get("tools")
    fixed = local_tokens(system, claude) + (local_tokens(tools, claude) if tools else 0)
    chosen = select(items, shape, budget, fixed, claude)
    kept = [_unmarked(i) for i in items[: chosen.head] + items[chosen.start :]]

    out: Dict[str, Any] = {"model": model or body.get("model", "")}
    if format == "openai":
        if isinstance(system, list):
            system = "\n\n".join(str(b.get("text", "")) for b in system if isinstance(b, Mapping))
        out["messages"] = ([{"role": "system", "content": system}] if system else []) + kept
    elif format == "responses":
        if system:
            out["instructions"] = system
        out["input"] = kept
    else:  # anthropic
        if shape == "openai":
            # Text-only Chat messages: leading system messages join the system prompt.
            lead = [m["content"] for m in kept if _is_head(m, shape)]
            rest = [m for m in kept if not _is_head(m, shape)]
            if any(m["role"] not in ("user", "assistant") for m in rest) or (rest and rest[0]["role"] != "user"):
                return None
            texts = ([system] if isinstance(system, str) and system else []) + lead
            system = "\n\n".join(texts) if texts else None
            kept = [{"role": m["role"], "content": m["content"]} for m in rest]
        out["max_tokens"] = max_output_tokens or body.get("max_tokens") or DEFAULT_MAX_TOKENS
        if system:
            out["system"] = system
        out["messages"] = kept
    if tools:
        out["tools"] = tools
    if max_output_tokens is not None and format != "anthropic":
        out["max_completion_tokens" if format == "openai" else "max_output_tokens"] = max_output_tokens
    if format != "anthropic":
        for name, value in (("prompt_cache_key", prompt_cache_key), ("safety_identifier", safety_identifier)):
            value = value if value is not None else body.get(name)
            if isinstance(value, str):
                out[name] = value
    return Local(out, chosen, len(kept), len(items))
