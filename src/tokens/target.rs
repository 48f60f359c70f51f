//! What a request is counted for. Counts must match what the provider is
//! sent: which reasoning parts reach it, and how its format frames messages,
//! tools and images.

use super::framing::Framing;
use super::overhead::ChatOverhead;

/// The framing a request is counted with: the wire format's rules and its
/// overheads (built by `provider::Format::target`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    /// What the format adds or leaves out.
    pub framing: Framing,
    /// Its per-message and per-request overheads.
    pub overhead: ChatOverhead,
}

impl Target {
    /// Stable description for fingerprints.
    pub fn describe(&self) -> String {
        format!("{}:{:?}", self.framing.name, self.overhead)
    }
}
