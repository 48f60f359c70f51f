"""A LangGraph pre-model hook: the model sees the conversation as compactd
renders it within the budget (`llm_input_messages`); the graph's state keeps
every message.

    from langgraph.prebuilt import create_react_agent
    from compactd import Client
    from compactd.integrations.langgraph import pre_model_hook

    hook = pre_model_hook(Client("127.0.0.1:50051"), budget=32_000, model="gpt-4o")
    agent = create_react_agent(model, tools, pre_model_hook=hook)
    agent.invoke({"messages": [...]}, {"configurable": {"thread_id": "t1"}})
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Union

from langchain_core.runnables import RunnableConfig

from compactd._client import AsyncClient, Client
from compactd._fallback import check_on_unavailable
from compactd.integrations._lc import last_usage, to_openai


def pre_model_hook(
    client: Union[Client, AsyncClient],
    *,
    budget: int,
    model: str = "gpt-4o",
    thread_id: Optional[str] = None,
    on_unavailable: str = "original",
    **render_options: Any,
) -> Callable[[Dict[str, Any], RunnableConfig], Dict[str, Any]]:
    """A hook for `create_react_agent(pre_model_hook=...)`; the thread id is
    `thread_id`, else the run's `configurable.thread_id`. With an
    `AsyncClient` the hook is a coroutine function (for `ainvoke`).
    `on_unavailable="original"` (the default): when compactd cannot answer,
    the model gets the original messages, or their newest part within the
    budget (`Client.render`); "raise" raises CompactdError instead."""
    check_on_unavailable(on_unavailable)
    from langchain_core.messages import convert_to_messages

    def tid_of(config: RunnableConfig) -> str:
        tid = thread_id or (config.get("configurable") or {}).get("thread_id")
        if not tid:
            raise ValueError(
                "compactd needs a thread id: pass thread_id= to pre_model_hook, "
                'or run the graph with {"configurable": {"thread_id": ...}}'
            )
        return str(tid)

    def args(config: RunnableConfig, messages: Any) -> Dict[str, Any]:
        return dict(
            thread_id=tid_of(config),
            model=model,
            budget=budget,
            format="openai",
            shape="openai",
            usage=last_usage(messages),
            on_unavailable=on_unavailable,
            **render_options,
        )

    if isinstance(client, AsyncClient):

        async def ahook(state: Dict[str, Any], config: RunnableConfig) -> Dict[str, Any]:
            if not state["messages"]:
                return {"llm_input_messages": []}
            rendered = await client.render(to_openai(state["messages"]), **args(config, state["messages"]))
            return {"llm_input_messages": list(convert_to_messages(rendered.body["messages"]))}

        return ahook  # type: ignore[return-value]

    def hook(state: Dict[str, Any], config: RunnableConfig) -> Dict[str, Any]:
        if not state["messages"]:
            return {"llm_input_messages": []}
        rendered = client.render(to_openai(state["messages"]), **args(config, state["messages"]))
        return {"llm_input_messages": list(convert_to_messages(rendered.body["messages"]))}

    return hook


__all__ = ["pre_model_hook"]
