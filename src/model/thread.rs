//! A thread and its validation. Every later stage relies on the invariants
//! checked here, so they are checked once, with errors that name the message.

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::ids::{IdMap, IdSet};
use super::message::{Message, Role};

/// The immutable conversation that compaction projects.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Thread {
    /// Stable id chosen by the caller.
    pub id: String,
    /// Messages in order.
    pub messages: Vec<Message>,
}

/// Size limits enforced on every thread before any work is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadLimits {
    /// Largest number of messages accepted.
    pub max_messages: usize,
    /// Largest single message, in bytes.
    pub max_message_bytes: usize,
    /// Longest message id, in bytes.
    pub max_id_bytes: usize,
}

impl Default for ThreadLimits {
    fn default() -> Self {
        ThreadLimits {
            max_messages: 100_000,
            max_message_bytes: 8 * 1024 * 1024,
            max_id_bytes: 256,
        }
    }
}

/// Why a thread was rejected. Each variant names the offending message index and field.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ThreadError {
    /// The thread id is empty.
    #[error("thread.id must not be empty")]
    EmptyThreadId,
    /// Too many messages.
    #[error("thread.messages has {count} messages; the limit is {limit}")]
    TooManyMessages {
        /// Messages sent.
        count: usize,
        /// Allowed.
        limit: usize,
    },
    /// A message without an id.
    #[error("messages[{index}].id must not be empty")]
    EmptyId {
        /// Message index.
        index: usize,
    },
    /// An id longer than allowed.
    #[error("messages[{index}].id is {len} bytes; the limit is {limit}")]
    IdTooLong {
        /// Message index.
        index: usize,
        /// Its length.
        len: usize,
        /// Allowed.
        limit: usize,
    },
    /// Two messages share an id.
    #[error("messages[{index}].id {id:?} duplicates messages[{first}].id")]
    DuplicateId {
        /// Message index.
        index: usize,
        /// Index of the first use.
        first: usize,
        /// The id.
        id: String,
    },
    /// A role name the API does not know (raised by converters).
    #[error(
        "messages[{index}].role {role:?} is not one of system, developer, user, assistant, tool"
    )]
    UnknownRole {
        /// Message index.
        index: usize,
        /// What was sent.
        role: String,
    },
    /// Turns went backwards.
    #[error("messages[{index}].turn {turn} is lower than the previous message's turn {previous}")]
    NonMonotonicTurn {
        /// Message index.
        index: usize,
        /// Its turn.
        turn: u32,
        /// The turn before it.
        previous: u32,
    },
    /// A message over the size limit.
    #[error("messages[{index}].content is {bytes} bytes; the limit is {limit}")]
    OversizeContent {
        /// Message index.
        index: usize,
        /// Its size.
        bytes: usize,
        /// Allowed.
        limit: usize,
    },
    /// A tool message without an envelope.
    #[error("messages[{index}].tool_result is required for role tool")]
    MissingToolResult {
        /// Message index.
        index: usize,
    },
    /// An envelope on a non-tool message.
    #[error("messages[{index}].tool_result is only allowed on role tool")]
    UnexpectedToolResult {
        /// Message index.
        index: usize,
    },
    /// Tool calls on a non-assistant message.
    #[error("messages[{index}].tool_calls are only allowed on role assistant")]
    UnexpectedToolCalls {
        /// Message index.
        index: usize,
    },
    /// A tool call without an id or name.
    #[error("messages[{index}].tool_calls[{call}].{field} must not be empty")]
    EmptyToolCallField {
        /// Message index.
        index: usize,
        /// Call index.
        call: usize,
        /// `id` or `name`.
        field: &'static str,
    },
    /// Two calls with one id.
    #[error("messages[{index}].tool_calls[{call}].id {id:?} is used by an earlier tool call")]
    DuplicateToolCallId {
        /// Message index.
        index: usize,
        /// Call index.
        call: usize,
        /// The id.
        id: String,
    },
    /// A result whose call does not precede it.
    #[error("messages[{index}].tool_result.tool_call_id {id:?} has no earlier tool call")]
    OrphanToolResult {
        /// Message index.
        index: usize,
        /// The id.
        id: String,
    },
    /// A second result for one call.
    #[error("messages[{index}].tool_result.tool_call_id {id:?} was already answered")]
    DuplicateToolResult {
        /// Message index.
        index: usize,
        /// The id.
        id: String,
    },
    /// A call that no later tool message answers; providers reject it.
    #[error("messages[{index}].tool_calls[{call}].id {id:?} has no tool result")]
    UnansweredToolCall {
        /// Message index.
        index: usize,
        /// Call index.
        call: usize,
        /// The id.
        id: String,
    },
    /// Result names a different tool than its call.
    #[error("messages[{index}].tool_result.tool_name {got:?} does not match the call's name {expected:?}")]
    ToolNameMismatch {
        /// Message index.
        index: usize,
        /// Call's tool name.
        expected: String,
        /// Result's tool name.
        got: String,
    },
}

impl ThreadError {
    /// Dotted path of the offending field, for API error details.
    pub fn field_path(&self) -> String {
        match self {
            ThreadError::EmptyThreadId => "thread.id".into(),
            ThreadError::TooManyMessages { .. } => "thread.messages".into(),
            ThreadError::EmptyId { index }
            | ThreadError::IdTooLong { index, .. }
            | ThreadError::DuplicateId { index, .. } => format!("thread.messages[{index}].id"),
            ThreadError::UnknownRole { index, .. } => format!("thread.messages[{index}].role"),
            ThreadError::NonMonotonicTurn { index, .. } => format!("thread.messages[{index}].turn"),
            ThreadError::OversizeContent { index, .. } => {
                format!("thread.messages[{index}].content")
            }
            ThreadError::MissingToolResult { index }
            | ThreadError::UnexpectedToolResult { index } => {
                format!("thread.messages[{index}].tool_result")
            }
            ThreadError::UnexpectedToolCalls { index } => {
                format!("thread.messages[{index}].tool_calls")
            }
            ThreadError::EmptyToolCallField { index, call, field } => {
                format!("thread.messages[{index}].tool_calls[{call}].{field}")
            }
            ThreadError::DuplicateToolCallId { index, call, .. }
            | ThreadError::UnansweredToolCall { index, call, .. } => {
                format!("thread.messages[{index}].tool_calls[{call}].id")
            }
            ThreadError::OrphanToolResult { index, .. }
            | ThreadError::DuplicateToolResult { index, .. } => {
                format!("thread.messages[{index}].tool_result.tool_call_id")
            }
            ThreadError::ToolNameMismatch { index, .. } => {
                format!("thread.messages[{index}].tool_result.tool_name")
            }
        }
    }
}

impl Thread {
    /// Checks every invariant the pipeline relies on.
    pub fn validate(&self, limits: &ThreadLimits) -> Result<(), ThreadError> {
        if self.id.is_empty() {
            return Err(ThreadError::EmptyThreadId);
        }
        if self.messages.len() > limits.max_messages {
            return Err(ThreadError::TooManyMessages {
                count: self.messages.len(),
                limit: limits.max_messages,
            });
        }
        let mut ids: IdMap<&str, usize> =
            IdMap::with_capacity_and_hasher(self.messages.len(), Default::default());
        // call id -> tool name, for pairing checks
        let mut calls: IdMap<&str, &str> = IdMap::default();
        let mut answered: IdSet<&str> = IdSet::default();
        let mut previous_turn = 0u32;
        for (index, m) in self.messages.iter().enumerate() {
            if m.id.is_empty() {
                return Err(ThreadError::EmptyId { index });
            }
            if m.id.len() > limits.max_id_bytes {
                return Err(ThreadError::IdTooLong {
                    index,
                    len: m.id.len(),
                    limit: limits.max_id_bytes,
                });
            }
            if let Some(&first) = ids.get(m.id.as_str()) {
                return Err(ThreadError::DuplicateId {
                    index,
                    first,
                    id: m.id.clone(),
                });
            }
            ids.insert(&m.id, index);
            if index > 0 && m.turn < previous_turn {
                return Err(ThreadError::NonMonotonicTurn {
                    index,
                    turn: m.turn,
                    previous: previous_turn,
                });
            }
            previous_turn = m.turn;
            let bytes = m.byte_len();
            if bytes > limits.max_message_bytes {
                return Err(ThreadError::OversizeContent {
                    index,
                    bytes,
                    limit: limits.max_message_bytes,
                });
            }
            if !m.tool_calls.is_empty() && m.role != Role::Assistant {
                return Err(ThreadError::UnexpectedToolCalls { index });
            }
            for (call, c) in m.tool_calls.iter().enumerate() {
                if c.id.is_empty() {
                    return Err(ThreadError::EmptyToolCallField {
                        index,
                        call,
                        field: "id",
                    });
                }
                if c.name.is_empty() {
                    return Err(ThreadError::EmptyToolCallField {
                        index,
                        call,
                        field: "name",
                    });
                }
                if calls.insert(&c.id, &c.name).is_some() {
                    return Err(ThreadError::DuplicateToolCallId {
                        index,
                        call,
                        id: c.id.clone(),
                    });
                }
            }
            match (m.role, &m.tool_result) {
                (Role::Tool, None) => return Err(ThreadError::MissingToolResult { index }),
                (Role::Tool, Some(env)) => {
                    let Some(name) = calls.get(env.tool_call_id.as_str()) else {
                        return Err(ThreadError::OrphanToolResult {
                            index,
                            id: env.tool_call_id.clone(),
                        });
                    };
                    if !answered.insert(&env.tool_call_id) {
                        return Err(ThreadError::DuplicateToolResult {
                            index,
                            id: env.tool_call_id.clone(),
                        });
                    }
                    if *name != env.tool_name {
                        return Err(ThreadError::ToolNameMismatch {
                            index,
                            expected: (*name).to_string(),
                            got: env.tool_name.clone(),
                        });
                    }
                }
                (_, Some(_)) => return Err(ThreadError::UnexpectedToolResult { index }),
                (_, None) => {}
            }
        }
        if answered.len() != calls.len() {
            for (index, m) in self.messages.iter().enumerate() {
                for (call, c) in m.tool_calls.iter().enumerate() {
                    if !answered.contains(c.id.as_str()) {
                        return Err(ThreadError::UnansweredToolCall {
                            index,
                            call,
                            id: c.id.clone(),
                        });
                    }
                }
            }
        }
        Ok(())
    }

    /// Index of a message by id.
    pub fn index_of(&self, id: &str) -> Option<usize> {
        self.messages.iter().position(|m| m.id == id)
    }

    /// Turn of the last message (the "current" turn).
    pub fn current_turn(&self) -> u32 {
        self.messages.last().map(|m| m.turn).unwrap_or(0)
    }
}
