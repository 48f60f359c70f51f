"""LangChain messages to and from the OpenAI Chat shape compactd renders."""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

from langchain_core.messages import BaseMessage, SystemMessage, convert_to_messages, convert_to_openai_messages
from langchain_core.utils.function_calling import convert_to_openai_tool


def to_openai(messages: Sequence[BaseMessage]) -> List[dict]:
    """The messages in the OpenAI Chat shape, each message's content blocks
    as the message holds them: LangChain's conversion drops what OpenAI has
    no field for (Anthropic's citations, server tool results), and compactd
    carries provider blocks as they are."""
    messages = list(messages)
    converted = list(convert_to_openai_messages(messages))
    if len(converted) != len(messages):
        return converted
    for original, out in zip(messages, converted):
        if isinstance(original.content, list) and out.get("content") != original.content:
            out["content"] = original.content
    return converted


def last_usage(messages: Sequence[BaseMessage]) -> Optional[dict]:
    """The provider's usage on the latest model reply (LangChain's
    `usage_metadata`): its report on the body compactd rendered for that
    call, sent with the next one."""
    for m in reversed(list(messages)):
        if getattr(m, "type", None) == "ai":
            usage = getattr(m, "usage_metadata", None)
            return dict(usage) if usage else None
    return None


def tool_dicts(tools: Sequence[Any]) -> List[dict]:
    out = []
    for t in tools:
        try:
            out.append(convert_to_openai_tool(t))
        except (TypeError, ValueError):
            # A provider's built-in tool: counted by the provider, not here.
            continue
    return out


def split_system(rendered: Sequence[dict], system: Optional[str]) -> Tuple[Optional[str], List[BaseMessage]]:
    """The rendered messages as LangChain ones, the system prompt the
    request already carries taken off the front."""
    messages = list(rendered)
    if system is not None and messages and messages[0].get("role") == "system" and messages[0].get("content") == system:
        messages = messages[1:]
    return system, list(convert_to_messages(messages))


def system_text(message: Optional[SystemMessage]) -> Optional[str]:
    if message is None:
        return None
    return message.text if hasattr(message, "text") else str(message.content)
