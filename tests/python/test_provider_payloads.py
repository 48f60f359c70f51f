"""Rendered provider payloads, checked against the providers themselves.

`compactd` renders a (compacted) thread as an OpenAI Chat Completions, an
Anthropic Messages or an OpenAI Responses request body. This file checks
those bodies from the outside, with nothing taken from the Rust code:

1. **Schema**: every payload is validated with pydantic against the official
   SDK request types, `openai.types.chat.completion_create_params.
   CompletionCreateParamsNonStreaming`, `anthropic.types.
   message_create_params.MessageCreateParamsNonStreaming` and
   `openai.types.responses.response_create_params.
   ResponseCreateParamsNonStreaming` (TypedDicts), made strict (see "How
   strict the SDK adapters are" below).
2. **Ordering rules** from the providers' documentation, written here in
   Python: OpenAI's "an assistant message with `tool_calls` must be followed
   by tool messages responding to each `tool_call_id`", Anthropic's
   user-first strict alternation, `tool_result` blocks first in the
   immediately following user message, non-blank text blocks, object
   `tool_use.input`, unique `tool_use` ids matching `^[a-zA-Z0-9_-]+$`,
   thinking blocks first in their assistant message; the Responses API's
   `function_call_output` answering an earlier unanswered `function_call`
   by `call_id`, every call answered, a `reasoning` item immediately
   followed by the item it preceded, no empty message; and, for all three,
   the image types the providers take (PNG, JPEG, WEBP, GIF).
3. **Inputs**: threads built here with a seeded `random.Random` (plain
   dialogue, up to 8 parallel tool calls answered in shuffled order, failed
   and partial results, images by https and data: URL, mid-thread
   system/developer messages, a thread opening with the assistant, huge tool
   outputs, random agent sessions) plus `examples/threads/*.json`, each
   rendered with `compact_first` in all three formats at a roomy, a tight
   and a squeezed budget, so summaries, clearings and externalization
   pointers are in the payloads too.
4. **Targeted cases**: Anthropic thinking / redacted_thinking blocks and
   Responses reasoning items (byte for byte, placed in their own turn, in
   no other format), tool calls without a result (refused by default, left
   out on request), tool ids Anthropic rejects (rewritten for Anthropic
   only), and image types no provider takes.

Negative tests feed hand-made bad payloads to both layers so neither can pass
everything silently.

Reproduce a failure with the seed printed in its message:
    COMPACTD_PAYLOAD_SEED=<seed> COMPACTD_BIN=target/debug/compactd \\
        .venv/bin/python -m pytest -q tests/python/test_provider_payloads.py

How strict the SDK adapters are
-------------------------------
- `TypeAdapter(SomeTypedDict, config=ConfigDict(...))` is refused by pydantic
  for TypedDicts ("Cannot use `config` when the type is a BaseModel,
  dataclass or TypedDict"). Instead the SDK class is subclassed and the
  subclass decorated with `pydantic.with_config(ConfigDict(extra="forbid",
  strict=True))`; the SDK classes themselves are not touched.
- That config reaches the nested TypedDicts too (messages, content parts,
  `tool_calls[].function`, tool definitions...): pydantic builds a nested
  TypedDict that has no config of its own with the enclosing one.
  `test_adapters_forbid_unknown_keys` walks the adapters' core schemas: every
  OpenAI TypedDict forbids extras, and every Anthropic one but the 3 below.
  `strict=True` also stops lax coercions (`"max_tokens": "1024"`,
  `"is_error": "true"`).
- The 3 exceptions are set by the anthropic SDK itself: `Base64ImageSourceParam`
  and `Base64PDFSourceParam` carry their own `__pydantic_config__`
  (`arbitrary_types_allowed`), so unknown keys there are silently IGNORED,
  and `InputSchemaTyped` (a JSON Schema) allows extras on purpose. Also,
  anthropic's `MessageContentParam` union includes the RESPONSE type
  `ContentBlock` (pydantic models that allow extras), so a text block with an
  unknown key validates as a `TextBlock` model. Both holes are closed by
  `_no_silent_acceptance`: after validation, a key missing from the output
  or a value that came out as a response model is a violation.
- Fields typed `Iterable[...]` (`messages`, `content`, `tool_calls`, `tools`,
  `system`...) are validated LAZILY by pydantic: `validate_python` returns a
  `ValidatorIterator` and a bad message only raises when iterated. Left as
  is, the adapter would pass a tool message without `tool_call_id`. `_drain`
  below iterates every such iterator recursively, with the path, so nothing
  is left unvalidated.
- Responses (`ResponseCreateParamsNonStreaming`): every TypedDict of the
  adapter forbids extras and the request union holds no response model
  (`test_adapters_forbid_unknown_keys`), but the SDK types leave open what
  the rule layer checks: the TypedDict is `total=False` (neither `model`
  nor `input` is required), `input` may be a plain string,
  `function_call_output.call_id` is OPTIONAL, an item may leave out
  `type: "message"`, an assistant message may carry `input_text` parts,
  and nothing orders the items. `input` is a `List` (validated eagerly);
  `tools`, `summary` and content lists nested in it are drained like the
  others. The input item union is not discriminated (~35 item types are
  tried), so `_explain` drops the members whose `type` literal did not
  match from the error message. The SDK's `FunctionToolParam` requires
  `strict` and `parameters` (as the API reference does): a Responses tool
  left without `strict` is strict by default, unlike in Chat Completions,
  so the sweep also wants `strict: false` (ToolSchema has no such flag).
- Not strict, by the SDK's own typing: values typed `Dict[str, object]` or
  `object` (`tool_use.input` — its object-ness is checked by the rule layer —,
  JSON Schemas in `tools[].function.parameters` / `input_schema`,
  `metadata`), and whatever a union accepts (e.g. Anthropic's `input_schema`
  falls back to a plain dict). Anthropic's SDK also has a `system` message
  role; the rule layer allows only `user` / `assistant` in `messages`.

Inputs that once broke payloads
-------------------------------
Tests near the bottom pin three cases that used to produce invalid
payloads: a user message between a call and its result, call ids reused
across turns, and a JSON error result with no stated outcome.
"""

import base64
import hashlib
import json
import os
import random
import re
import string
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming
from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, with_config

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "threads"
CALL_TIMEOUT_S = 60
SEED = int(os.environ.get("COMPACTD_PAYLOAD_SEED", "20260301"))
OPENAI_MODELS = ["gpt-4o", "gpt-4.1", "gpt-4o-mini"]
ANTHROPIC_MODELS = ["claude-sonnet-4-5", "claude-opus-4-1", "claude-3-5-haiku-latest"]


# ───────────────────────────── strict SDK adapters ─────────────────────────────

STRICT = ConfigDict(extra="forbid", strict=True)


@with_config(STRICT)
class StrictOpenAIChatRequest(CompletionCreateParamsNonStreaming):
    """The SDK's non-streaming Chat Completions params, unknown keys forbidden."""


@with_config(STRICT)
class StrictAnthropicMessagesRequest(MessageCreateParamsNonStreaming):
    """The SDK's non-streaming Messages params, unknown keys forbidden."""


@with_config(STRICT)
class StrictOpenAIResponsesRequest(ResponseCreateParamsNonStreaming):
    """The SDK's non-streaming Responses params, unknown keys forbidden."""


OPENAI_ADAPTER = TypeAdapter(StrictOpenAIChatRequest)
ANTHROPIC_ADAPTER = TypeAdapter(StrictAnthropicMessagesRequest)
RESPONSES_ADAPTER = TypeAdapter(StrictOpenAIResponsesRequest)


class SchemaViolation(AssertionError):
    """A payload the official SDK types reject."""


class RuleViolation(AssertionError):
    """A payload that breaks a provider's documented ordering/content rules."""


def _drain(value, path):
    """Iterates every lazily validated `Iterable[...]` so its items get validated."""
    if isinstance(value, dict):
        return {k: _drain(v, f"{path}.{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_drain(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, Iterator):  # pydantic's ValidatorIterator
        items = []
        try:
            for item in value:
                items.append(_drain(item, f"{path}[{len(items)}]"))
        except ValidationError as e:
            raise SchemaViolation(f"{path}[{len(items)}]: {_explain(e)}") from None
        return items
    return value


def _no_silent_acceptance(given, validated, path):
    """What `extra="forbid"` cannot reach: a key an SDK type ignored, or a value
    accepted only by a response model in a union (anthropic's
    `MessageContentParam` includes `ContentBlock`, whose models allow extras)."""
    if isinstance(validated, BaseModel):
        raise SchemaViolation(
            f"{path}: accepted only as the SDK response type {type(validated).__name__}, "
            f"not by a request param type: {json.dumps(given)[:300]}"
        )
    if isinstance(given, dict) and isinstance(validated, dict):
        dropped = sorted(set(given) - set(validated))
        if dropped:
            raise SchemaViolation(f"{path}: keys ignored by the SDK type: {dropped}")
        for k in given:
            _no_silent_acceptance(given[k], validated[k], f"{path}.{k}")
    elif isinstance(given, list) and isinstance(validated, list):
        for i, (g, v) in enumerate(zip(given, validated, strict=True)):
            _no_silent_acceptance(g, v, f"{path}[{i}]")


_CLASS_SEGMENT = re.compile(r"^[A-Z][A-Za-z0-9_]*$")


def _is_member(seg):
    """A loc segment naming a union member (SDK classes are CamelCase, fields snake_case)."""
    return isinstance(seg, str) and bool(_CLASS_SEGMENT.match(seg))


def _loc(loc):
    # pydantic's schema labels (`list[union[...35 names...]]`) say nothing the member name does not.
    return ".".join(str(seg) for seg in loc if not (isinstance(seg, str) and "[" in seg))


def _explain(e):
    """A ValidationError without the noise of union members whose `type`
    literal did not even match (a Responses input item is tried against ~35
    item types): a union no member of which takes the `type` becomes one
    line, and what is left is why the intended member failed."""
    errors = e.errors()
    wrong = {}  # member loc -> (the `type` given, the literal it wanted)
    tried = {}  # union loc -> member names tried there
    for err in errors:
        loc = tuple(err["loc"])
        if err["type"] == "literal_error" and len(loc) >= 2 and loc[-1] == "type" and _is_member(loc[-2]):
            wrong[loc[:-1]] = (err.get("input"), (err.get("ctx") or {}).get("expected"))
        for k, seg in enumerate(loc):
            if _is_member(seg):
                tried.setdefault(loc[:k], set()).add(seg)
    lines = []
    for at, names in tried.items():
        if all(at + (n,) in wrong for n in names):
            given = wrong[at + (min(names),)][0]
            wanted = sorted({str(wrong[at + (n,)][1]) for n in names})
            lines.append(f"  {_loc(at)}: type {given!r} is none of {', '.join(wanted)}")

    def noise(err):
        loc = tuple(err["loc"])
        in_wrong_member = any(loc[: k + 1] in wrong for k in range(len(loc)))
        string_alternative = bool(loc) and loc[-1] == "str" and err["type"] == "string_type"
        return in_wrong_member or string_alternative

    def line(err):
        given = json.dumps(err.get("input"), default=repr)
        return f"  {_loc(err['loc'])}: {err['msg']} [type={err['type']}, input_value={given[:120]}]"

    kept = [err for err in errors if not noise(err)]
    lines += [line(err) for err in kept[:25]]
    if len(kept) > 25:
        lines.append(f"  ... and {len(kept) - 25} more")
    if not lines:
        lines = [line(err) for err in errors[:25]]
    return f"{len(errors)} validation errors:\n" + "\n".join(lines)


def _sdk_validate(adapter, payload, what):
    try:
        validated = adapter.validate_python(payload)
    except ValidationError as e:
        raise SchemaViolation(f"{what}: {_explain(e)}") from None
    validated = _drain(validated, what)
    _no_silent_acceptance(payload, validated, what)
    return validated


def validate_openai_schema(payload):
    return _sdk_validate(OPENAI_ADAPTER, payload, "openai")


def validate_anthropic_schema(payload):
    return _sdk_validate(ANTHROPIC_ADAPTER, payload, "anthropic")


def validate_responses_schema(payload):
    return _sdk_validate(RESPONSES_ADAPTER, payload, "responses")


# ───────────────────────────── provider rules ─────────────────────────────

# Written from the providers' docs (Chat Completions "function calling";
# Messages API "tool use": handling tool results, and the API errors), not
# from compactd's Rust checkers.

ANTHROPIC_ID = re.compile(r"^[a-zA-Z0-9_-]+$")
# Both providers document the same inline image types: PNG, JPEG, WEBP, GIF
# (OpenAI "Images and vision": image input requirements; Anthropic "Vision").
ANTHROPIC_IMAGE_TYPES = {"image/jpeg", "image/png", "image/gif", "image/webp"}
OPENAI_IMAGE_TYPES = ANTHROPIC_IMAGE_TYPES
IMAGE_MAGIC = {
    "image/png": b"\x89PNG\r\n\x1a\n",
    "image/jpeg": b"\xff\xd8\xff",
    "image/gif": b"GIF8",
    "image/webp": b"RIFF",
}
DATA_URL = re.compile(r"^data:(image/[a-z0-9.+-]+);base64,(.*)$", re.S)


def _fail(cls, msg):
    raise cls(msg)


def _b64(data, where):
    try:
        return base64.b64decode(data, validate=True)
    except Exception as e:  # binascii.Error, ValueError
        _fail(RuleViolation, f"{where}: not valid base64 ({e})")


def _check_openai_image_url(url, where):
    """An http(s) URL, or a base64 data: URL of an accepted type whose bytes are that type."""
    if not isinstance(url, str):
        _fail(RuleViolation, f"{where}: image url is not a string: {url!r}")
    if url.startswith("https://") or url.startswith("http://"):
        return
    m = DATA_URL.match(url)
    if not m:
        _fail(RuleViolation, f"{where}: image_url is neither http(s) nor a base64 data: URL: {url[:60]!r}")
    if m.group(1) not in OPENAI_IMAGE_TYPES:
        _fail(RuleViolation, f"{where}: media type {m.group(1)!r} not accepted (PNG, JPEG, WEBP, GIF only)")
    if not _b64(m.group(2), where).startswith(IMAGE_MAGIC[m.group(1)]):
        _fail(RuleViolation, f"{where}: data does not look like {m.group(1)}")


def check_openai_rules(payload):
    """Chat Completions: tool-call pairing and required content.

    - A `tool` message answers a `tool_calls` id of the closest preceding
      assistant message, with only tool messages in between.
    - Every id of an assistant's `tool_calls` is answered (once) before the
      next non-tool message, and before the end of the request.
    - `function.arguments` is a JSON string (the API rejects non-JSON).
    - Content is required for system/developer/user/tool messages, and for
      an assistant message without tool_calls; content arrays are never
      empty. Here system/developer/user/assistant text must also be non-empty
      (stricter than the API, which takes "": such a message says nothing);
      a tool's "" stays allowed (a command may print nothing).
    """
    msgs = payload.get("messages")
    if not isinstance(msgs, list) or not msgs:
        _fail(RuleViolation, "messages must be a non-empty list")
    pending = None  # ids of the open tool_calls block, None when there is none
    for i, m in enumerate(msgs):
        role = m.get("role")
        where = f"messages[{i}] ({role})"
        content = m.get("content")
        if role == "tool":
            tid = m.get("tool_call_id")
            if pending is None or tid not in pending:
                _fail(
                    RuleViolation,
                    f"{where}: tool_call_id {tid!r} answers no open call of the preceding assistant message",
                )
            pending.discard(tid)
            if not _openai_has_content(content, allow_empty_string=True):
                _fail(RuleViolation, f"{where}: missing tool content")
            continue
        if pending:
            _fail(RuleViolation, f"{where}: tool calls {sorted(pending)} are not answered before this message")
        pending = None
        if role == "assistant":
            calls = m.get("tool_calls") or []
            ids = []
            for j, c in enumerate(calls):
                if not c.get("id"):
                    _fail(RuleViolation, f"{where}.tool_calls[{j}]: empty id")
                fn = c.get("function") or {}
                if not fn.get("name"):
                    _fail(RuleViolation, f"{where}.tool_calls[{j}]: empty function name")
                try:
                    json.loads(fn.get("arguments"))
                except (TypeError, ValueError):
                    _fail(
                        RuleViolation,
                        f"{where}.tool_calls[{j}]: arguments is not a JSON string: {fn.get('arguments')!r}",
                    )
                ids.append(c["id"])
            if len(set(ids)) != len(ids):
                _fail(RuleViolation, f"{where}: duplicate tool call ids {ids}")
            if ids:
                pending = set(ids)
            elif not _openai_has_content(content):
                _fail(RuleViolation, f"{where}: assistant message with neither content nor tool_calls")
        elif role in ("system", "developer", "user"):
            if not _openai_has_content(content):
                _fail(RuleViolation, f"{where}: empty content")
            if isinstance(content, list):
                for j, part in enumerate(content):
                    if part.get("type") == "image_url":
                        _check_openai_image_url(part["image_url"]["url"], f"{where}.content[{j}]")
        else:
            _fail(RuleViolation, f"{where}: unexpected role")
    if pending:
        _fail(RuleViolation, f"tool calls {sorted(pending)} are never answered")


def _openai_has_content(content, allow_empty_string=False):
    if isinstance(content, str):
        return allow_empty_string or content != ""
    if isinstance(content, list):
        return bool(content) and all(p.get("type") != "text" or p.get("text") for p in content)
    return False


def _anthropic_blocks(content):
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return content


def _check_anthropic_text(text, where):
    if not isinstance(text, str) or not text.strip():
        _fail(RuleViolation, f"{where}: text blocks must contain non-whitespace text, got {text!r}")


def _check_anthropic_image(block, where):
    src = block.get("source") or {}
    if src.get("type") == "base64":
        if src.get("media_type") not in ANTHROPIC_IMAGE_TYPES:
            _fail(RuleViolation, f"{where}: media_type {src.get('media_type')!r} not accepted")
        raw = _b64(src.get("data", ""), where)
        if not raw.startswith(IMAGE_MAGIC[src["media_type"]]):
            _fail(RuleViolation, f"{where}: data does not look like {src['media_type']}")
    elif src.get("type") == "url":
        if not re.match(r"^https?://", src.get("url", "")):
            _fail(RuleViolation, f"{where}: url image sources must be http(s): {src.get('url', '')[:60]!r}")
    else:
        _fail(RuleViolation, f"{where}: unexpected image source {src.get('type')!r}")


def check_anthropic_rules(payload):
    """Messages API: alternation, tool_use/tool_result pairing, content.

    - `messages` alternate strictly `user` / `assistant`, starting with `user`.
    - Every `tool_use` of an assistant message is answered by a `tool_result`
      in the immediately following user message; in that message all
      `tool_result` blocks come first, before any other block.
    - A `tool_result` answers a `tool_use` of the immediately preceding
      assistant message, once.
    - `tool_use.id` is unique in the request and matches `^[a-zA-Z0-9_-]+$`;
      `tool_use.input` is an object.
    - Text blocks (and string content) are non-empty and not whitespace
      only; a final assistant message does not end with whitespace.
    - Images are base64 (an accepted media type, data that decodes to it)
      or http(s) URLs.
    - `thinking` / `redacted_thinking` blocks (extended thinking) only in
      assistant messages, before every other block of the message (the API:
      "Expected `thinking` or `redacted_thinking`, but found `text`. When
      `thinking` is enabled, a final `assistant` message must start with a
      thinking block". The API checks the latest assistant turn; this holds
      every one to it, since each was the latest when its tool results were
      sent, and compactd renders it the same way then).
    """
    system = payload.get("system")
    if isinstance(system, list):
        for j, b in enumerate(system):
            _check_anthropic_text(b.get("text"), f"system[{j}]")
    msgs = payload.get("messages")
    if not isinstance(msgs, list) or not msgs:
        _fail(RuleViolation, "messages must be a non-empty list")
    if msgs[0].get("role") != "user":
        _fail(RuleViolation, f"messages[0]: the first message must be user, got {msgs[0].get('role')!r}")
    seen_ids = set()
    prev_uses = []
    for i, m in enumerate(msgs):
        role = m.get("role")
        where = f"messages[{i}] ({role})"
        if role not in ("user", "assistant"):
            _fail(RuleViolation, f"{where}: role must be user or assistant")
        if i and msgs[i - 1].get("role") == role:
            _fail(RuleViolation, f"{where}: two {role} messages in a row (roles must alternate)")
        blocks = _anthropic_blocks(m.get("content"))
        if not isinstance(blocks, list) or not blocks:
            _fail(RuleViolation, f"{where}: empty content")
        uses, results, first_other, first_visible = [], [], None, None
        for j, b in enumerate(blocks):
            t = b.get("type")
            bw = f"{where}.content[{j}] ({t})"
            if t in ("thinking", "redacted_thinking"):
                if role != "assistant":
                    _fail(RuleViolation, f"{bw}: thinking blocks only in assistant messages")
                if first_visible is not None:
                    _fail(
                        RuleViolation,
                        f"{bw}: thinking blocks must come first in the assistant message "
                        f"(a {blocks[first_visible]['type']} block is at {first_visible})",
                    )
            elif first_visible is None:
                first_visible = j
            if t in ("thinking", "redacted_thinking"):
                pass
            elif t == "text":
                _check_anthropic_text(b.get("text"), bw)
            elif t == "image":
                if role != "user":
                    _fail(RuleViolation, f"{bw}: images only in user messages")
                _check_anthropic_image(b, bw)
            elif t == "tool_use":
                if role != "assistant":
                    _fail(RuleViolation, f"{bw}: tool_use only in assistant messages")
                uid = b.get("id")
                if not isinstance(uid, str) or not ANTHROPIC_ID.match(uid):
                    _fail(RuleViolation, f"{bw}: tool_use id {uid!r} does not match {ANTHROPIC_ID.pattern}")
                if uid in seen_ids:
                    _fail(RuleViolation, f"{bw}: tool_use ids must be unique, {uid!r} repeats")
                seen_ids.add(uid)
                if not isinstance(b.get("input"), dict):
                    _fail(RuleViolation, f"{bw}: tool_use.input must be an object, got {type(b.get('input')).__name__}")
                if not b.get("name"):
                    _fail(RuleViolation, f"{bw}: empty tool name")
                uses.append(uid)
            elif t == "tool_result":
                if role != "user":
                    _fail(RuleViolation, f"{bw}: tool_result only in user messages")
                if first_other is not None:
                    _fail(
                        RuleViolation,
                        f"{bw}: tool_result blocks must come first in the user message "
                        f"(a {blocks[first_other]['type']} block is at {first_other})",
                    )
                results.append(b.get("tool_use_id"))
                inner = b.get("content")
                if isinstance(inner, list):
                    for k, ib in enumerate(inner):
                        if ib.get("type") == "text":
                            _check_anthropic_text(ib.get("text"), f"{bw}.content[{k}]")
                        elif ib.get("type") == "image":
                            _check_anthropic_image(ib, f"{bw}.content[{k}]")
            else:
                _fail(RuleViolation, f"{bw}: unexpected block type")
            if t != "tool_result" and first_other is None:
                first_other = j
        if role == "user":
            for rid in results:
                if rid not in prev_uses:
                    _fail(
                        RuleViolation,
                        f"{where}: tool_result {rid!r} has no tool_use in the immediately preceding assistant message",
                    )
            if len(set(results)) != len(results):
                _fail(RuleViolation, f"{where}: a tool_use is answered twice: {results}")
            missing = [u for u in prev_uses if u not in results]
            if missing:
                _fail(
                    RuleViolation,
                    f"{where}: tool_use ids {missing} are not answered in this, the immediately following, "
                    "user message",
                )
            prev_uses = []
        else:
            prev_uses = uses
    if prev_uses:
        _fail(RuleViolation, f"tool_use ids {prev_uses} of the last message are never answered")
    last = msgs[-1]
    if last["role"] == "assistant":
        tail = _anthropic_blocks(last["content"])[-1]
        if tail.get("type") == "text" and tail["text"] != tail["text"].rstrip():
            _fail(RuleViolation, "the final assistant content cannot end with trailing whitespace")


RESPONSES_INPUT_PARTS = {"input_text", "input_image", "input_file"}
RESPONSES_OUTPUT_PARTS = {"output_text", "refusal"}
RESPONSES_ROLES = {"user", "system", "developer", "assistant"}


def _responses_item_type(item):
    # A message item may leave out `type` (the SDK's EasyInputMessageParam).
    return item.get("type", "message" if "role" in item else None)


def _check_responses_message(item, where):
    role = item.get("role")
    if role not in RESPONSES_ROLES:
        _fail(RuleViolation, f"{where}: message role must be one of {sorted(RESPONSES_ROLES)}, got {role!r}")
    content = item.get("content")
    if isinstance(content, str):
        if not content.strip():
            _fail(RuleViolation, f"{where}: empty message")
        return
    if not isinstance(content, list) or not content:
        _fail(RuleViolation, f"{where}: empty message")
    allowed = RESPONSES_OUTPUT_PARTS if role == "assistant" else RESPONSES_INPUT_PARTS
    for j, part in enumerate(content):
        t = part.get("type")
        pw = f"{where}.content[{j}] ({t})"
        if t not in allowed:
            _fail(RuleViolation, f"{pw}: a {role} message takes only {sorted(allowed)} parts")
        if t in ("input_text", "output_text") and not (isinstance(part.get("text"), str) and part["text"].strip()):
            _fail(RuleViolation, f"{pw}: empty text part")
        if t == "input_image":
            if part.get("image_url") is not None:
                _check_openai_image_url(part["image_url"], pw)
            elif not part.get("file_id"):
                _fail(RuleViolation, f"{pw}: input_image with neither image_url nor file_id")


def check_responses_rules(payload):
    """Responses API (`POST /v1/responses`, "function calling" and "reasoning"
    guides): what the SDK types leave open, and the order of `input` items.

    - `model` is a non-empty string and `input` a non-empty list of items (the
      SDK's TypedDict is `total=False`: it requires neither, and takes a
      plain string as `input`).
    - `function_call`: non-empty `call_id` and `name`; `arguments` is a JSON
      string; its `call_id` is used by no other call in the input (outputs
      are matched to calls by `call_id` across the whole request; a repeated
      one is refused as a duplicate).
    - `function_call_output` has a `call_id` (optional in the SDK type) of an
      EARLIER `function_call` that has no output yet.
    - Every `function_call` has its `function_call_output` before the end.
    - A `reasoning` item has an id and is IMMEDIATELY followed by the item it
      preceded in the model's output: an assistant `message` or a
      `function_call` (the API: "reasoning item was provided without its
      required following item").
    - No empty message: content is a non-blank string or a non-empty list
      of non-blank parts; user/system/developer messages take `input_*`
      parts, assistant messages `output_text` / `refusal` parts.
    - `input_image` is an http(s) URL or a base64 data: URL of an accepted
      type (PNG, JPEG, WEBP, GIF) whose bytes are that type, or a file id.
    - Function tools have a non-empty name, unique in the request.
    """
    if not isinstance(payload.get("model"), str) or not payload["model"]:
        _fail(RuleViolation, "model must be a non-empty string")
    items = payload.get("input")
    if not isinstance(items, list) or not items:
        _fail(RuleViolation, "input must be a non-empty list of items")
    open_calls = {}  # call_id -> index of the function_call without output yet
    all_calls = {}  # call_id -> index of the function_call that used it
    for i, item in enumerate(items):
        t = _responses_item_type(item)
        where = f"input[{i}] ({t})"
        if t == "message":
            _check_responses_message(item, where)
        elif t == "function_call":
            cid = item.get("call_id")
            if not isinstance(cid, str) or not cid:
                _fail(RuleViolation, f"{where}: empty call_id")
            if not item.get("name"):
                _fail(RuleViolation, f"{where}: empty function name")
            try:
                json.loads(item.get("arguments"))
            except (TypeError, ValueError):
                _fail(RuleViolation, f"{where}: arguments is not a JSON string: {item.get('arguments')!r}")
            if cid in all_calls:
                _fail(
                    RuleViolation,
                    f"{where}: call_id {cid!r} is already used by the call at input[{all_calls[cid]}]",
                )
            open_calls[cid] = i
            all_calls[cid] = i
        elif t == "function_call_output":
            cid = item.get("call_id")
            if not isinstance(cid, str) or not cid:
                _fail(RuleViolation, f"{where}: function_call_output without call_id")
            if cid not in open_calls:
                _fail(
                    RuleViolation,
                    f"{where}: call_id {cid!r} answers no earlier function_call that is still unanswered",
                )
            del open_calls[cid]
        elif t == "reasoning":
            if not item.get("id"):
                _fail(RuleViolation, f"{where}: reasoning item without id")
            nxt = items[i + 1] if i + 1 < len(items) else None
            nt = nxt and _responses_item_type(nxt)
            if not (nt == "function_call" or (nt == "message" and nxt.get("role") == "assistant")):
                _fail(
                    RuleViolation,
                    f"{where}: a reasoning item must be immediately followed by the item it preceded "
                    f"(an assistant message or a function_call), got {nt or 'the end of input'}"
                    + (f" ({nxt.get('role')})" if nt == "message" else ""),
                )
        else:
            _fail(RuleViolation, f"{where}: unexpected item type")
    if open_calls:
        _fail(
            RuleViolation,
            "function calls without function_call_output: "
            + ", ".join(f"{cid!r} at input[{i}]" for cid, i in open_calls.items()),
        )
    names = []
    for j, tool in enumerate(payload.get("tools") or []):
        if tool.get("type") == "function":
            if not tool.get("name"):
                _fail(RuleViolation, f"tools[{j}]: empty function name")
            names.append(tool["name"])
    if len(set(names)) != len(names):
        _fail(RuleViolation, f"tools: duplicate function names {names}")


def validate_openai(payload):
    validate_openai_schema(payload)
    check_openai_rules(payload)


def validate_anthropic(payload):
    validate_anthropic_schema(payload)
    check_anthropic_rules(payload)


def validate_responses(payload):
    validate_responses_schema(payload)
    check_responses_rules(payload)


# ───────────────────────────── thread model ─────────────────────────────

# Threads are built as plain dicts in the canonical thread format of docs/api.md
# (the same shape as examples/threads/incident.json) and converted to proto.

ROLES = ("system", "developer", "user", "assistant", "tool")


def to_proto(pb2, thread_id, messages):
    role = {r: getattr(pb2, f"ROLE_{r.upper()}") for r in ROLES}
    out = []
    for m in messages:
        kw = {"id": m["id"], "role": role[m["role"]], "turn": m.get("turn", 0)}
        content = m.get("content")
        if isinstance(content, str):
            kw["text"] = content
        elif isinstance(content, list):
            kw["parts"] = [to_proto_part(pb2, p) for p in content]
        if m.get("tool_calls"):
            kw["tool_calls"] = [
                pb2.ToolCall(id=c["id"], name=c["name"], arguments_json=json.dumps(c["arguments"]))
                for c in m["tool_calls"]
            ]
        if "tool_result" in m:
            r = m["tool_result"]
            env = pb2.ToolResultEnvelope(tool_name=r["tool_name"], tool_call_id=r["tool_call_id"])
            if r.get("outcome"):
                env.outcome = getattr(pb2, f"OUTCOME_{r['outcome'].upper()}")
            if r.get("durability"):
                env.durability = getattr(pb2, f"DURABILITY_{r['durability'].upper()}")
            c = r.get("content", "")
            if isinstance(c, str):
                env.content_text = c
            else:
                env.content_json = json.dumps(c)
            for k, v in (r.get("key_fields") or {}).items():
                env.key_fields[k] = json.dumps(v)
            for k, v in (r.get("determinism") or {}).items():
                setattr(env.determinism, k, v)
            kw["tool_result"] = env
        md = m.get("metadata")
        if md:
            meta = pb2.MessageMetadata(protected=md.get("protected", False))
            if "label" in md:
                meta.label = md["label"]
            if "source" in md:
                meta.source = md["source"]
            if "sensitivity" in md:
                meta.sensitivity = getattr(pb2, f"SENSITIVITY_{md['sensitivity'].upper()}")
            kw["metadata"] = meta
        out.append(pb2.Message(**kw))
    return pb2.Thread(id=thread_id, messages=out)


def to_proto_part(pb2, p):
    """A canonical content part: text, image (by url), and the assistant-only
    thinking / redacted_thinking (Anthropic) and reasoning (OpenAI Responses)."""
    t = p["type"]
    if t == "text":
        return pb2.ContentPart(text=p["text"])
    if t == "image":
        return pb2.ContentPart(image_url=p["url"])
    if t == "thinking":
        return pb2.ContentPart(thinking=pb2.ThinkingBlock(thinking=p["thinking"], signature=p["signature"]))
    if t == "redacted_thinking":
        return pb2.ContentPart(redacted_thinking=pb2.RedactedThinkingBlock(data=p["data"]))
    if t == "reasoning":
        item = pb2.ReasoningItem(id=p["id"], summary=p["summary"])
        if p.get("encrypted_content") is not None:
            item.encrypted_content = p["encrypted_content"]
        return pb2.ContentPart(reasoning=item)
    raise ValueError(f"unknown part type {t!r}")


def from_openai_messages(msgs):
    """A plain OpenAI `messages` array in the canonical form (docs/api.md: ids m0,
    m1..., each user message opens a turn, results named by their call)."""
    names, out, turn = {}, [], 0
    for i, m in enumerate(msgs):
        c = {"id": f"m{i}", "role": m["role"]}
        if m["role"] == "user":
            turn += 1
        c["turn"] = turn
        if m["role"] == "tool":
            c["tool_result"] = {
                "tool_name": names[m["tool_call_id"]],
                "tool_call_id": m["tool_call_id"],
                "content": m["content"],
            }
        else:
            c["content"] = m.get("content") or ""
        for call in m.get("tool_calls") or []:
            names[call["id"]] = call["function"]["name"]
            c.setdefault("tool_calls", []).append(
                {
                    "id": call["id"],
                    "name": call["function"]["name"],
                    "arguments": json.loads(call["function"]["arguments"]),
                }
            )
        out.append(c)
    return out


# ───────────────────────────── thread generators ─────────────────────────────

SERVICES = ["payments-api", "checkout", "ledger-db", "auth-gateway", "search-indexer", "notifier", "billing-cron"]
FILES = [
    "src/utils.py",
    "lib/parser.rs",
    "app/models/order.rb",
    "cmd/server/main.go",
    "web/src/App.tsx",
    "docs/RUNBOOK.md",
]
DBS = ["orders", "ledger", "analytics", "users_eu", "inventory"]
VERSIONS = ["v2.3.1", "14.2", "2026.03", "1.0.0-rc2", "3.11"]

USER_ASKS = [
    "Can you check why {svc} is slow since {time}?",
    "Please look into the failing {db} backup job; it broke after the {ver} upgrade.",
    "i need a quick summary of {file}, nothing fancy",
    "What's the p99 latency of {svc} over the last {n} minutes?",
    "Refactor {file} so it stops using globals. Keep the public API exactly as it is.",
    "Compare {svc} and {svc2} error rates and give me a table.",
    "Über-quick question: does {file} handle UTF-8 input like “naïve café”?",
    "{db} 数据库现在有多少个连接？请简短回答。",
    "Let's plan the migration of {db} to {ver}.\nConstraints:\n- no downtime\n- budget ${n}\n- finish by Friday",
    "ok",
    "Thanks! Now do the same for {svc2}.",
    "Never delete anything in {db} without asking me first. Then find the orphaned rows.",
    "hmm, that number looks off. Can you double-check with the raw data?",
    "Write a short post-mortem for the {svc} outage at {time} 🚒",
    "Run the test suite for {file} and tell me what fails.",
]
ASSISTANT_REPLIES = [
    "Done. {svc} looks healthy now; p99 is {n} ms.",
    "I checked {file}: it has {n} functions and no global state left.",
    "Here's the comparison:\n\n| service | errors |\n|---|---|\n| {svc} | {n} |\n| {svc2} | {n2} |",
    "The {db} job failed because the {ver} client dropped the `--compress` flag. I patched the cron entry.",
    "Short answer: yes.",
    "I couldn't confirm that yet — the logs for {time} are incomplete. Shall I pull the archived ones?",
    '```python\ndef handler(event):\n    return {{"ok": True, "n": {n}}}\n```\nThat\'s the minimal fix.',
    "Understood, I won't touch {db} without your approval.",
    "Summary: {n} of {n2} requests timed out, all routed through {svc}.",
]
THINKING = [
    "Let me look.",
    "I'll check a few things in parallel.",
    "Pulling the data now.",
    "",
    "",
    "First I need the current state of {svc}.",
]


def fill(rng, template):
    svc, svc2 = rng.sample(SERVICES, 2)
    return template.format(
        svc=svc,
        svc2=svc2,
        file=rng.choice(FILES),
        db=rng.choice(DBS),
        ver=rng.choice(VERSIONS),
        n=rng.randint(2, 900),
        n2=rng.randint(900, 5000),
        time=f"{rng.randint(0, 23):02}:{rng.choice(['00', '15', '30', '45'])} UTC",
    )


def tiny_png(rng):
    """A valid 2x2 PNG with random colours."""
    raw = b"".join(b"\x00" + bytes(rng.randrange(256) for _ in range(6)) for _ in range(2))

    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    ihdr = struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def data_url(rng):
    return "data:image/png;base64," + base64.b64encode(tiny_png(rng)).decode()


def https_image(rng):
    return f"https://images.example.com/{rng.choice(['screens', 'charts', 'photos'])}/{rng.randrange(10**6):06}.png"


def log_lines(rng, n):
    svc = rng.choice(SERVICES)
    return "".join(
        f"2026-03-{1 + i % 28:02}T{i % 24:02}:{i % 60:02}:00Z "
        f"{rng.choice(['INFO', 'INFO', 'INFO', 'WARN', 'DEBUG'])} {svc} req={rng.randrange(10**6)} "
        f"{rng.choice(['ok', 'ok', 'retry', 'cache-miss'])} {rng.randint(1, 999)}ms\n"
        for i in range(n)
    )


def code_lines(rng, n):
    return "\n".join(
        f"def helper_{i}(x, y={rng.randint(0, 9)}):\n    return x * {i} + y  # {rng.choice(['fast', 'slow', 'todo'])}"
        for i in range(n)
    )


def _schema(props, required=()):
    return {"type": "object", "properties": props, "required": list(required)}


def _tool_read_file(rng, size):
    path = rng.choice(FILES)
    return {"path": path}, code_lines(rng, size), None


def _tool_search(rng, size):
    q = fill(rng, rng.choice(["{svc} timeout", "{db} vacuum settings", "postmortem {svc}", "{ver} changelog"]))
    hits = [
        {
            "title": f"Result {i}: {fill(rng, '{svc} and {db}')}",
            "url": f"https://wiki.example.com/page/{rng.randrange(10**5)}",
            "snippet": " ".join(rng.choice(["latency", "pool", "retry", "storm", "index", "lock"]) for _ in range(12)),
        }
        for i in range(max(1, size // 3))
    ]
    return {"query": q, "limit": len(hits)}, hits, None


def _tool_sql(rng, size):
    db = rng.choice(DBS)
    rows = [
        [f"ord_{5000 + i}", rng.choice(["paid", "failed", "refunded"]), round(rng.uniform(1, 500), 2)]
        for i in range(size)
    ]
    return (
        {"sql": f"select id, status, amount from {db} limit {size}", "database": db},
        {"columns": ["id", "status", "amount"], "rows": rows, "row_count": size},
        {"row_count": size},
    )


def _tool_http(rng, size):
    tid = f"PAY-{rng.randint(1000, 9999)}"
    body = {
        "status": 201,
        "id": tid,
        "url": f"https://tickets.example.com/{tid}",
        "watchers": [f"user{i}" for i in range(size // 10)],
    }
    return (
        {"method": "POST", "url": "https://tickets.example.com/api", "body": {"title": fill(rng, "{svc} incident")}},
        body,
        {"ticket_id": tid},
    )


def _tool_shell(rng, size):
    cmd = rng.choice(["pytest -q", "cargo test --quiet", "kubectl get pods -A", "df -h", "git log --oneline -n 40"])
    return {"cmd": cmd, "timeout_s": rng.choice([30, 60, 600])}, f"$ {cmd}\n{log_lines(rng, size)}exit code 0\n", None


def _tool_metrics(rng, size):
    svc = rng.choice(SERVICES)
    series = [{"t": 1700000000 + 60 * i, "p50": rng.randint(5, 50), "p99": rng.randint(60, 900)} for i in range(size)]
    return {"service": svc, "window_minutes": size, "percentiles": [50, 99]}, {"service": svc, "series": series}, None


TOOLS = {
    "read_file": ("Read a file from the repository.", _schema({"path": {"type": "string"}}, ["path"]), _tool_read_file),
    "search_wiki": (
        "Search the internal wiki.",
        _schema({"query": {"type": "string"}, "limit": {"type": "integer"}}, ["query"]),
        _tool_search,
    ),
    "run_sql": (
        "Run a read-only SQL query.",
        _schema({"sql": {"type": "string"}, "database": {"type": "string"}}, ["sql"]),
        _tool_sql,
    ),
    "http_request": (
        "Send an HTTP request to an internal API.",
        _schema(
            {"method": {"type": "string"}, "url": {"type": "string"}, "body": {"type": "object"}}, ["method", "url"]
        ),
        _tool_http,
    ),
    "shell": (
        "Run a shell command in the sandbox.",
        _schema({"cmd": {"type": "string"}, "timeout_s": {"type": "integer"}}, ["cmd"]),
        _tool_shell,
    ),
    "get_metrics": (
        "Fetch latency metrics for a service.",
        _schema(
            {"service": {"type": "string"}, "window_minutes": {"type": "integer"}, "percentiles": {"type": "array"}}
        ),
        _tool_metrics,
    ),
}

FAILURES = [
    "Error: ENOENT: no such file or directory, open '{file}'",
    'Traceback (most recent call last):\n  File "runner.py", line 12, in <module>\n'
    "TimeoutError: {svc} did not answer in 30s",
    "fatal: could not read from remote repository",
    "permission denied: role reader cannot query {db}",
]


class ThreadBuilder:
    """Appends canonical messages; ids, turns and call ids vary by seed."""

    def __init__(self, rng):
        self.rng = rng
        self.messages = []
        self.turn = 0
        self.tools_used = set()
        self.id_style = rng.choice(["openai", "anthropic", "short"])
        self.msg_prefix = rng.choice(["m", "msg-", "evt_", ""])

    def _append(self, m):
        m["id"] = f"{self.msg_prefix}{len(self.messages)}"
        m["turn"] = self.turn
        self.messages.append(m)
        return m

    def call_id(self):
        tail = "".join(self.rng.choices(string.ascii_letters + string.digits, k=self.rng.choice([8, 24])))
        return {"openai": f"call_{tail}", "anthropic": f"toolu_01{tail}", "short": f"c{len(self.messages)}_{tail[:4]}"}[
            self.id_style
        ]

    def user(self, content=None, **meta):
        self.turn += 1
        m = {"role": "user", "content": content if content is not None else fill(self.rng, self.rng.choice(USER_ASKS))}
        if meta:
            m["metadata"] = meta
        return self._append(m)

    def assistant(self, content=None, calls=()):
        m = {
            "role": "assistant",
            "content": content if content is not None else fill(self.rng, self.rng.choice(ASSISTANT_REPLIES)),
        }
        if calls:
            m["tool_calls"] = list(calls)
        return self._append(m)

    def system(self, role, content, **meta):
        m = {"role": role, "content": content}
        if meta:
            m["metadata"] = meta
        return self._append(m)

    def new_call(self, name=None, size=None):
        """A call plus the result it will get: (call, (content, key_fields))."""
        name = name or self.rng.choice(sorted(TOOLS))
        self.tools_used.add(name)
        size = size if size is not None else self.rng.choice([2, 4, 8, 15, 30])
        args, output, key_fields = TOOLS[name][2](self.rng, size)
        return {"id": self.call_id(), "name": name, "arguments": args}, (output, key_fields)

    def result(self, call, output, key_fields=None, outcome=None, durability=None):
        r = {"tool_name": call["name"], "tool_call_id": call["id"], "content": output}
        if outcome:
            r["outcome"] = outcome
        if key_fields:
            r["key_fields"] = key_fields
        durability = durability or self.rng.choice(
            [None, None, "ephemeral", "anchoring", "replayable", "non_replayable"]
        )
        if durability:
            r["durability"] = durability
            if durability == "replayable" and self.rng.random() < 0.5:
                r["determinism"] = {"content_hash": f"sha256:{self.rng.randrange(16**12):012x}"}
        return self._append({"role": "tool", "tool_result": r})

    def tool_round(self, k, *, text=None, shuffle=True, fail_rate=0.0, size=None, names=None):
        pairs = [self.new_call(names[i] if names else None, size) for i in range(k)]
        self.assistant(text if text is not None else fill(self.rng, self.rng.choice(THINKING)), [c for c, _ in pairs])
        order = list(pairs)
        if shuffle:
            self.rng.shuffle(order)
        for call, (output, key_fields) in order:
            if self.rng.random() < fail_rate:
                self.result(call, fill(self.rng, self.rng.choice(FAILURES)), outcome="failure")
            else:
                self.result(call, output, key_fields, outcome=self.rng.choice([None, "success", "success"]))


def gen_plain_dialogue(rng, tb):
    for _ in range(rng.randint(3, 9)):
        tb.user()
        for _ in range(rng.choice([1, 1, 1, 2])):  # sometimes two assistant messages in a row
            tb.assistant()
    tb.user(
        rng.choice(["  and one more thing: what's next?\n", "Thanks — anything else I should know?", "¿Y ahora qué?"])
    )
    return {"expect_compaction": False}


def gen_parallel_tool_calls(rng, tb):
    tb.user()
    sizes = [8, rng.randint(2, 7), rng.randint(2, 8)]
    rng.shuffle(sizes)
    for i, k in enumerate(sizes):
        tb.tool_round(k, text=rng.choice(["", "Checking everything at once.", fill(rng, "Fanning out over {svc}.")]))
        if i < len(sizes) - 1:
            tb.assistant() if rng.random() < 0.6 else tb.user()
    # The request is made right after the last results: the thread ends with tool messages.
    return {"expect_compaction": False}


def gen_failed_tool_results(rng, tb):
    tb.user()
    for _ in range(rng.randint(2, 4)):
        call, (output, kf) = tb.new_call()
        tb.assistant(rng.choice(["Trying.", ""]), [call])
        if rng.random() < 0.7:
            tb.result(
                call, fill(rng, rng.choice(FAILURES)), outcome="failure", durability=rng.choice([None, "ephemeral"])
            )
            retry, (out2, kf2) = tb.new_call(call["name"])
            tb.assistant("That failed; retrying with different arguments.", [retry])
            tb.result(retry, out2, kf2, outcome=rng.choice(["success", "partial"]))
        else:
            tb.result(call, {"error": {"code": 403, "message": "forbidden"}}, outcome="failure")
        tb.assistant()
        tb.user()
    return {"expect_compaction": False}


def gen_multimodal_user(rng, tb):
    tb.user([{"type": "text", "text": "Here is the dashboard."}, {"type": "image", "url": https_image(rng)}])
    tb.assistant()
    tb.user(
        [
            {"type": "image", "url": data_url(rng)},
            {"type": "text", "text": fill(rng, "And this screenshot from {svc} — what's wrong?")},
        ]
    )
    tb.tool_round(rng.randint(1, 3))
    tb.assistant()
    parts = [{"type": "image", "url": rng.choice([https_image(rng), data_url(rng)])} for _ in range(rng.randint(1, 3))]
    if rng.random() < 0.5:
        parts.append({"type": "text", "text": "Compare these."})
    tb.user(parts)
    return {"expect_compaction": False}


def gen_mid_thread_system(rng, tb):
    if rng.random() < 0.5:
        tb.system("developer", "Answer in English. Prefer tables.", protected=True, label="Style")
    tb.user()
    tb.tool_round(rng.randint(1, 2))
    tb.assistant()
    tb.system(rng.choice(["system", "developer"]), fill(rng, "Policy update: {db} is read-only from now on."))
    tb.user()
    tb.assistant()
    if rng.random() < 0.5:
        tb.system("developer", "Reminder: be brief.")
        tb.assistant("Noted.")
    tb.user()
    return {"expect_compaction": False}


def gen_starts_with_assistant(rng, tb):
    if rng.random() < 0.5:
        tb.assistant(
            rng.choice(["Hi! I'm the on-call assistant. What's up?", "Welcome back — resuming where we left off."])
        )
    else:
        # An agent that acts first: the thread opens with a tool call.
        tb.tool_round(rng.randint(1, 3), text=rng.choice(["", "Loading your workspace."]))
        tb.assistant()
    tb.user()
    tb.assistant()
    tb.user()
    return {"expect_compaction": False}


def gen_large_tool_outputs(rng, tb):
    tb.system("developer", "Never restart ledger-db without approval.", protected=True, label="Policy")
    tb.user()
    for _ in range(rng.randint(3, 5)):
        k = rng.choice([1, 1, 2, 3])
        tb.tool_round(
            k,
            size=rng.choice([120, 250, 400]),
            names=[rng.choice(["read_file", "shell", "run_sql", "search_wiki"]) for _ in range(k)],
        )
        tb.assistant()
        tb.user()
    tb.tool_round(rng.randint(1, 2), size=10)
    return {"expect_compaction": True}


def gen_agent_session(rng, tb):
    turns = rng.randint(4, 10)
    for t in range(turns):
        if rng.random() < 0.2:
            tb.user(
                [
                    {"type": "text", "text": fill(rng, rng.choice(USER_ASKS))},
                    {"type": "image", "url": rng.choice([https_image(rng), data_url(rng)])},
                ]
            )
        else:
            tb.user()
        for _ in range(rng.choice([0, 1, 1, 2, 3])):
            tb.tool_round(
                rng.choice([1, 1, 1, 2, 3, 5, 8]),
                fail_rate=0.15,
                size=rng.choice([None, None, 60, 200]),
            )
        if t < turns - 1 or rng.random() < 0.5:
            tb.assistant()
            if t == turns - 1:
                tb.user()
    return {"expect_compaction": False}


GENERATORS = {
    "plain_dialogue": gen_plain_dialogue,
    "parallel_tool_calls": gen_parallel_tool_calls,
    "failed_tool_results": gen_failed_tool_results,
    "multimodal_user_content": gen_multimodal_user,
    "mid_thread_system_developer": gen_mid_thread_system,
    "starts_with_assistant": gen_starts_with_assistant,
    "large_tool_outputs": gen_large_tool_outputs,
}
CASES = [f"{name}#{v}" for name in GENERATORS for v in range(3)] + [f"agent_session#{v}" for v in range(10)]
CASES += [f"example:{p.name}" for p in sorted(EXAMPLES.glob("*.json"))]


def build_case(case):
    """(canonical messages, system prompt or None, tool names, expectations, rng)."""
    rng = random.Random(f"{SEED}:{case}")
    if case.startswith("example:"):
        data = json.loads((EXAMPLES / case.split(":", 1)[1]).read_text())
        if isinstance(data, dict) and "messages" in data and all("id" in m for m in data["messages"]):
            msgs, system = data["messages"], data.get("system")
        else:
            raw = data["messages"] if isinstance(data, dict) else data
            msgs, system = from_openai_messages(raw), None
        tools = sorted({c["name"] for m in msgs for c in m.get("tool_calls") or []})
        return msgs, system, tools, {"expect_compaction": False}, rng
    tb = ThreadBuilder(rng)
    name = case.split("#")[0]
    expect = (gen_agent_session if name == "agent_session" else GENERATORS[name])(rng, tb)
    system = rng.choice(
        [None, "You are a careful engineering agent.", "You help the SRE team.\nBe precise; cite tool output."]
    )
    tools = sorted(tb.tools_used) if rng.random() < 0.7 else []
    return tb.messages, system, tools, expect, rng


# ───────────────────────────── rendering ─────────────────────────────

FORMATS = ("openai", "anthropic", "responses")


def tool_schemas(pb2, names):
    out = []
    for n in names:
        desc, params = (TOOLS[n][0], TOOLS[n][1]) if n in TOOLS else (f"The {n} tool.", {"type": "object"})
        out.append(pb2.ToolSchema(name=n, description=desc, parameters_json=json.dumps(params)))
    return out


def output_format(pb2, fmt):
    return {
        "openai": pb2.OUTPUT_FORMAT_OPENAI_CHAT,
        "anthropic": pb2.OUTPUT_FORMAT_ANTHROPIC_MESSAGES,
        "responses": pb2.OUTPUT_FORMAT_OPENAI_RESPONSES,
    }[fmt]


def models_for(fmt):
    return ANTHROPIC_MODELS if fmt == "anthropic" else OPENAI_MODELS


def render(
    pb2,
    stub,
    thread,
    fmt,
    *,
    budget,
    system=None,
    tools=(),
    policy=None,
    model=None,
    max_output=None,
    omit_pending=False,
):
    req = pb2.RenderRequest(
        thread=thread,
        compact_first=True,
        model=model or models_for(fmt)[0],
        max_input_tokens=budget,
        format=output_format(pb2, fmt),
        tools=list(tools),
        omit_pending_calls=omit_pending,
    )
    if system is not None:
        req.system_prompt = system
    if policy is not None:
        req.policy.CopyFrom(policy)
    if max_output is not None:
        req.max_output_tokens = max_output
    out = stub.Render(req, timeout=CALL_TIMEOUT_S)
    return out, json.loads(out.provider_payload_json)


def render_fitting(pb2, stub, thread, fmt, budget, where, **kw):
    """`render` at `budget`, or at the first budget up a x1.5 ladder that fits:
    a budget below what the kept tail needs is refused (INSUFFICIENT_BUDGET).
    Each attempt gets its own thread id (plans are stored per thread)."""
    start = budget
    while True:
        try:
            out, payload = render(
                pb2,
                stub,
                pb2.Thread(id=f"{thread.id}-{fmt}-{budget}", messages=thread.messages),
                fmt,
                budget=budget,
                **kw,
            )
            return out, payload, budget
        except grpc.RpcError as e:
            if error_reason(e) != "INSUFFICIENT_BUDGET" or budget > 50 * start + 50_000:
                raise AssertionError(f"{where} budget={budget}: Render failed: {e.code()} {e.details()}") from None
            budget = int(budget * 1.5)


def all_text(payload):
    """Every string in the payload, decoded (for "does X survive" checks)."""
    acc = []

    def walk(v):
        if isinstance(v, str):
            acc.append(v)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(payload)
    return "\n".join(acc)


def payload_call_ids(payload, fmt):
    """Call ids in payload order (tool_calls / tool_use / function_call)."""
    if fmt == "responses":
        return [i["call_id"] for i in payload["input"] if i.get("type") == "function_call"]
    ids = []
    for m in payload["messages"]:
        if fmt == "openai":
            ids += [c["id"] for c in m.get("tool_calls") or []]
        elif isinstance(m["content"], list):
            ids += [b["id"] for b in m["content"] if b.get("type") == "tool_use"]
    return ids


def error_info(err):
    """The google.rpc `ErrorInfo` of a failed call, or None."""
    status = rpc_status.from_call(err)
    for d in status.details if status else ():
        if d.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            d.Unpack(info)
            return info
    return None


def error_reason(err):
    """The stable `ErrorInfo.reason` of a failed call (google.rpc details)."""
    info = error_info(err)
    return info.reason if info else None


VALIDATORS = {"openai": validate_openai, "anthropic": validate_anthropic, "responses": validate_responses}


def validate(payload, fmt):
    VALIDATORS[fmt](payload)


def _dump(tmp_path, name, payload):
    path = tmp_path / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', name)}.json"
    path.write_text(json.dumps(payload, indent=1, ensure_ascii=False))
    return path


def render_options(pb2, rng, policy=None, truncate=True):
    """Rendering options that change the text: user-content delimiting and
    tool-result truncation, sometimes."""
    policy = policy or pb2.PolicyOverrides()
    if rng.random() < 0.25:
        policy.delimit_user_content = True
    if rng.random() < 0.25:
        policy.delimit_tool_output = False
    cap = rng.choice([None, None, 300, 4000])
    if cap and truncate:
        policy.tool_result_max_chars = cap
    return policy


def squeeze_policy(pb2, rng=None):
    """A tiny tail and no reserves, so compaction reaches the recent turns (no
    truncation: it could shrink the thread below the trigger)."""
    policy = pb2.PolicyOverrides(
        keep_recent_turns=1,
        keep_tool_io_pairs=1,
        externalize_threshold_tokens=300,
        rehydration_reserve_tokens=0,
        safety_buffer_tokens=100,
    )
    if rng is not None:
        if rng.random() < 0.25:
            policy.enable_externalize = False
        render_options(pb2, rng, policy, truncate=False)
    return policy


# ───────────────────────────── the sweep ─────────────────────────────


@pytest.mark.parametrize("case", CASES)
def test_rendered_payloads_satisfy_sdk_types_and_provider_rules(api, stub, tmp_path, case):
    pb2, _ = api
    msgs, system, tool_names, expect, rng = build_case(case)
    thread = to_proto(pb2, f"pp-{SEED}-{case}", msgs)
    tools = tool_schemas(pb2, tool_names)
    ctx = f"[seed={SEED} case={case}]"

    # Size the thread once, then pick budgets relative to it.
    sizing, _ = render(pb2, stub, thread, "openai", budget=1_000_000, system=system, tools=tools)
    total = sizing.tokens.total
    configs = [
        ("roomy", 1_000_000, None),
        ("tight", max(int(total * 0.6), 1_000), render_options(pb2, rng)),
        ("squeezed", max(int(total * 0.3), 300), squeeze_policy(pb2, rng)),
    ]
    thread_texts = [m["content"] for m in msgs if m["role"] == "user" and isinstance(m.get("content"), str)]
    thread_call_ids = [c["id"] for m in msgs for c in m.get("tool_calls") or []]
    compacted_any = False
    for fmt in FORMATS:
        for label, budget, policy in configs:
            where = f"{ctx} format={fmt} budget={label}:{budget}"
            model = rng.choice(models_for(fmt))
            max_output = rng.choice([None, 1024, 8192]) if fmt != "openai" else None
            out, payload, budget = render_fitting(
                pb2,
                stub,
                thread,
                fmt,
                budget,
                where,
                system=system,
                tools=tools,
                policy=policy,
                model=model,
                max_output=max_output,
            )
            where = f"{ctx} format={fmt} budget={label}:{budget}"
            dump = _dump(tmp_path, f"{case}-{fmt}-{label}", payload)
            try:
                validate(payload, fmt)
            except AssertionError as e:
                raise AssertionError(f"{where}: {type(e).__name__}: {e}\npayload: {dump}") from None
            assert payload["model"] == model, where
            if fmt == "anthropic":
                assert payload["max_tokens"] == (max_output or payload["max_tokens"]) > 0, where
            if fmt == "responses":
                assert payload.get("max_output_tokens") == max_output, where
                assert payload.get("instructions") == (system or None), f"{where}: system prompt not in instructions"
                for j, t in enumerate(payload.get("tools") or []):
                    # ToolSchema has no strictness flag, and Chat Completions tools are
                    # loose by default; Responses tools are strict unless `strict` is false.
                    assert t.get("strict") is False, (
                        f"{where}: tools[{j}].strict must be false, got {t.get('strict')!r}"
                    )
            if tools:
                assert len(payload.get("tools") or []) == len(tools), f"{where}: tools not all sent"
            plan = out.compaction.plan
            records = len(plan.externalizations) + len(plan.summarizations) + len(plan.clearings) + len(plan.drops)
            text = all_text(payload)
            if records == 0:
                # Nothing compacted: everything the user said and every call is there.
                for t in thread_texts:
                    assert t.strip() in text, f"{where}: user text lost without compaction: {t[:60]!r}\npayload: {dump}"
                assert sorted(payload_call_ids(payload, fmt)) == sorted(thread_call_ids), (
                    f"{where}: tool calls changed\npayload: {dump}"
                )
            else:
                compacted_any = True
                # What the plan says replaced the content is what the payload shows.
                for x in plan.externalizations:
                    assert x.artifact_id in text, f"{where}: pointer to {x.artifact_id} missing\npayload: {dump}"
                for c in plan.clearings:
                    assert c.replacement.strip() in text, (
                        f"{where}: clear placeholder missing: {c.replacement[:80]!r}\npayload: {dump}"
                    )
                if plan.summarizations:
                    assert "[Context Summary" in text, f"{where}: summary missing\npayload: {dump}"
            # The generated ids are valid for both providers and unique, so none is renamed.
            invented = set(payload_call_ids(payload, fmt)) - set(thread_call_ids)
            assert not invented, (
                f"{where}: tool call ids that are not in the thread: {sorted(invented)}\npayload: {dump}"
            )
            assert out.tokens.total <= out.compaction.budget.hard_limit or label == "roomy", where
    if expect["expect_compaction"]:
        assert compacted_any, f"{ctx}: the tight/squeezed budgets compacted nothing (total {total} tokens)"


# ───────────────────────────── the validators bite ─────────────────────────────


def _ok_openai():
    return {
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Look"},
                    {"type": "image_url", "image_url": {"url": "https://x.example/a.png"}},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_a",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": '{"path": "a"}'},
                    },
                    {
                        "id": "call_b",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": '{"path": "b"}'},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "call_b", "content": "B"},
            {"role": "tool", "tool_call_id": "call_a", "content": "A"},
            {"role": "assistant", "content": "Both read."},
            {"role": "developer", "content": "Mid-thread policy."},
            {"role": "user", "content": "thanks"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {"name": "read_file", "description": "r", "parameters": {"type": "object"}},
            }
        ],
    }


def _ok_anthropic():
    png = base64.b64encode(tiny_png(random.Random(0))).decode()
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "system": "Be brief.",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Look"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}},
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Reading both."},
                    {"type": "tool_use", "id": "toolu_a", "name": "read_file", "input": {"path": "a"}},
                    {"type": "tool_use", "id": "toolu_b", "name": "read_file", "input": {"path": "b"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_b", "content": "B"},
                    {"type": "tool_result", "tool_use_id": "toolu_a", "content": "boom", "is_error": True},
                    {"type": "text", "text": "and then?"},
                ],
            },
            {"role": "assistant", "content": "Done."},
            {"role": "user", "content": "thanks"},
        ],
        "tools": [{"name": "read_file", "description": "r", "input_schema": {"type": "object", "properties": {}}}],
    }


def _ok_responses():
    png = base64.b64encode(tiny_png(random.Random(1))).decode()
    return {
        "model": "gpt-4o",
        "instructions": "Be brief.",
        "input": [
            {
                "type": "message",
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "Look"},
                    {"type": "input_image", "image_url": f"data:image/png;base64,{png}", "detail": "auto"},
                ],
            },
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [{"type": "summary_text", "text": "Two files to read."}],
                "encrypted_content": "gAAAAABopaque==",
            },
            {"type": "message", "role": "assistant", "content": "Reading both."},
            {"type": "function_call", "call_id": "call_a", "name": "read_file", "arguments": '{"path": "a"}'},
            {"type": "function_call", "call_id": "call_b", "name": "read_file", "arguments": '{"path": "b"}'},
            {"type": "function_call_output", "call_id": "call_b", "output": "B"},
            {"type": "function_call_output", "call_id": "call_a", "output": "A"},
            {"type": "reasoning", "id": "rs_2", "summary": []},
            {"type": "function_call", "call_id": "call_c", "name": "read_file", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_c", "output": ""},
            {"type": "message", "role": "assistant", "content": "Both read."},
            {"type": "message", "role": "developer", "content": "Mid-thread policy."},
            {"type": "message", "role": "user", "content": "thanks"},
        ],
        "tools": [
            {
                "type": "function",
                "name": "read_file",
                "description": "r",
                "parameters": {"type": "object"},
                "strict": False,
            }
        ],
        "max_output_tokens": 1024,
    }


def _typed_dicts(schema, models=None):
    """(class name, extra behaviour) of every TypedDict in a core schema; the
    names of pydantic models (response types) go into `models`."""
    found = set()

    def walk(node):
        if isinstance(node, dict):
            if node.get("type") == "typed-dict":
                found.add((node["cls"].__name__, node.get("extra_behavior", "ignore")))
            if node.get("type") == "model" and models is not None:
                models.add(node["cls"].__name__)
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(schema)
    return found


def test_adapters_forbid_unknown_keys():
    """Where `extra="forbid"` reaches, as documented at the top of this file."""
    openai_tds = _typed_dicts(OPENAI_ADAPTER.core_schema)
    assert len(openai_tds) > 30, "the walk found the nested TypedDicts"
    assert {td for td in openai_tds if td[1] != "forbid"} == set()
    anthropic_tds = _typed_dicts(ANTHROPIC_ADAPTER.core_schema)
    assert len(anthropic_tds) > 100
    assert {td for td in anthropic_tds if td[1] != "forbid"} == {
        ("Base64ImageSourceParam", "ignore"),  # SDK-set config: caught by _no_silent_acceptance
        ("Base64PDFSourceParam", "ignore"),
        ("InputSchemaTyped", "allow"),  # a JSON Schema: open by design
    }
    models = set()
    responses_tds = _typed_dicts(RESPONSES_ADAPTER.core_schema, models)
    assert len(responses_tds) > 100
    assert {td for td in responses_tds if td[1] != "forbid"} == set()
    assert models == set(), "no response model in the Responses request union"


def test_valid_control_payloads_pass():
    """The hand-made payloads the negative tests mutate are valid as they are."""
    validate_openai(_ok_openai())
    validate_anthropic(_ok_anthropic())
    validate_responses(_ok_responses())
    # Extended thinking first in an assistant turn is fine.
    validate_anthropic(_mutate(_ok_anthropic(), _think_at(1, 0)))


def _think_at(msg, pos):
    def fn(p):
        content = p["messages"][msg]["content"]
        if isinstance(content, str):
            content = p["messages"][msg]["content"] = [{"type": "text", "text": content}]
        content[pos:pos] = [
            {"type": "thinking", "thinking": "Two files.", "signature": "EqQBCkYIBxgCKkAsig=="},
            {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT"},
        ]

    return fn


def _mutate(base, fn):
    p = json.loads(json.dumps(base))
    fn(p)
    return p


def _set(path, value):
    def fn(p):
        obj = p
        for k in path[:-1]:
            obj = obj[k]
        obj[path[-1]] = value

    return fn


def _delete(path):
    def fn(p):
        obj = p
        for k in path[:-1]:
            obj = obj[k]
        del obj[path[-1]]

    return fn


OPENAI_SCHEMA_BAD = {
    "tool message without tool_call_id": (_delete(["messages", 3, "tool_call_id"]), "tool_call_id"),
    "unknown content part type": (
        _set(["messages", 1, "content", 1], {"type": "video_url", "video_url": {"url": "https://v"}}),
        "video_url",
    ),
    "unknown role": (_set(["messages", 6, "role"], "summary"), "role"),
    "arguments as an object": (
        _set(["messages", 2, "tool_calls", 0, "function", "arguments"], {"path": "a"}),
        "arguments",
    ),
    "missing model": (_delete(["model"]), "model"),
    "unknown top-level key": (_set(["thread_id"], "t1"), "extra_forbidden"),
    "unknown message key": (_set(["messages", 7, "origin"], "verbatim"), "extra_forbidden"),
    "unknown key in image_url": (_set(["messages", 1, "content", 1, "image_url", "alt"], "x"), "extra_forbidden"),
    "unknown key in function": (_set(["messages", 2, "tool_calls", 0, "function", "id"], "x"), "extra_forbidden"),
    "unknown key in a tool definition": (_set(["tools", 0, "function", "input_schema"], {}), "extra_forbidden"),
    "max_tokens as a string (strict)": (_set(["max_tokens"], "1024"), "max_tokens"),
    "tool content as a number": (_set(["messages", 4, "content"], 42), "content"),
}

ANTHROPIC_SCHEMA_BAD = {
    "missing max_tokens": (_delete(["max_tokens"]), "max_tokens"),
    "unknown content block type": (_set(["messages", 3, "content"], [{"type": "summary", "text": "x"}]), "summary"),
    "tool_result without tool_use_id": (_delete(["messages", 2, "content", 0, "tool_use_id"]), "tool_use_id"),
    "tool_use input as a JSON string": (_set(["messages", 1, "content", 1, "input"], '{"path": "a"}'), "input"),
    "image without media_type": (_delete(["messages", 0, "content", 1, "source", "media_type"]), "media_type"),
    "unknown image media_type": (
        _set(["messages", 0, "content", 1, "source", "media_type"], "image/bmp"),
        "media_type",
    ),
    "role tool": (_set(["messages", 2, "role"], "tool"), "role"),
    # These two pass `extra="forbid"` (a response model in the content union; an
    # SDK-set config on the base64 source) and are caught by the drop check.
    "unknown key in a text block": (
        _set(["messages", 0, "content", 0, "origin"], "summary"),
        "response type TextBlock",
    ),
    "unknown key in an image source": (
        _set(["messages", 0, "content", 1, "source", "url"], "https://x"),
        "ignored by the SDK type: ['url']",
    ),
    "unknown key in a tool_use block": (_set(["messages", 1, "content", 1, "origin"], "summary"), "origin"),
    "unknown key in a tool_result block": (_set(["messages", 2, "content", 0, "origin"], "summary"), "origin"),
    "unknown key in a message": (_set(["messages", 3, "name"], "bot"), "extra_forbidden"),
    "unknown top-level key": (_set(["format"], "anthropic"), "extra_forbidden"),
    "max_tokens as a string (strict)": (_set(["max_tokens"], "1024"), "max_tokens"),
    "is_error as a string (strict)": (_set(["messages", 2, "content", 1, "is_error"], "true"), "is_error"),
    "thinking block without signature": (
        lambda p: p["messages"][1]["content"].insert(0, {"type": "thinking", "thinking": "hmm"}),
        "signature",
    ),
    "unknown key in a redacted_thinking block": (
        lambda p: p["messages"][1]["content"].insert(0, {"type": "redacted_thinking", "data": "x", "id": "rs_1"}),
        "id",
    ),
}

RESPONSES_SCHEMA_BAD = {
    "function_call without call_id": (_delete(["input", 3, "call_id"]), "call_id"),
    "arguments as an object": (_set(["input", 3, "arguments"], {"path": "a"}), "arguments"),
    "unknown item type": (_set(["input", 6, "type"], "tool_result"), "tool_result"),
    "chat-style tool message": (
        _set(["input", 6], {"role": "tool", "tool_call_id": "call_a", "content": "A"}),
        "tool_call_id",
    ),
    "message role tool": (_set(["input", 12, "role"], "tool"), "role"),
    "chat-style tool definition": (
        _set(["tools", 0], {"type": "function", "function": {"name": "read_file", "parameters": {}}}),
        "function",
    ),
    "tool without strict": (_delete(["tools", 0, "strict"]), "strict"),
    "tool without parameters": (_delete(["tools", 0, "parameters"]), "parameters"),
    "unknown key in a message item": (_set(["input", 12, "origin"], "verbatim"), "extra_forbidden"),
    "is_error on a function_call_output": (_set(["input", 6, "is_error"], True), "extra_forbidden"),
    "signature on a reasoning item": (_set(["input", 1, "signature"], "sig"), "extra_forbidden"),
    "reasoning summary as plain strings": (_set(["input", 1, "summary"], ["Two files to read."]), "summary"),
    "reasoning without summary": (_delete(["input", 1, "summary"]), "summary"),
    "encrypted_content as a number": (_set(["input", 1, "encrypted_content"], 42), "encrypted_content"),
    "chat-style image part": (
        _set(["input", 0, "content", 1], {"type": "image_url", "image_url": {"url": "https://x.example/a.png"}}),
        "image_url",
    ),
    "chat-style text part": (_set(["input", 0, "content", 0], {"type": "text", "text": "Look"}), "input_text"),
    "input_image without detail": (_delete(["input", 0, "content", 1, "detail"]), "detail"),
    "function_call_output as an object": (_set(["input", 6, "output"], {"ok": True}), "output"),
    "max_tokens instead of max_output_tokens": (
        lambda p: p.__setitem__("max_tokens", p.pop("max_output_tokens")),
        "extra_forbidden",
    ),
    "max_output_tokens as a string (strict)": (_set(["max_output_tokens"], "1024"), "max_output_tokens"),
    "messages instead of input": (lambda p: p.__setitem__("messages", p.pop("input")), "extra_forbidden"),
    "unknown top-level key": (_set(["system"], "Be brief."), "extra_forbidden"),
}


@pytest.mark.parametrize("name", sorted(OPENAI_SCHEMA_BAD))
def test_openai_schema_rejects(name):
    fn, needle = OPENAI_SCHEMA_BAD[name]
    with pytest.raises(SchemaViolation) as info:
        validate_openai_schema(_mutate(_ok_openai(), fn))
    assert needle in str(info.value), str(info.value)[:2000]


@pytest.mark.parametrize("name", sorted(ANTHROPIC_SCHEMA_BAD))
def test_anthropic_schema_rejects(name):
    fn, needle = ANTHROPIC_SCHEMA_BAD[name]
    with pytest.raises(SchemaViolation) as info:
        validate_anthropic_schema(_mutate(_ok_anthropic(), fn))
    assert needle in str(info.value), str(info.value)[:2000]


@pytest.mark.parametrize("name", sorted(RESPONSES_SCHEMA_BAD))
def test_responses_schema_rejects(name):
    fn, needle = RESPONSES_SCHEMA_BAD[name]
    with pytest.raises(SchemaViolation) as info:
        validate_responses_schema(_mutate(_ok_responses(), fn))
    assert needle in str(info.value), str(info.value)[:2000]


def _insert(index, message):
    return lambda p: p["messages"].insert(index, message)


def _pop(index):
    return lambda p: p["messages"].pop(index)


# Each stays valid for the SDK types (so only the rule layer can catch it).
OPENAI_RULES_BAD = {
    "user message between calls and results": (_insert(3, {"role": "user", "content": "wait"}), "not answered before"),
    "a call never answered": (lambda p: p.__setitem__("messages", p["messages"][:4]), "never answered"),
    "a call not answered before the next assistant message": (_pop(4), "not answered before"),
    "tool message with no call before it": (
        _insert(1, {"role": "tool", "tool_call_id": "call_a", "content": "x"}),
        "answers no open call",
    ),
    "result after the next assistant message": (
        lambda p: p["messages"].insert(6, p["messages"].pop(4)),
        "not answered before",
    ),
    "a call answered twice": (
        _insert(5, {"role": "tool", "tool_call_id": "call_a", "content": "again"}),
        "answers no open call",
    ),
    "duplicate ids in one assistant message": (
        _set(["messages", 2, "tool_calls", 1, "id"], "call_a"),
        "duplicate tool call ids",
    ),
    "assistant with neither content nor calls": (
        _set(["messages", 5, "content"], None),
        "neither content nor tool_calls",
    ),
    "empty user content": (_set(["messages", 7, "content"], ""), "empty content"),
    "tool content as an empty array": (_set(["messages", 3, "content"], []), "missing tool content"),
    "empty text part": (_set(["messages", 1, "content", 0, "text"], ""), "empty content"),
    "arguments not JSON": (
        _set(["messages", 2, "tool_calls", 0, "function", "arguments"], "{path: a"),
        "not a JSON string",
    ),
    "image data URL that is not base64": (
        _set(["messages", 1, "content", 1, "image_url", "url"], "data:image/png;base64,@@@"),
        "base64",
    ),
    "image data URL of a type OpenAI does not take": (
        _set(["messages", 1, "content", 1, "image_url", "url"], "data:image/svg+xml;base64,PHN2Zy8+"),
        "not accepted",
    ),
}

ANTHROPIC_RULES_BAD = {
    "first message from the assistant": (
        _insert(0, {"role": "assistant", "content": "Hi"}),
        "first message must be user",
    ),
    "two user messages in a row": (_insert(1, {"role": "user", "content": "again"}), "in a row"),
    "text before tool_result": (
        lambda p: p["messages"][2]["content"].insert(0, {"type": "text", "text": "results:"}),
        "must come first",
    ),
    "tool_use not answered in the next user message": (
        lambda p: p["messages"][2]["content"].pop(1),
        "not answered",
    ),
    "tool_result for a tool_use two messages back": (
        _set(
            ["messages", 4],
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_a", "content": "late"}]},
        ),
        "immediately preceding",
    ),
    "blank text block": (_set(["messages", 3, "content"], [{"type": "text", "text": "  \n"}]), "non-whitespace"),
    "empty string content": (_set(["messages", 4, "content"], ""), "non-whitespace"),
    "tool_use input not an object": (_set(["messages", 1, "content", 1, "input"], ["a"]), "must be an object"),
    "tool_use id reused across turns": (
        lambda p: p["messages"].extend(
            [
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "toolu_a", "name": "read_file", "input": {}}],
                },
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_a", "content": "again"}]},
            ]
        ),
        "must be unique",
    ),
    "tool_use id with a dot": (
        lambda p: (
            p["messages"][1]["content"][1].__setitem__("id", "call.a"),
            p["messages"][2]["content"][1].__setitem__("tool_use_id", "call.a"),
        ),
        "does not match",
    ),
    "data URL as an image url source": (
        _set(["messages", 0, "content", 1, "source"], {"type": "url", "url": "data:image/png;base64,AAAA"}),
        "must be http(s)",
    ),
    "base64 data that is not the media type": (
        _set(["messages", 0, "content", 1, "source", "data"], base64.b64encode(b"GIF89a....").decode()),
        "does not look like image/png",
    ),
    "final assistant text ends with whitespace": (
        lambda p: p["messages"].append({"role": "assistant", "content": "The answer is "}),
        "trailing whitespace",
    ),
    "thinking after the text of the assistant turn": (_think_at(1, 1), "thinking blocks must come first"),
    "thinking after a tool_use": (_think_at(1, 3), "thinking blocks must come first"),
    "thinking in a user message": (_think_at(0, 0), "only in assistant messages"),
}

# Each stays valid for the SDK types (so only the rule layer can catch it).
RESPONSES_RULES_BAD = {
    # The SDK types `call_id` of a function_call_output as optional.
    "function_call_output without call_id": (_delete(["input", 6, "call_id"]), "without call_id"),
    "output for a call that does not exist": (_set(["input", 6, "call_id"], "call_z"), "answers no earlier"),
    "output before its call": (lambda p: p["input"].insert(3, p["input"].pop(5)), "answers no earlier"),
    "a call answered twice": (
        lambda p: p["input"].insert(7, {"type": "function_call_output", "call_id": "call_a", "output": "again"}),
        "answers no earlier",
    ),
    "a call never answered": (lambda p: p["input"].pop(5), "without function_call_output"),
    "the last call never answered": (lambda p: p["input"].pop(9), "without function_call_output"),
    "two unanswered calls with one call_id": (_set(["input", 4, "call_id"], "call_a"), "already used"),
    "a call_id used again after its output": (
        lambda p: [p["input"][k].update(call_id="call_a") for k in (8, 9)],
        "already used",
    ),
    "arguments not JSON": (_set(["input", 3, "arguments"], "{path: a"), "not a JSON string"),
    "reasoning item at the end": (
        lambda p: p["input"].append({"type": "reasoning", "id": "rs_9", "summary": []}),
        "end of input",
    ),
    "reasoning item followed by an output": (
        lambda p: p["input"].insert(5, {"type": "reasoning", "id": "rs_9", "summary": []}),
        "immediately followed",
    ),
    "reasoning item followed by a user message": (
        lambda p: p["input"].insert(12, {"type": "reasoning", "id": "rs_9", "summary": []}),
        "immediately followed",
    ),
    "reasoning item whose call and answer were left out": (
        lambda p: p["input"].__delitem__(slice(8, 11)),
        "immediately followed",
    ),
    "empty message": (_set(["input", 12, "content"], ""), "empty message"),
    "blank message": (_set(["input", 11, "content"], " \n"), "empty message"),
    "message with an empty content list": (_set(["input", 12, "content"], []), "empty message"),
    "empty text part": (_set(["input", 0, "content", 0, "text"], ""), "empty text part"),
    "assistant message with input_text parts": (
        _set(["input", 2, "content"], [{"type": "input_text", "text": "Reading both."}]),
        "takes only",
    ),
    "missing model (optional in the SDK type)": (_delete(["model"]), "model must be"),
    "missing input (optional in the SDK type)": (_delete(["input"]), "non-empty list"),
    "input as a plain string": (_set(["input"], "hello"), "non-empty list"),
    "image data URL of a type OpenAI does not take": (
        _set(["input", 0, "content", 1, "image_url"], "data:image/bmp;base64,Qk0="),
        "not accepted",
    ),
    "image data URL that is not base64": (
        _set(["input", 0, "content", 1, "image_url"], "data:image/png;base64,@@"),
        "base64",
    ),
    "input_image with neither image_url nor file_id": (
        _delete(["input", 0, "content", 1, "image_url"]),
        "neither image_url nor file_id",
    ),
    "duplicate tool names": (lambda p: p["tools"].append(dict(p["tools"][0])), "duplicate function names"),
}


@pytest.mark.parametrize("name", sorted(OPENAI_RULES_BAD))
def test_openai_rules_reject(name):
    fn, needle = OPENAI_RULES_BAD[name]
    bad = _mutate(_ok_openai(), fn)
    validate_openai_schema(bad)  # the SDK types cannot see it...
    with pytest.raises(RuleViolation) as info:  # ...the rules do
        check_openai_rules(bad)
    assert needle in str(info.value), str(info.value)


# The SDK types catch these too; every other rule case is schema-valid.
ANTHROPIC_RULES_ALSO_SCHEMA = {"tool_use input not an object"}


@pytest.mark.parametrize("name", sorted(RESPONSES_RULES_BAD))
def test_responses_rules_reject(name):
    fn, needle = RESPONSES_RULES_BAD[name]
    bad = _mutate(_ok_responses(), fn)
    validate_responses_schema(bad)  # the SDK types cannot see it...
    with pytest.raises(RuleViolation) as info:  # ...the rules do
        check_responses_rules(bad)
    assert needle in str(info.value), str(info.value)


@pytest.mark.parametrize("name", sorted(ANTHROPIC_RULES_BAD))
def test_anthropic_rules_reject(name):
    fn, needle = ANTHROPIC_RULES_BAD[name]
    bad = _mutate(_ok_anthropic(), fn)
    if name in ANTHROPIC_RULES_ALSO_SCHEMA:
        with pytest.raises(SchemaViolation):
            validate_anthropic_schema(bad)
    else:
        validate_anthropic_schema(bad)
    with pytest.raises(RuleViolation) as info:
        check_anthropic_rules(bad)
    assert needle in str(info.value), str(info.value)


def _first(payload, pred):
    return next(i for i, m in enumerate(payload["messages"]) if pred(m))


def _blocks_of(m):
    return m["content"] if isinstance(m["content"], list) else []


def _corrupt_openai():
    def drop_first_tool(p):
        del p["messages"][_first(p, lambda m: m["role"] == "tool")]

    def tool_after_next_assistant(p):
        i = _first(p, lambda m: m["role"] == "tool")
        j = next(k for k in range(i, len(p["messages"])) if p["messages"][k]["role"] != "tool")
        p["messages"].insert(j, p["messages"].pop(i))

    def unknown_key(p):
        p["messages"][-1]["origin"] = "verbatim"

    def no_tool_call_id(p):
        del p["messages"][_first(p, lambda m: m["role"] == "tool")]["tool_call_id"]

    def arguments_object(p):
        m = p["messages"][_first(p, lambda m: m.get("tool_calls"))]
        m["tool_calls"][0]["function"]["arguments"] = {"a": 1}

    return {
        "drop the first tool message": (drop_first_tool, RuleViolation),
        "move a result after the next message": (tool_after_next_assistant, RuleViolation),
        "unknown key on a message": (unknown_key, SchemaViolation),
        "tool message without tool_call_id": (no_tool_call_id, SchemaViolation),
        "arguments as an object": (arguments_object, SchemaViolation),
    }


def _corrupt_anthropic():
    def text_before_results(p):
        m = p["messages"][_first(p, lambda m: any(b.get("type") == "tool_result" for b in _blocks_of(m)))]
        m["content"].insert(0, {"type": "text", "text": "Results follow."})

    def drop_a_result(p):
        m = p["messages"][_first(p, lambda m: any(b.get("type") == "tool_result" for b in _blocks_of(m)))]
        k = next(j for j, b in enumerate(m["content"]) if b["type"] == "tool_result")
        del m["content"][k]
        if not m["content"]:
            m["content"] = "(nothing)"

    def blank_text(p):
        p["messages"][-1]["content"] = [{"type": "text", "text": " "}]

    def start_with_assistant(p):
        del p["messages"][0]

    def repeat_last_user(p):
        p["messages"].append(json.loads(json.dumps(p["messages"][-1])))

    def no_max_tokens(p):
        del p["max_tokens"]

    def input_as_string(p):
        m = p["messages"][_first(p, lambda m: any(b.get("type") == "tool_use" for b in _blocks_of(m)))]
        b = next(b for b in m["content"] if b["type"] == "tool_use")
        b["input"] = json.dumps(b["input"])

    def thinking_after_tool_use(p):
        m = p["messages"][_first(p, lambda m: any(b.get("type") == "thinking" for b in _blocks_of(m)))]
        m["content"].append(m["content"].pop(0))

    return {
        "thinking moved after the tool_use blocks": (thinking_after_tool_use, RuleViolation),
        "text before the tool_result blocks": (text_before_results, RuleViolation),
        "a tool_use left unanswered": (drop_a_result, RuleViolation),
        "a blank text block": (blank_text, RuleViolation),
        "first message from the assistant": (start_with_assistant, RuleViolation),
        "two user messages in a row": (repeat_last_user, RuleViolation),
        "no max_tokens": (no_max_tokens, SchemaViolation),
        "tool_use input as a JSON string": (input_as_string, SchemaViolation),
    }


def _corrupt_responses():
    def kind(t):
        return lambda i: i.get("type") == t

    def first(p, pred):
        return next(k for k, i in enumerate(p["input"]) if pred(i))

    def drop_first_output(p):
        del p["input"][first(p, kind("function_call_output"))]

    def output_before_its_call(p):
        o = p["input"].pop(first(p, kind("function_call_output")))
        cid = o["call_id"]
        p["input"].insert(first(p, lambda i: i.get("call_id") == cid), o)

    def reasoning_to_the_end(p):
        p["input"].append(p["input"].pop(first(p, kind("reasoning"))))

    def reasoning_after_its_calls(p):
        r = p["input"].pop(first(p, kind("reasoning")))
        p["input"].insert(first(p, kind("function_call_output")), r)

    def blank_last_message(p):
        p["input"][first(p, kind("message"))]["content"] = " "

    def unknown_key(p):
        p["input"][-1]["origin"] = "verbatim"

    def no_call_id(p):
        del p["input"][first(p, kind("function_call"))]["call_id"]

    def output_without_call_id(p):
        del p["input"][first(p, kind("function_call_output"))]["call_id"]

    def arguments_object(p):
        p["input"][first(p, kind("function_call"))]["arguments"] = {"a": 1}

    def chat_style_tool_message(p):
        k = first(p, kind("function_call_output"))
        o = p["input"][k]
        p["input"][k] = {"role": "tool", "tool_call_id": o["call_id"], "content": o["output"]}

    return {
        "drop the first function_call_output": (drop_first_output, RuleViolation),
        "an output before its call": (output_before_its_call, RuleViolation),
        "a reasoning item moved to the end": (reasoning_to_the_end, RuleViolation),
        "a reasoning item moved after its calls": (reasoning_after_its_calls, RuleViolation),
        "a blank message": (blank_last_message, RuleViolation),
        "an output without call_id": (output_without_call_id, RuleViolation),
        "unknown key on an item": (unknown_key, SchemaViolation),
        "function_call without call_id": (no_call_id, SchemaViolation),
        "arguments as an object": (arguments_object, SchemaViolation),
        "a Chat Completions tool message": (chat_style_tool_message, SchemaViolation),
    }


@pytest.mark.parametrize("fmt", FORMATS)
def test_corrupted_real_payloads_are_rejected(api, stub, fmt):
    """Real compactd payloads, each broken one way, fail validation: the sweep's
    passes are not vacuous."""
    pb2, _ = api
    rng = random.Random(f"{SEED}:corrupt")
    tb = ThreadBuilder(rng)
    tb.user()
    tb.tool_round(3)
    tb.assistant()
    tb.user()
    tb.tool_round(2)
    tb.user("Thanks, and now?")  # results then text: merged into one Anthropic user message
    tb.tool_round(2)
    # Extended thinking and a reasoning item on the tool loop in progress
    # (earlier turns' reasoning is neither sent nor counted).
    first = next(m for m in reversed(tb.messages) if m.get("tool_calls"))
    text = first["content"]
    first["content"] = [
        {"type": "thinking", "thinking": "Three lookups at once.", "signature": "EqQBCkYIBxgCKkBzaWc="},
        {"type": "reasoning", "id": "rs_corrupt", "summary": ["Three lookups."], "encrypted_content": "gAAAAB"},
    ] + ([{"type": "text", "text": text}] if text else [])
    _, payload = render(pb2, stub, to_proto(pb2, f"pp-{SEED}-corrupt-{fmt}", tb.messages), fmt, budget=1_000_000)
    validate(payload, fmt)
    corruptions = {"openai": _corrupt_openai, "anthropic": _corrupt_anthropic, "responses": _corrupt_responses}[fmt]
    for name, (corrupt, expected) in corruptions().items():
        bad = _mutate(payload, corrupt)
        with pytest.raises(expected):
            validate(bad, fmt)
        assert bad != payload, name


# ───────────────────────────── inputs that once broke payloads ─────────────────────────────


def _render_all(
    pb2, stub, tmp_path, name, msgs, *, budgets=(1_000_000, 1_000), system=None, omit_pending=False, **policy_overrides
):
    """Renders in every format at each budget (the small ones squeezed, plus
    `policy_overrides`, up the ladder until they fit) and validates; returns
    the (response, payload) pairs by (format, budget asked)."""
    out = {}
    for fmt in FORMATS:
        for budget in budgets:
            thread = to_proto(pb2, f"pp-{SEED}-{name}-{budget}", msgs)
            where = f"[seed={SEED} case={name}] format={fmt}"
            policy = None
            if budget < 1_000_000:
                policy = squeeze_policy(pb2)
                policy.MergeFrom(pb2.PolicyOverrides(**policy_overrides))
            resp, payload, _ = render_fitting(
                pb2, stub, thread, fmt, budget, where, policy=policy, system=system, omit_pending=omit_pending
            )
            where += f" budget={budget}"
            dump = _dump(tmp_path, f"{name}-{fmt}-{budget}", payload)
            try:
                validate(payload, fmt)
            except AssertionError as e:
                raise AssertionError(f"{where}: {type(e).__name__}: {e}\npayload: {dump}") from None
            out[(fmt, budget)] = (resp, payload)
    return out


def test_interleaved_user_message(api, stub, tmp_path):
    pb2, _ = api
    rng = random.Random(f"{SEED}:interleaved")
    tb = ThreadBuilder(rng)
    tb.user()
    call, (output, kf) = tb.new_call("read_file")
    tb.assistant("Reading it.", [call])
    interjection = rng.choice(
        [
            "wait — also check the tests folder",
            "Actually, use the staging branch.",
            "(sorry, typo above: I meant orders_v2)",
        ]
    )
    tb.user(interjection)
    tb.result(call, output, kf)
    tb.assistant()
    tb.user()
    for (fmt, budget), (_, payload) in _render_all(pb2, stub, tmp_path, "interleaved", tb.messages).items():
        if budget == 1_000_000:
            assert interjection in all_text(payload), f"[seed={SEED}] {fmt}: the interjected user message was lost"


def test_reused_tool_call_ids(api, stub, tmp_path):
    pb2, _ = api
    rng = random.Random(f"{SEED}:reused-ids")
    tb = ThreadBuilder(rng)
    for _ in range(rng.randint(3, 5)):
        tb.user()
        k = rng.choice([1, 2, 3])
        pairs = [tb.new_call() for _ in range(k)]
        for i, (c, _) in enumerate(pairs):
            c["id"] = f"call_{i}"  # the same ids every turn, as some agents do
        tb.assistant("", [c for c, _ in pairs])
        for c, (output, kf) in pairs:
            tb.result(c, output, kf)
        tb.assistant()
    tb.user()
    results = _render_all(pb2, stub, tmp_path, "reused-ids", tb.messages)
    n_calls = sum(len(m.get("tool_calls") or []) for m in tb.messages)
    for (fmt, budget), (_, payload) in results.items():
        if budget == 1_000_000:
            assert len(payload_call_ids(payload, fmt)) == n_calls, f"[seed={SEED}] {fmt}: tool calls lost"


def test_status_error_json_result(api, stub, tmp_path):
    pb2, _ = api
    rng = random.Random(f"{SEED}:status-error")
    tb = ThreadBuilder(rng)
    tb.user("Deploy the new build of payments-api to staging.")
    call, _ = tb.new_call("http_request")
    tb.assistant("Deploying.", [call])
    error = f"Deployment failed: quota exceeded (code Q{rng.randint(1, 99)})"
    # No outcome: the caller does not say; the content does.
    tb.result(
        call, {"status": "error", "error": error, "request_id": f"req_{rng.randrange(10**8)}"}, durability="ephemeral"
    )
    tb.assistant("The deploy did not go through.")
    for _ in range(4):
        tb.user()
        tb.tool_round(1, size=300, names=[rng.choice(["shell", "read_file"])])
        tb.assistant()
    tb.user("So what happened with the deploy?")
    # No last-resort window drop (it may drop anything): every other reducer
    # must keep the error, as for any failure.
    results = _render_all(
        pb2, stub, tmp_path, "status-error", tb.messages, budgets=(1_000_000, 2_000), enable_drop=False
    )
    for (fmt, budget), (_, payload) in results.items():
        where = f"[seed={SEED}] {fmt} budget={budget}"
        assert error in all_text(payload), f"{where}: the error text did not survive compaction"
        if fmt == "anthropic" and budget == 1_000_000:
            blocks = [b for m in payload["messages"] if isinstance(m["content"], list) for b in m["content"]]
            res = [b for b in blocks if b.get("type") == "tool_result" and b["tool_use_id"] == call["id"]]
            assert res and res[0].get("is_error") is True, f"{where}: the failed result is not marked is_error"


# ───────────────────────────── extended thinking and reasoning items ─────────────────────────────

# Opaque provider state carried by assistant messages: Anthropic `thinking` /
# `redacted_thinking` blocks go back to Anthropic byte for byte, first in
# their assistant turn; OpenAI Responses `reasoning` items go back to the
# Responses API right before the items of their assistant turn. Neither
# appears in any other format.

ODD_TEXT = [
    "  two leading spaces",
    "trailing spaces and newlines  \n\n",
    "tabs\tand\r\nCRLF",
    "quotes \" ' and \\ backslashes \\n (not a newline)",
    "naïve café 🧠 数据库 \u2028line separator\u2029",
    '<thinking>not a tag</thinking> {"json": true} ```code```',
    "combining e\u0301 and a zero-width\u200bspace",
    "1. check the pool\n2. compare with yesterday\n   - p99 only",
]


def hidden_part(rng, kind, tag):
    """A thinking / redacted_thinking / reasoning part whose every string is unique (`tag`)."""
    if kind == "thinking":
        body = " ".join(rng.sample(ODD_TEXT, 3))
        text = f"{tag}: {body}" * rng.choice([1, 1, 30])
        sig = base64.b64encode(rng.randbytes(rng.choice([64, 180, 400]))).decode()
        return {"type": "thinking", "thinking": text, "signature": f"{sig}{tag}"}
    if kind == "redacted_thinking":
        return {"type": "redacted_thinking", "data": f"{tag}" + base64.b64encode(rng.randbytes(240)).decode()}
    if kind == "reasoning":
        return {
            "type": "reasoning",
            "id": f"rs_{tag}{rng.randbytes(20).hex()}",
            "summary": [f"**{tag}.{k}** {rng.choice(ODD_TEXT)}" for k in range(rng.choice([0, 1, 1, 2, 3]))],
            "encrypted_content": rng.choice([None, f"gAAAAA{tag}" + base64.b64encode(rng.randbytes(300)).decode()]),
        }
    raise ValueError(kind)


ANTHROPIC_HIDDEN = ("thinking", "redacted_thinking")


def hidden_of(m, kinds):
    """The parts of canonical message `m` whose type is in `kinds`."""
    content = m.get("content")
    return [p for p in content if p["type"] in kinds] if isinstance(content, list) else []


def expected_anthropic_block(p):
    if p["type"] == "thinking":
        return {"type": "thinking", "thinking": p["thinking"], "signature": p["signature"]}
    return {"type": "redacted_thinking", "data": p["data"]}


def expected_reasoning_item(p):
    item = {
        "type": "reasoning",
        "id": p["id"],
        "summary": [{"type": "summary_text", "text": s} for s in p["summary"]],
    }
    if p.get("encrypted_content") is not None:
        item["encrypted_content"] = p["encrypted_content"]
    return item


def same_reasoning(got, want):
    # An unset encrypted_content may also be sent as null.
    return got == want or ("encrypted_content" not in want and got == {**want, "encrypted_content": None})


def opaque_strings(msgs, kinds):
    """The strings of the hidden parts of `kinds` (for absence checks)."""
    out = []
    for m in msgs:
        for p in hidden_of(m, kinds):
            if p["type"] == "thinking":
                out += [p["thinking"], p["signature"]]
            elif p["type"] == "redacted_thinking":
                out.append(p["data"])
            else:
                out += [p["id"], *p["summary"]] + ([p["encrypted_content"]] if p.get("encrypted_content") else [])
    return out


class RichThread:
    """A thread whose assistant messages carry hidden parts; each assistant
    message without calls ends with a unique tag so it can be found."""

    def __init__(self, rng):
        self.rng = rng
        self.tb = ThreadBuilder(rng)
        self.n = 0

    def tag(self):
        self.n += 1
        return f"H{self.n}x{self.rng.randrange(16**6):06x}"

    def assistant(self, kinds, text=None, calls=()):
        parts = [hidden_part(self.rng, k, self.tag()) for k in kinds]
        if text is None:
            text = fill(self.rng, self.rng.choice(ASSISTANT_REPLIES))
        if not calls:
            text = f"{text} ({self.tag()})"
        content = parts + ([{"type": "text", "text": text}] if text else [])
        return self.tb.assistant(content, calls)

    def tool_round(self, kinds, k, text=""):
        pairs = [self.tb.new_call() for _ in range(k)]
        self.assistant(kinds, text, [c for c, _ in pairs])
        order = list(pairs)
        self.rng.shuffle(order)
        for call, (output, kf) in order:
            self.tb.result(call, output, kf)


def _think_single_call(r):
    r.tb.user()
    r.tool_round(["thinking"], 1, r.rng.choice(["", "Let me read it."]))
    r.assistant(["thinking"])
    r.tb.user()


def _think_parallel_calls(r):
    r.tb.user()
    r.tool_round(["thinking", "redacted_thinking"], 4, "Fanning out.")
    # The request is made right after the results (agent mid-loop).


def _think_without_tools(r):
    r.tb.user()
    r.assistant(["thinking"])
    r.tb.user()
    r.assistant(["redacted_thinking", "thinking"])
    r.tb.user()


def _think_every_turn(r):
    for _ in range(4):
        r.tb.user()
        r.tool_round(["thinking"], r.rng.choice([1, 2, 3]), r.rng.choice(["", "Checking."]))
        r.assistant(["thinking"])
    r.tb.user()


def _think_after_assistant_text(r):
    # Two assistant messages in a row (a progress note, then the thinking
    # turn): one Anthropic assistant turn, which must still open with the
    # thinking.
    r.tb.user("Restart the worker.")
    r.tb.assistant("Okay, on it.")
    r.tool_round(["thinking"], 1, "")
    # Ends with the tool result: this is the latest assistant turn, which
    # the API checks when thinking is enabled.


def _reason_single_call(r):
    r.tb.user()
    r.tool_round(["reasoning"], 1, "")
    r.assistant(["reasoning"])
    r.tb.user()


def _reason_parallel_calls(r):
    r.tb.user()
    r.tool_round(["reasoning"], 3, "Three lookups at once.")


def _reason_without_tools(r):
    r.tb.user()
    r.assistant(["reasoning"])
    r.tb.user()
    r.assistant(["reasoning"])
    r.tb.user()


def _reason_every_turn(r):
    for _ in range(4):
        r.tb.user()
        r.tool_round(["reasoning"], r.rng.choice([1, 2, 3]), r.rng.choice(["", "Checking."]))
        r.assistant(r.rng.choice([[], ["reasoning"]]))
    r.tb.user()


def _both_kinds(r):
    # A platform that switches providers keeps both kinds on one message.
    for _ in range(3):
        r.tb.user()
        r.tool_round(["thinking", "reasoning"], r.rng.choice([1, 2]), r.rng.choice(["", "On it."]))
        r.assistant(["redacted_thinking", "reasoning"])
    r.tb.user()


HIDDEN_CASES = {
    "thinking_single_call": _think_single_call,
    "thinking_parallel_calls": _think_parallel_calls,
    "thinking_without_tools": _think_without_tools,
    "thinking_every_turn": _think_every_turn,
    "thinking_after_assistant_text": _think_after_assistant_text,
    "reasoning_single_call": _reason_single_call,
    "reasoning_parallel_calls": _reason_parallel_calls,
    "reasoning_without_tools": _reason_without_tools,
    "reasoning_every_turn": _reason_every_turn,
    "both_kinds_every_turn": _both_kinds,
}


def _assistant_tag(m):
    text = next((p["text"] for p in m["content"] if p["type"] == "text"), "")
    match = re.search(r"\((H\d+x[0-9a-f]{6})\)$", text)
    return text, (match.group(1) if match else None)


def active_loop(msgs):
    """The messages after the last one a person typed: the tool loop in
    progress, the only turn whose reasoning providers take back (they drop
    earlier turns' from the context, so compactd neither sends nor counts it)."""
    last_user = max((i for i, m in enumerate(msgs) if m["role"] == "user"), default=-1)
    return msgs[last_user + 1 :]


def check_anthropic_thinking(payload, msgs, where):
    """Each assistant message of the tool loop in progress opens its Anthropic
    assistant turn with its thinking blocks, unchanged and in order; there
    are no others (earlier turns' thinking is not sent)."""
    owners = [m for m in active_loop(msgs) if m["role"] == "assistant" and hidden_of(m, ANTHROPIC_HIDDEN)]
    for m in owners:
        want = [expected_anthropic_block(p) for p in hidden_of(m, ANTHROPIC_HIDDEN)]
        if m.get("tool_calls"):
            cid = m["tool_calls"][0]["id"]
            found = [
                a
                for a in payload["messages"]
                if any(b.get("type") == "tool_use" and b["id"] == cid for b in _blocks_of(a))
            ]
        else:
            _, tag = _assistant_tag(m)
            found = [
                a
                for a in payload["messages"]
                if a["role"] == "assistant" and any(b.get("type") == "text" and tag in b["text"] for b in _blocks_of(a))
            ]
        assert len(found) == 1, f"{where}: the Anthropic turn of message {m['id']} not found"
        got = found[0]["content"][: len(want)]
        assert got == want, (
            f"{where}: message {m['id']}: the assistant turn does not open with its thinking blocks, unchanged:\n"
            f"want {json.dumps(want)[:400]}\ngot  {json.dumps(got)[:400]}"
        )
    sent = [b for a in payload["messages"] for b in _blocks_of(a) if b.get("type") in ANTHROPIC_HIDDEN]
    n = sum(len(hidden_of(m, ANTHROPIC_HIDDEN)) for m in owners)
    assert len(sent) == n, f"{where}: {len(sent)} thinking blocks sent for {n} in the thread"


def check_responses_reasoning(payload, msgs, where):
    """Each assistant message of the tool loop in progress has its reasoning
    items, unchanged and in order, right before the items of its turn: its
    assistant message (when it has text), then its function_calls. There are
    no others (earlier turns' reasoning is not sent)."""
    items = payload["input"]
    owners = [m for m in active_loop(msgs) if m["role"] == "assistant" and hidden_of(m, ("reasoning",))]
    for m in owners:
        want = [expected_reasoning_item(p) for p in hidden_of(m, ("reasoning",))]
        text, tag = _assistant_tag(m)
        if m.get("tool_calls"):
            ids = [c["id"] for c in m["tool_calls"]]
            f = next((k for k, i in enumerate(items) if i.get("call_id") == ids[0]), None)
            assert f is not None, f"{where}: the function_call {ids[0]} of message {m['id']} is missing"
            got_ids = [i.get("call_id") for i in items[f : f + len(ids)]]
            assert got_ids == ids, f"{where}: the function_calls of message {m['id']} are not together: {got_ids}"
            start = f
            if text.strip():
                assert items[f - 1].get("type") == "message" and items[f - 1].get("role") == "assistant", (
                    f"{where}: message {m['id']}: its text is not right before its function_calls"
                )
                start = f - 1
        else:
            start = next(
                (
                    k
                    for k, i in enumerate(items)
                    if i.get("type") == "message" and i.get("role") == "assistant" and tag in str(i.get("content"))
                ),
                None,
            )
            assert start is not None, f"{where}: the assistant message of {m['id']} is missing"
        got = items[max(0, start - len(want)) : start]
        assert len(got) == len(want) and all(same_reasoning(g, w) for g, w in zip(got, want, strict=True)), (
            f"{where}: message {m['id']}: its reasoning items are not right before its turn, unchanged:\n"
            f"want {json.dumps(want)[:400]}\ngot  {json.dumps(got)[:400]}"
        )
    sent = [i for i in items if i.get("type") == "reasoning"]
    n = sum(len(hidden_of(m, ("reasoning",))) for m in owners)
    assert len(sent) == n, f"{where}: {len(sent)} reasoning items sent for {n} in the thread"


def check_hidden_parts_unchanged(payload, fmt, msgs, where):
    """Whatever compaction did, a thinking block / reasoning item that is sent
    is one of the thread's, unchanged."""
    if fmt == "anthropic":
        known = [expected_anthropic_block(p) for m in msgs for p in hidden_of(m, ANTHROPIC_HIDDEN)]
        for a in payload["messages"]:
            for b in _blocks_of(a):
                if b.get("type") in ANTHROPIC_HIDDEN:
                    assert b in known, f"{where}: a thinking block that is not the thread's: {json.dumps(b)[:300]}"
    if fmt == "responses":
        known = [expected_reasoning_item(p) for m in msgs for p in hidden_of(m, ("reasoning",))]
        for i in payload["input"]:
            if i.get("type") == "reasoning":
                assert any(same_reasoning(i, k) for k in known), (
                    f"{where}: a reasoning item that is not the thread's: {json.dumps(i)[:300]}"
                )


def check_hidden_absent(payload, fmt, msgs, where):
    """Thinking only reaches Anthropic, reasoning items only the Responses API."""
    text = all_text(payload)
    foreign = []
    if fmt != "anthropic":
        foreign += opaque_strings(msgs, ANTHROPIC_HIDDEN)
    if fmt != "responses":
        foreign += opaque_strings(msgs, ("reasoning",))
    leaked = [s for s in foreign if s.strip() and s.strip() in text]
    assert not leaked, f"{where}: hidden content of another provider leaked into the payload: {leaked[0][:120]!r}"


@pytest.mark.parametrize("case", sorted(HIDDEN_CASES))
def test_thinking_and_reasoning_parts(api, stub, tmp_path, case):
    pb2, _ = api
    rng = random.Random(f"{SEED}:hidden:{case}")
    r = RichThread(rng)
    HIDDEN_CASES[case](r)
    msgs = r.tb.messages
    ctx = f"[seed={SEED} case={case}]"
    thread = to_proto(pb2, f"pp-{SEED}-hidden-{case}", msgs)
    sizing, _ = render(pb2, stub, thread, "openai", budget=1_000_000)
    squeezed = max(int(sizing.tokens.total * 0.3), 300)
    for fmt in FORMATS:
        for label, budget, policy in (("roomy", 1_000_000, None), ("squeezed", squeezed, squeeze_policy(pb2))):
            where = f"{ctx} format={fmt} budget={label}"
            out, payload, budget = render_fitting(pb2, stub, thread, fmt, budget, where, policy=policy)
            dump = _dump(tmp_path, f"{case}-{fmt}-{label}", payload)
            where = f"{where}:{budget} payload={dump}"
            try:
                validate(payload, fmt)
            except AssertionError as e:
                raise AssertionError(f"{where}: {type(e).__name__}: {e}") from None
            check_hidden_parts_unchanged(payload, fmt, msgs, where)
            check_hidden_absent(payload, fmt, msgs, where)
            if label == "roomy":
                plan = out.compaction.plan
                assert not (plan.externalizations or plan.summarizations or plan.clearings or plan.drops), (
                    f"{where}: the roomy budget compacted"
                )
                if fmt == "anthropic":
                    check_anthropic_thinking(payload, msgs, where)
                if fmt == "responses":
                    check_responses_reasoning(payload, msgs, where)


# ───────────────────────────── pending tool calls ─────────────────────────────


def _pending_at_end(tb):
    # An approval is pending: the call is the last thing in the thread.
    tb.user()
    tb.tool_round(1)
    tb.assistant()
    tb.user("Go ahead and create the ticket.")
    call, _ = tb.new_call("http_request")
    tb.assistant("Creating it; waiting for your approval.", [call])
    return [call["id"]]


def _pending_then_user_message(tb):
    # The user moved on before the tool answered: the call is abandoned mid-thread.
    tb.user()
    call, _ = tb.new_call("shell")
    tb.assistant("", [call])
    tb.user("Never mind that, just tell me what the runbook says.")
    tb.assistant()
    tb.user()
    return [call["id"]]


def _pending_beside_answered_call(tb):
    # Parallel calls where one answered and one did not.
    tb.user()
    (a, (out_a, kf_a)), (p, _), (b, (out_b, kf_b)) = [tb.new_call() for _ in range(3)]
    tb.assistant("Three things at once.", [a, p, b])
    tb.result(b, out_b, kf_b)
    tb.result(a, out_a, kf_a)
    tb.assistant()
    tb.user()
    return [p["id"]]


def _pending_after_reasoning(tb):
    # The only content of the turn besides the pending call is hidden state.
    tb.user()
    tb.tool_round(2)
    tb.user("Now restart it.")
    call, _ = tb.new_call("shell")
    rng = tb.rng
    tb.assistant([hidden_part(rng, "thinking", "PENDTHINK"), hidden_part(rng, "reasoning", "PENDREASON")], [call])
    return [call["id"]]


def _pending_several(tb):
    tb.user()
    first, _ = tb.new_call("run_sql")
    tb.assistant("Querying.", [first])
    tb.user("Skip the query.")
    tb.tool_round(2)
    tb.assistant()
    tb.user()
    second, _ = tb.new_call("http_request")
    tb.assistant("", [second])
    return [first["id"], second["id"]]


PENDING_CASES = {
    "pending_at_end": _pending_at_end,
    "pending_then_user_message": _pending_then_user_message,
    "pending_beside_answered_call": _pending_beside_answered_call,
    "pending_after_reasoning": _pending_after_reasoning,
    "pending_several": _pending_several,
}


def _pending_case(case):
    """The thread, its unanswered calls, the field of the first one the client
    still owes (a call of the last assistant message; None when every
    unanswered call is abandoned: the conversation moved past it), those
    abandoned ones, and the answered calls."""
    rng = random.Random(f"{SEED}:pending:{case}")
    tb = ThreadBuilder(rng)
    unanswered = PENDING_CASES[case](tb)
    last_assistant = max(i for i, m in enumerate(tb.messages) if m["role"] == "assistant")
    owed = [
        (i, j)
        for i, m in enumerate(tb.messages)
        for j, c in enumerate(m.get("tool_calls") or [])
        if c["id"] in unanswered and i == last_assistant
    ]
    field = f"thread.messages[{owed[0][0]}].tool_calls[{owed[0][1]}].id" if owed else None
    abandoned = [
        c["id"]
        for i, m in enumerate(tb.messages)
        for c in m.get("tool_calls") or []
        if c["id"] in unanswered and i != last_assistant
    ]
    answered = [c["id"] for m in tb.messages for c in m.get("tool_calls") or [] if c["id"] not in unanswered]
    return tb.messages, unanswered, field, abandoned, answered


@pytest.mark.parametrize("case", sorted(PENDING_CASES))
def test_pending_calls_are_refused_by_default(api, stub, case):
    """A call of the last assistant message without a result is owed by the
    client: Render refuses, naming it. One the conversation moved past is
    abandoned: left out with a warning, never a refusal."""
    pb2, _ = api
    msgs, _, field, abandoned, _ = _pending_case(case)
    ctx = f"[seed={SEED} case={case}]"
    thread = to_proto(pb2, f"pp-{SEED}-{case}-refused", msgs)
    # Accepted as input: Compact plans around it.
    stub.Compact(pb2.CompactRequest(thread=thread, max_input_tokens=1_000_000), timeout=CALL_TIMEOUT_S)
    for fmt in FORMATS:
        if field is None:
            resp, payload = render(pb2, stub, thread, fmt, budget=1_000_000)
            validate(payload, fmt)
            warnings = " ".join(resp.audit.warnings)
            for aid in abandoned:
                assert aid not in all_text(payload), f"{ctx} format={fmt}: the abandoned call {aid} was sent"
                assert aid in warnings and "abandoned" in warnings, f"{ctx} format={fmt}: no warning names {aid}"
            continue
        with pytest.raises(grpc.RpcError) as info:
            render(pb2, stub, thread, fmt, budget=1_000_000)
        err = info.value
        where = f"{ctx} format={fmt}: {err.code()} {err.details()}"
        assert err.code() == grpc.StatusCode.FAILED_PRECONDITION, where
        detail = error_info(err)
        assert detail is not None, f"{where}: no ErrorInfo"
        assert (detail.reason, detail.domain) == ("PENDING_TOOL_CALL", "compactd.v1"), where
        assert detail.metadata["field"] == field, f"{where}: field {detail.metadata['field']!r}, want {field!r}"


@pytest.mark.parametrize("case", sorted(PENDING_CASES))
def test_pending_calls_left_out_on_request(api, stub, tmp_path, case):
    pb2, _ = api
    msgs, pending, _, _, answered = _pending_case(case)
    ctx = f"[seed={SEED} case={case}]"
    results = _render_all(pb2, stub, tmp_path, case, msgs, omit_pending=True)
    user_texts = [m["content"] for m in msgs if m["role"] == "user"]
    for (fmt, budget), (resp, payload) in results.items():
        where = f"{ctx} format={fmt} budget={budget}"
        text = all_text(payload)
        for pid in pending:
            assert pid not in text, f"{where}: the pending call {pid} was sent"
        check_hidden_parts_unchanged(payload, fmt, msgs, where)
        check_hidden_absent(payload, fmt, msgs, where)
        if budget == 1_000_000:
            assert payload_call_ids(payload, fmt) == answered, f"{where}: answered calls changed"
            for t in user_texts:
                assert t.strip() in text, f"{where}: user text lost: {t[:60]!r}"
            warnings = list(resp.audit.warnings)
            assert any(
                "pending" in w.lower() or "abandoned" in w.lower() or any(pid in w for pid in pending) for w in warnings
            ), (
                f"{where}: no audit warning says a pending call was left out: {warnings}"
            )


# ───────────────────────────── tool ids Anthropic rejects ─────────────────────────────


def test_tool_ids_rewritten_for_anthropic_only(api, stub, tmp_path):
    """Ids with characters outside [a-zA-Z0-9_-], ids reused across turns, and
    ids whose naive rewrite collides with another id: Anthropic gets valid,
    unique ids with each tool_result still on its own tool_use; Responses
    gets reused ids made unique (it matches outputs by call_id across the
    whole input) and every other id as sent; Chat Completions gets the
    caller's ids."""
    pb2, _ = api
    rng = random.Random(f"{SEED}:anthropic-ids")
    tb = ThreadBuilder(rng)
    turns = [
        ["call.1", "fn:read_file:0", "my call 3", "z.z"],
        ["call_0", "call_1"],
        ["call_0", "call_1"],  # reused, as some agents do
        ["a.b", "a_b", "a-b", "toolu_01KEEPME", "ü-call"],
        ["call_0", "z_z"],
    ]
    n = 0
    results_by_n = {}
    for ids in turns:
        tb.user()
        calls = []
        for cid in ids:
            n += 1
            calls.append({"id": cid, "name": "read_file", "arguments": {"path": f"f{n}.txt", "n": n}})
            results_by_n[n] = f"result #{n}"
        tb.assistant(rng.choice(["", "Reading."]), calls)
        order = list(calls)
        rng.shuffle(order)
        for c in order:
            tb.result(c, results_by_n[c["arguments"]["n"]], durability="non_replayable")
        tb.assistant()
    tb.user("Thanks.")
    thread_ids = [c["id"] for m in tb.messages for c in m.get("tool_calls") or []]
    counts = {i: thread_ids.count(i) for i in thread_ids}
    kept_as_is = [i for i in thread_ids if counts[i] == 1 and ANTHROPIC_ID.match(i)]
    out = _render_all(pb2, stub, tmp_path, "anthropic-ids", tb.messages)
    for (fmt, budget), (resp, payload) in out.items():
        where = f"[seed={SEED}] format={fmt} budget={budget}"
        pairs = _call_result_pairs(payload, fmt)
        for cid, args, result in pairs:
            assert result == results_by_n[args["n"]], f"{where}: the result of call {cid} (n={args['n']}) is {result!r}"
        if budget != 1_000_000:
            continue
        assert len(pairs) == len(thread_ids), f"{where}: calls lost"
        ids = payload_call_ids(payload, fmt)
        if fmt == "anthropic":
            assert all(ANTHROPIC_ID.match(i) for i in ids) and len(set(ids)) == len(ids), where
            assert set(kept_as_is) <= set(ids), f"{where}: valid unique ids were rewritten: {ids}"
            warnings = list(resp.audit.warnings)
            for i in sorted(set(thread_ids) - set(kept_as_is)):
                assert any(i in w for w in warnings), f"{where}: no audit warning says {i!r} was rewritten: {warnings}"
        elif fmt == "responses":
            # Outputs are matched to calls by call_id across the whole input:
            # reused ids are made unique, any other id goes as it is.
            assert len(set(ids)) == len(ids), f"{where}: a call_id is used twice: {ids}"
            once = [i for i in thread_ids if counts[i] == 1]
            assert set(once) <= set(ids), f"{where}: ids used once were rewritten: {ids}"
            warnings = list(resp.audit.warnings)
            for i in sorted({i for i in thread_ids if counts[i] > 1}):
                assert any(i in w and "Responses" in w for w in warnings), f"{where}: no audit warning for {i!r}: {warnings}"
            assert not [w for w in warnings if "Anthropic" in w], f"{where}: {warnings}"
        else:
            assert ids == thread_ids, f"{where}: the caller's ids were not sent as they are: {ids}"
            assert not [w for w in resp.audit.warnings if " sent to " in w], f"{where}: {list(resp.audit.warnings)}"


def _result_text(content):
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") for b in content)


TOOL_OUTPUT_BLOCK = re.compile(r"\A<tool_output id=([0-9a-f]{16})>\n(.*)\n</tool_output id=\1>\Z", re.S)


def unwrap_tool_output(text):
    """The text inside a `<tool_output id=N>` data block (what compactd renders
    tool output as by default), checking that N is the first 64 bits of the
    text's SHA-256; text without a block comes back as it is."""
    if not isinstance(text, str):
        return text
    m = TOOL_OUTPUT_BLOCK.match(text)
    if not m:
        return text
    inner = m.group(2)
    assert hashlib.sha256(inner.encode()).hexdigest()[:16] == m.group(1), f"block id does not hash its text: {text[:120]!r}"
    return inner


def _call_result_pairs(payload, fmt):
    """(id, parsed arguments, result text) of every answered call in the
    payload, data blocks unwrapped."""
    return [(cid, args, unwrap_tool_output(text)) for cid, args, text in _raw_call_result_pairs(payload, fmt)]


def _raw_call_result_pairs(payload, fmt):
    pairs = []
    if fmt == "responses":
        open_calls = {}
        for i in payload["input"]:
            if i.get("type") == "function_call":
                open_calls[i["call_id"]] = json.loads(i["arguments"])
            elif i.get("type") == "function_call_output":
                pairs.append((i["call_id"], open_calls.pop(i["call_id"]), _result_text(i["output"])))
        return pairs
    open_calls = {}
    for m in payload["messages"]:
        if fmt == "openai":
            for c in m.get("tool_calls") or []:
                open_calls[c["id"]] = json.loads(c["function"]["arguments"])
            if m["role"] == "tool":
                pairs.append((m["tool_call_id"], open_calls.pop(m["tool_call_id"]), _result_text(m["content"])))
        else:
            for b in _blocks_of(m):
                if b.get("type") == "tool_use":
                    open_calls[b["id"]] = b["input"]
                elif b.get("type") == "tool_result":
                    pairs.append((b["tool_use_id"], open_calls.pop(b["tool_use_id"]), _result_text(b["content"])))
    return pairs


# ───────────────────────────── images a provider does not take ─────────────────────────────

UNSUPPORTED_IMAGES = [
    "data:image/svg+xml;base64," + base64.b64encode(b'<svg xmlns="http://www.w3.org/2000/svg"/>').decode(),
    "data:image/bmp;base64," + base64.b64encode(b"BM" + bytes(60)).decode(),
    "data:image/tiff;base64," + base64.b64encode(b"II*\x00" + bytes(40)).decode(),
    "data:image/heic;base64," + base64.b64encode(b"\x00\x00\x00\x18ftypheic" + bytes(20)).decode(),
]


def _image_media_types(payload, fmt):
    """(media type or URL scheme, where) of every image block / part sent."""
    found = []

    def of_url(url):
        m = DATA_URL.match(url) if isinstance(url, str) else None
        return m.group(1) if m else "url"

    if fmt == "responses":
        for i, item in enumerate(payload["input"]):
            for j, part in enumerate(item.get("content") if isinstance(item.get("content"), list) else []):
                if part.get("type") == "input_image":
                    found.append((of_url(part.get("image_url")), f"input[{i}].content[{j}]"))
        return found
    for i, m in enumerate(payload["messages"]):
        for j, part in enumerate(m["content"] if isinstance(m.get("content"), list) else []):
            if fmt == "openai" and part.get("type") == "image_url":
                found.append((of_url(part["image_url"]["url"]), f"messages[{i}].content[{j}]"))
            if fmt == "anthropic" and part.get("type") == "image":
                src = part["source"]
                found.append((src.get("media_type", "url"), f"messages[{i}].content[{j}]"))
    return found


def test_unsupported_image_types_become_text_references(api, stub, tmp_path):
    pb2, _ = api
    rng = random.Random(f"{SEED}:unsupported-images")
    tb = ThreadBuilder(rng)
    png = data_url(rng)
    tb.user(
        [{"type": "text", "text": "Here are the diagrams."}]
        + [{"type": "image", "url": u} for u in UNSUPPORTED_IMAGES]
        + [{"type": "image", "url": png}, {"type": "image", "url": "https://images.example.com/arch.svg"}]
    )
    tb.assistant()
    tb.user([{"type": "image", "url": UNSUPPORTED_IMAGES[0]}])  # nothing else in the message
    out = _render_all(pb2, stub, tmp_path, "unsupported-images", tb.messages, budgets=(1_000_000,))
    for (fmt, _), (_, payload) in out.items():
        where = f"[seed={SEED}] format={fmt}"
        for media_type, at in _image_media_types(payload, fmt):
            assert media_type == "url" or media_type in ANTHROPIC_IMAGE_TYPES, f"{where}: {at} is {media_type}"
        # The PNG still goes as an image; the data of the others is not inlined as text.
        assert any(mt == "image/png" for mt, _ in _image_media_types(payload, fmt)), f"{where}: the PNG was lost"
        text = all_text(payload)
        for u in UNSUPPORTED_IMAGES:
            assert u.split(",", 1)[1] not in text, f"{where}: the data of {u[:30]} was sent"
            media_type = u[len("data:") : u.index(";")]
            assert media_type in text, f"{where}: no text reference to the {media_type} image"


# ───────────────────────────── tool definitions ─────────────────────────────


def test_tool_definitions_without_description_or_parameters(api, stub, tmp_path):
    """A ToolSchema may leave out its description and its JSON Schema (empty
    `parameters_json` means null); every format still needs a valid tool."""
    pb2, _ = api
    rng = random.Random(f"{SEED}:tool-defs")
    tb = ThreadBuilder(rng)
    tb.user("Ping the worker, then echo 'done'.")
    ping = {"id": "call_ping", "name": "ping", "arguments": {}}
    tb.assistant("", [ping])
    tb.result(ping, "pong")
    tb.assistant("Pong received.")
    tb.user("Thanks.")
    tools = [
        pb2.ToolSchema(name="ping"),
        pb2.ToolSchema(name="echo", parameters_json=json.dumps({"type": "object", "properties": {}})),
        pb2.ToolSchema(name="noop", description="Does nothing."),
    ]
    thread = to_proto(pb2, f"pp-{SEED}-tool-defs", tb.messages)
    for fmt in FORMATS:
        where = f"[seed={SEED}] format={fmt}"
        _, payload = render(pb2, stub, thread, fmt, budget=1_000_000, tools=tools)
        dump = _dump(tmp_path, f"tool-defs-{fmt}", payload)
        try:
            validate(payload, fmt)
        except AssertionError as e:
            raise AssertionError(f"{where}: {type(e).__name__}: {e}\npayload: {dump}") from None
        assert len(payload["tools"]) == len(tools), where
