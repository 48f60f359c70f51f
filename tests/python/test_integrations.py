"""The README's Python examples, run as written (only the server address and
the budget changed to the test's) against the real `compactd serve --dev`,
with the real SDKs and frameworks from PyPI and no LLM: the OpenAI,
Anthropic and Agents SDKs talk to a fake provider over loopback HTTP, and
LangChain/LangGraph run the fake chat model langchain-core ships."""

import json
import re
from pathlib import Path

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from pydantic import Field

from compactd import Client
from fake_model import FakeProvider

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
BUDGET = 4_000


def readme_examples():
    text = (REPO / "README.md").read_text()
    found = dict(re.findall(r"<!-- example: (\w+) -->\n```python\n(.*?)```", text, flags=re.S))
    assert set(found) >= {"openai", "anthropic", "langchain", "langgraph", "agents"}, sorted(found)
    return found


def run_example(name, server_addr, **names):
    code = readme_examples()[name]
    assert len(code.strip().splitlines()) < 15, f"README example {name} is over 15 lines"
    code = code.replace("127.0.0.1:50051", server_addr).replace("32_000", str(BUDGET))
    scope = dict(names)
    exec(compile(code, f"README.md example {name}", "exec"), scope)
    return scope


@pytest.fixture
def provider(monkeypatch):
    with FakeProvider() as p:
        monkeypatch.setenv("OPENAI_BASE_URL", p.base_url + "/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "test")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", p.base_url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
        monkeypatch.setenv("OPENAI_AGENTS_DISABLE_TRACING", "1")
        yield p


def swe_messages():
    return json.loads((DATA / "swe_agent_marshmallow.json").read_text())


class RecordingModel(GenericFakeChatModel):
    """langchain-core's fake chat model, keeping what each call was given."""

    seen: list = Field(default_factory=list)

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        self.seen.append(list(messages))
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)

    def bind_tools(self, tools, **kwargs):
        return self


def chars(messages):
    return sum(len(json.dumps(getattr(m, "content", m), default=str)) for m in messages)


def assert_paired(messages):
    open_ids = set()
    for m in messages:
        if isinstance(m, AIMessage):
            open_ids |= {c["id"] for c in m.tool_calls}
        if isinstance(m, ToolMessage):
            assert m.tool_call_id in open_ids, m.tool_call_id
            open_ids.discard(m.tool_call_id)


def test_readme_openai_example(server_addr, provider):
    messages = swe_messages()
    scope = run_example("openai", server_addr, messages=messages)
    r = scope["r"]
    assert r.tokens <= BUDGET < r.tokens_before
    path, sent = provider.requests[-1]
    assert path == "/v1/chat/completions"
    assert sent["messages"] == r.body["messages"]
    assert scope["reply"].choices[0].message.content == "done"


def test_readme_anthropic_example(server_addr, provider):
    body = json.loads((DATA / "claude_code_rust_port.anthropic.json").read_text())
    scope = run_example("anthropic", server_addr, body=body)
    r = scope["r"]
    assert r.format == "anthropic" and r.tokens <= BUDGET < r.tokens_before
    path, sent = provider.requests[-1]
    assert path == "/v1/messages"
    assert sent["messages"] == r.body["messages"] and sent["system"] == r.body["system"]
    assert scope["reply"].content[0].text == "done"


def test_readme_langchain_middleware_example(server_addr):
    messages = swe_messages()
    model = RecordingModel(messages=iter([AIMessage(content="done")]))
    state = run_example("langchain", server_addr, model=model, messages=messages)["state"]
    assert len(model.seen) == 1
    seen = model.seen[0]
    assert chars(seen) < chars(messages) / 2, "the model saw the compacted conversation"
    assert_paired(seen)
    # The agent's state keeps every message, and the reply.
    assert len(state["messages"]) == len(messages) + 1
    assert state["messages"][-1].content == "done"


def test_readme_langgraph_hook_example(server_addr):
    messages = swe_messages()
    model = RecordingModel(messages=iter([AIMessage(content="done")]))
    state = run_example("langgraph", server_addr, model=model, messages=messages)["state"]
    seen = model.seen[0]
    assert chars(seen) < chars(messages) / 2
    assert_paired(seen)
    assert len(state["messages"]) == len(messages) + 1


def test_readme_agents_sdk_example(server_addr, provider):
    # The log as Responses items, as the Agents SDK holds a run's input.
    with Client(server_addr) as c:
        items = c.render(swe_messages(), thread_id="items-src", model="gpt-4o", budget=200_000, format="responses").body["input"]
    result = run_example("agents", server_addr, items=items)["result"]
    assert result.final_output == "done"
    calls = [body for path, body in provider.requests if path == "/v1/responses"]
    assert len(calls) == 1
    sent = calls[0]["input"]
    assert len(json.dumps(sent)) < len(json.dumps(items)) / 2, "the model got the compacted items"
    ids = {i.get("call_id") for i in sent if i.get("type") == "function_call"}
    for i in sent:
        if i.get("type") == "function_call_output":
            assert i["call_id"] in ids


# A web search Anthropic ran on its side, as ChatAnthropic keeps it in an
# AIMessage's content, and a reply citing it.
SERVER_TOOL_TURN = [
    {"role": "user", "content": "What changed in the spec?"},
    {"role": "assistant", "content": [
        {"type": "text", "text": "Let me search."},
        {"type": "server_tool_use", "id": "srvtoolu_01", "name": "web_search", "input": {"query": "spec changes"}},
        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_01", "content": [
            {"type": "web_search_result", "url": "https://spec.example/v2", "title": "Spec v2",
             "encrypted_content": "RW5jcnlwdGVkIHBhZ2U="}]},
        {"type": "text", "text": "Version 2 renamed the field.",
         "citations": [{"type": "web_search_result_location", "url": "https://spec.example/v2",
                        "title": "Spec v2", "encrypted_index": "RW5j", "cited_text": "renamed"}]},
    ]},
    {"role": "user", "content": "And before that?"},
]


def test_langchain_middleware_passes_server_tool_blocks_through(server_addr):
    model = RecordingModel(messages=iter([AIMessage(content="done")]))
    run_example("langchain", server_addr, model=model, messages=SERVER_TOOL_TURN)
    seen = model.seen[0]
    ai = [m for m in seen if isinstance(m, AIMessage)]
    assert ai and ai[0].content == SERVER_TOOL_TURN[1]["content"], ai


def test_agents_sdk_filter_passes_built_in_tool_items_through(server_addr, provider):
    built_in = [
        {"type": "web_search_call", "id": "ws_1", "status": "completed",
         "action": {"type": "search", "query": "spec changes"}},
        {"type": "computer_call", "id": "cu_1", "call_id": "call_cu", "status": "completed",
         "pending_safety_checks": [], "action": {"type": "screenshot"}},
        {"type": "computer_call_output", "call_id": "call_cu",
         "output": {"type": "computer_screenshot", "image_url": "https://shots.example/1.png"}},
        {"type": "mcp_call", "id": "mcp_1", "server_label": "docs", "name": "lookup",
         "arguments": "{}", "output": "v2 renamed the field", "status": "completed"},
    ]
    items = [{"role": "user", "content": "What changed?"}, *built_in,
             {"role": "user", "content": "And before that?"}]
    result = run_example("agents", server_addr, items=items)["result"]
    assert result.final_output == "done"
    sent = [body for path, body in provider.requests if path == "/v1/responses"][0]["input"]
    for item in built_in:
        assert item in sent, (item, sent)


class ReportingClient(Client):
    """compactd.Client, keeping each Render request's usage reports and the
    response's warnings."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls = []

    def _call(self, method, request):
        resp = super()._call(method, request)
        if hasattr(request, "usage"):
            self.calls.append((list(request.usage), list(resp.audit.warnings)))
        return resp


def test_langchain_middleware_reports_the_providers_usage_on_the_next_call(server_addr):
    from langchain.agents import create_agent
    from langchain_core.tools import tool

    from compactd.integrations.langchain import CompactdMiddleware

    @tool
    def lookup(key: str) -> str:
        """Looks a key up."""
        return "value of " + key

    usage = {
        "input_tokens": 3_000,
        "output_tokens": 12,
        "total_tokens": 3_012,
        "input_token_details": {"cache_read": 2_048, "cache_creation": 500},
    }
    call = AIMessage(content="", tool_calls=[{"name": "lookup", "args": {"key": "k"}, "id": "c1"}], usage_metadata=usage)
    model = RecordingModel(messages=iter([call, AIMessage(content="done")]))
    with ReportingClient(server_addr) as client:
        agent = create_agent(model, [lookup], middleware=[CompactdMiddleware(client, budget=BUDGET, model="gpt-4o")])
        agent.invoke({"messages": swe_messages()}, {"configurable": {"thread_id": "lc-usage"}})
    assert len(client.calls) == 2
    (first, _), (second, warnings) = client.calls
    assert first == [], "nothing to report before the first model call"
    assert [(u.input_tokens, u.cache_read_tokens, u.cache_write_tokens) for u in second] == [(3_000, 2_048, 500)]
    assert second[0].body_digest and not [w for w in warnings if w.startswith("usage")], warnings


class ScriptedAgentsModel:
    """An Agents SDK model answering from a script of (output items, usage),
    keeping the input of each call."""

    def __new__(cls, script):
        from agents.models.interface import Model

        class Scripted(Model):
            def __init__(self):
                self.script, self.inputs = list(script), []

            async def get_response(self, system_instructions, input, *args, **kwargs):
                from agents.items import ModelResponse

                self.inputs.append(input)
                output, usage = self.script.pop(0)
                return ModelResponse(output=output, usage=usage, response_id=None)

            def stream_response(self, *args, **kwargs):
                raise AssertionError("the test runs the agent without streaming")

        return Scripted()


def test_agents_sdk_filter_reports_the_providers_usage_on_the_next_call(server_addr):
    from agents import Agent, RunConfig, Runner, function_tool
    from agents.usage import Usage
    from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText
    from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails

    from compactd.integrations.agents import input_filter

    @function_tool
    def lookup(key: str) -> str:
        """Looks a key up."""
        return "value of " + key

    def usage(total, cached):
        return Usage(requests=1, input_tokens=total, output_tokens=5, total_tokens=total + 5,
                     input_tokens_details=InputTokensDetails(cached_tokens=cached, cache_write_tokens=700),
                     output_tokens_details=OutputTokensDetails(reasoning_tokens=0))

    call = ResponseFunctionToolCall(type="function_call", id="fc_1", call_id="c1", name="lookup",
                                    arguments='{"key": "k"}', status="completed")
    done = ResponseOutputMessage(type="message", id="msg_1", role="assistant", status="completed",
                                 content=[ResponseOutputText(type="output_text", text="done", annotations=[])])
    model = ScriptedAgentsModel([([call], usage(3_000, 2_048)), ([done], usage(3_100, 2_900))])
    with Client(server_addr) as c:
        items = c.render(swe_messages(), thread_id="agents-usage-src", model="gpt-4o", budget=200_000,
                         format="responses").body["input"]
    with ReportingClient(server_addr) as client:
        compact = input_filter(client, thread_id="agents-usage", budget=BUDGET, model="gpt-4o")
        agent = Agent(name="assistant", instructions="Be brief.", model=model, tools=[lookup])
        result = Runner.run_sync(agent, items, run_config=RunConfig(call_model_input_filter=compact,
                                                                    tracing_disabled=True), hooks=compact.hooks)
    assert result.final_output == "done"
    assert len(client.calls) == 2 and len(model.inputs) == 2
    (first, _), (second, warnings) = client.calls
    assert first == [], "nothing to report before the first model call"
    assert [(u.input_tokens, u.cache_read_tokens, u.cache_write_tokens) for u in second] == [(3_000, 2_048, 700)]
    assert second[0].body_digest and not [w for w in warnings if w.startswith("usage")], warnings
    assert json.dumps(model.inputs[1]).count('"c1"') >= 2, "the tool call and its result reached the model"


def start_server(data_dir, listen="127.0.0.1:0"):
    """`compactd serve --dev` of its own (the test kills it); returns the
    process and its address."""
    import os
    import subprocess

    from conftest import STARTUP_TIMEOUT_S, _binary

    env = {k: v for k, v in os.environ.items() if not (k.startswith("COMPACTD__") or k == "COMPACTD_CONFIG")}
    proc = subprocess.Popen(
        [str(_binary()), "serve", "--dev", "--listen", listen, "--data-dir", str(data_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
    )
    import selectors

    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    first = proc.stdout.readline().decode() if sel.select(STARTUP_TIMEOUT_S) else ""
    sel.close()
    if not first.startswith("compactd listening on "):
        proc.kill()
        raise AssertionError(f"server did not start: {first!r}")
    return proc, first.split()[-1]


def local_count(messages, tools):
    """docs/python.md's local count of a Chat body's messages and tools."""
    def tokens(v):
        text = json.dumps(v, ensure_ascii=False, separators=(",", ":"))
        return -(-sum(1 if ord(ch) < 128 else 2 * len(ch.encode()) for ch in text) // 3)

    return tokens(tools) + 8 + sum(tokens(m) + 8 for m in messages)


class RenderRecordingClient(Client):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.rendered = []

    def render(self, *args, **kwargs):
        r = super().render(*args, **kwargs)
        self.rendered.append(r)
        return r


def test_langchain_agent_falls_open_when_the_server_dies_mid_session(tmp_path, caplog):
    import logging
    import signal

    import grpc
    from langchain.agents import create_agent
    from langchain_core.messages import HumanMessage, SystemMessage
    from langchain_core.tools import tool

    import compactd
    from compactd.integrations._lc import to_openai, tool_dicts
    from compactd.integrations.langchain import CompactdMiddleware

    @tool
    def lookup(key: str) -> str:
        """Looks a key up."""
        return "value of " + key + " ü日本🙂" * 20

    turns = 6
    script = []
    for t in range(turns):
        script += [AIMessage(content="", tool_calls=[{"name": "lookup", "args": {"key": f"k{t}"}, "id": f"call_{t}"}]),
                   AIMessage(content=f"done {t}")]
    model = RecordingModel(messages=iter(script))
    proc, addr = start_server(tmp_path / "data")
    caplog.set_level(logging.WARNING, logger="compactd")
    before = compactd.fail_open_counts().get("UNAVAILABLE", 0)
    tools = tool_dicts([lookup])
    try:
        with RenderRecordingClient(addr) as client:
            agent = create_agent(model, [lookup], system_prompt="Be brief.",
                                 middleware=[CompactdMiddleware(client, budget=BUDGET, model="gpt-4o")])
            messages = swe_messages()[1:]  # the agent's system prompt instead of the log's

            def turn(t):
                nonlocal messages
                messages = messages + [HumanMessage(content=f"Now check key k{t}, please. 日本語 ok?")]
                state = agent.invoke({"messages": messages}, {"configurable": {"thread_id": "lc-down"}})
                assert state["messages"][-1].content == f"done {t}"
                messages = state["messages"]

            for t in range(2):
                turn(t)
            alive = len(client.rendered)
            assert alive == 4 and all(r.fell_back is None and r.tokens <= BUDGET for r in client.rendered)
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=15)
            for t in range(2, 5):
                turn(t)
            down = client.rendered[alive:]
            assert len(down) == 6 and all(r.fell_back == "UNAVAILABLE" for r in down)
            for seen in model.seen[alive:]:
                # A valid conversation within the budget: the system prompt,
                # then from a user message on, every tool result after its call.
                assert isinstance(seen[0], SystemMessage) and isinstance(seen[1], HumanMessage)
                assert_paired(seen)
                calls = {c["id"] for m in seen if isinstance(m, AIMessage) for c in m.tool_calls}
                assert calls == {m.tool_call_id for m in seen if isinstance(m, ToolMessage)}
                assert local_count(to_openai(seen), tools) <= BUDGET
            # The newest messages reached the model.
            assert model.seen[-1][-1].tool_call_id == "call_4"
            assert client.fail_open_count == 6
            assert compactd.fail_open_counts()["UNAVAILABLE"] == before + 6
            logged = [r for r in caplog.records if r.name == "compactd"]
            assert len(logged) == 6 and all("lc-down" in r.getMessage() for r in logged)

            # The server back on the same store and address: compacted again.
            proc, _ = start_server(tmp_path / "data", listen=addr)
            grpc.channel_ready_future(client._channel).result(timeout=30)
            turn(5)
            back = client.rendered[alive + 6:]
            assert len(back) == 2 and all(r.fell_back is None and r.response is not None for r in back)
            assert all(r.tokens <= BUDGET < r.tokens_before for r in back)
            assert client.fail_open_count == 6
    finally:
        proc.kill()
        proc.wait(timeout=15)
