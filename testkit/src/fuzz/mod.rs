//! Fuzzing on the stable toolchain (issue 21: no input makes compactd panic).
//!
//! - [`generate`] turns arbitrary bytes into a thread file in one of the
//!   four import formats (canonical, OpenAI Chat, Anthropic Messages, OpenAI
//!   Responses) plus the request's knobs (budget, model, policy overrides,
//!   JSON text sent over the wire): arbitrary Unicode in every text field,
//!   tool output as text and as JSON, lone surrogate escapes, deep nesting,
//!   and now and then a malformed document.
//! - [`mutate`] derives new inputs from known ones (corpus entries, real
//!   logs): string leaves rewritten, messages duplicated or dropped, bytes
//!   flipped and spliced.
//! - [`Oracle`] runs one input through what the service does with a
//!   request (JSON import, the gRPC conversions, compact and render in every
//!   output format, a second turn on the committed plan, Explain and
//!   Rehydrate) and says whether compactd behaved: no panic, no internal
//!   error, every body accepted by its provider's structure check and under
//!   budget, every refusal one the API documents.
//!
//! `tests/fuzz.rs` drives these for a bounded time and replays
//! `tests/fuzz_corpus/`.

mod gen;
mod mutate;
mod oracle;
mod source;

pub use gen::{
    document, generate, knobs_from, Call, Conversation, Item, Out, Part, DEEP_MARKER, MARKERS,
    PIECES, TOOLS,
};
pub use mutate::mutate;
pub use oracle::{Finding, Knobs, Oracle, Tally, WireJson};
pub use source::Source;
