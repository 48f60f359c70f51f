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

from compactd._client import Client
from compactd._shapes import plain

ThreadId = Union[str, Callable[[CallModelData], str]]


def input_filter(
    client: Client,
    *,
    thread_id: ThreadId,
    budget: int,
    model: str = "gpt-4o",
    **render_options: Any,
) -> Callable[[CallModelData], ModelInputData]:
    """A `RunConfig(call_model_input_filter=...)`; `thread_id` is a string or
    a function of the call (for instance of its context)."""

    def filter_input(data: CallModelData) -> ModelInputData:
        items = plain(list(data.model_data.input))
        if not items:
            return data.model_data
        tid = thread_id(data) if callable(thread_id) else thread_id
        instructions: Optional[str] = data.model_data.instructions
        rendered = client.render(
            items,
            thread_id=tid,
            model=model,
            budget=budget,
            format="responses",
            system=instructions,
            **render_options,
        )
        return ModelInputData(input=rendered.body["input"], instructions=instructions)

    return filter_input


__all__ = ["input_filter"]
