"""`on_unavailable="original"`: when compactd cannot answer (UNAVAILABLE,
DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED) the client sends the original
conversation, or its newest valid part that fits the budget by the local
count, logs a warning and counts it; every other error still raises.

The part chosen is checked against validity rules written here for each
shape (starts at a user message, no call without its result, no result
without its call) and against every other valid part: it is the longest one
that fits. The codes come from a dead loopback port (UNAVAILABLE), a tiny
timeout (DEADLINE_EXCEEDED) and a message-size limit (RESOURCE_EXHAUSTED);
invalid input goes to the real server.
"""

import asyncio
import json
import logging
import math
import random
import socket

import grpc
import pytest

import compactd
from compactd import AsyncClient, Client, CompactdError
from compactd._fallback import local_tokens, select

# -- The local count, as docs/python.md states it.


def count(value, claude=False):
    if value is None:
        return 0
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    weighted = sum(1 if ord(ch) < 128 else 2 * len(ch.encode("utf-8")) for ch in text)
    return math.ceil(weighted / (2 if claude else 3))


def body_count(items, fixed=0, claude=False):
    return fixed + 8 + sum(count(i, claude) + 8 for i in items)


def test_the_local_count_is_of_utf8_bytes_with_non_ascii_counted_twice():
    assert local_tokens("abc") == 1
    assert local_tokens("abcd") == 2
    assert local_tokens("日本語") == 6  # 9 bytes, counted twice, / 3
    assert local_tokens("日本語", claude=True) == 9
    assert local_tokens("🙂") == 3  # 4 bytes
    assert local_tokens("é" * 300) == 400  # 2 bytes a character
    # A lone surrogate (json.loads gives one for "\ud800") is counted, not an error.
    assert local_tokens(json.loads('"\\ud800x"')) > 0
    for text in ["plain words", "日本語のテキスト", "mixed ünïcödé 🙂 text", '{"json": [1, 2]}']:
        item = {"role": "user", "content": text}
        assert local_tokens(item) == count(item)
        assert local_tokens(item, claude=True) == count(item, claude=True)
    # The same characters cost more in CJK than in ASCII.
    assert local_tokens("漢" * 30) > local_tokens("a" * 30)


# -- Conversations in each shape, and what makes a part of one valid.

WORDS = ["alpha", "beta", "gamma", "データ", "ünïcödé", "🙂", "fix", "the", "build"]


def text(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


def chat(rng, turns):
    items = [{"role": "system", "content": "You fix builds."}]
    k = 0
    for t in range(turns):
        items.append({"role": "user", "content": f"turn {t}: " + text(rng, rng.randint(1, 40))})
        for _ in range(rng.randint(0, 3)):
            ids = [f"call_{k + j}" for j in range(rng.randint(1, 2))]
            k += len(ids)
            items.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": i, "type": "function", "function": {"name": "run", "arguments": json.dumps({"q": text(rng, 3)})}}
                for i in ids]})
            items += [{"role": "tool", "tool_call_id": i, "content": text(rng, rng.randint(1, 80))} for i in ids]
        items.append({"role": "assistant", "content": text(rng, rng.randint(1, 20))})
    return items


def responses(rng, turns):
    items = [{"role": "developer", "content": "You fix builds."}]
    k = 0
    for t in range(turns):
        items.append({"type": "message", "role": "user", "content": [{"type": "input_text", "text": f"turn {t}: " + text(rng, 9)}]})
        for _ in range(rng.randint(0, 3)):
            k += 1
            kind = rng.choice(["function", "computer", "custom_tool"])
            items.append({"type": "reasoning", "id": f"rs_{k}", "summary": []})
            if kind == "function":
                items.append({"type": "function_call", "call_id": f"c{k}", "name": "run", "arguments": "{}"})
                items.append({"type": "function_call_output", "call_id": f"c{k}", "output": text(rng, rng.randint(1, 80))})
            elif kind == "computer":
                items.append({"type": "computer_call", "id": f"cu{k}", "call_id": f"c{k}", "status": "completed",
                              "pending_safety_checks": [], "action": {"type": "screenshot"}})
                items.append({"type": "computer_call_output", "call_id": f"c{k}",
                              "output": {"type": "computer_screenshot", "image_url": "https://x.example/" + "a" * rng.randint(1, 200)}})
            else:
                items.append({"type": "custom_tool_call", "call_id": f"c{k}", "name": "patch", "input": text(rng, 20)})
                items.append({"type": "custom_tool_call_output", "call_id": f"c{k}", "output": text(rng, 30)})
        items.append({"type": "message", "role": "assistant",
                      "content": [{"type": "output_text", "text": text(rng, 10), "annotations": []}]})
    return items


def anthropic(rng, turns):
    items = []
    k = 0
    for t in range(turns):
        items.append({"role": "user", "content": f"turn {t}: " + text(rng, rng.randint(1, 30))})
        for _ in range(rng.randint(0, 3)):
            k += 1
            items.append({"role": "assistant", "content": [
                {"type": "text", "text": text(rng, 4)},
                {"type": "tool_use", "id": f"toolu_{k}", "name": "run", "input": {"q": text(rng, 3)}}]})
            items.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": f"toolu_{k}", "content": text(rng, rng.randint(1, 80))}]})
        items.append({"role": "assistant", "content": [{"type": "text", "text": text(rng, 8)}]})
    return items


def pairs(item, shape):
    """(calls, results) of an item, read independently of the client."""
    if shape == "openai":
        return ([c["id"] for c in item.get("tool_calls") or []],
                [item["tool_call_id"]] if item.get("role") == "tool" else [])
    if shape == "responses":
        kind = item.get("type", "")
        calls = [item["call_id"]] if kind in ("function_call", "computer_call", "custom_tool_call") else []
        results = [item["call_id"]] if kind.endswith("_call_output") else []
        return calls, results
    blocks = item["content"] if isinstance(item["content"], list) else []
    return ([b["id"] for b in blocks if b["type"] == "tool_use"],
            [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"])


def starts_a_turn(item, shape):
    if item.get("role") != "user":
        return False
    if shape == "anthropic" and isinstance(item["content"], list):
        return all(b["type"] != "tool_result" for b in item["content"])
    return True


def valid_part(part, shape, whole):
    """Starts at a user message; every result's call and every call's
    result (when the whole conversation has it) are in the part."""
    if not part or not starts_a_turn(part[0], shape):
        return False
    answered = {r for i in whole for r in pairs(i, shape)[1]}
    calls = {c for i in part for c in pairs(i, shape)[0]}
    results = {r for i in part for r in pairs(i, shape)[1]}
    return results <= calls and {c for c in calls if c in answered} <= results


def head_of(items, shape):
    n = 0
    while shape != "anthropic" and n < len(items) and items[n].get("role") in ("system", "developer"):
        n += 1
    return n


@pytest.mark.parametrize("shape,make", [("openai", chat), ("responses", responses), ("anthropic", anthropic)])
def test_the_newest_valid_part_that_fits_is_chosen(shape, make):
    rng = random.Random(57)
    checked = 0
    for _ in range(30):
        items = make(rng, rng.randint(1, 8))
        fixed = rng.choice([0, 40])
        head = head_of(items, shape)
        whole = body_count(items, fixed)
        for budget in sorted({rng.randint(1, whole + 50) for _ in range(25)} | {whole, whole - 1}):
            s = select(items, shape, budget, fixed)
            assert s.head == head
            kept = items[s.start:]
            sent = items[:head] + kept
            assert s.tokens == body_count(sent, fixed) and s.tokens_whole == whole
            if whole <= budget:
                assert (s.start, s.fits) == (head, True)
                continue
            starts = [j for j in range(head + 1, len(items)) if valid_part(items[j:], shape, items)]
            fitting = [j for j in starts if body_count(items[:head] + items[j:], fixed) <= budget]
            if fitting:
                # The longest valid part that fits, and it fits.
                assert (s.start, s.fits) == (fitting[0], True), (budget, s, fitting)
                assert s.tokens <= budget
                checked += 1
            elif starts:
                # None fits: the smallest valid part, said to be over the budget.
                assert (s.start, s.fits) == (starts[-1], False)
            else:
                assert (s.start, s.fits) == (head, False)
            assert valid_part(kept, shape, items) or not starts
    assert checked > 50


INTERJECTED = {
    "openai": [
        {"role": "user", "content": "a" * 300},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "user", "content": "interjection"},
        {"role": "tool", "tool_call_id": "c1", "content": "b" * 300},
        {"role": "user", "content": "last"},
    ],
    "responses": [
        {"role": "user", "content": "a" * 300},
        {"type": "shell_call", "call_id": "c1", "action": {"commands": ["ls"]}},
        {"role": "user", "content": "interjection"},
        {"type": "shell_call_output", "call_id": "c1", "output": [{"stdout": "b" * 300}]},
        {"role": "user", "content": "last"},
    ],
    "anthropic": [
        {"role": "user", "content": "a" * 300},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "f", "input": {}}]},
        {"role": "user", "content": "interjection"},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "b" * 300}]},
        {"role": "user", "content": "last"},
    ],
}


@pytest.mark.parametrize("shape", sorted(INTERJECTED))
def test_a_user_message_between_a_call_and_its_result_is_not_a_cut(shape):
    # Cutting at the interjection would send c1's result without its call.
    items = INTERJECTED[shape]
    s = select(items, shape, body_count(items) - 1, 0)
    assert s.start == 4 and s.fits
    s = select(items, shape, body_count(items[2:]), 0)
    assert s.start == 4, "the cut at the interjection would orphan c1's result"


def test_an_anthropic_tool_result_turn_is_not_a_cut_and_budget_zero_sends_the_whole():
    items = anthropic(random.Random(1), 1)
    items += [{"role": "user", "content": "ok"}]
    for budget in range(1, body_count(items)):
        s = select(items, "anthropic", budget, 0)
        if s.start:
            assert not any(b.get("type") == "tool_result" for b in items[s.start]["content"] if isinstance(b, dict))
    s = select(items, "anthropic", 0, 0)
    assert (s.start, s.fits, s.tokens) == (0, True, body_count(items))


# -- The clients.


def dead_target():
    """A loopback port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


SECRET = "the password is hunter2"


def conversation(turns=6):
    items = [{"role": "system", "content": "You are terse."}]
    for t in range(turns):
        items += [
            {"role": "user", "content": f"question {t} {SECRET} " + "x" * 400},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": f"c{t}", "type": "function", "function": {"name": "look", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": f"c{t}", "content": "result " + "日本" * 100},
            {"role": "assistant", "content": f"answer {t}"},
        ]
    return items


def test_on_unavailable_takes_original_or_raise_only():
    for bad in ["ignore", "", None, 1]:
        with pytest.raises(ValueError, match="on_unavailable") as e:
            Client(dead_target(), on_unavailable=bad)
        assert repr(bad) in str(e.value)
        with pytest.raises(ValueError, match="on_unavailable"):
            AsyncClient(dead_target(), on_unavailable=bad)
    with Client(dead_target(), on_unavailable="original") as c:
        with pytest.raises(ValueError, match="'sometimes'"):
            c.render(conversation(), thread_id="v", on_unavailable="sometimes")
        assert c.fail_open_count == 0


def test_the_integrations_check_on_unavailable():
    from compactd.integrations.agents import input_filter
    from compactd.integrations.langchain import CompactdMiddleware
    from compactd.integrations.langgraph import pre_model_hook

    with Client(dead_target()) as c:
        assert CompactdMiddleware(c, budget=100).on_unavailable == "original"
        for make in (
            lambda: CompactdMiddleware(c, budget=100, on_unavailable="fail"),
            lambda: pre_model_hook(c, budget=100, on_unavailable="fail"),
            lambda: input_filter(c, thread_id="t", budget=100, on_unavailable="fail"),
        ):
            with pytest.raises(ValueError, match="'fail'"):
                make()


def test_the_plain_client_raises_by_default(caplog):
    with Client(dead_target()) as c:
        with pytest.raises(CompactdError) as e:
            c.render(conversation(), thread_id="raise", model="gpt-4o", budget=1_000)
    assert e.value.code == grpc.StatusCode.UNAVAILABLE
    assert c.fail_open_count == 0 and not [r for r in caplog.records if r.name == "compactd"]


def test_unavailable_sends_the_newest_part_that_fits_logs_and_counts(caplog):
    items = conversation()
    before = compactd.fail_open_counts().get("UNAVAILABLE", 0)
    tools = [{"type": "function", "function": {"name": "look", "parameters": {"type": "object"}}}]
    caplog.set_level(logging.WARNING, logger="compactd")
    with Client(dead_target(), on_unavailable="original") as c:
        whole = c.render(items, thread_id="fo-1", model="gpt-4o", budget=0, max_output_tokens=64)
        r = c.render(items, thread_id="fo-1", model="gpt-4o", budget=1_000, tools=tools, prompt_cache_key="k")
    assert whole.fell_back == "UNAVAILABLE" and not whole.compacted
    assert whole.body == {"model": "gpt-4o", "messages": items, "max_completion_tokens": 64}
    assert r.fell_back == "UNAVAILABLE" and r.counting == "local" and r.response is None
    sent = r.body["messages"]
    assert sent[0] == items[0], "the system prompt is kept"
    assert sent[1]["role"] == "user" and sent[-1] == items[-1]
    assert valid_part(sent[1:], "openai", items)
    assert r.tokens == body_count(sent, count(tools)) <= 1_000 < r.tokens_before
    assert len(sent) < len(items) and sent[1:] == items[len(items) - len(sent) + 1:]
    # The next older user turn would not have fit.
    assert body_count([items[0]] + items[len(items) - len(sent) - 3:], count(tools)) > 1_000
    assert r.body["tools"] == tools and r.body["prompt_cache_key"] == "k"
    assert c.fail_open_count == 2
    assert compactd.fail_open_counts()["UNAVAILABLE"] == before + 2
    logged = [rec.getMessage() for rec in caplog.records if rec.name == "compactd"]
    assert len(logged) == 2 and all("fo-1" in m and "UNAVAILABLE" in m for m in logged), logged
    assert f"newest {len(sent)} of {len(items)} messages" in logged[1]
    assert not any(SECRET in m or "日本" in m for m in logged), "no message content in the log"
    assert r.warnings == [logged[1].split(": ", 1)[1]]


def test_a_newest_turn_over_the_budget_is_sent_with_a_warning():
    items = conversation(2)
    with Client(dead_target(), on_unavailable="original") as c:
        r = c.render(items, thread_id="fo-over", model="gpt-4o", budget=50)
    assert r.body["messages"] == [items[0]] + items[5:]
    assert r.tokens > 50 and "the newest user turn alone does not fit" in r.warnings[0]


def test_marks_are_not_sent_and_other_shapes_keep_their_layout():
    with Client(dead_target(), on_unavailable="original") as c:
        chat_items = [{"role": "user", "content": "Never refund.", "protected": True, "label": "policy"},
                      {"role": "user", "content": "hi"}]
        r = c.render(chat_items, thread_id="fo-marks", model="gpt-4o", budget=0)
        assert r.body["messages"] == [{"role": "user", "content": "Never refund."}, {"role": "user", "content": "hi"}]
        # Text-only Chat messages for a Claude model: Anthropic's layout.
        r = c.render([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
                     thread_id="fo-claude", model="claude-sonnet-4-5", budget=0, system="Port code.")
        assert r.format == "anthropic"
        assert r.body == {"model": "claude-sonnet-4-5", "max_tokens": 4096, "system": "Port code.\n\nBe brief.",
                          "messages": [{"role": "user", "content": "hi"}]}
        items = responses(random.Random(3), 4)
        r = c.render(items, thread_id="fo-resp", model="gpt-4o", budget=0, system="Be brief.", max_output_tokens=9)
        assert r.body == {"model": "gpt-4o", "instructions": "Be brief.", "input": items, "max_output_tokens": 9}
        body = {"model": "claude-sonnet-4-5", "max_tokens": 100, "system": [{"type": "text", "text": "S"}],
                "messages": anthropic(random.Random(4), 3), "temperature": 0.5}
        r = c.render(body, thread_id="fo-anth", model="claude-sonnet-4-5", budget=1_000)
        assert r.body["system"] == body["system"] and r.body["max_tokens"] == 100 and "temperature" not in r.body
        assert valid_part(r.body["messages"], "anthropic", body["messages"])
        assert r.tokens == body_count(r.body["messages"], count(body["system"], True), claude=True) <= 1_000 < r.tokens_before
        assert c.fail_open_count == 4


def test_a_shape_the_format_cannot_take_without_the_server_raises():
    items = responses(random.Random(5), 2)
    with Client(dead_target(), on_unavailable="original") as c:
        for fmt in ("openai", "anthropic", "neutral"):
            with pytest.raises(CompactdError) as e:
                c.render(items, thread_id="fo-fmt", model="gpt-4o", format=fmt)
            assert e.value.code == grpc.StatusCode.UNAVAILABLE
        with pytest.raises(CompactdError):
            c.render(conversation(1), thread_id="fo-fmt2", model="gpt-4o", format="anthropic")
        assert c.fail_open_count == 0


def test_the_per_call_setting_overrides_the_clients():
    with Client(dead_target()) as c:
        r = c.render(conversation(1), thread_id="fo-call", model="gpt-4o", on_unavailable="original")
        assert r.fell_back == "UNAVAILABLE"
    with Client(dead_target(), on_unavailable="original") as c:
        with pytest.raises(CompactdError):
            c.render(conversation(1), thread_id="fo-call", model="gpt-4o", on_unavailable="raise")


def test_the_async_client_falls_open_too():
    async def run():
        async with AsyncClient(dead_target(), on_unavailable="original") as c:
            r = await c.render(conversation(), thread_id="fo-async", model="gpt-4o", budget=1_000)
            with pytest.raises(CompactdError):
                await c.render(conversation(), thread_id="fo-async", model="gpt-4o", on_unavailable="raise")
            return r, c.fail_open_count

    r, n = asyncio.run(run())
    assert r.fell_back == "UNAVAILABLE" and r.tokens <= 1_000 and n == 1
    assert valid_part(r.body["messages"][1:], "openai", conversation())


def test_a_deadline_and_a_size_limit_fall_open(server_addr):
    with Client(server_addr, timeout=1e-6, on_unavailable="original") as c:
        r = c.render(conversation(), thread_id="fo-deadline", model="gpt-4o", budget=1_000)
    assert r.fell_back == "DEADLINE_EXCEEDED"
    # A request over the channel's message limit: RESOURCE_EXHAUSTED.
    with Client(server_addr, max_message_bytes=1_000, on_unavailable="original") as c:
        r = c.render(conversation(), thread_id="fo-size", model="gpt-4o", budget=1_000)
    assert r.fell_back == "RESOURCE_EXHAUSTED" and r.tokens <= 1_000


def test_invalid_input_still_raises(server_addr):
    orphan = [{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "nope", "content": "x"}]
    pending = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]
    with Client(server_addr, on_unavailable="original") as c:
        with pytest.raises(CompactdError) as e:
            c.render(orphan, thread_id="fo-invalid", model="gpt-4o", budget=1_000)
        assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(CompactdError) as e:
            c.render(pending, thread_id="fo-pending", model="gpt-4o", budget=1_000)
        assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION
        with pytest.raises(ValueError):
            c.render(orphan, thread_id="", model="gpt-4o")
        assert c.fail_open_count == 0


class FlakyClient(Client):
    """A client whose calls fail as UNAVAILABLE while `down`; keeps the
    last request that reached the server."""

    down = False
    last = None

    def _call(self, method, request):
        if self.down:
            raise CompactdError(grpc.StatusCode.UNAVAILABLE, "down")
        self.last = request
        return super()._call(method, request)


def test_a_fallen_open_call_leaves_the_threads_state_as_the_last_success_left_it(server_addr):
    items = conversation(4)
    with FlakyClient(server_addr, on_unavailable="original") as c:
        first = c.render(items[:9], thread_id="fo-state", model="gpt-4o", budget=600)
        assert first.fell_back is None
        held = c._threads["fo-state"]
        kept = (held.session_version, list(held.sent), held.plan)
        c.down = True
        r = c.render(items[:13], thread_id="fo-state", model="gpt-4o", budget=600, usage={"prompt_tokens": 900})
        assert r.fell_back == "UNAVAILABLE"
        assert (held.session_version, held.sent, held.plan) == kept
        assert held.body_digest == "", "the provider's next report is on the fallen-open body"
        c.down = False
        again = c.render(items, thread_id="fo-state", model="gpt-4o", budget=600, usage={"prompt_tokens": 900})
        assert again.fell_back is None and again.tokens <= 600 < again.tokens_before
        # Appended to the session the last success left: everything since it,
        # and no usage report named by a body the provider did not get last.
        assert c.last.HasField("append") and c.last.append.base_version == kept[0]
        assert json.loads(c.last.append.messages_json) == items[9:]
        assert not c.last.usage
        assert c._threads["fo-state"].sent == [json.dumps(i, ensure_ascii=False, sort_keys=True) for i in items]
