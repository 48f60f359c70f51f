"""A 100-turn agent session (200 model calls) driven through the Python client,
each rendered body sent by the official SDK to a loopback stand-in of the
provider (fake_cache.py: its own tokenizer, the published prompt-cache
rules) whose `usage` goes back with the next call. The budget holds by the
provider's count, the cache is read, and compactd's expected cache reads
agree with the provider's.

`pytest tests/python/test_prompt_cache_loop.py -s` prints the figures.
"""

import anthropic
import openai
import pytest

from compactd import Client
from fake_cache import CachingProvider

TURNS = 100
BUDGET = 60_000
SYSTEM = (
    "You are a careful operator of the batch fleet. Check each shard you are asked about, "
    "read its log with read_file, and report what you find."
)
SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}


def log(n):
    return "".join(f"turn {n} line {i}: worker processed batch {n * 100 + i} in {(n * 7 + i) % 90 + 10} ms\n" for i in range(40))


@pytest.fixture(scope="module")
def client(server_addr):
    with Client(server_addr) as c:
        yield c


def anthropic_session(client, provider, thread_id, model):
    sdk = anthropic.Anthropic(base_url=provider.base_url, api_key="test", max_retries=0)
    body = {
        "model": model,
        "max_tokens": 1024,
        "system": SYSTEM,
        "tools": [{"name": "read_file", "description": "Read a file of the workspace", "input_schema": SCHEMA}],
        "messages": [],
    }
    calls, usage = [], None
    for n in range(1, TURNS + 1):
        body["messages"].append({"role": "user", "content": f"Step {n}: check the batches of shard {n}."})
        while True:
            r = client.render(body, thread_id=thread_id, model=model, budget=BUDGET, usage=usage)
            reply = sdk.messages.create(**r.body)
            usage = reply.usage
            total = usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens
            calls.append((r, total, usage.cache_read_input_tokens))
            body["messages"].append(
                {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]}
            )
            if reply.stop_reason != "tool_use":
                break
            call = reply.content[0]
            body["messages"].append(
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": log(n)}]}
            )
    return calls


def openai_session(client, provider, thread_id, model):
    sdk = openai.OpenAI(base_url=provider.base_url + "/v1", api_key="test", max_retries=0)
    body = {
        "model": model,
        "messages": [{"role": "system", "content": SYSTEM}],
        "tools": [
            {
                "type": "function",
                "function": {"name": "read_file", "description": "Read a file of the workspace", "parameters": SCHEMA},
            }
        ],
    }
    calls, usage = [], None
    for n in range(1, TURNS + 1):
        body["messages"].append({"role": "user", "content": f"Step {n}: check the batches of shard {n}."})
        while True:
            r = client.render(body, thread_id=thread_id, model=model, budget=BUDGET, usage=usage)
            reply = sdk.chat.completions.create(**r.body)
            usage = reply.usage
            calls.append((r, usage.prompt_tokens, usage.prompt_tokens_details.cached_tokens))
            message = reply.choices[0].message
            body["messages"].append(message.model_dump(exclude_none=True))
            if not message.tool_calls:
                break
            body["messages"].append({"role": "tool", "tool_call_id": message.tool_calls[0].id, "content": log(n)})
    return calls


def figures(calls):
    """After the first compaction: (share of input read from the cache,
    tokens read, tokens compactd expected read)."""
    first = next(i for i, (r, _, _) in enumerate(calls) if r.compacted and i > 0)
    after = calls[first + 1 :]
    read = sum(c[2] for c in after)
    expected = sum(c[0].expected_cache_read_tokens or 0 for c in after)
    return read / sum(c[1] for c in after), read, expected


def test_an_anthropic_session_holds_its_budget_and_reads_the_cache_as_expected(client):
    with CachingProvider() as provider:
        calls = anthropic_session(client, provider, "py-cache-loop-anthropic", "claude-sonnet-4-5")
    assert len(calls) == 2 * TURNS
    over = [(i, total) for i, (_, total, _) in enumerate(calls) if total > BUDGET]
    assert not over, f"over the budget by the provider's count: {over}"
    assert calls[0][0].counting == "estimate"
    calibrated = next(i for i, (r, _, _) in enumerate(calls) if r.counting == "calibrated")
    assert calibrated <= 6, calibrated
    compactions = sum(1 for r, _, _ in calls[1:] if r.compacted)
    share, read, expected = figures(calls)
    print(
        f"\nanthropic: {len(calls)} calls, {compactions} compactions, calibrated from call {calibrated} "
        f"(scale {calls[-1][0].count_scale:.3f}); {100 * share:.1f}% of input read from the cache; "
        f"{read} tokens read, {expected} expected ({100 * (expected / read - 1):+.2f}%)"
    )
    assert compactions >= 2
    assert share >= 0.90, share
    assert abs(expected / read - 1) <= 0.02, (read, expected)


def test_an_openai_session_reads_the_cache_as_expected(client):
    with CachingProvider() as provider:
        calls = openai_session(client, provider, "py-cache-loop-openai", "gpt-4o")
    over = [(i, total) for i, (_, total, _) in enumerate(calls) if total > BUDGET]
    assert not over, f"over the budget by the provider's count: {over}"
    assert all(r.counting == "exact" for r, _, _ in calls)
    compactions = sum(1 for r, _, _ in calls[1:] if r.compacted)
    share, read, expected = figures(calls)
    print(
        f"\nopenai: {len(calls)} calls, {compactions} compactions; {100 * share:.1f}% of input read from the "
        f"cache; {read} tokens read, {expected} expected ({100 * (expected / read - 1):+.2f}%)"
    )
    assert compactions >= 2
    assert abs(expected / read - 1) <= 0.02, (read, expected)
