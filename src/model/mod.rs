//! The domain model: threads, messages, plans and summaries. Pure data, no I/O.

mod audit;
mod ids;
pub(crate) mod image;
mod message;
mod outcome;
mod plan;
mod provider_part;
mod records;
mod summary;
mod summary_read;
mod thread;

pub use audit::{AuditRecord, Eviction, EvictionCounts};
pub(crate) use ids::process_seed;
pub use ids::{IdHash, IdHasher, IdMap, IdSet};
pub use message::{
    is_rfc3339, memory_weight, Content, ContentPart, DeterminismMetadata, Durability, JsonText,
    Message, MessageMetadata, Outcome, Role, Sensitivity, ToolCall, ToolContent,
    ToolResultEnvelope, ToolSchema,
};
pub use outcome::{error_message, infer_outcome, ERROR_MESSAGE_MAX_CHARS};
pub use plan::{
    fingerprint, is_artifact_id, message_digest, thread_digest, Action, ActionKind, ActionMap,
    ClearReason, ClearRecord, CompactionPlan, DropRecord, DroppedSpanIndex, ExternalizationRecord,
    NormalizationWarning, PlanError, SpanReference, SummarizationRecord, PLAN_FORMAT_VERSION,
};
pub use provider_part::{
    countable, is_blob, Dialect, Media, ProviderPart, UnknownItems, STATE_KEYS,
};
pub use records::Records;
pub use summary::{
    words_of, ArtifactReference, Decision, OpenItem, Priority, StructuredSummary, ToolOutcome,
    SUMMARY_RENDER_VERSION, SUMMARY_SCHEMA_VERSION,
};
pub use summary_read::{read_rendered, SUMMARY_HEADER};
pub use thread::{Pairing, PairingState, Thread, ThreadError, ThreadLimits, Validation};
