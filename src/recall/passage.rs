//! Passages as the use cases hand them on: to the response, and to the
//! events that report them (ids and positions; the text only where the
//! caller may read it).

use crate::model::Sensitivity;

/// A passage the recall block carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecalledPassage {
    /// The message it comes from.
    pub message_id: String,
    /// The artifact holding the whole message, when one was written.
    pub artifact_id: Option<String>,
    /// Its first line within the message.
    pub line: u32,
}

/// One passage found.
#[derive(Debug, Clone, PartialEq)]
pub struct FoundPassage {
    /// The message it comes from.
    pub message_id: String,
    /// The artifact holding the whole message, when one was written.
    pub artifact_id: Option<String>,
    /// Its first line within the message.
    pub line: u32,
    /// The text, redacted.
    pub text: String,
    /// Relevance within this search.
    pub score: f32,
    /// The message's classification.
    pub sensitivity: Sensitivity,
}
