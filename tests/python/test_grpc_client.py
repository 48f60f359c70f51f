"""A Python client nobody on the team wrote, against the real `compactd` binary.

The stubs are generated from `proto/` with grpcio-tools at test time (nothing
generated is checked in; see conftest.py), the server is the binary started with
`compactd serve --listen 127.0.0.1:0` (dev mode: loopback, no credentials), and
errors are decoded the standard way: `grpc_status.rpc_status.from_call` and the
`google.rpc` `ErrorInfo` / `BadRequest` / `RetryInfo` details it carries.

Run:
    python3 -m venv /tmp/pyvenv
    /tmp/pyvenv/bin/pip install -r tests/python/requirements.txt
    cargo build --bin compactd
    COMPACTD_BIN=target/debug/compactd /tmp/pyvenv/bin/pytest -q tests/python
"""

import json

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

CALL_TIMEOUT_S = 60
MODEL = "gpt-4o"
SYSTEM = "You are a careful engineering agent."


# ───────────────────────────── thread builders ─────────────────────────────


def big_output(lines):
    """Varied log text, roughly 12 tokens a line."""
    return "".join(
        f"{i:05} INFO worker-{i % 7} processed batch {i * 31 % 997} in {i * 17 % 113} ms status=ok\n"
        for i in range(lines)
    )


def big_thread(pb2, thread_id, lines=2000):
    """A thread whose early tool output dwarfs everything else."""
    R = pb2
    msgs = [
        R.Message(id="u1", role=R.ROLE_USER, turn=1, text="Please read the log. Never delete production data."),
        R.Message(
            id="a1",
            role=R.ROLE_ASSISTANT,
            turn=1,
            tool_calls=[R.ToolCall(id="c1", name="read_file", arguments_json='{"path": "/srv/app/log.txt"}')],
        ),
        R.Message(
            id="t1",
            role=R.ROLE_TOOL,
            turn=1,
            tool_result=R.ToolResultEnvelope(
                tool_name="read_file",
                tool_call_id="c1",
                outcome=R.OUTCOME_SUCCESS,
                content_text=big_output(lines),
                key_fields={"order_id": '"A-17"'},
                durability=R.DURABILITY_NON_REPLAYABLE,
            ),
        ),
        R.Message(id="a1b", role=R.ROLE_ASSISTANT, turn=1, text="I read the log; all batches succeeded."),
    ]
    for turn in (2, 3, 4):
        msgs.append(R.Message(id=f"u{turn}", role=R.ROLE_USER, turn=turn, text=f"Question {turn} about the log?"))
        if turn == 3:
            # A small, recent tool pair: must survive with its pairing intact.
            msgs.append(
                R.Message(
                    id="a3t",
                    role=R.ROLE_ASSISTANT,
                    turn=turn,
                    tool_calls=[R.ToolCall(id="c2", name="lookup", arguments_json='{"q": "batch 7"}')],
                )
            )
            msgs.append(
                R.Message(
                    id="t3",
                    role=R.ROLE_TOOL,
                    turn=turn,
                    tool_result=R.ToolResultEnvelope(
                        tool_name="lookup", tool_call_id="c2", content_json='{"batch": 7, "status": "ok"}'
                    ),
                )
            )
        msgs.append(R.Message(id=f"a{turn}", role=R.ROLE_ASSISTANT, turn=turn, text=f"Answer {turn}: all fine."))
    return R.Thread(id=thread_id, messages=msgs)


def call(method, request):
    return method(request, timeout=CALL_TIMEOUT_S)


# ───────────────────────────── pairing checks ─────────────────────────────


def assert_neutral_pairing(pb2, messages):
    """Every tool message answers an earlier call; every call is answered."""
    open_calls = {}
    for i, m in enumerate(messages):
        for c in m.tool_calls:
            open_calls[c.id] = i
        if m.role == pb2.ROLE_TOOL:
            assert m.HasField("tool_call_id"), f"tool message {i} has no tool_call_id"
            assert m.tool_call_id in open_calls, f"orphaned tool message {i}: {m.tool_call_id}"
            del open_calls[m.tool_call_id]
    assert not open_calls, f"tool calls without a result: {sorted(open_calls)}"


def assert_openai_pairing(payload):
    open_calls = set()
    for i, m in enumerate(payload["messages"]):
        for c in m.get("tool_calls") or []:
            assert c["type"] == "function"
            json.loads(c["function"]["arguments"])  # OpenAI arguments are a JSON string
            open_calls.add(c["id"])
        if m["role"] == "tool":
            assert m["tool_call_id"] in open_calls, f"orphaned tool message {i}: {m}"
            open_calls.remove(m["tool_call_id"])
    assert not open_calls, f"tool calls without a result: {sorted(open_calls)}"


def assert_anthropic_pairing(payload):
    open_uses = set()
    for m in payload["messages"]:
        blocks = m["content"] if isinstance(m["content"], list) else []
        for b in blocks:
            if b.get("type") == "tool_use":
                open_uses.add(b["id"])
            if b.get("type") == "tool_result":
                assert b["tool_use_id"] in open_uses, f"orphaned tool_result: {b['tool_use_id']}"
                open_uses.remove(b["tool_use_id"])
    assert not open_uses, f"tool_use without a result: {sorted(open_uses)}"


# ───────────────────────────── tests ─────────────────────────────


def test_compact_fits_the_budget(api, stub):
    pb2, _ = api
    budget = 8000
    out = call(
        stub.Compact,
        pb2.CompactRequest(
            thread=big_thread(pb2, "py-compact"), model=MODEL, max_input_tokens=budget, system_prompt=SYSTEM
        ),
    )
    assert out.version == 1
    assert not out.reused
    assert out.plan.version == 1 and out.plan.thread_id == "py-compact"
    assert out.tokens_before > budget, "the test thread must need compaction"
    assert out.tokens_after <= out.budget.hard_limit <= budget
    assert out.tokens_after < out.tokens_before
    p = out.plan
    assert len(p.externalizations) + len(p.summarizations) + len(p.clearings) + len(p.drops) > 0
    assert out.plan.compacted_token_count == out.tokens_after
    assert sum(r.tokens_freed for r in out.per_reducer) > 0

    # Idempotent: the same request returns the committed plan, no new version.
    again = call(
        stub.Compact,
        pb2.CompactRequest(
            thread=big_thread(pb2, "py-compact"), model=MODEL, max_input_tokens=budget, system_prompt=SYSTEM
        ),
    )
    assert again.reused and again.version == 1
    assert again.plan.fingerprint == out.plan.fingerprint


def test_render_neutral_after_compact(api, stub):
    pb2, _ = api
    thread = big_thread(pb2, "py-render")
    compacted = call(
        stub.Compact, pb2.CompactRequest(thread=thread, model=MODEL, max_input_tokens=8000, system_prompt=SYSTEM)
    )
    out = call(
        stub.Render,
        pb2.RenderRequest(thread=thread, model=MODEL, system_prompt=SYSTEM, format=pb2.OUTPUT_FORMAT_NEUTRAL),
    )
    assert out.plan_version == compacted.version == 1
    assert out.system_prompt == SYSTEM
    assert not out.provider_payload_json
    assert out.messages, "neutral form carries the messages"
    assert_neutral_pairing(pb2, out.messages)
    origins = {m.origin for m in out.messages}
    assert origins - {pb2.ORIGIN_VERBATIM}, "something was compacted"
    # The recent turn is verbatim, and the small recent tool pair survived.
    assert out.messages[-1].text == "Answer 4: all fine."
    assert any(m.tool_call_id == "c2" for m in out.messages)
    t = out.tokens
    assert t.total == t.system + t.tools + t.messages + t.rehydrated + t.recalled + t.framing
    # The plan's prompt as Compact counted it, plus this turn's recall block.
    assert t.total - t.recalled == compacted.tokens_after
    recalled = [m for m in out.messages if m.origin == pb2.ORIGIN_RECALLED]
    assert len(recalled) == (1 if t.recalled else 0)
    assert out.audit.plan_version == 1
    assert out.audit.plan_fingerprint == compacted.plan.fingerprint
    assert not out.HasField("compaction")


def test_render_openai_compact_first(api, stub):
    pb2, _ = api
    budget = 8000
    out = call(
        stub.Render,
        pb2.RenderRequest(
            thread=big_thread(pb2, "py-openai"),
            compact_first=True,
            model=MODEL,
            max_input_tokens=budget,
            system_prompt=SYSTEM,
            format=pb2.OUTPUT_FORMAT_OPENAI_CHAT,
        ),
    )
    assert out.HasField("compaction")
    assert out.compaction.version == 1 and out.plan_version == 1
    assert out.tokens.total <= out.compaction.budget.hard_limit <= budget
    assert not out.messages, "provider formats carry only the payload"
    payload = json.loads(out.provider_payload_json)
    assert payload["model"] == MODEL
    assert payload["messages"][0] == {"role": "system", "content": SYSTEM}
    assert_openai_pairing(payload)
    assert len(json.dumps(payload)) < len(big_output(2000)), "the big output is not in the prompt"


def test_render_anthropic_compact_first(api, stub):
    pb2, _ = api
    out = call(
        stub.Render,
        pb2.RenderRequest(
            thread=big_thread(pb2, "py-anthropic"),
            compact_first=True,
            model=MODEL,
            max_input_tokens=8000,
            system_prompt=SYSTEM,
            format=pb2.OUTPUT_FORMAT_ANTHROPIC_MESSAGES,
            max_output_tokens=1024,
        ),
    )
    payload = json.loads(out.provider_payload_json)
    assert payload["max_tokens"] == 1024
    # The system prompt goes as one text block, marked for the prompt cache.
    assert payload["system"] == [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
    assert_anthropic_pairing(payload)


def test_search_context_answers_the_search_tool(api, stub):
    """The agent's search_context loop from a plain gRPC client: Render offers
    the tool, SearchContext answers a query with passages of the compacted
    log and the artifact that holds it, and a bad query names its field."""
    pb2, _ = api
    thread = big_thread(pb2, "py-search")
    out = call(
        stub.Render,
        pb2.RenderRequest(
            thread=thread,
            compact_first=True,
            model=MODEL,
            max_input_tokens=8000,
            format=pb2.OUTPUT_FORMAT_OPENAI_CHAT,
            search_context_tool=True,
        ),
    )
    tools = [t["function"]["name"] for t in json.loads(out.provider_payload_json)["tools"]]
    assert tools == ["search_context"]
    found = call(stub.SearchContext, pb2.SearchContextRequest(thread=thread, query="worker-3 batch 311", max_results=3))
    assert found.plan_version == out.plan_version
    assert 1 <= len(found.passages) <= 3
    top = found.passages[0]
    assert top.message_id == "t1" and top.artifact_id.startswith("art_")
    assert "worker-3" in top.text
    with pytest.raises(grpc.RpcError) as info:
        call(stub.SearchContext, pb2.SearchContextRequest(thread=thread, query=" "))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    status = rpc_status.from_call(info.value)
    details = [error_details_pb2.ErrorInfo() for d in status.details if d.Is(error_details_pb2.ErrorInfo.DESCRIPTOR)]
    for d, e in zip([d for d in status.details if d.Is(error_details_pb2.ErrorInfo.DESCRIPTOR)], details):
        d.Unpack(e)
    assert any(e.metadata.get("field") == "query" for e in details)


def test_duplicate_message_ids_are_invalid_argument(api, stub):
    pb2, _ = api
    thread = pb2.Thread(
        id="py-dup",
        messages=[
            pb2.Message(id="m0", role=pb2.ROLE_USER, turn=1, text="hello"),
            pb2.Message(id="m0", role=pb2.ROLE_ASSISTANT, turn=1, text="hi"),
        ],
    )
    with pytest.raises(grpc.RpcError) as info:
        call(stub.Compact, pb2.CompactRequest(thread=thread, model=MODEL, max_input_tokens=8000))
    err = info.value
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    field = "thread.messages[1].id"
    assert field in err.details()

    # The standard google.rpc.Status trailer with standard details: nothing
    # compactd-specific is needed to read the reason or the field.
    status = rpc_status.from_call(err)
    assert status is not None, "grpc-status-details-bin trailer is present"
    assert status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    infos = [d for d in status.details if d.Is(error_details_pb2.ErrorInfo.DESCRIPTOR)]
    assert len(infos) == 1, status.details
    info = error_details_pb2.ErrorInfo()
    infos[0].Unpack(info)
    assert info.reason == "INVALID_ARGUMENT"
    assert info.domain == "compactd.v1"
    assert info.metadata["field"] == field
    bad = [d for d in status.details if d.Is(error_details_pb2.BadRequest.DESCRIPTOR)]
    assert len(bad) == 1, status.details
    request = error_details_pb2.BadRequest()
    bad[0].Unpack(request)
    assert [v.field for v in request.field_violations] == [field]
