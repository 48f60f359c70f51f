"""An OpenAI Agents SDK model input filter: each model call gets the run's
items as compactd renders them within the budget (Responses items); the
run's history is left as it is.

    from agents import Agent, RunConfig, Runner
    from compactd import Client
    from compactd.integrations.agents import input_filter

    config = RunConfig(call_model_input_filter=input_filter(
        Client("127.0.0.1:50051"), thread_id="t1", budget=32_000, model="gpt-4o"))
    Runner.run_sync(agent, "...", run_config=config)

The filter never sees the model's response, so the provider's usage on the
body compactd rendered reaches compactd through run hooks: pass
`hooks=f.hooks` to `Runner.run` (or call `f.report(context, response)` from
your own `on_llm_end`), and each model call's `usage` goes with the next
render of its thread (compactd compares it with the cache reads it
expected and learns the provider's count from it).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable, Optional, Union

from agents.items import ModelResponse
from agents.lifecycle import RunHooks
from agents.run import CallModelData, ModelInputData

from compactd._client import AsyncClient, Client
from compactd._fallback import check_on_unavailable
from compactd._shapes import plain

ThreadId = Union[str, Callable[[CallModelData], str]]

# Runs whose last filtered call a filter remembers (oldest dropped).
_RUNS_KEPT = 1024


def _usage_of(response: ModelResponse) -> Optional[dict]:
    """The provider's usage on a model response, as the client reads it:
    the provider's own payload when the SDK kept it, else the SDK's
    normalized Responses-style usage."""
    raw = getattr(response, "raw_usage", None)
    if isinstance(raw, dict) and raw:
        return raw
    u = response.usage
    if u is None or not u.input_tokens:
        return None
    details = getattr(u, "input_tokens_details", None)
    return {
        "input_tokens": u.input_tokens,
        "input_tokens_details": {
            "cached_tokens": getattr(details, "cached_tokens", 0) or 0,
            "cache_write_tokens": getattr(details, "cache_write_tokens", 0) or 0,
        },
    }


class _UsageHooks(RunHooks):
    """Run hooks that hand each model response's usage to the filter."""

    def __init__(self, owner: "InputFilter"):
        self._owner = owner

    async def on_llm_end(self, context, agent, response) -> None:
        self._owner.report(context, response)


class InputFilter:
    """A `RunConfig(call_model_input_filter=...)` that also takes the
    provider's usage back through `hooks`. Calling it returns the filtered
    input, or with an `AsyncClient` a coroutine the SDK awaits."""

    def __init__(self, client: Union[Client, AsyncClient], thread_id: ThreadId, options: dict):
        self._client = client
        self._thread_id = thread_id
        self._options = options
        # Run (its context object) -> the thread its last model call rendered.
        self._threads: "OrderedDict[int, str]" = OrderedDict()
        # Thread -> the usage on the body last rendered for it, not yet sent.
        self._usage: "OrderedDict[str, dict]" = OrderedDict()
        self.hooks: RunHooks = _UsageHooks(self)

    def report(self, context: Any, response: ModelResponse) -> None:
        """Keeps `response`'s usage for the next render of the thread this
        run's last model call rendered (`context` is the hook's
        RunContextWrapper, or the run's context object)."""
        key = id(getattr(context, "context", context))
        thread = self._threads.get(key)
        usage = _usage_of(response)
        if thread is not None and usage is not None:
            self._usage[thread] = usage
            self._usage.move_to_end(thread)
            while len(self._usage) > _RUNS_KEPT:
                self._usage.popitem(last=False)

    def _args(self, data: CallModelData) -> dict:
        tid = self._thread_id(data) if callable(self._thread_id) else self._thread_id
        self._threads[id(data.context)] = tid
        self._threads.move_to_end(id(data.context))
        while len(self._threads) > _RUNS_KEPT:
            self._threads.popitem(last=False)
        return dict(
            thread_id=tid,
            model=self._options["model"],
            budget=self._options["budget"],
            format="responses",
            shape="responses",
            system=data.model_data.instructions,
            usage=self._usage.pop(tid, None),
            on_unavailable=self._options["on_unavailable"],
            **self._options["render"],
        )

    @staticmethod
    def _filtered(data: CallModelData, rendered: Any) -> ModelInputData:
        return ModelInputData(input=rendered.body["input"], instructions=data.model_data.instructions)

    def __call__(self, data: CallModelData):
        items = plain(list(data.model_data.input))
        if isinstance(self._client, AsyncClient):
            return self._call_async(data, items)
        if not items:
            return data.model_data
        return self._filtered(data, self._client.render(items, **self._args(data)))

    async def _call_async(self, data: CallModelData, items: list) -> ModelInputData:
        if not items:
            return data.model_data
        return self._filtered(data, await self._client.render(items, **self._args(data)))


def input_filter(
    client: Union[Client, AsyncClient],
    *,
    thread_id: ThreadId,
    budget: int,
    model: str = "gpt-4o",
    on_unavailable: str = "original",
    **render_options: Any,
) -> InputFilter:
    """A `RunConfig(call_model_input_filter=...)`; `thread_id` is a string or
    a function of the call (for instance of its context). Its `hooks` (for
    `Runner.run(..., hooks=...)`) send the provider's usage with the next
    call. Concurrent runs of one filter each need their own context object.
    `on_unavailable="original"` (the default): when compactd cannot answer,
    the model gets the run's items, or their newest part within the budget
    (`Client.render`); "raise" raises CompactdError instead."""
    options = {
        "model": model,
        "budget": budget,
        "on_unavailable": check_on_unavailable(on_unavailable),
        "render": render_options,
    }
    return InputFilter(client, thread_id, options)


__all__ = ["InputFilter", "input_filter"]
