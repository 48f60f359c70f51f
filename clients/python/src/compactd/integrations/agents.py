"""An OpenAI Agents SDK model input filter: each model call gets the run's
items as compactd renders them within the budget (Responses items); the
run's history is left as it is.

    from agents import Agent, RunConfig, Runner
    from compactd import Client
    from compactd.integrations.agents import input_filter

    config = RunConfig(call_model_input_filter=input_filter(
        Client("127.0.0.1:50051"), thread_id="t1", budget=32_000, model="gpt-4o"))
    Runner.run_sync(agent, "...", run_config=config)
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Union

from agents.run import CallModelData, ModelInputData

from compactd._client import AsyncClient, Client
from compactd._shapes import plain

ThreadId = Union[str, Callable[[CallModelData], str]]


def input_filter(
    client: Union[Client, AsyncClient],
    *,
    thread_id: ThreadId,
    budget: int,
    model: str = "gpt-4o",
    **render_options: Any,
) -> Callable[[CallModelData], ModelInputData]:
    """A `RunConfig(call_model_input_filter=...)`; `thread_id` is a string or
    a function of the call (for instance of its context). With an
    `AsyncClient` the filter is a coroutine function (the SDK awaits it)."""

    def args(data: CallModelData) -> dict:
        tid = thread_id(data) if callable(thread_id) else thread_id
        return dict(
            thread_id=tid,
            model=model,
            budget=budget,
            format="responses",
            shape="responses",
            system=data.model_data.instructions,
            **render_options,
        )

    def filtered(data: CallModelData, rendered: Any) -> ModelInputData:
        return ModelInputData(input=rendered.body["input"], instructions=data.model_data.instructions)

    if isinstance(client, AsyncClient):

        async def filter_input_async(data: CallModelData) -> ModelInputData:
            items = plain(list(data.model_data.input))
            if not items:
                return data.model_data
            return filtered(data, await client.render(items, **args(data)))

        return filter_input_async  # type: ignore[return-value]

    def filter_input(data: CallModelData) -> ModelInputData:
        items = plain(list(data.model_data.input))
        if not items:
            return data.model_data
        return filtered(data, client.render(items, **args(data)))

    return filter_input


__all__ = ["input_filter"]
