"""The SDKs' shapes: plain JSON from SDK objects, which output format a
conversation is in, and the body compactd reads it from.

compactd itself reads the conversation (the same importer as `compactd
compact --input`); this module only wraps what the caller holds into one
JSON body and picks the output format the caller will send it in.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Optional, Sequence, Union

# What `format=` accepts, and the proto's names for them.
FORMATS = ("openai", "responses", "anthropic", "neutral")

Conversation = Union[Sequence[Any], Mapping[str, Any]]

# Blocks only Anthropic has (its Messages API and its beta blocks).
_ANTHROPIC_BLOCKS = {
    "tool_use",
    "tool_result",
    "thinking",
    "redacted_thinking",
    "document",
    "search_result",
    "server_tool_use",
    "web_search_tool_result",
    "web_fetch_tool_result",
    "code_execution_tool_result",
    "bash_code_execution_tool_result",
    "text_editor_code_execution_tool_result",
    "tool_search_tool_result",
    "mcp_tool_use",
    "mcp_tool_result",
    "container_upload",
    "advisor_tool_result",
    "tool_addition",
    "tool_removal",
    "mcp_tool_listing",
    "fallback",
}
# Item and part types only the Responses API has.
_RESPONSES_TYPES = {
    "function_call",
    "function_call_output",
    "reasoning",
    "input_text",
    "output_text",
    "input_image",
    "input_file",
    "file_search_call",
    "computer_call",
    "computer_call_output",
    "web_search_call",
    "tool_search_call",
    "tool_search_output",
    "additional_tools",
    "configuration_update",
    "compaction",
    "compaction_trigger",
    "image_generation_call",
    "code_interpreter_call",
    "local_shell_call",
    "local_shell_call_output",
    "shell_call",
    "shell_call_output",
    "apply_patch_call",
    "apply_patch_call_output",
    "mcp_list_tools",
    "mcp_approval_request",
    "mcp_approval_response",
    "mcp_call",
    "custom_tool_call",
    "custom_tool_call_output",
    "item_reference",
    "program",
    "program_output",
}
# Roles Anthropic's messages never have.
_CHAT_ROLES = {"system", "developer", "tool", "function"}


def plain(obj: Any) -> Any:
    """SDK objects (pydantic models, TypedDicts, tuples) as plain JSON values."""
    if hasattr(obj, "model_dump"):
        return plain(obj.model_dump(exclude_none=True, mode="json"))
    if isinstance(obj, Mapping):
        return {str(k): plain(v) for k, v in obj.items() if v is not None}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    return obj


def _items(conversation: Any) -> Iterable[Any]:
    if isinstance(conversation, Mapping):
        return conversation.get("messages") or conversation.get("input") or []
    return conversation


def detect_format(conversation: Any, model: str = "") -> str:
    """The output format that matches what the caller holds: Responses items,
    Anthropic blocks, else a Claude model's Anthropic, else OpenAI Chat."""
    if isinstance(conversation, Mapping):
        if "input" in conversation and "messages" not in conversation:
            return "responses"
        if isinstance(conversation.get("system"), list):
            return "anthropic"
    items = _items(conversation)
    if isinstance(items, str):
        return "responses"
    for item in items:
        if not isinstance(item, Mapping):
            continue
        if item.get("type") in _RESPONSES_TYPES:
            return "responses"
        if "type" not in item and "role" not in item and "id" in item:
            return "responses"  # an `item_reference` without its type
        content = item.get("content")
        if isinstance(content, list):
            for part in content:
                kind = part.get("type") if isinstance(part, Mapping) else None
                anthropic = (
                    kind in _ANTHROPIC_BLOCKS
                    or (kind == "image" and "source" in part)
                    # Only Anthropic's blocks carry these.
                    or (isinstance(part, Mapping) and ("cache_control" in part or "citations" in part))
                )
                if anthropic and not _chat_roles(items):
                    return "anthropic"
                if kind in _RESPONSES_TYPES:
                    return "responses"
    if "claude" in model.lower():
        return "anthropic"
    return "openai"


def _chat_roles(items: Iterable[Any]) -> bool:
    return any(isinstance(i, Mapping) and i.get("role") in _CHAT_ROLES for i in items)


def body_of(
    conversation: Conversation,
    *,
    system: Optional[str] = None,
    tools: Optional[Sequence[Any]] = None,
) -> dict:
    """One JSON body compactd reads: a messages list or Responses items
    wrapped, a body taken as it is; `system` and `tools` added when given."""
    conversation = plain(conversation)
    if isinstance(conversation, Mapping):
        body = dict(conversation)
    elif isinstance(conversation, list):
        responses = detect_format(conversation) == "responses"
        body = {"input": conversation} if responses else {"messages": conversation}
    else:
        raise TypeError(
            "conversation: expected a list of messages (OpenAI Chat, Responses "
            "items or Anthropic) or a request body dict, got " + type(conversation).__name__
        )
    if system is not None:
        body["instructions" if "input" in body else "system"] = system
    if tools is not None:
        body["tools"] = plain(list(tools))
    return body
