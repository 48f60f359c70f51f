"""The Python client's per-call content around the thread against the real
`compactd serve --dev`: `injections` (hooks' per-turn content before the
latest user message, paid from the injection reserve), `bootstrap` and
`workspace` (AssemblyContext) and `task_outcome`, on the sync and async
clients, on append-session calls and on the whole-conversation retry.
"""

import asyncio
import json
import re

import grpc
import pytest

from compactd import AsyncClient, Client, CompactdError
from compactd.v1 import compactd_pb2 as pb

MODEL = "gpt-4o"
SYSTEM = "You are a terse coding agent."
RESERVE = {"injection_reserve_tokens": 200}
CONVERSATION = [
    {"role": "user", "content": "Fix the failing import in utils.py."},
    {"role": "assistant", "content": "Fixed: the module was renamed."},
    {"role": "user", "content": "Now run the tests."},
]


class Recording(Client):
    """A client that keeps every request it sends (the retry's included)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.sent = []

    def _call(self, method, request):
        if isinstance(request, pb.RenderRequest):
            copy = pb.RenderRequest()
            copy.CopyFrom(request)
            self.sent.append(copy)
        return super()._call(method, request)


@pytest.fixture()
def client(server_addr):
    with Recording(server_addr) as c:
        yield c


def said(content):
    """A user message's words without the `<user_context id=N>` block the
    server delimits them with by default; anything else as it is."""
    if not isinstance(content, str):
        return content
    m = re.fullmatch(r'<user_context id=([0-9a-f]{16})(?: source="[^"]*")?>\n(.*)\n</user_context id=\1>', content, re.S)
    return m.group(2) if m else content


def contents(body):
    return [said(m["content"]) for m in body["messages"]]


def latest_user_index(body, text):
    found = [i for i, m in enumerate(body["messages"]) if m["role"] == "user" and said(m["content"]) == text]
    assert found, contents(body)
    return found[-1]


def test_injections_sit_just_before_the_latest_user_message(client):
    r = client.render(
        CONVERSATION,
        thread_id="py-ctx-inject",
        model=MODEL,
        format="openai",
        policy=RESERVE,
        injections=[("memory", "The user prefers pytest."), ("date", "Today is 2026-11-26.")],
    )
    at = latest_user_index(r.body, "Now run the tests.")
    assert contents(r.body)[at - 2 : at] == ["The user prefers pytest.", "Today is 2026-11-26."]
    assert r.body["messages"][at - 3]["role"] == "assistant", "after the history"
    sent = client.sent[-1]
    assert [(i.hook, i.text) for i in sent.injections] == [
        ("memory", "The user prefers pytest."),
        ("date", "Today is 2026-11-26."),
    ]


def test_injections_as_a_mapping_keep_their_order_in_the_neutral_form(client):
    r = client.render(
        CONVERSATION,
        thread_id="py-ctx-inject-map",
        model=MODEL,
        format="neutral",
        policy=RESERVE,
        injections={"retrieval": "docs: pytest -q runs quietly.", "memory": "Tests live in tests/."},
    )
    ids = [m.source_id for m in r.response.messages]
    assert ids[-3:] == ["injection:retrieval", "injection:memory", "m2"], ids
    origins = [m.origin for m in r.response.messages][-3:-1]
    assert origins == [pb.ORIGIN_INJECTED, pb.ORIGIN_INJECTED]


@pytest.mark.parametrize("over", [0, 1])
def test_an_injection_over_the_reserve_is_refused_by_name(client, over):
    fits = ("date", "Today is 2026-11-26.")
    too_big = ("retrieval", "a long retrieved passage " * 60)
    injections = [too_big] if over == 0 else [fits, too_big]
    with pytest.raises(CompactdError) as info:
        client.render(
            CONVERSATION,
            thread_id=f"py-ctx-over-{over}",
            model=MODEL,
            policy={"injection_reserve_tokens": 50},
            injections=injections,
        )
    e = info.value
    assert e.code == grpc.StatusCode.INVALID_ARGUMENT
    assert e.field == f"injections[{over}]", e.field
    assert "retrieval" in e.message


def test_without_a_reserve_any_injection_is_refused(client):
    with pytest.raises(CompactdError) as info:
        client.render(CONVERSATION, thread_id="py-ctx-noreserve", model=MODEL, injections=[("date", "Today.")])
    assert info.value.field == "injections[0]"


def test_malformed_injections_raise_value_error_before_any_call(client):
    for bad in ["just a string", [("hook",)], [("hook", "text", "extra")], [("hook", 3)], ["ab"]]:
        with pytest.raises(ValueError, match="injections"):
            client.render(CONVERSATION, thread_id="py-ctx-bad-inject", model=MODEL, injections=bad)
    assert client.sent == []


def test_bootstrap_follows_the_system_prompt_and_workspace_opens_the_history(client):
    r = client.render(
        CONVERSATION,
        thread_id="py-ctx-assembly",
        model=MODEL,
        format="openai",
        system=SYSTEM,
        bootstrap={"AGENTS.md": "Run ruff before committing.", "persona.md": "Be brief."},
        workspace={"todo.md": "- fix the import\n- run the tests", "utils.py": "import helpers"},
    )
    messages = r.body["messages"]
    assert messages[0]["role"] == "system"
    system = messages[0]["content"]
    assert system.startswith(SYSTEM)
    agents = system.index('<bootstrap name="AGENTS.md">\nRun ruff before committing.\n</bootstrap>')
    persona = system.index('<bootstrap name="persona.md">\nBe brief.\n</bootstrap>')
    assert len(SYSTEM) < agents < persona, "appended after the system prompt, in order"
    # Nothing compacted: the workspace opens the conversation, one user message.
    workspace = messages[1]
    assert workspace["role"] == "user"
    todo = workspace["content"].index('<workspace_file name="todo.md">')
    utils = workspace["content"].index('<workspace_file name="utils.py">\nimport helpers\n</workspace_file>')
    assert todo < utils
    assert said(messages[2]["content"]) == CONVERSATION[0]["content"]
    assert r.response.compaction.budget.workspace_tokens > 0
    files = client.sent[-1].context
    assert [f.name for f in files.bootstrap] == ["AGENTS.md", "persona.md"]
    assert [f.name for f in files.workspace] == ["todo.md", "utils.py"]


def test_no_context_leaves_the_field_unset(client):
    client.render(CONVERSATION, thread_id="py-ctx-none", model=MODEL, bootstrap={}, workspace=None)
    assert not client.sent[-1].HasField("context")
    assert client.sent[-1].task_outcome == pb.TASK_OUTCOME_UNSPECIFIED
    assert not client.sent[-1].injections


def test_a_bad_workspace_file_is_refused_by_the_server_by_name(client):
    with pytest.raises(CompactdError) as info:
        client.render(CONVERSATION, thread_id="py-ctx-bad-file", model=MODEL, workspace={"todo.md": ""})
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.field == "context.workspace[0].text", info.value.field


def test_task_outcome_is_sent_and_checked(client):
    r = client.render(CONVERSATION, thread_id="py-ctx-outcome", model=MODEL, task_outcome="succeeded")
    assert r.body["messages"]
    assert client.sent[-1].task_outcome == pb.TASK_OUTCOME_SUCCEEDED
    client.render(CONVERSATION, thread_id="py-ctx-outcome", model=MODEL, task_outcome="failed")
    assert client.sent[-1].task_outcome == pb.TASK_OUTCOME_FAILED
    sent = len(client.sent)
    for bad in ["success", "SUCCEEDED", "", 1]:
        with pytest.raises(ValueError, match="task_outcome"):
            client.render(CONVERSATION, thread_id="py-ctx-outcome", model=MODEL, task_outcome=bad)
    assert len(client.sent) == sent, "refused before anything was sent"


def test_appended_calls_still_carry_injections_and_workspace(client):
    thread = "py-ctx-session"
    first = client.render(
        CONVERSATION,
        thread_id=thread,
        model=MODEL,
        system=SYSTEM,
        policy=RESERVE,
        injections=[("memory", "First turn memory.")],
        bootstrap={"AGENTS.md": "Run ruff."},
        workspace={"todo.md": "- fix the import"},
    )
    assert first.response.HasField("session")
    grown = CONVERSATION + [
        {"role": "assistant", "content": "All 12 tests pass."},
        {"role": "user", "content": "Commit it."},
    ]
    second = client.render(
        grown,
        thread_id=thread,
        model=MODEL,
        system=SYSTEM,
        policy=RESERVE,
        injections=[("memory", "Second turn memory.")],
        bootstrap={"AGENTS.md": "Run ruff."},
        workspace={"todo.md": "- commit"},
        task_outcome="succeeded",
    )
    req = client.sent[-1]
    assert req.HasField("append") and not req.HasField("input"), "an append-session call"
    assert second.request_bytes < len(json.dumps(grown))
    assert req.task_outcome == pb.TASK_OUTCOME_SUCCEEDED
    body = contents(second.body)
    at = latest_user_index(second.body, "Commit it.")
    assert body[at - 1] == "Second turn memory."
    assert "First turn memory." not in body, "injections are per call"
    assert body[1] == '<workspace_file name="todo.md">\n- commit\n</workspace_file>'
    assert body[0] == SYSTEM + '\n\n<bootstrap name="AGENTS.md">\nRun ruff.\n</bootstrap>'


def test_the_whole_conversation_retry_keeps_the_per_call_fields(server_addr):
    thread = "py-ctx-stale"
    with Recording(server_addr) as c, Client(server_addr) as other:
        c.render(CONVERSATION, thread_id=thread, model=MODEL)
        other.delete_thread(thread)  # the session is gone: the next append is stale
        grown = CONVERSATION + [
            {"role": "assistant", "content": "Done."},
            {"role": "user", "content": "And the docs?"},
        ]
        r = c.render(
            grown,
            thread_id=thread,
            model=MODEL,
            policy=RESERVE,
            injections=[("memory", "Docs live in docs/.")],
            workspace={"todo.md": "- docs"},
            task_outcome="failed",
        )
        stale, retry = c.sent[-2], c.sent[-1]
        assert stale.HasField("append") and retry.HasField("input")
        for req in (stale, retry):
            assert [i.text for i in req.injections] == ["Docs live in docs/."]
            assert [f.name for f in req.context.workspace] == ["todo.md"]
            assert req.task_outcome == pb.TASK_OUTCOME_FAILED
        body = contents(r.body)
        at = latest_user_index(r.body, "And the docs?")
        assert body[at - 1] == "Docs live in docs/."
        assert '<workspace_file name="todo.md">\n- docs\n</workspace_file>' in body


def test_the_async_client_sends_the_same(server_addr):
    kwargs = dict(
        model=MODEL,
        format="openai",
        system=SYSTEM,
        policy=RESERVE,
        injections=[("memory", "The user prefers pytest.")],
        bootstrap={"AGENTS.md": "Run ruff."},
        workspace={"todo.md": "- run the tests"},
        task_outcome="succeeded",
    )
    with Client(server_addr) as sync:
        expected = sync.render(CONVERSATION, thread_id="py-ctx-async-sync", **kwargs)

    async def run():
        async with AsyncClient(server_addr) as c:
            r = await c.render(CONVERSATION, thread_id="py-ctx-async", **kwargs)
            with pytest.raises(ValueError, match="task_outcome"):
                await c.render(CONVERSATION, thread_id="py-ctx-async", model=MODEL, task_outcome="done")
            with pytest.raises(CompactdError) as info:
                await c.render(
                    CONVERSATION,
                    thread_id="py-ctx-async-over",
                    model=MODEL,
                    policy={"injection_reserve_tokens": 5},
                    injections=[("retrieval", "far too long for five tokens " * 5)],
                )
            assert info.value.field == "injections[0]"
            return r

    r = asyncio.run(run())
    assert r.body == expected.body
    at = latest_user_index(r.body, "Now run the tests.")
    assert contents(r.body)[at - 1] == "The user prefers pytest."
    assert "<bootstrap name=\"AGENTS.md\">" in r.body["messages"][0]["content"]
    assert r.body["messages"][1]["content"].startswith('<workspace_file name="todo.md">')
