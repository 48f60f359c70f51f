//! Token counting: exact OpenAI encodings, an estimator, and the ledger cache.
//!
//! Counting is the service's dominant cost (~40× the transport of the same
//! bytes), so every count of a message goes through one [`TokenLedger`] keyed
//! by content hash, and each encoding is built once per process.

pub mod calibration;
mod counter;
mod estimate;
mod framing;
mod ledger;
pub(crate) use ledger::PassThrough;
mod overhead;
mod target;
mod truncate;

#[cfg(test)]
mod corpus;

pub use calibration::Calibrated;
pub use counter::{
    cl100k, counter_for, counter_for_model, encoding_known, normalize_model, o200k, TokenCounter,
};
pub use estimate::Estimator;
pub use framing::{BlankFiller, Framing, IdGrowth, TokenizerRule};
pub use ledger::{LedgerStats, TokenLedger, DEFAULT_MAX_ENTRIES, MIN_CACHED_BYTES};
pub use overhead::{count_tool_schemas, schema_texts, ChatOverhead};
pub use target::Target;
pub use truncate::{tail_within_tokens, truncate_to_tokens};
