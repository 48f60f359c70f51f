"""Every item and block type the official SDKs define for a request,
through the real service, generated from the SDKs' own type definitions.

For each member of
- `openai.types.responses.ResponseInputItemParam` (Responses items),
- `openai.types.chat.ChatCompletionContentPartParam` (Chat user parts) and
  the Chat message roles of `ChatCompletionMessageParam`,
- `anthropic.types.ContentBlockParam` and `anthropic.types.beta.
  BetaContentBlockParam` (Anthropic blocks),
an instance is built from the TypedDict's annotations (every key, required
or not, filled from its declared type), put in a small conversation of its
format (a call type gets the output type that answers it, an answer the
call it answers) and sent to `compactd serve` as `ProviderInput.json` in a
Render request:

1. **Generous budget**: the call succeeds, no warning says the type is
   unknown, the item comes back JSON-equal in the body, and the body
   validates against the SDK's request type.
2. **Tight budget**, with bulky older turns before it: the call succeeds,
   the body validates and is within budget, every call in it is answered.
3. **Another format**: the item is converted (text) or the call is refused
   with INVALID_ARGUMENT naming `output_format` and the item's type.

A newer SDK with a new member fails (1) until compactd knows the type: the
member is then carried with an "unknown type" warning.
"""

import base64
import json
import typing

import grpc
import pytest
import typing_extensions as te
from anthropic.types import ContentBlockParam
from anthropic.types.beta import BetaContentBlockParam
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
from openai.types.chat import ChatCompletionContentPartParam, ChatCompletionMessageParam
from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming
from openai.types.responses import ResponseInputItemParam
from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming
from pydantic import TypeAdapter

CALL_TIMEOUT_S = 60
PNG = base64.b64encode(bytes.fromhex("89504e470d0a1a0a0000000d49484452")).decode()
PDF = base64.b64encode(b"%PDF-1.4\n1 0 obj << /Type /Page >> endobj\n").decode()
UNKNOWN = "of a type compactd does not know"


def _members(union):
    return [m for m in typing.get_args(union) if te.is_typeddict(m)]


def _value(tp, key, depth):
    """A value of annotation `tp` for `key`, deterministic."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (te.Required, te.NotRequired, te.Annotated) or str(origin).endswith(
        ("Required", "NotRequired", "Annotated")
    ):
        return _value(args[0], key, depth)
    if origin is typing.Literal or origin is te.Literal:
        return args[0]
    if origin is typing.Union or str(origin) == "<class 'types.UnionType'>":
        options = [a for a in args if a is not type(None)]
        # A plain string where one is allowed: the simplest member.
        return _value(options[0], key, depth)
    if origin in (list, typing.List) or str(origin).startswith("<class 'collections.abc."):
        if origin is dict or "Mapping" in str(origin):
            return {"k": "v"}
        return [_value(args[0], key, depth + 1)] if args and depth < 6 else []
    if origin is dict:
        return {"k": "v"}
    if te.is_typeddict(tp):
        return instance(tp, depth + 1)
    if tp is str:
        return _string(key)
    if tp is bool:
        return True
    if tp is int:
        return 1
    if tp is float:
        return 1.0
    if tp is object:
        return {"k": "v"}
    return _string(key)


def _string(key):
    return {
        "data": PNG,
        "media_type": "image/png",
        "signature": "c2ln",
        "encrypted_content": "ZW5j",
        "url": "https://example.com/a.png",
        "image_url": "https://example.com/a.png",
        "arguments": "{}",
    }.get(key, f"{key}-1")


def instance(td, depth=0):
    """Every key of TypedDict `td` with a value of its declared type."""
    hints = te.get_type_hints(td, include_extras=True)
    return {k: _value(t, k, depth) for k, t in hints.items() if depth < 8}


def _type_of(td):
    t = te.get_type_hints(td).get("type")
    args = typing.get_args(t)
    literal = [a for a in args if isinstance(a, str)] or [
        x for a in args for x in typing.get_args(a) if isinstance(x, str)
    ]
    return literal[0] if literal else td.__name__


def _render(pb2, stub, body, fmt, *, shape, budget=1_000_000, model=None, delimit=False):
    formats = {
        "openai": pb2.OUTPUT_FORMAT_OPENAI_CHAT,
        "anthropic": pb2.OUTPUT_FORMAT_ANTHROPIC_MESSAGES,
        "responses": pb2.OUTPUT_FORMAT_OPENAI_RESPONSES,
    }
    req = pb2.RenderRequest(
        input=pb2.ProviderInput(thread_id="vocab", json=json.dumps(body), format=formats[shape]),
        compact_first=True,
        model=model or ("claude-sonnet-4-5" if fmt == "anthropic" else "gpt-4o"),
        max_input_tokens=budget,
        format=formats[fmt],
        omit_pending_calls=True,
    )
    # The tool-output and user-text delimiters are the additions compactd
    # makes to a kept body; they are switched off here to compare bodies
    # with their input.
    req.policy.delimit_tool_output = delimit
    req.policy.delimit_user_content = delimit
    out = stub.Render(req, timeout=CALL_TIMEOUT_S)
    return out, json.loads(out.provider_payload_json)


def _validate(adapter, body):
    validated = adapter.validate_python(body)
    # Iterables are validated lazily: drain them.
    def drain(v):
        if isinstance(v, dict):
            for x in v.values():
                drain(x)
        elif isinstance(v, (list, tuple)):
            for x in v:
                drain(x)
        elif hasattr(v, "__iter__") and not isinstance(v, (str, bytes)):
            for x in v:
                drain(x)

    drain(validated)


RESPONSES = TypeAdapter(ResponseCreateParamsNonStreaming)
CHAT = TypeAdapter(CompletionCreateParamsNonStreaming)
ANTHROPIC = TypeAdapter(MessageCreateParamsNonStreaming)


# ─────────────────────────── OpenAI Responses ───────────────────────────

RESPONSES_ITEMS = {_type_of(m): m for m in _members(ResponseInputItemParam)}
# The three message members share a type: each is tested by its class.
RESPONSES_MEMBERS = {m.__name__: m for m in _members(ResponseInputItemParam)}


def _responses_conversation(kind, member=None):
    """A user turn, the item (with its partner), a closing user turn."""
    item = instance(member or RESPONSES_ITEMS[kind])
    item["type"] = kind
    items = [item]
    if "call_id" in item:
        item["call_id"] = "call_1"
    if kind.endswith("_output") and kind != "function_call_output":
        call_kind = kind[: -len("_output")]
        call_kind = {"computer_call": "computer_call", "tool_search": "tool_search_call"}.get(
            call_kind, call_kind
        )
        if call_kind in RESPONSES_ITEMS:
            call = instance(RESPONSES_ITEMS[call_kind])
            call.update(type=call_kind, call_id="call_1")
            items.insert(0, call)
        if "call_id" not in item:
            # `local_shell_call_output` names its call by `id`.
            item["id"] = "call_1"
    elif kind == "function_call_output":
        items.insert(0, {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"})
    elif kind == "function_call":
        items.append({"type": "function_call_output", "call_id": "call_1", "output": "ok"})
    elif kind == "mcp_approval_response":
        items.insert(0, {"type": "mcp_approval_request", "id": "mcpr_1", "arguments": "{}",
                         "name": "deploy", "server_label": "ops"})
        item["approval_request_id"] = "mcpr_1"
    elif kind == "reasoning":
        # This turn's reasoning, before the call it led to: kept.
        items += [{"type": "function_call", "call_id": "call_r", "name": "f", "arguments": "{}"},
                  {"type": "function_call_output", "call_id": "call_r", "output": "ok"}]
        return [{"role": "user", "content": "start"}, *items], item
    elif f"{kind}_output" in RESPONSES_ITEMS:
        out = instance(RESPONSES_ITEMS[f"{kind}_output"])
        out.update(type=f"{kind}_output", call_id="call_1")
        items.append(out)
    return [{"role": "user", "content": "start"}, *items, {"role": "user", "content": "go on"}], item


@pytest.mark.parametrize("member", sorted(RESPONSES_MEMBERS))
def test_every_responses_item_comes_back(api, stub, member):
    pb2, _ = api
    kind = _type_of(RESPONSES_MEMBERS[member])
    items, item = _responses_conversation(kind, RESPONSES_MEMBERS[member])
    out, body = _render(pb2, stub, {"model": "gpt-4o", "input": items}, "responses", shape="responses")
    assert not [w for w in out.audit.warnings if UNKNOWN in w], list(out.audit.warnings)
    _validate(RESPONSES, body)
    assert item in body["input"], (kind, json.dumps(body["input"])[:2000])


# ───────────────────────────── OpenAI Chat ─────────────────────────────

CHAT_PARTS = {_type_of(m): m for m in _members(ChatCompletionContentPartParam)}


@pytest.mark.parametrize("kind", sorted(CHAT_PARTS))
def test_every_chat_user_part_comes_back(api, stub, kind):
    pb2, _ = api
    part = instance(CHAT_PARTS[kind])
    part["type"] = kind
    if kind == "input_audio":
        part["input_audio"] = {"data": "UklGRg==", "format": "wav"}
    if kind == "file":
        part["file"] = {"file_data": f"data:application/pdf;base64,{PDF}", "filename": "a.pdf"}
    messages = [{"role": "user", "content": [{"type": "text", "text": "see"}, part]}]
    out, body = _render(pb2, stub, {"model": "gpt-4o", "messages": messages}, "openai", shape="openai")
    assert not [w for w in out.audit.warnings if UNKNOWN in w], list(out.audit.warnings)
    _validate(CHAT, body)
    assert part in body["messages"][-1]["content"], json.dumps(body)[:2000]


CHAT_MESSAGES = {m.__name__: m for m in _members(ChatCompletionMessageParam)}


def _chat_conversation(member):
    """The message of `member`, every key filled, with what pairs it."""
    m = instance(CHAT_MESSAGES[member])
    role = m["role"]
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    if role == "assistant":
        m.pop("function_call")  # the legacy form is tested on its own
        m["tool_calls"] = [call]
        return [{"role": "user", "content": "go"}, m,
                {"role": "tool", "tool_call_id": "call_1", "content": "ok"}], m
    if role == "tool":
        m["tool_call_id"] = "call_1"
        return [{"role": "user", "content": "go"},
                {"role": "assistant", "content": None, "tool_calls": [call]}, m], m
    if role == "function":
        m["name"] = "f"
        return [{"role": "user", "content": "go"},
                {"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": "{}"}},
                m], m
    return [m, {"role": "user", "content": "go on"}], m


@pytest.mark.parametrize("member", sorted(CHAT_MESSAGES))
def test_every_chat_message_comes_back(api, stub, member):
    pb2, _ = api
    messages, m = _chat_conversation(member)
    out, body = _render(pb2, stub, {"model": "gpt-4o", "messages": messages}, "openai", shape="openai")
    assert not [w for w in out.audit.warnings if UNKNOWN in w], list(out.audit.warnings)
    _validate(CHAT, body)
    assert m in body["messages"], (member, json.dumps(body["messages"])[:2000])


def test_chat_refusal_and_name_come_back(api, stub):
    pb2, _ = api
    messages = [
        {"role": "user", "name": "alice", "content": "do it"},
        {"role": "assistant", "content": None, "refusal": "I can't help with that."},
        {"role": "user", "content": "ok"},
    ]
    out, body = _render(pb2, stub, {"model": "gpt-4o", "messages": messages}, "openai", shape="openai")
    _validate(CHAT, body)
    assert body["messages"][:2] == messages[:2], body["messages"]


# ─────────────────────────── Anthropic Messages ───────────────────────────

ANTHROPIC_BLOCKS = {_type_of(m): m for m in _members(ContentBlockParam)}
# Blocks of the generally available API: the body validates against its type.
GA_BLOCKS = set(ANTHROPIC_BLOCKS)
for _m in _members(BetaContentBlockParam):
    ANTHROPIC_BLOCKS.setdefault(_type_of(_m), _m)
# The assistant's own blocks; the rest are the user's.
ASSISTANT_SIDE = {"thinking", "redacted_thinking", "tool_use", "server_tool_use", "mcp_tool_use",
                  "compaction"}


def _anthropic_block(kind):
    block = instance(ANTHROPIC_BLOCKS[kind])
    block["type"] = kind
    if kind == "document":
        block["source"] = {"type": "base64", "media_type": "application/pdf", "data": PDF}
    if kind == "image":
        block["source"] = {"type": "base64", "media_type": "image/png", "data": PNG}
    for key in ("tool_use_id", "id"):
        if key in block and kind != "search_result":
            block[key] = "toolu_1" if key == "tool_use_id" or kind.endswith("tool_use") else block[key]
    return block


def _anthropic_conversation(kind):
    block = _anthropic_block(kind)
    if kind in ("tool_use", "tool_result"):
        use = {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}
        result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}
        block["id" if kind == "tool_use" else "tool_use_id"] = "toolu_1"
        return [
            {"role": "user", "content": "start"},
            {"role": "assistant", "content": [block if kind == "tool_use" else use]},
            {"role": "user", "content": [block if kind == "tool_result" else result]},
        ], block
    if kind.endswith("_tool_result") or kind == "mcp_tool_result":
        use_kind = "mcp_tool_use" if kind == "mcp_tool_result" else "server_tool_use"
        use = _anthropic_block(use_kind)
        use["id"] = "toolu_1"
        block["tool_use_id"] = "toolu_1"
        return [
            {"role": "user", "content": "start"},
            {"role": "assistant", "content": [use, block]},
            {"role": "user", "content": "go on"},
        ], block
    if kind in ("thinking", "redacted_thinking"):
        # This turn's thinking, in a tool loop: kept.
        use = {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}
        return [
            {"role": "user", "content": [{"type": "text", "text": "start"}]},
            {"role": "assistant", "content": [block, use]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]},
        ], block
    if kind in ASSISTANT_SIDE:
        after = [] if kind in ("server_tool_use", "mcp_tool_use", "tool_use") else [
            {"type": "text", "text": "done"}]
        return [
            {"role": "user", "content": "start"},
            {"role": "assistant", "content": [block, *after]},
            {"role": "user", "content": "go on"},
        ], block
    return [{"role": "user", "content": [{"type": "text", "text": "see"}, block]}], block


@pytest.mark.parametrize("kind", sorted(ANTHROPIC_BLOCKS))
def test_every_anthropic_block_comes_back(api, stub, kind):
    pb2, _ = api
    messages, block = _anthropic_conversation(kind)
    body_in = {"model": "claude-sonnet-4-5", "max_tokens": 1024, "messages": messages}
    out, body = _render(pb2, stub, body_in, "anthropic", shape="anthropic")
    assert not [w for w in out.audit.warnings if UNKNOWN in w], list(out.audit.warnings)
    if kind in GA_BLOCKS:
        _validate(ANTHROPIC, body)
    sent = [b for m in body["messages"] for b in (m["content"] if isinstance(m["content"], list) else [])]
    assert block in sent, (kind, json.dumps(body)[:2000])


# ─────────────────────── tight budgets, other formats ───────────────────────

BULK = "row " * 3000


def _bulky_responses(items):
    older = []
    for k in range(6):
        older += [
            {"role": "user", "content": f"step {k}"},
            {"type": "function_call", "call_id": f"old_{k}", "name": "dump", "arguments": "{}"},
            {"type": "function_call_output", "call_id": f"old_{k}", "output": BULK},
        ]
    return older + items


@pytest.mark.parametrize("kind", sorted(RESPONSES_ITEMS))
def test_responses_items_at_a_tight_budget(api, stub, kind):
    pb2, _ = api
    items, _ = _responses_conversation(kind)
    if kind == "compaction":
        # It stands for everything before it (kept whole): the bulk follows.
        bulky = items[:-1] + _bulky_responses([items[-1]])
    else:
        bulky = _bulky_responses(items)
    body_in = {"model": "gpt-4o", "input": bulky}
    out, body = _render(pb2, stub, body_in, "responses", shape="responses", budget=8_000)
    _validate(RESPONSES, body)
    assert out.tokens.total <= 8_000, out.tokens
    calls = {i["call_id"] for i in body["input"] if i.get("type") == "function_call"}
    outputs = {i["call_id"] for i in body["input"] if i.get("type") == "function_call_output"}
    assert calls == outputs


CONVERTIBLE = {"message", "reasoning", "function_call", "function_call_output"}


@pytest.mark.parametrize("kind", sorted(RESPONSES_ITEMS))
def test_responses_items_in_another_format_are_converted_or_refused(api, stub, kind):
    pb2, _ = api
    items, _ = _responses_conversation(kind)
    try:
        _, body = _render(pb2, stub, {"model": "gpt-4o", "input": items}, "anthropic", shape="responses")
    except grpc.RpcError as e:
        assert kind not in CONVERTIBLE, (kind, e.details())
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "output_format" in e.details() and "which Anthropic has no form for" in e.details(), e.details()
        return
    assert kind in CONVERTIBLE, f"{kind} was sent to Anthropic"
    _validate(ANTHROPIC, body)


# ─────────────────────── calls and results in their provider form ───────────────────────


def test_chat_custom_tool_calls_come_back_and_convert(api, stub):
    pb2, _ = api
    messages = [
        {"role": "user", "content": "patch it"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_c1", "type": "custom", "custom": {"name": "apply_patch", "input": "*** Begin Patch"}}]},
        {"role": "tool", "tool_call_id": "call_c1", "content": "applied"},
        {"role": "user", "content": "thanks"},
    ]
    body_in = {"model": "gpt-4o", "messages": messages}
    _, body = _render(pb2, stub, body_in, "openai", shape="openai")
    _validate(CHAT, body)
    assert body["messages"] == messages, body["messages"]
    # Responses has custom tools too: converted.
    _, body = _render(pb2, stub, body_in, "responses", shape="openai")
    _validate(RESPONSES, body)
    kinds = [i.get("type") for i in body["input"]]
    assert "custom_tool_call" in kinds and "custom_tool_call_output" in kinds, kinds
    call = next(i for i in body["input"] if i.get("type") == "custom_tool_call")
    assert call["input"] == "*** Begin Patch" and call["name"] == "apply_patch", call
    # Anthropic has none: refused, naming the call.
    with pytest.raises(grpc.RpcError) as e:
        _render(pb2, stub, body_in, "anthropic", shape="openai")
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "output_format" in e.value.details() and '"custom"' in e.value.details(), e.value.details()


def test_chat_legacy_function_role_comes_back_and_converts(api, stub):
    pb2, _ = api
    messages = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "function_call": {"name": "weather", "arguments": "{\"city\": \"Oslo\"}"}},
        {"role": "function", "name": "weather", "content": "-3 C"},
        {"role": "user", "content": "thanks"},
    ]
    body_in = {"model": "gpt-4o", "messages": messages}
    _, body = _render(pb2, stub, body_in, "openai", shape="openai")
    _validate(CHAT, body)
    assert body["messages"] == messages, body["messages"]
    _, body = _render(pb2, stub, body_in, "anthropic", shape="openai")
    _validate(ANTHROPIC, body)
    uses = [b for m in body["messages"] if isinstance(m["content"], list) for b in m["content"]
            if b["type"] == "tool_use"]
    assert uses and uses[0]["name"] == "weather" and uses[0]["input"] == {"city": "Oslo"}, body


def test_anthropic_results_keep_their_blocks_inside_the_delimiter(api, stub):
    pb2, _ = api
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "cache_control": {"type": "ephemeral"},
              "content": [{"type": "text", "text": "the chart"},
                          {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}]}
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "plot"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "plot", "input": {},
                                           "cache_control": {"type": "ephemeral"}}]},
        {"role": "user", "content": [result]},
    ]
    body_in = {"model": "claude-sonnet-4-5", "max_tokens": 1024, "messages": messages}
    _, body = _render(pb2, stub, body_in, "anthropic", shape="anthropic")
    _validate(ANTHROPIC, body)
    assert body["messages"] == messages, body["messages"]
    _, body = _render(pb2, stub, body_in, "anthropic", shape="anthropic", delimit=True)
    _validate(ANTHROPIC, body)
    sent = body["messages"][2]["content"][0]
    assert sent["cache_control"] == {"type": "ephemeral"}, sent
    inner = sent["content"]
    assert inner[1:-1] == result["content"], inner
    assert inner[0]["text"].startswith("<tool_output id=") and inner[-1]["text"].startswith("</tool_output id="), inner


# ─────────────────────── the Python client's shape detection ───────────────────────


@pytest.mark.parametrize("member", sorted(RESPONSES_MEMBERS))
def test_the_client_knows_every_responses_conversation_for_one(member):
    from compactd._shapes import detect_format

    kind = _type_of(RESPONSES_MEMBERS[member])
    items, _ = _responses_conversation(kind, RESPONSES_MEMBERS[member])
    if kind == "message":
        return  # a message alone reads as Chat's too; its body says `input`
    assert detect_format(items) == "responses", kind


@pytest.mark.parametrize("kind", sorted(set(ANTHROPIC_BLOCKS) - {"text", "image", "compaction"}))
def test_the_client_knows_every_anthropic_conversation_for_one(kind):
    from compactd._shapes import detect_format

    messages, _ = _anthropic_conversation(kind)
    assert detect_format(messages) == "anthropic", kind


def test_an_unknown_type_is_carried_with_a_warning(api, stub):
    pb2, _ = api
    block = {"type": "hologram", "frames": 3}
    messages = [{"role": "user", "content": [{"type": "text", "text": "see"}, block]}]
    body_in = {"model": "claude-sonnet-4-5", "max_tokens": 1024, "messages": messages}
    out, body = _render(pb2, stub, body_in, "anthropic", shape="anthropic")
    assert [w for w in out.audit.warnings if UNKNOWN in w and "hologram" in w], list(out.audit.warnings)
    assert block in body["messages"][0]["content"]


# ─────────────────────── every type × every other format ───────────────────────

ADAPTERS = {"openai": CHAT, "anthropic": ANTHROPIC, "responses": RESPONSES}


def _cases():
    for member, td in sorted(RESPONSES_MEMBERS.items()):
        items, _ = _responses_conversation(_type_of(td), td)
        yield "responses", member, {"model": "gpt-4o", "input": items}
    for kind in sorted(CHAT_PARTS):
        part = instance(CHAT_PARTS[kind])
        part["type"] = kind
        yield "openai", kind, {"model": "gpt-4o", "messages": [
            {"role": "user", "content": [{"type": "text", "text": "see"}, part]}]}
    for member in sorted(CHAT_MESSAGES):
        messages, _ = _chat_conversation(member)
        yield "openai", member, {"model": "gpt-4o", "messages": messages}
    for kind in sorted(ANTHROPIC_BLOCKS):
        messages, _ = _anthropic_conversation(kind)
        yield "anthropic", kind, {"model": "claude-sonnet-4-5", "max_tokens": 1024, "messages": messages}


CROSS = [(shape, name, body, to) for shape, name, body in _cases() for to in ADAPTERS if to != shape]


@pytest.mark.parametrize("shape,name,body,to", CROSS, ids=[f"{s}:{n}->{t}" for s, n, _, t in CROSS])
def test_every_type_in_every_other_format_is_converted_or_refused(api, stub, shape, name, body, to):
    """Converted: the body validates against the target SDK's type. Or
    refused: INVALID_ARGUMENT naming output_format and the format that has
    no form for it. Nothing else (no internal error, nothing dropped
    without a word)."""
    pb2, _ = api
    try:
        _, out = _render(pb2, stub, body, to, shape=shape)
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, (name, to, e.code(), e.details())
        assert "output_format" in e.details() and "has no form for" in e.details(), e.details()
        return
    if to == "anthropic" and shape == "anthropic":
        return
    _validate(ADAPTERS[to], out)


def _bulky_chat(messages):
    older = []
    for k in range(6):
        older += [
            {"role": "user", "content": f"step {k}"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"old_{k}", "type": "function", "function": {"name": "dump", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": f"old_{k}", "content": BULK},
        ]
    return older + messages


def _bulky_anthropic(messages):
    older = []
    for k in range(6):
        older += [
            {"role": "user", "content": [{"type": "text", "text": f"step {k}"}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": f"old_{k}", "name": "dump", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"old_{k}", "content": BULK}]},
        ]
    return older + messages


TIGHT = [(shape, name, body) for shape, name, body in _cases() if shape != "responses"]


@pytest.mark.parametrize("shape,name,body", TIGHT, ids=[f"{s}:{n}" for s, n, _ in TIGHT])
def test_chat_and_anthropic_types_at_a_tight_budget(api, stub, shape, name, body):
    pb2, _ = api
    body = dict(body)
    bulky = _bulky_chat if shape == "openai" else _bulky_anthropic
    if name == "compaction":
        # It stands for everything before it (kept whole): the bulk follows.
        body["messages"] = body["messages"][:-1] + bulky(body["messages"][-1:])
    else:
        body["messages"] = bulky(body["messages"])
    out, sent = _render(pb2, stub, body, shape, shape=shape, budget=8_000)
    assert out.tokens.total <= 8_000, out.tokens
    if shape == "openai":
        _validate(CHAT, sent)
        calls = {c["id"] for m in sent["messages"] for c in m.get("tool_calls") or []}
        results = {m["tool_call_id"] for m in sent["messages"] if m["role"] == "tool"}
        assert calls == results
    else:
        if name in GA_BLOCKS:
            _validate(ANTHROPIC, sent)
        blocks = [b for m in sent["messages"] if isinstance(m["content"], list) for b in m["content"]]
        uses = {b["id"] for b in blocks if b["type"] == "tool_use"}
        results = {b["tool_use_id"] for b in blocks if b["type"] == "tool_result"}
        assert uses == results
