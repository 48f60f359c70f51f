from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Role(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ROLE_UNSPECIFIED: _ClassVar[Role]
    ROLE_SYSTEM: _ClassVar[Role]
    ROLE_DEVELOPER: _ClassVar[Role]
    ROLE_USER: _ClassVar[Role]
    ROLE_ASSISTANT: _ClassVar[Role]
    ROLE_TOOL: _ClassVar[Role]

class Outcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OUTCOME_UNSPECIFIED: _ClassVar[Outcome]
    OUTCOME_SUCCESS: _ClassVar[Outcome]
    OUTCOME_FAILURE: _ClassVar[Outcome]
    OUTCOME_PARTIAL: _ClassVar[Outcome]

class Durability(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DURABILITY_UNSPECIFIED: _ClassVar[Durability]
    DURABILITY_EPHEMERAL: _ClassVar[Durability]
    DURABILITY_ANCHORING: _ClassVar[Durability]
    DURABILITY_REPLAYABLE: _ClassVar[Durability]
    DURABILITY_NON_REPLAYABLE: _ClassVar[Durability]

class Sensitivity(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SENSITIVITY_UNSPECIFIED: _ClassVar[Sensitivity]
    SENSITIVITY_PUBLIC: _ClassVar[Sensitivity]
    SENSITIVITY_INTERNAL: _ClassVar[Sensitivity]
    SENSITIVITY_CONFIDENTIAL: _ClassVar[Sensitivity]
    SENSITIVITY_RESTRICTED: _ClassVar[Sensitivity]

class SummaryStyle(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SUMMARY_STYLE_UNSPECIFIED: _ClassVar[SummaryStyle]
    SUMMARY_STYLE_TASK_STATE: _ClassVar[SummaryStyle]
    SUMMARY_STYLE_BRIEF: _ClassVar[SummaryStyle]
    SUMMARY_STYLE_DECISION_LOG: _ClassVar[SummaryStyle]
    SUMMARY_STYLE_CODE_DELTA: _ClassVar[SummaryStyle]

class Priority(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PRIORITY_UNSPECIFIED: _ClassVar[Priority]
    PRIORITY_HIGH: _ClassVar[Priority]
    PRIORITY_MEDIUM: _ClassVar[Priority]
    PRIORITY_LOW: _ClassVar[Priority]

class ClearReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CLEAR_REASON_UNSPECIFIED: _ClassVar[ClearReason]
    CLEAR_REASON_EXPIRED: _ClassVar[ClearReason]
    CLEAR_REASON_DURABILITY: _ClassVar[ClearReason]
    CLEAR_REASON_COMPRESSED: _ClassVar[ClearReason]
    CLEAR_REASON_PLUGIN: _ClassVar[ClearReason]
    CLEAR_REASON_EXCERPT: _ClassVar[ClearReason]

class EvictionAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EVICTION_ACTION_UNSPECIFIED: _ClassVar[EvictionAction]
    EVICTION_ACTION_EXTERNALIZED: _ClassVar[EvictionAction]
    EVICTION_ACTION_SUMMARIZED: _ClassVar[EvictionAction]
    EVICTION_ACTION_CLEARED: _ClassVar[EvictionAction]
    EVICTION_ACTION_DROPPED: _ClassVar[EvictionAction]

class OutputFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OUTPUT_FORMAT_NEUTRAL: _ClassVar[OutputFormat]
    OUTPUT_FORMAT_OPENAI_CHAT: _ClassVar[OutputFormat]
    OUTPUT_FORMAT_ANTHROPIC_MESSAGES: _ClassVar[OutputFormat]
    OUTPUT_FORMAT_OPENAI_RESPONSES: _ClassVar[OutputFormat]

class Origin(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ORIGIN_UNSPECIFIED: _ClassVar[Origin]
    ORIGIN_VERBATIM: _ClassVar[Origin]
    ORIGIN_CLEARED: _ClassVar[Origin]
    ORIGIN_SUMMARY: _ClassVar[Origin]
    ORIGIN_EXTERNALIZED: _ClassVar[Origin]
    ORIGIN_REHYDRATED: _ClassVar[Origin]
    ORIGIN_RECALLED: _ClassVar[Origin]

class RehydrationBlocked(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REHYDRATION_BLOCKED_UNSPECIFIED: _ClassVar[RehydrationBlocked]
    REHYDRATION_BLOCKED_SENSITIVITY: _ClassVar[RehydrationBlocked]
    REHYDRATION_BLOCKED_PERMISSION: _ClassVar[RehydrationBlocked]
    REHYDRATION_BLOCKED_COOLDOWN: _ClassVar[RehydrationBlocked]
    REHYDRATION_BLOCKED_TURN_LIMIT: _ClassVar[RehydrationBlocked]
    REHYDRATION_BLOCKED_NOT_FOUND: _ClassVar[RehydrationBlocked]
    REHYDRATION_BLOCKED_UNAVAILABLE: _ClassVar[RehydrationBlocked]

class ExplainVerdict(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EXPLAIN_VERDICT_UNSPECIFIED: _ClassVar[ExplainVerdict]
    EXPLAIN_VERDICT_VERBATIM: _ClassVar[ExplainVerdict]
    EXPLAIN_VERDICT_IN_SUMMARY: _ClassVar[ExplainVerdict]
    EXPLAIN_VERDICT_COMPACTED_OUT: _ClassVar[ExplainVerdict]
    EXPLAIN_VERDICT_NOT_FOUND: _ClassVar[ExplainVerdict]
ROLE_UNSPECIFIED: Role
ROLE_SYSTEM: Role
ROLE_DEVELOPER: Role
ROLE_USER: Role
ROLE_ASSISTANT: Role
ROLE_TOOL: Role
OUTCOME_UNSPECIFIED: Outcome
OUTCOME_SUCCESS: Outcome
OUTCOME_FAILURE: Outcome
OUTCOME_PARTIAL: Outcome
DURABILITY_UNSPECIFIED: Durability
DURABILITY_EPHEMERAL: Durability
DURABILITY_ANCHORING: Durability
DURABILITY_REPLAYABLE: Durability
DURABILITY_NON_REPLAYABLE: Durability
SENSITIVITY_UNSPECIFIED: Sensitivity
SENSITIVITY_PUBLIC: Sensitivity
SENSITIVITY_INTERNAL: Sensitivity
SENSITIVITY_CONFIDENTIAL: Sensitivity
SENSITIVITY_RESTRICTED: Sensitivity
SUMMARY_STYLE_UNSPECIFIED: SummaryStyle
SUMMARY_STYLE_TASK_STATE: SummaryStyle
SUMMARY_STYLE_BRIEF: SummaryStyle
SUMMARY_STYLE_DECISION_LOG: SummaryStyle
SUMMARY_STYLE_CODE_DELTA: SummaryStyle
PRIORITY_UNSPECIFIED: Priority
PRIORITY_HIGH: Priority
PRIORITY_MEDIUM: Priority
PRIORITY_LOW: Priority
CLEAR_REASON_UNSPECIFIED: ClearReason
CLEAR_REASON_EXPIRED: ClearReason
CLEAR_REASON_DURABILITY: ClearReason
CLEAR_REASON_COMPRESSED: ClearReason
CLEAR_REASON_PLUGIN: ClearReason
CLEAR_REASON_EXCERPT: ClearReason
EVICTION_ACTION_UNSPECIFIED: EvictionAction
EVICTION_ACTION_EXTERNALIZED: EvictionAction
EVICTION_ACTION_SUMMARIZED: EvictionAction
EVICTION_ACTION_CLEARED: EvictionAction
EVICTION_ACTION_DROPPED: EvictionAction
OUTPUT_FORMAT_NEUTRAL: OutputFormat
OUTPUT_FORMAT_OPENAI_CHAT: OutputFormat
OUTPUT_FORMAT_ANTHROPIC_MESSAGES: OutputFormat
OUTPUT_FORMAT_OPENAI_RESPONSES: OutputFormat
ORIGIN_UNSPECIFIED: Origin
ORIGIN_VERBATIM: Origin
ORIGIN_CLEARED: Origin
ORIGIN_SUMMARY: Origin
ORIGIN_EXTERNALIZED: Origin
ORIGIN_REHYDRATED: Origin
ORIGIN_RECALLED: Origin
REHYDRATION_BLOCKED_UNSPECIFIED: RehydrationBlocked
REHYDRATION_BLOCKED_SENSITIVITY: RehydrationBlocked
REHYDRATION_BLOCKED_PERMISSION: RehydrationBlocked
REHYDRATION_BLOCKED_COOLDOWN: RehydrationBlocked
REHYDRATION_BLOCKED_TURN_LIMIT: RehydrationBlocked
REHYDRATION_BLOCKED_NOT_FOUND: RehydrationBlocked
REHYDRATION_BLOCKED_UNAVAILABLE: RehydrationBlocked
EXPLAIN_VERDICT_UNSPECIFIED: ExplainVerdict
EXPLAIN_VERDICT_VERBATIM: ExplainVerdict
EXPLAIN_VERDICT_IN_SUMMARY: ExplainVerdict
EXPLAIN_VERDICT_COMPACTED_OUT: ExplainVerdict
EXPLAIN_VERDICT_NOT_FOUND: ExplainVerdict

class Thread(_message.Message):
    __slots__ = ("id", "messages")
    ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    id: str
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    def __init__(self, id: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ...) -> None: ...

class ThreadAppend(_message.Message):
    __slots__ = ("thread_id", "base_version", "messages")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    BASE_VERSION_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    base_version: int
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    def __init__(self, thread_id: _Optional[str] = ..., base_version: _Optional[int] = ..., messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ...) -> None: ...

class SessionState(_message.Message):
    __slots__ = ("version", "digest", "messages")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    version: int
    digest: str
    messages: int
    def __init__(self, version: _Optional[int] = ..., digest: _Optional[str] = ..., messages: _Optional[int] = ...) -> None: ...

class ProviderInput(_message.Message):
    __slots__ = ("thread_id", "json")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    json: str
    def __init__(self, thread_id: _Optional[str] = ..., json: _Optional[str] = ...) -> None: ...

class Message(_message.Message):
    __slots__ = ("id", "role", "text", "parts", "tool_calls", "tool_result", "turn", "metadata")
    ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    PARTS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_RESULT_FIELD_NUMBER: _ClassVar[int]
    TURN_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    id: str
    role: Role
    text: str
    parts: _containers.RepeatedCompositeFieldContainer[ContentPart]
    tool_calls: _containers.RepeatedCompositeFieldContainer[ToolCall]
    tool_result: ToolResultEnvelope
    turn: int
    metadata: MessageMetadata
    def __init__(self, id: _Optional[str] = ..., role: _Optional[_Union[Role, str]] = ..., text: _Optional[str] = ..., parts: _Optional[_Iterable[_Union[ContentPart, _Mapping]]] = ..., tool_calls: _Optional[_Iterable[_Union[ToolCall, _Mapping]]] = ..., tool_result: _Optional[_Union[ToolResultEnvelope, _Mapping]] = ..., turn: _Optional[int] = ..., metadata: _Optional[_Union[MessageMetadata, _Mapping]] = ...) -> None: ...

class ContentPart(_message.Message):
    __slots__ = ("text", "image_url", "thinking", "redacted_thinking", "reasoning")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    IMAGE_URL_FIELD_NUMBER: _ClassVar[int]
    THINKING_FIELD_NUMBER: _ClassVar[int]
    REDACTED_THINKING_FIELD_NUMBER: _ClassVar[int]
    REASONING_FIELD_NUMBER: _ClassVar[int]
    text: str
    image_url: str
    thinking: ThinkingBlock
    redacted_thinking: RedactedThinkingBlock
    reasoning: ReasoningItem
    def __init__(self, text: _Optional[str] = ..., image_url: _Optional[str] = ..., thinking: _Optional[_Union[ThinkingBlock, _Mapping]] = ..., redacted_thinking: _Optional[_Union[RedactedThinkingBlock, _Mapping]] = ..., reasoning: _Optional[_Union[ReasoningItem, _Mapping]] = ...) -> None: ...

class ThinkingBlock(_message.Message):
    __slots__ = ("thinking", "signature")
    THINKING_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    thinking: str
    signature: str
    def __init__(self, thinking: _Optional[str] = ..., signature: _Optional[str] = ...) -> None: ...

class RedactedThinkingBlock(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: str
    def __init__(self, data: _Optional[str] = ...) -> None: ...

class ReasoningItem(_message.Message):
    __slots__ = ("id", "summary", "encrypted_content")
    ID_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    ENCRYPTED_CONTENT_FIELD_NUMBER: _ClassVar[int]
    id: str
    summary: _containers.RepeatedScalarFieldContainer[str]
    encrypted_content: str
    def __init__(self, id: _Optional[str] = ..., summary: _Optional[_Iterable[str]] = ..., encrypted_content: _Optional[str] = ...) -> None: ...

class ToolCall(_message.Message):
    __slots__ = ("id", "name", "arguments_json")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    arguments_json: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., arguments_json: _Optional[str] = ...) -> None: ...

class DeterminismMetadata(_message.Message):
    __slots__ = ("content_hash", "etag", "mtime", "version")
    CONTENT_HASH_FIELD_NUMBER: _ClassVar[int]
    ETAG_FIELD_NUMBER: _ClassVar[int]
    MTIME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    content_hash: str
    etag: str
    mtime: float
    version: str
    def __init__(self, content_hash: _Optional[str] = ..., etag: _Optional[str] = ..., mtime: _Optional[float] = ..., version: _Optional[str] = ...) -> None: ...

class ToolResultEnvelope(_message.Message):
    __slots__ = ("tool_name", "tool_call_id", "outcome", "content_text", "content_json", "key_fields", "durability", "determinism", "started_at", "completed_at")
    class KeyFieldsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    CONTENT_TEXT_FIELD_NUMBER: _ClassVar[int]
    CONTENT_JSON_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELDS_FIELD_NUMBER: _ClassVar[int]
    DURABILITY_FIELD_NUMBER: _ClassVar[int]
    DETERMINISM_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_AT_FIELD_NUMBER: _ClassVar[int]
    tool_name: str
    tool_call_id: str
    outcome: Outcome
    content_text: str
    content_json: str
    key_fields: _containers.ScalarMap[str, str]
    durability: Durability
    determinism: DeterminismMetadata
    started_at: str
    completed_at: str
    def __init__(self, tool_name: _Optional[str] = ..., tool_call_id: _Optional[str] = ..., outcome: _Optional[_Union[Outcome, str]] = ..., content_text: _Optional[str] = ..., content_json: _Optional[str] = ..., key_fields: _Optional[_Mapping[str, str]] = ..., durability: _Optional[_Union[Durability, str]] = ..., determinism: _Optional[_Union[DeterminismMetadata, _Mapping]] = ..., started_at: _Optional[str] = ..., completed_at: _Optional[str] = ...) -> None: ...

class MessageMetadata(_message.Message):
    __slots__ = ("protected", "label", "sensitivity", "source")
    PROTECTED_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    SENSITIVITY_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    protected: bool
    label: str
    sensitivity: Sensitivity
    source: str
    def __init__(self, protected: _Optional[bool] = ..., label: _Optional[str] = ..., sensitivity: _Optional[_Union[Sensitivity, str]] = ..., source: _Optional[str] = ...) -> None: ...

class ToolSchema(_message.Message):
    __slots__ = ("name", "description", "parameters_json")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_JSON_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    parameters_json: str
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., parameters_json: _Optional[str] = ...) -> None: ...

class PolicyOverrides(_message.Message):
    __slots__ = ("trigger_ratio", "target_ratio", "safety_buffer_tokens", "response_reserve_tokens", "rehydration_reserve_tokens", "injection_reserve_tokens", "keep_recent_turns", "keep_tool_io_pairs", "externalize_threshold_tokens", "summary_chunk_tokens", "summary_max_tokens", "max_summaries", "default_durability", "durability", "retention_default", "retention", "enable_retention", "enable_compress", "enable_clear", "enable_externalize", "enable_summarize", "enable_drop", "delimit_user_content", "tool_result_max_chars", "enable_archive", "keep_recent_tokens", "summary_style", "delimit_tool_output")
    class DurabilityEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Durability
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Durability, str]] = ...) -> None: ...
    class RetentionEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ToolRetention
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ToolRetention, _Mapping]] = ...) -> None: ...
    TRIGGER_RATIO_FIELD_NUMBER: _ClassVar[int]
    TARGET_RATIO_FIELD_NUMBER: _ClassVar[int]
    SAFETY_BUFFER_TOKENS_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_RESERVE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    REHYDRATION_RESERVE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    INJECTION_RESERVE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    KEEP_RECENT_TURNS_FIELD_NUMBER: _ClassVar[int]
    KEEP_TOOL_IO_PAIRS_FIELD_NUMBER: _ClassVar[int]
    EXTERNALIZE_THRESHOLD_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_CHUNK_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_SUMMARIES_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_DURABILITY_FIELD_NUMBER: _ClassVar[int]
    DURABILITY_FIELD_NUMBER: _ClassVar[int]
    RETENTION_DEFAULT_FIELD_NUMBER: _ClassVar[int]
    RETENTION_FIELD_NUMBER: _ClassVar[int]
    ENABLE_RETENTION_FIELD_NUMBER: _ClassVar[int]
    ENABLE_COMPRESS_FIELD_NUMBER: _ClassVar[int]
    ENABLE_CLEAR_FIELD_NUMBER: _ClassVar[int]
    ENABLE_EXTERNALIZE_FIELD_NUMBER: _ClassVar[int]
    ENABLE_SUMMARIZE_FIELD_NUMBER: _ClassVar[int]
    ENABLE_DROP_FIELD_NUMBER: _ClassVar[int]
    DELIMIT_USER_CONTENT_FIELD_NUMBER: _ClassVar[int]
    TOOL_RESULT_MAX_CHARS_FIELD_NUMBER: _ClassVar[int]
    ENABLE_ARCHIVE_FIELD_NUMBER: _ClassVar[int]
    KEEP_RECENT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_STYLE_FIELD_NUMBER: _ClassVar[int]
    DELIMIT_TOOL_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    trigger_ratio: float
    target_ratio: float
    safety_buffer_tokens: int
    response_reserve_tokens: int
    rehydration_reserve_tokens: int
    injection_reserve_tokens: int
    keep_recent_turns: int
    keep_tool_io_pairs: int
    externalize_threshold_tokens: int
    summary_chunk_tokens: int
    summary_max_tokens: int
    max_summaries: int
    default_durability: Durability
    durability: _containers.ScalarMap[str, Durability]
    retention_default: ToolRetention
    retention: _containers.MessageMap[str, ToolRetention]
    enable_retention: bool
    enable_compress: bool
    enable_clear: bool
    enable_externalize: bool
    enable_summarize: bool
    enable_drop: bool
    delimit_user_content: bool
    tool_result_max_chars: int
    enable_archive: bool
    keep_recent_tokens: int
    summary_style: SummaryStyle
    delimit_tool_output: bool
    def __init__(self, trigger_ratio: _Optional[float] = ..., target_ratio: _Optional[float] = ..., safety_buffer_tokens: _Optional[int] = ..., response_reserve_tokens: _Optional[int] = ..., rehydration_reserve_tokens: _Optional[int] = ..., injection_reserve_tokens: _Optional[int] = ..., keep_recent_turns: _Optional[int] = ..., keep_tool_io_pairs: _Optional[int] = ..., externalize_threshold_tokens: _Optional[int] = ..., summary_chunk_tokens: _Optional[int] = ..., summary_max_tokens: _Optional[int] = ..., max_summaries: _Optional[int] = ..., default_durability: _Optional[_Union[Durability, str]] = ..., durability: _Optional[_Mapping[str, Durability]] = ..., retention_default: _Optional[_Union[ToolRetention, _Mapping]] = ..., retention: _Optional[_Mapping[str, ToolRetention]] = ..., enable_retention: _Optional[bool] = ..., enable_compress: _Optional[bool] = ..., enable_clear: _Optional[bool] = ..., enable_externalize: _Optional[bool] = ..., enable_summarize: _Optional[bool] = ..., enable_drop: _Optional[bool] = ..., delimit_user_content: _Optional[bool] = ..., tool_result_max_chars: _Optional[int] = ..., enable_archive: _Optional[bool] = ..., keep_recent_tokens: _Optional[int] = ..., summary_style: _Optional[_Union[SummaryStyle, str]] = ..., delimit_tool_output: _Optional[bool] = ...) -> None: ...

class ToolRetention(_message.Message):
    __slots__ = ("keep_turns", "keep_last", "never_evict")
    KEEP_TURNS_FIELD_NUMBER: _ClassVar[int]
    KEEP_LAST_FIELD_NUMBER: _ClassVar[int]
    NEVER_EVICT_FIELD_NUMBER: _ClassVar[int]
    keep_turns: int
    keep_last: int
    never_evict: bool
    def __init__(self, keep_turns: _Optional[int] = ..., keep_last: _Optional[int] = ..., never_evict: _Optional[bool] = ...) -> None: ...

class SpanReference(_message.Message):
    __slots__ = ("message_ids", "first_turn", "last_turn")
    MESSAGE_IDS_FIELD_NUMBER: _ClassVar[int]
    FIRST_TURN_FIELD_NUMBER: _ClassVar[int]
    LAST_TURN_FIELD_NUMBER: _ClassVar[int]
    message_ids: _containers.RepeatedScalarFieldContainer[str]
    first_turn: int
    last_turn: int
    def __init__(self, message_ids: _Optional[_Iterable[str]] = ..., first_turn: _Optional[int] = ..., last_turn: _Optional[int] = ...) -> None: ...

class Decision(_message.Message):
    __slots__ = ("decision", "rationale", "turn")
    DECISION_FIELD_NUMBER: _ClassVar[int]
    RATIONALE_FIELD_NUMBER: _ClassVar[int]
    TURN_FIELD_NUMBER: _ClassVar[int]
    decision: str
    rationale: str
    turn: int
    def __init__(self, decision: _Optional[str] = ..., rationale: _Optional[str] = ..., turn: _Optional[int] = ...) -> None: ...

class OpenItem(_message.Message):
    __slots__ = ("description", "context", "priority")
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    description: str
    context: str
    priority: Priority
    def __init__(self, description: _Optional[str] = ..., context: _Optional[str] = ..., priority: _Optional[_Union[Priority, str]] = ...) -> None: ...

class ArtifactReference(_message.Message):
    __slots__ = ("artifact_id", "description", "rehydrate_hint")
    ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    REHYDRATE_HINT_FIELD_NUMBER: _ClassVar[int]
    artifact_id: str
    description: str
    rehydrate_hint: str
    def __init__(self, artifact_id: _Optional[str] = ..., description: _Optional[str] = ..., rehydrate_hint: _Optional[str] = ...) -> None: ...

class ToolOutcome(_message.Message):
    __slots__ = ("tool_name", "outcome", "key_fields", "error_message")
    class KeyFieldsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELDS_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    tool_name: str
    outcome: Outcome
    key_fields: _containers.ScalarMap[str, str]
    error_message: str
    def __init__(self, tool_name: _Optional[str] = ..., outcome: _Optional[_Union[Outcome, str]] = ..., key_fields: _Optional[_Mapping[str, str]] = ..., error_message: _Optional[str] = ...) -> None: ...

class StructuredSummary(_message.Message):
    __slots__ = ("span", "facts", "decisions", "open_items", "artifacts", "tool_outcomes", "current_task", "current_plan", "references", "omitted", "requests")
    SPAN_FIELD_NUMBER: _ClassVar[int]
    FACTS_FIELD_NUMBER: _ClassVar[int]
    DECISIONS_FIELD_NUMBER: _ClassVar[int]
    OPEN_ITEMS_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    TOOL_OUTCOMES_FIELD_NUMBER: _ClassVar[int]
    CURRENT_TASK_FIELD_NUMBER: _ClassVar[int]
    CURRENT_PLAN_FIELD_NUMBER: _ClassVar[int]
    REFERENCES_FIELD_NUMBER: _ClassVar[int]
    OMITTED_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    span: SpanReference
    facts: _containers.RepeatedScalarFieldContainer[str]
    decisions: _containers.RepeatedCompositeFieldContainer[Decision]
    open_items: _containers.RepeatedCompositeFieldContainer[OpenItem]
    artifacts: _containers.RepeatedCompositeFieldContainer[ArtifactReference]
    tool_outcomes: _containers.RepeatedCompositeFieldContainer[ToolOutcome]
    current_task: str
    current_plan: _containers.RepeatedScalarFieldContainer[str]
    references: _containers.RepeatedScalarFieldContainer[str]
    omitted: int
    requests: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, span: _Optional[_Union[SpanReference, _Mapping]] = ..., facts: _Optional[_Iterable[str]] = ..., decisions: _Optional[_Iterable[_Union[Decision, _Mapping]]] = ..., open_items: _Optional[_Iterable[_Union[OpenItem, _Mapping]]] = ..., artifacts: _Optional[_Iterable[_Union[ArtifactReference, _Mapping]]] = ..., tool_outcomes: _Optional[_Iterable[_Union[ToolOutcome, _Mapping]]] = ..., current_task: _Optional[str] = ..., current_plan: _Optional[_Iterable[str]] = ..., references: _Optional[_Iterable[str]] = ..., omitted: _Optional[int] = ..., requests: _Optional[_Iterable[str]] = ...) -> None: ...

class ExternalizationRecord(_message.Message):
    __slots__ = ("span", "artifact_id", "summary", "rehydrate_hint", "sensitivity", "content_hash", "content_tokens")
    SPAN_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    REHYDRATE_HINT_FIELD_NUMBER: _ClassVar[int]
    SENSITIVITY_FIELD_NUMBER: _ClassVar[int]
    CONTENT_HASH_FIELD_NUMBER: _ClassVar[int]
    CONTENT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    span: SpanReference
    artifact_id: str
    summary: StructuredSummary
    rehydrate_hint: str
    sensitivity: Sensitivity
    content_hash: str
    content_tokens: int
    def __init__(self, span: _Optional[_Union[SpanReference, _Mapping]] = ..., artifact_id: _Optional[str] = ..., summary: _Optional[_Union[StructuredSummary, _Mapping]] = ..., rehydrate_hint: _Optional[str] = ..., sensitivity: _Optional[_Union[Sensitivity, str]] = ..., content_hash: _Optional[str] = ..., content_tokens: _Optional[int] = ...) -> None: ...

class SummarizationRecord(_message.Message):
    __slots__ = ("span", "summary", "summary_token_count", "archive_artifact_id", "summarizer_id")
    SPAN_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_TOKEN_COUNT_FIELD_NUMBER: _ClassVar[int]
    ARCHIVE_ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    SUMMARIZER_ID_FIELD_NUMBER: _ClassVar[int]
    span: SpanReference
    summary: StructuredSummary
    summary_token_count: int
    archive_artifact_id: str
    summarizer_id: str
    def __init__(self, span: _Optional[_Union[SpanReference, _Mapping]] = ..., summary: _Optional[_Union[StructuredSummary, _Mapping]] = ..., summary_token_count: _Optional[int] = ..., archive_artifact_id: _Optional[str] = ..., summarizer_id: _Optional[str] = ...) -> None: ...

class ClearRecord(_message.Message):
    __slots__ = ("span", "preserved_fields", "reason", "replacement", "archive_artifact_id", "archive_note", "strategy")
    class PreservedFieldsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SPAN_FIELD_NUMBER: _ClassVar[int]
    PRESERVED_FIELDS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REPLACEMENT_FIELD_NUMBER: _ClassVar[int]
    ARCHIVE_ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    ARCHIVE_NOTE_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    span: SpanReference
    preserved_fields: _containers.ScalarMap[str, str]
    reason: ClearReason
    replacement: str
    archive_artifact_id: str
    archive_note: str
    strategy: str
    def __init__(self, span: _Optional[_Union[SpanReference, _Mapping]] = ..., preserved_fields: _Optional[_Mapping[str, str]] = ..., reason: _Optional[_Union[ClearReason, str]] = ..., replacement: _Optional[str] = ..., archive_artifact_id: _Optional[str] = ..., archive_note: _Optional[str] = ..., strategy: _Optional[str] = ...) -> None: ...

class DroppedSpanIndex(_message.Message):
    __slots__ = ("keywords", "summary")
    KEYWORDS_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    keywords: _containers.RepeatedScalarFieldContainer[str]
    summary: str
    def __init__(self, keywords: _Optional[_Iterable[str]] = ..., summary: _Optional[str] = ...) -> None: ...

class DropRecord(_message.Message):
    __slots__ = ("span", "reason", "index", "archive_artifact_id")
    SPAN_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    ARCHIVE_ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    span: SpanReference
    reason: str
    index: DroppedSpanIndex
    archive_artifact_id: str
    def __init__(self, span: _Optional[_Union[SpanReference, _Mapping]] = ..., reason: _Optional[str] = ..., index: _Optional[_Union[DroppedSpanIndex, _Mapping]] = ..., archive_artifact_id: _Optional[str] = ...) -> None: ...

class CompactionPlan(_message.Message):
    __slots__ = ("thread_id", "version", "fingerprint", "externalizations", "summarizations", "clearings", "drops", "original_token_count", "compacted_token_count")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    EXTERNALIZATIONS_FIELD_NUMBER: _ClassVar[int]
    SUMMARIZATIONS_FIELD_NUMBER: _ClassVar[int]
    CLEARINGS_FIELD_NUMBER: _ClassVar[int]
    DROPS_FIELD_NUMBER: _ClassVar[int]
    ORIGINAL_TOKEN_COUNT_FIELD_NUMBER: _ClassVar[int]
    COMPACTED_TOKEN_COUNT_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    version: int
    fingerprint: str
    externalizations: _containers.RepeatedCompositeFieldContainer[ExternalizationRecord]
    summarizations: _containers.RepeatedCompositeFieldContainer[SummarizationRecord]
    clearings: _containers.RepeatedCompositeFieldContainer[ClearRecord]
    drops: _containers.RepeatedCompositeFieldContainer[DropRecord]
    original_token_count: int
    compacted_token_count: int
    def __init__(self, thread_id: _Optional[str] = ..., version: _Optional[int] = ..., fingerprint: _Optional[str] = ..., externalizations: _Optional[_Iterable[_Union[ExternalizationRecord, _Mapping]]] = ..., summarizations: _Optional[_Iterable[_Union[SummarizationRecord, _Mapping]]] = ..., clearings: _Optional[_Iterable[_Union[ClearRecord, _Mapping]]] = ..., drops: _Optional[_Iterable[_Union[DropRecord, _Mapping]]] = ..., original_token_count: _Optional[int] = ..., compacted_token_count: _Optional[int] = ...) -> None: ...

class BudgetReport(_message.Message):
    __slots__ = ("max_input_tokens", "hard_limit", "trigger", "target", "fixed_tokens", "system_tokens", "tool_tokens")
    MAX_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    HARD_LIMIT_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    FIXED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOOL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    max_input_tokens: int
    hard_limit: int
    trigger: int
    target: int
    fixed_tokens: int
    system_tokens: int
    tool_tokens: int
    def __init__(self, max_input_tokens: _Optional[int] = ..., hard_limit: _Optional[int] = ..., trigger: _Optional[int] = ..., target: _Optional[int] = ..., fixed_tokens: _Optional[int] = ..., system_tokens: _Optional[int] = ..., tool_tokens: _Optional[int] = ...) -> None: ...

class ReducerReport(_message.Message):
    __slots__ = ("name", "tokens_freed")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FREED_FIELD_NUMBER: _ClassVar[int]
    name: str
    tokens_freed: int
    def __init__(self, name: _Optional[str] = ..., tokens_freed: _Optional[int] = ...) -> None: ...

class TokenBreakdown(_message.Message):
    __slots__ = ("system", "tools", "messages", "rehydrated", "framing", "total", "recalled")
    SYSTEM_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    REHYDRATED_FIELD_NUMBER: _ClassVar[int]
    FRAMING_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    RECALLED_FIELD_NUMBER: _ClassVar[int]
    system: int
    tools: int
    messages: int
    rehydrated: int
    framing: int
    total: int
    recalled: int
    def __init__(self, system: _Optional[int] = ..., tools: _Optional[int] = ..., messages: _Optional[int] = ..., rehydrated: _Optional[int] = ..., framing: _Optional[int] = ..., total: _Optional[int] = ..., recalled: _Optional[int] = ...) -> None: ...

class EvictionCounts(_message.Message):
    __slots__ = ("externalized", "summarized", "cleared", "dropped")
    EXTERNALIZED_FIELD_NUMBER: _ClassVar[int]
    SUMMARIZED_FIELD_NUMBER: _ClassVar[int]
    CLEARED_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    externalized: int
    summarized: int
    cleared: int
    dropped: int
    def __init__(self, externalized: _Optional[int] = ..., summarized: _Optional[int] = ..., cleared: _Optional[int] = ..., dropped: _Optional[int] = ...) -> None: ...

class AuditRecord(_message.Message):
    __slots__ = ("plan_version", "plan_fingerprint", "plan_format_version", "summary_schema_version", "summary_render_version", "render_format_version", "summarizer_id", "tokenizer", "evictions", "artifact_ids", "rehydrated_artifact_ids", "warnings", "strategies", "requester", "evicted")
    PLAN_VERSION_FIELD_NUMBER: _ClassVar[int]
    PLAN_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    PLAN_FORMAT_VERSION_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_RENDER_VERSION_FIELD_NUMBER: _ClassVar[int]
    RENDER_FORMAT_VERSION_FIELD_NUMBER: _ClassVar[int]
    SUMMARIZER_ID_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_FIELD_NUMBER: _ClassVar[int]
    EVICTIONS_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_IDS_FIELD_NUMBER: _ClassVar[int]
    REHYDRATED_ARTIFACT_IDS_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    STRATEGIES_FIELD_NUMBER: _ClassVar[int]
    REQUESTER_FIELD_NUMBER: _ClassVar[int]
    EVICTED_FIELD_NUMBER: _ClassVar[int]
    plan_version: int
    plan_fingerprint: str
    plan_format_version: str
    summary_schema_version: str
    summary_render_version: str
    render_format_version: str
    summarizer_id: str
    tokenizer: str
    evictions: EvictionCounts
    artifact_ids: _containers.RepeatedScalarFieldContainer[str]
    rehydrated_artifact_ids: _containers.RepeatedScalarFieldContainer[str]
    warnings: _containers.RepeatedScalarFieldContainer[str]
    strategies: _containers.RepeatedScalarFieldContainer[str]
    requester: str
    evicted: _containers.RepeatedCompositeFieldContainer[Eviction]
    def __init__(self, plan_version: _Optional[int] = ..., plan_fingerprint: _Optional[str] = ..., plan_format_version: _Optional[str] = ..., summary_schema_version: _Optional[str] = ..., summary_render_version: _Optional[str] = ..., render_format_version: _Optional[str] = ..., summarizer_id: _Optional[str] = ..., tokenizer: _Optional[str] = ..., evictions: _Optional[_Union[EvictionCounts, _Mapping]] = ..., artifact_ids: _Optional[_Iterable[str]] = ..., rehydrated_artifact_ids: _Optional[_Iterable[str]] = ..., warnings: _Optional[_Iterable[str]] = ..., strategies: _Optional[_Iterable[str]] = ..., requester: _Optional[str] = ..., evicted: _Optional[_Iterable[_Union[Eviction, _Mapping]]] = ...) -> None: ...

class Eviction(_message.Message):
    __slots__ = ("action", "first_message_id", "last_message_id", "message_count", "reason", "strategy", "artifact_id")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    FIRST_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    action: EvictionAction
    first_message_id: str
    last_message_id: str
    message_count: int
    reason: str
    strategy: str
    artifact_id: str
    def __init__(self, action: _Optional[_Union[EvictionAction, str]] = ..., first_message_id: _Optional[str] = ..., last_message_id: _Optional[str] = ..., message_count: _Optional[int] = ..., reason: _Optional[str] = ..., strategy: _Optional[str] = ..., artifact_id: _Optional[str] = ...) -> None: ...

class CompactRequest(_message.Message):
    __slots__ = ("thread", "model", "max_input_tokens", "system_prompt", "tools", "policy", "expected_version", "observations", "tenant_id", "rehydrated_this_turn", "append", "start_session", "known_plan_version", "input")
    class ObservationsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: DeterminismMetadata
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[DeterminismMetadata, _Mapping]] = ...) -> None: ...
    THREAD_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MAX_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_PROMPT_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    OBSERVATIONS_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    REHYDRATED_THIS_TURN_FIELD_NUMBER: _ClassVar[int]
    APPEND_FIELD_NUMBER: _ClassVar[int]
    START_SESSION_FIELD_NUMBER: _ClassVar[int]
    KNOWN_PLAN_VERSION_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    thread: Thread
    model: str
    max_input_tokens: int
    system_prompt: str
    tools: _containers.RepeatedCompositeFieldContainer[ToolSchema]
    policy: PolicyOverrides
    expected_version: int
    observations: _containers.MessageMap[str, DeterminismMetadata]
    tenant_id: str
    rehydrated_this_turn: bool
    append: ThreadAppend
    start_session: bool
    known_plan_version: int
    input: ProviderInput
    def __init__(self, thread: _Optional[_Union[Thread, _Mapping]] = ..., model: _Optional[str] = ..., max_input_tokens: _Optional[int] = ..., system_prompt: _Optional[str] = ..., tools: _Optional[_Iterable[_Union[ToolSchema, _Mapping]]] = ..., policy: _Optional[_Union[PolicyOverrides, _Mapping]] = ..., expected_version: _Optional[int] = ..., observations: _Optional[_Mapping[str, DeterminismMetadata]] = ..., tenant_id: _Optional[str] = ..., rehydrated_this_turn: _Optional[bool] = ..., append: _Optional[_Union[ThreadAppend, _Mapping]] = ..., start_session: _Optional[bool] = ..., known_plan_version: _Optional[int] = ..., input: _Optional[_Union[ProviderInput, _Mapping]] = ...) -> None: ...

class CompactResponse(_message.Message):
    __slots__ = ("plan", "version", "tokens_before", "tokens_after", "per_reducer", "budget", "warnings", "reused", "triggered", "new_artifact_ids", "target_use", "session", "plan_omitted")
    PLAN_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    TOKENS_BEFORE_FIELD_NUMBER: _ClassVar[int]
    TOKENS_AFTER_FIELD_NUMBER: _ClassVar[int]
    PER_REDUCER_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    REUSED_FIELD_NUMBER: _ClassVar[int]
    TRIGGERED_FIELD_NUMBER: _ClassVar[int]
    NEW_ARTIFACT_IDS_FIELD_NUMBER: _ClassVar[int]
    TARGET_USE_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    PLAN_OMITTED_FIELD_NUMBER: _ClassVar[int]
    plan: CompactionPlan
    version: int
    tokens_before: int
    tokens_after: int
    per_reducer: _containers.RepeatedCompositeFieldContainer[ReducerReport]
    budget: BudgetReport
    warnings: _containers.RepeatedScalarFieldContainer[str]
    reused: bool
    triggered: bool
    new_artifact_ids: _containers.RepeatedScalarFieldContainer[str]
    target_use: float
    session: SessionState
    plan_omitted: bool
    def __init__(self, plan: _Optional[_Union[CompactionPlan, _Mapping]] = ..., version: _Optional[int] = ..., tokens_before: _Optional[int] = ..., tokens_after: _Optional[int] = ..., per_reducer: _Optional[_Iterable[_Union[ReducerReport, _Mapping]]] = ..., budget: _Optional[_Union[BudgetReport, _Mapping]] = ..., warnings: _Optional[_Iterable[str]] = ..., reused: _Optional[bool] = ..., triggered: _Optional[bool] = ..., new_artifact_ids: _Optional[_Iterable[str]] = ..., target_use: _Optional[float] = ..., session: _Optional[_Union[SessionState, _Mapping]] = ..., plan_omitted: _Optional[bool] = ...) -> None: ...

class RenderRequest(_message.Message):
    __slots__ = ("thread", "plan_version", "compact_first", "system_prompt", "tools", "format", "model", "max_output_tokens", "rehydrate_artifact_ids", "max_input_tokens", "policy", "expected_version", "observations", "tenant_id", "omit_pending_calls", "auto_rehydrate", "read_artifact_tool", "recall", "search_context_tool", "append", "start_session", "known_plan_version", "input")
    class ObservationsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: DeterminismMetadata
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[DeterminismMetadata, _Mapping]] = ...) -> None: ...
    THREAD_FIELD_NUMBER: _ClassVar[int]
    PLAN_VERSION_FIELD_NUMBER: _ClassVar[int]
    COMPACT_FIRST_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_PROMPT_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    REHYDRATE_ARTIFACT_IDS_FIELD_NUMBER: _ClassVar[int]
    MAX_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    OBSERVATIONS_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    OMIT_PENDING_CALLS_FIELD_NUMBER: _ClassVar[int]
    AUTO_REHYDRATE_FIELD_NUMBER: _ClassVar[int]
    READ_ARTIFACT_TOOL_FIELD_NUMBER: _ClassVar[int]
    RECALL_FIELD_NUMBER: _ClassVar[int]
    SEARCH_CONTEXT_TOOL_FIELD_NUMBER: _ClassVar[int]
    APPEND_FIELD_NUMBER: _ClassVar[int]
    START_SESSION_FIELD_NUMBER: _ClassVar[int]
    KNOWN_PLAN_VERSION_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    thread: Thread
    plan_version: int
    compact_first: bool
    system_prompt: str
    tools: _containers.RepeatedCompositeFieldContainer[ToolSchema]
    format: OutputFormat
    model: str
    max_output_tokens: int
    rehydrate_artifact_ids: _containers.RepeatedScalarFieldContainer[str]
    max_input_tokens: int
    policy: PolicyOverrides
    expected_version: int
    observations: _containers.MessageMap[str, DeterminismMetadata]
    tenant_id: str
    omit_pending_calls: bool
    auto_rehydrate: bool
    read_artifact_tool: bool
    recall: bool
    search_context_tool: bool
    append: ThreadAppend
    start_session: bool
    known_plan_version: int
    input: ProviderInput
    def __init__(self, thread: _Optional[_Union[Thread, _Mapping]] = ..., plan_version: _Optional[int] = ..., compact_first: _Optional[bool] = ..., system_prompt: _Optional[str] = ..., tools: _Optional[_Iterable[_Union[ToolSchema, _Mapping]]] = ..., format: _Optional[_Union[OutputFormat, str]] = ..., model: _Optional[str] = ..., max_output_tokens: _Optional[int] = ..., rehydrate_artifact_ids: _Optional[_Iterable[str]] = ..., max_input_tokens: _Optional[int] = ..., policy: _Optional[_Union[PolicyOverrides, _Mapping]] = ..., expected_version: _Optional[int] = ..., observations: _Optional[_Mapping[str, DeterminismMetadata]] = ..., tenant_id: _Optional[str] = ..., omit_pending_calls: _Optional[bool] = ..., auto_rehydrate: _Optional[bool] = ..., read_artifact_tool: _Optional[bool] = ..., recall: _Optional[bool] = ..., search_context_tool: _Optional[bool] = ..., append: _Optional[_Union[ThreadAppend, _Mapping]] = ..., start_session: _Optional[bool] = ..., known_plan_version: _Optional[int] = ..., input: _Optional[_Union[ProviderInput, _Mapping]] = ...) -> None: ...

class RenderedMessage(_message.Message):
    __slots__ = ("role", "text", "parts", "tool_calls", "tool_call_id", "tool_name", "is_error", "source_id", "origin")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    PARTS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    IS_ERROR_FIELD_NUMBER: _ClassVar[int]
    SOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    role: Role
    text: str
    parts: _containers.RepeatedCompositeFieldContainer[ContentPart]
    tool_calls: _containers.RepeatedCompositeFieldContainer[ToolCall]
    tool_call_id: str
    tool_name: str
    is_error: bool
    source_id: str
    origin: Origin
    def __init__(self, role: _Optional[_Union[Role, str]] = ..., text: _Optional[str] = ..., parts: _Optional[_Iterable[_Union[ContentPart, _Mapping]]] = ..., tool_calls: _Optional[_Iterable[_Union[ToolCall, _Mapping]]] = ..., tool_call_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., is_error: _Optional[bool] = ..., source_id: _Optional[str] = ..., origin: _Optional[_Union[Origin, str]] = ...) -> None: ...

class RehydratedArtifact(_message.Message):
    __slots__ = ("artifact_id", "truncated", "omitted", "auto", "blocked")
    ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    OMITTED_FIELD_NUMBER: _ClassVar[int]
    AUTO_FIELD_NUMBER: _ClassVar[int]
    BLOCKED_FIELD_NUMBER: _ClassVar[int]
    artifact_id: str
    truncated: bool
    omitted: bool
    auto: bool
    blocked: RehydrationBlocked
    def __init__(self, artifact_id: _Optional[str] = ..., truncated: _Optional[bool] = ..., omitted: _Optional[bool] = ..., auto: _Optional[bool] = ..., blocked: _Optional[_Union[RehydrationBlocked, str]] = ...) -> None: ...

class RenderResponse(_message.Message):
    __slots__ = ("messages", "system_prompt", "provider_payload_json", "tokens", "plan_version", "audit", "compaction", "rehydrated", "session", "unchanged_prefix_tokens")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_PROMPT_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_PAYLOAD_JSON_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    PLAN_VERSION_FIELD_NUMBER: _ClassVar[int]
    AUDIT_FIELD_NUMBER: _ClassVar[int]
    COMPACTION_FIELD_NUMBER: _ClassVar[int]
    REHYDRATED_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    UNCHANGED_PREFIX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[RenderedMessage]
    system_prompt: str
    provider_payload_json: str
    tokens: TokenBreakdown
    plan_version: int
    audit: AuditRecord
    compaction: CompactResponse
    rehydrated: _containers.RepeatedCompositeFieldContainer[RehydratedArtifact]
    session: SessionState
    unchanged_prefix_tokens: int
    def __init__(self, messages: _Optional[_Iterable[_Union[RenderedMessage, _Mapping]]] = ..., system_prompt: _Optional[str] = ..., provider_payload_json: _Optional[str] = ..., tokens: _Optional[_Union[TokenBreakdown, _Mapping]] = ..., plan_version: _Optional[int] = ..., audit: _Optional[_Union[AuditRecord, _Mapping]] = ..., compaction: _Optional[_Union[CompactResponse, _Mapping]] = ..., rehydrated: _Optional[_Iterable[_Union[RehydratedArtifact, _Mapping]]] = ..., session: _Optional[_Union[SessionState, _Mapping]] = ..., unchanged_prefix_tokens: _Optional[int] = ...) -> None: ...

class RehydrateRequest(_message.Message):
    __slots__ = ("thread_id", "artifact_id", "max_tokens", "model", "tenant_id")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    artifact_id: str
    max_tokens: int
    model: str
    tenant_id: str
    def __init__(self, thread_id: _Optional[str] = ..., artifact_id: _Optional[str] = ..., max_tokens: _Optional[int] = ..., model: _Optional[str] = ..., tenant_id: _Optional[str] = ...) -> None: ...

class RehydrateResponse(_message.Message):
    __slots__ = ("artifact_id", "content", "truncated", "tokens", "sensitivity", "message_ids", "content_hash")
    ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    SENSITIVITY_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_IDS_FIELD_NUMBER: _ClassVar[int]
    CONTENT_HASH_FIELD_NUMBER: _ClassVar[int]
    artifact_id: str
    content: str
    truncated: bool
    tokens: int
    sensitivity: Sensitivity
    message_ids: _containers.RepeatedScalarFieldContainer[str]
    content_hash: str
    def __init__(self, artifact_id: _Optional[str] = ..., content: _Optional[str] = ..., truncated: _Optional[bool] = ..., tokens: _Optional[int] = ..., sensitivity: _Optional[_Union[Sensitivity, str]] = ..., message_ids: _Optional[_Iterable[str]] = ..., content_hash: _Optional[str] = ...) -> None: ...

class DeleteThreadRequest(_message.Message):
    __slots__ = ("thread_id", "tenant_id")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    tenant_id: str
    def __init__(self, thread_id: _Optional[str] = ..., tenant_id: _Optional[str] = ...) -> None: ...

class DeleteThreadResponse(_message.Message):
    __slots__ = ("had_plan", "artifacts_deleted", "bytes_freed", "had_session")
    HAD_PLAN_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_DELETED_FIELD_NUMBER: _ClassVar[int]
    BYTES_FREED_FIELD_NUMBER: _ClassVar[int]
    HAD_SESSION_FIELD_NUMBER: _ClassVar[int]
    had_plan: bool
    artifacts_deleted: int
    bytes_freed: int
    had_session: bool
    def __init__(self, had_plan: _Optional[bool] = ..., artifacts_deleted: _Optional[int] = ..., bytes_freed: _Optional[int] = ..., had_session: _Optional[bool] = ...) -> None: ...

class ResetPlanRequest(_message.Message):
    __slots__ = ("thread_id", "expected_version", "tenant_id")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    expected_version: int
    tenant_id: str
    def __init__(self, thread_id: _Optional[str] = ..., expected_version: _Optional[int] = ..., tenant_id: _Optional[str] = ...) -> None: ...

class ResetPlanResponse(_message.Message):
    __slots__ = ("previous_version", "version")
    PREVIOUS_VERSION_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    previous_version: int
    version: int
    def __init__(self, previous_version: _Optional[int] = ..., version: _Optional[int] = ...) -> None: ...

class ExplainRequest(_message.Message):
    __slots__ = ("thread_id", "plan_version", "text", "thread", "search_artifacts", "tenant_id", "append")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    PLAN_VERSION_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    THREAD_FIELD_NUMBER: _ClassVar[int]
    SEARCH_ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    APPEND_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    plan_version: int
    text: str
    thread: Thread
    search_artifacts: bool
    tenant_id: str
    append: ThreadAppend
    def __init__(self, thread_id: _Optional[str] = ..., plan_version: _Optional[int] = ..., text: _Optional[str] = ..., thread: _Optional[_Union[Thread, _Mapping]] = ..., search_artifacts: _Optional[bool] = ..., tenant_id: _Optional[str] = ..., append: _Optional[_Union[ThreadAppend, _Mapping]] = ...) -> None: ...

class ExplainMessageHit(_message.Message):
    __slots__ = ("message_id", "verbatim", "action", "first_message_id", "last_message_id", "strategy", "artifact_id", "in_replacement")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    VERBATIM_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    FIRST_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    IN_REPLACEMENT_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    verbatim: bool
    action: EvictionAction
    first_message_id: str
    last_message_id: str
    strategy: str
    artifact_id: str
    in_replacement: bool
    def __init__(self, message_id: _Optional[str] = ..., verbatim: _Optional[bool] = ..., action: _Optional[_Union[EvictionAction, str]] = ..., first_message_id: _Optional[str] = ..., last_message_id: _Optional[str] = ..., strategy: _Optional[str] = ..., artifact_id: _Optional[str] = ..., in_replacement: _Optional[bool] = ...) -> None: ...

class ExplainSummaryHit(_message.Message):
    __slots__ = ("action", "first_message_id", "last_message_id", "strategy", "artifact_id")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    FIRST_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    action: EvictionAction
    first_message_id: str
    last_message_id: str
    strategy: str
    artifact_id: str
    def __init__(self, action: _Optional[_Union[EvictionAction, str]] = ..., first_message_id: _Optional[str] = ..., last_message_id: _Optional[str] = ..., strategy: _Optional[str] = ..., artifact_id: _Optional[str] = ...) -> None: ...

class ExplainArtifactHit(_message.Message):
    __slots__ = ("artifact_id", "message_ids", "sensitivity")
    ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_IDS_FIELD_NUMBER: _ClassVar[int]
    SENSITIVITY_FIELD_NUMBER: _ClassVar[int]
    artifact_id: str
    message_ids: _containers.RepeatedScalarFieldContainer[str]
    sensitivity: Sensitivity
    def __init__(self, artifact_id: _Optional[str] = ..., message_ids: _Optional[_Iterable[str]] = ..., sensitivity: _Optional[_Union[Sensitivity, str]] = ...) -> None: ...

class ExplainResponse(_message.Message):
    __slots__ = ("plan_version", "verdict", "messages", "summaries", "artifacts", "artifacts_not_searched", "warnings", "session")
    PLAN_VERSION_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    SUMMARIES_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_NOT_SEARCHED_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    plan_version: int
    verdict: ExplainVerdict
    messages: _containers.RepeatedCompositeFieldContainer[ExplainMessageHit]
    summaries: _containers.RepeatedCompositeFieldContainer[ExplainSummaryHit]
    artifacts: _containers.RepeatedCompositeFieldContainer[ExplainArtifactHit]
    artifacts_not_searched: _containers.RepeatedScalarFieldContainer[str]
    warnings: _containers.RepeatedScalarFieldContainer[str]
    session: SessionState
    def __init__(self, plan_version: _Optional[int] = ..., verdict: _Optional[_Union[ExplainVerdict, str]] = ..., messages: _Optional[_Iterable[_Union[ExplainMessageHit, _Mapping]]] = ..., summaries: _Optional[_Iterable[_Union[ExplainSummaryHit, _Mapping]]] = ..., artifacts: _Optional[_Iterable[_Union[ExplainArtifactHit, _Mapping]]] = ..., artifacts_not_searched: _Optional[_Iterable[str]] = ..., warnings: _Optional[_Iterable[str]] = ..., session: _Optional[_Union[SessionState, _Mapping]] = ...) -> None: ...

class SearchContextRequest(_message.Message):
    __slots__ = ("thread", "query", "max_results", "tenant_id", "append", "input")
    THREAD_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    MAX_RESULTS_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    APPEND_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    thread: Thread
    query: str
    max_results: int
    tenant_id: str
    append: ThreadAppend
    input: ProviderInput
    def __init__(self, thread: _Optional[_Union[Thread, _Mapping]] = ..., query: _Optional[str] = ..., max_results: _Optional[int] = ..., tenant_id: _Optional[str] = ..., append: _Optional[_Union[ThreadAppend, _Mapping]] = ..., input: _Optional[_Union[ProviderInput, _Mapping]] = ...) -> None: ...

class ContextPassage(_message.Message):
    __slots__ = ("message_id", "artifact_id", "line", "text", "score", "sensitivity")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    SENSITIVITY_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    artifact_id: str
    line: int
    text: str
    score: float
    sensitivity: Sensitivity
    def __init__(self, message_id: _Optional[str] = ..., artifact_id: _Optional[str] = ..., line: _Optional[int] = ..., text: _Optional[str] = ..., score: _Optional[float] = ..., sensitivity: _Optional[_Union[Sensitivity, str]] = ...) -> None: ...

class SearchContextResponse(_message.Message):
    __slots__ = ("plan_version", "passages", "withheld", "session")
    PLAN_VERSION_FIELD_NUMBER: _ClassVar[int]
    PASSAGES_FIELD_NUMBER: _ClassVar[int]
    WITHHELD_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    plan_version: int
    passages: _containers.RepeatedCompositeFieldContainer[ContextPassage]
    withheld: int
    session: SessionState
    def __init__(self, plan_version: _Optional[int] = ..., passages: _Optional[_Iterable[_Union[ContextPassage, _Mapping]]] = ..., withheld: _Optional[int] = ..., session: _Optional[_Union[SessionState, _Mapping]] = ...) -> None: ...
