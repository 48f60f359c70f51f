"""A LangChain v1 agent middleware: every model call sees the conversation as
compactd renders it within the budget; the agent's state is left as it is
(compactd never edits the thread).

    from langchain.agents import create_agent
    from compactd import Client
    from compactd.integrations.langchain import CompactdMiddleware

    agent = create_agent(model, tools, middleware=[
        CompactdMiddleware(Client("127.0.0.1:50051"), budget=32_000, model="gpt-4o"),
    ])
    agent.invoke({"messages": [...]}, {"configurable": {"thread_id": "t1"}})
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Union

from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import ModelRequest

from compactd._client import AsyncClient, Client
from compactd._fallback import check_on_unavailable
from compactd.integrations._lc import last_usage, split_system, system_text, to_openai, tool_dicts

ThreadId = Union[str, Callable[[ModelRequest], str], None]


def _thread_id(given: ThreadId, request: ModelRequest) -> str:
    if callable(given):
        return given(request)
    if given:
        return given
    try:
        from langgraph.config import get_config

        found = (get_config().get("configurable") or {}).get("thread_id")
    except RuntimeError:
        found = None
    if not found:
        raise ValueError(
            "compactd needs a thread id: pass thread_id= to CompactdMiddleware, "
            'or run the agent with {"configurable": {"thread_id": ...}}'
        )
    return str(found)


class CompactdMiddleware(AgentMiddleware):
    """Compacts the messages of each model call through compactd.

    `client` is a [`compactd.Client`] (or an `AsyncClient` for `ainvoke`);
    `budget` the model's input limit in tokens; `model` the tokenizer's model
    name; `thread_id` a string, a function of the request, or None for the
    run's `configurable.thread_id`. `on_unavailable="original"` (the
    default): when compactd cannot answer, the model gets the original
    messages, or their newest part within the budget (`Client.render`);
    "raise" raises CompactdError instead.
    """

    def __init__(
        self,
        client: Union[Client, AsyncClient],
        *,
        budget: int,
        model: str = "gpt-4o",
        thread_id: ThreadId = None,
        on_unavailable: str = "original",
        **render_options: Any,
    ) -> None:
        super().__init__()
        self.on_unavailable = check_on_unavailable(on_unavailable)
        self.client = client
        self.budget = budget
        self.model = model
        self.thread_id = thread_id
        self.render_options = render_options

    def _args(self, request: ModelRequest) -> dict:
        return dict(
            thread_id=_thread_id(self.thread_id, request),
            model=self.model,
            budget=self.budget,
            format="openai",
            shape="openai",
            system=system_text(request.system_message),
            tools=tool_dicts(request.tools) or None,
            usage=last_usage(request.messages),
            on_unavailable=self.on_unavailable,
            **self.render_options,
        )

    def _compacted(self, request: ModelRequest, rendered: Any) -> ModelRequest:
        _, messages = split_system(rendered.body["messages"], system_text(request.system_message))
        return request.override(messages=messages)

    def wrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], Any]) -> Any:
        if not request.messages:
            return handler(request)
        if not isinstance(self.client, Client):
            raise TypeError("CompactdMiddleware: a sync invoke needs compactd.Client")
        rendered = self.client.render(to_openai(request.messages), **self._args(request))
        return handler(self._compacted(request, rendered))

    async def awrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], Any]) -> Any:
        if not request.messages:
            return await handler(request)
        if isinstance(self.client, AsyncClient):
            rendered = await self.client.render(to_openai(request.messages), **self._args(request))
        else:
            import asyncio

            rendered = await asyncio.to_thread(self.client.render, to_openai(request.messages), **self._args(request))
        return await handler(self._compacted(request, rendered))


__all__ = ["CompactdMiddleware"]
