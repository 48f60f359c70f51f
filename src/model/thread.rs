//! A thread and its validation. Every later stage relies on the invariants
//! checked here, so they are checked once, with errors that name the message.

use std::collections::HashSet;
use std::hash::BuildHasherDefault;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::ids::{IdMap, IdSet};
use super::message::{Message, Role};
use crate::tokens::PassThrough;

/// The immutable conversation that compaction projects.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Thread {
    /// Stable id chosen by the caller.
    pub id: String,
    /// Messages in order. Shared: an append session's next turn, the
    /// carried plan and the recall index hold the same messages, so a turn
    /// copies pointers, not the thread.
    pub messages: Vec<Arc<Message>>,
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
    /// A message larger than this is accepted with a warning: a payload this
    /// size is often a dump or was cut off on its way (256 KB, the ingestion
    /// limit the seeds name).
    pub warn_message_bytes: usize,
    /// Items and blocks of a type compactd does not know: carried, or the
    /// thread refused.
    pub unknown_items: super::UnknownItems,
}

impl Default for ThreadLimits {
    fn default() -> Self {
        ThreadLimits {
            max_messages: 100_000,
            max_message_bytes: 8 * 1024 * 1024,
            max_id_bytes: 256,
            warn_message_bytes: 256 * 1024,
            unknown_items: super::UnknownItems::Carry,
        }
    }
}

/// Why a thread was rejected. Each variant names the offending message index and field.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ThreadError {
    /// A `created_at` that is not an RFC 3339 date-time.
    #[error("messages[{index}].metadata.created_at {value:?} is not an RFC 3339 time such as 2026-01-05T10:00:00Z")]
    BadTimestamp {
        /// Message position.
        index: usize,
        /// What was sent (at most 64 bytes of it).
        value: String,
    },
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
    /// An item of a type compactd does not know, where such items are refused.
    #[error("messages[{index}].parts[{part}] is a {dialect} item of type {kind:?}, which this deployment refuses (import.unknown_items: refuse)")]
    UnknownItem {
        /// Message index.
        index: usize,
        /// Part index.
        part: usize,
        /// Its type.
        kind: String,
        /// Its format.
        dialect: &'static str,
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
    /// A call id that an earlier call still waiting for its result uses: a
    /// result could not tell which of the two it answers.
    #[error("messages[{index}].tool_calls[{call}].id {id:?} is used by an earlier tool call that has no result yet")]
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
    /// Thinking or reasoning parts on a message the model did not write.
    #[error(
        "messages[{index}].content[{part}] is model reasoning, which only assistant messages carry"
    )]
    ReasoningOutsideAssistant {
        /// Message index.
        index: usize,
        /// Part index.
        part: usize,
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
            ThreadError::BadTimestamp { index, .. } => {
                format!("thread.messages[{index}].metadata.created_at")
            }
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
            ThreadError::DuplicateToolCallId { index, call, .. } => {
                format!("thread.messages[{index}].tool_calls[{call}].id")
            }
            ThreadError::ReasoningOutsideAssistant { index, part }
            | ThreadError::UnknownItem { index, part, .. } => {
                format!("thread.messages[{index}].parts[{part}]")
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
    /// A thread of `messages`, each put behind its shared pointer.
    pub fn new(id: impl Into<String>, messages: Vec<Message>) -> Thread {
        Thread {
            id: id.into(),
            messages: messages.into_iter().map(Arc::new).collect(),
        }
    }

    /// Checks every invariant the pipeline relies on.
    ///
    /// Tool results pair with calls by position: a result answers the
    /// earlier call with its id that is still waiting, so an id may be reused
    /// once its call was answered (local model servers name every turn's call
    /// `call_0`). A call no result answers yet is pending (a human approval,
    /// a tool still running): accepted here, kept verbatim by compaction, and
    /// refused by Render unless the request asks to omit pending calls.
    pub fn validate(&self, limits: &ThreadLimits) -> Result<(), ThreadError> {
        self.validate_from(limits, 0)
    }

    /// [`Thread::validate`] when the first `checked` messages are known to
    /// form a thread that passed it under the same `limits` (an append
    /// session's base): those are not checked one by one again, only
    /// walked for the ids and calls the rest is checked against. The result
    /// is `validate`'s.
    pub fn validate_from(&self, limits: &ThreadLimits, checked: usize) -> Result<(), ThreadError> {
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
        // Calls still waiting for their result: id -> tool name.
        let mut open: IdMap<&str, &str> = IdMap::default();
        // Every call id seen, to tell "answered twice" from "never called".
        let mut seen: IdSet<&str> = IdSet::default();
        let mut previous_turn = 0u32;
        for (index, m) in self.messages.iter().enumerate() {
            // What depends on this message alone was checked with the base.
            let known = index < checked;
            if !known && m.id.is_empty() {
                return Err(ThreadError::EmptyId { index });
            }
            if !known && m.id.len() > limits.max_id_bytes {
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
            if known {
                for c in &m.tool_calls {
                    open.insert(&c.id, &c.name);
                    seen.insert(&c.id);
                }
                if let Some(env) = &m.tool_result {
                    open.remove(env.tool_call_id.as_str());
                }
                continue;
            }
            m.check_alone(index, limits)?;
            open_calls(m, index, &mut open, &mut seen)?;
            close_call(m, index, &mut open, &seen)?;
        }
        Ok(())
    }

    /// What validating this thread leaves for validating it again with
    /// messages appended (see [`Thread::validate_appended`]). Meant for a
    /// thread that passed [`Thread::validate`].
    pub fn validation(&self) -> Validation {
        let mut v = Validation {
            ids: IdHashes::with_capacity_and_hasher(self.messages.len(), Default::default()),
            ..Validation::default()
        };
        for m in &self.messages {
            v.ids.insert(id_hash(&m.id));
            for c in &m.tool_calls {
                v.open.insert(c.id.clone(), c.name.clone());
            }
            if let Some(env) = &m.tool_result {
                v.open.remove(env.tool_call_id.as_str());
            }
            v.last_turn = m.turn;
        }
        v.len = self.messages.len();
        v
    }

    /// [`Thread::validate`] of a thread whose first `state.len` messages
    /// passed it under the same `limits` and left `state`: only the
    /// appended messages are read, against the ids and open calls `state`
    /// holds, so a session's turn costs what it appends. On success `state`
    /// describes the whole thread. Any error is the one `validate` gives
    /// (found by the full walk, which also settles an id hash that only
    /// collided).
    pub fn validate_appended(
        &self,
        limits: &ThreadLimits,
        state: &mut Validation,
    ) -> Result<(), ThreadError> {
        match self.appended_checks(limits, state) {
            Some((ids, open, last_turn)) => {
                state.ids.extend(ids);
                state.open = open;
                state.last_turn = last_turn;
                state.len = self.messages.len();
                // The kept pairing stays, for the base's messages.
                Ok(())
            }
            None => {
                self.validate_from(limits, state.len)?;
                *state = self.validation();
                Ok(())
            }
        }
    }

    /// The checks of [`Thread::validate_from`] on the messages after
    /// `state.len`, against `state`: the appended ids and what the open
    /// calls and last turn become, or `None` at the first doubt.
    fn appended_checks(
        &self,
        limits: &ThreadLimits,
        state: &Validation,
    ) -> Option<(IdHashes, IdMap<String, String>, u32)> {
        let n = self.messages.len();
        if self.id.is_empty() || n > limits.max_messages || state.len > n {
            return None;
        }
        let mut ids = IdHashes::with_capacity_and_hasher(n - state.len, Default::default());
        let mut open = state.open.clone();
        let mut last_turn = state.last_turn;
        for (index, m) in self.messages.iter().enumerate().skip(state.len) {
            if m.id.is_empty() || m.id.len() > limits.max_id_bytes {
                return None;
            }
            let h = id_hash(&m.id);
            if state.ids.contains(&h) || !ids.insert(h) {
                return None;
            }
            if index > 0 && m.turn < last_turn {
                return None;
            }
            last_turn = m.turn;
            m.check_alone(index, limits).ok()?;
            for c in &m.tool_calls {
                if c.id.is_empty()
                    || c.name.is_empty()
                    || open.insert(c.id.clone(), c.name.clone()).is_some()
                {
                    return None;
                }
            }
            match (m.role, &m.tool_result) {
                (Role::Tool, Some(env)) => {
                    if open.remove(env.tool_call_id.as_str())? != env.tool_name {
                        return None;
                    }
                }
                (Role::Tool, None) | (_, Some(_)) => return None,
                (_, None) => {}
            }
        }
        Some((ids, open, last_turn))
    }

    /// Which message answers which call, by position (see [`Thread::validate`]).
    /// On a thread that does not validate, unmatched results pair with nothing.
    pub fn pairing(&self) -> Pairing {
        let mut pairing = Pairing::default();
        // Borrowed ids; the calls left open are not kept.
        pairing.extend(&self.messages, &mut IdMap::<&str, _>::default());
        pairing
    }

    /// [`Thread::pairing`], with the calls still open at the end, from
    /// which [`Thread::pairing_after`] goes on.
    pub fn pairing_state(&self) -> PairingState {
        let mut pairing = Pairing::default();
        // Borrowed ids while pairing; only the calls left open are copied.
        let mut open: IdMap<&str, (usize, usize)> = IdMap::default();
        pairing.extend(&self.messages, &mut open);
        PairingState {
            pairing,
            open: open.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
        }
    }

    /// The pairing of this thread, whose first `base.len()` messages are
    /// those `base` was found for: only the messages after them are read
    /// (an append session's turn), and the result equals
    /// [`Thread::pairing_state`]'s.
    pub fn pairing_after(&self, base: &PairingState) -> PairingState {
        let from = base.len().min(self.messages.len());
        base.clone().extended(&self.messages[from..])
    }

    /// Calls without a result outside the last assistant message, as
    /// (message, call) in thread order: the conversation moved past them (a
    /// user interrupt, a crashed tool), so no result will come. Only the last
    /// assistant message's calls are pending.
    pub fn abandoned_calls(&self, pairing: &Pairing) -> Vec<(usize, usize)> {
        let last_assistant = self
            .messages
            .iter()
            .rposition(|m| m.role == Role::Assistant);
        pairing
            .pending()
            .filter(|&(i, _)| Some(i) != last_assistant)
            .collect()
    }

    /// The thread as the provider takes it, the view compaction and
    /// rendering work on (the thread itself is never changed):
    /// - abandoned calls (see [`Thread::abandoned_calls`]) are left out, and
    ///   an assistant message left with nothing visible with them; the
    ///   warnings name every call left out;
    /// - a model's reasoning (thinking blocks, reasoning items) from before
    ///   the last user message is left out: the providers drop it from the
    ///   context once the user speaks again, so it is neither sent nor
    ///   counted. The active tool loop keeps its own, signatures and all, as
    ///   Anthropic requires.
    ///
    /// `None` when the thread already is that view.
    pub fn provider_view(&self) -> Option<(Thread, Vec<String>)> {
        self.provider_view_without(&self.abandoned_calls(&self.pairing()))
    }

    /// [`Thread::provider_view`] given the thread's
    /// [`abandoned_calls`](Thread::abandoned_calls), for a caller that
    /// found them already.
    pub fn provider_view_without(
        &self,
        abandoned: &[(usize, usize)],
    ) -> Option<(Thread, Vec<String>)> {
        let loop_start = self
            .messages
            .iter()
            .rposition(|m| m.role == Role::User && m.tool_result.is_none())
            .unwrap_or(0);
        let earlier_reasoning = |m: &Arc<Message>| match &m.content {
            super::message::Content::Parts(parts) => parts.iter().any(|p| p.is_reasoning()),
            super::message::Content::Text(_) => false,
        };
        if abandoned.is_empty() && !self.messages[..loop_start].iter().any(earlier_reasoning) {
            return None;
        }
        let mut by_message: IdMap<usize, Vec<usize>> = IdMap::default();
        for &(i, j) in abandoned {
            by_message.entry(i).or_default().push(j);
        }
        let mut warnings = Vec::new();
        let mut messages = Vec::with_capacity(self.messages.len());
        for (i, m) in self.messages.iter().enumerate() {
            let calls = by_message.get(&i);
            let strip = i < loop_start && earlier_reasoning(m);
            if calls.is_none() && !strip {
                messages.push(m.clone());
                continue;
            }
            // Every path from here edits the message: an owned copy.
            let mut m = Message::clone(m);
            if strip {
                if let super::message::Content::Parts(parts) = &mut m.content {
                    parts.retain(|p| !p.is_reasoning());
                }
            }
            let Some(calls) = calls else {
                if !m.tool_calls.is_empty() || !m.content.text().trim().is_empty() {
                    messages.push(Arc::new(m));
                }
                continue;
            };
            let named: Vec<String> = calls
                .iter()
                .map(|&j| format!("{} ({})", m.tool_calls[j].id, m.tool_calls[j].name))
                .collect();
            let mut j = 0;
            m.tool_calls.retain(|_| {
                j += 1;
                !calls.contains(&(j - 1))
            });
            if m.tool_calls.is_empty() && m.content.text().trim().is_empty() {
                warnings.push(format!(
                    "message {} left out: its only tool calls {} have no result and the conversation moved on (abandoned)",
                    m.id,
                    named.join(", ")
                ));
                continue;
            }
            warnings.push(format!(
                "tool calls {} of message {} left out: no result, and the conversation moved on (abandoned)",
                named.join(", "),
                m.id
            ));
            messages.push(Arc::new(m));
        }
        Some((
            Thread {
                id: self.id.clone(),
                messages,
            },
            warnings,
        ))
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

impl Message {
    /// The checks of [`Thread::validate`] that read this message alone
    /// (at `index`): its timestamp, size, reasoning and tool calls' role.
    fn check_alone(&self, index: usize, limits: &ThreadLimits) -> Result<(), ThreadError> {
        if let Some(t) = self.metadata.created_at.as_deref() {
            if !super::message::is_rfc3339(t) {
                return Err(ThreadError::BadTimestamp {
                    index,
                    value: crate::summarize::text::head(t, 64).to_string(),
                });
            }
        }
        let bytes = match self.byte_len_bound() {
            b if b <= limits.max_message_bytes => b,
            _ => self.byte_len(),
        };
        if bytes > limits.max_message_bytes {
            return Err(ThreadError::OversizeContent {
                index,
                bytes,
                limit: limits.max_message_bytes,
            });
        }
        if self.role != Role::Assistant {
            if let super::message::Content::Parts(parts) = &self.content {
                if let Some(part) = parts.iter().position(|p| p.is_reasoning()) {
                    return Err(ThreadError::ReasoningOutsideAssistant { index, part });
                }
            }
        }
        if !self.tool_calls.is_empty() && self.role != Role::Assistant {
            return Err(ThreadError::UnexpectedToolCalls { index });
        }
        if limits.unknown_items == super::UnknownItems::Refuse {
            if let Some((part, p)) = self.unknown_parts().next() {
                return Err(ThreadError::UnknownItem {
                    index,
                    part,
                    kind: p.kind.clone(),
                    dialect: p.dialect.as_str(),
                });
            }
        }
        Ok(())
    }
}

/// What [`Thread::validate`] found in a valid thread that validating its
/// extensions reads: its message ids (hashed), its calls still open, its
/// last turn and length.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Validation {
    ids: IdHashes,
    /// Call id -> tool name.
    open: IdMap<String, String>,
    last_turn: u32,
    len: usize,
    /// The thread's pairing, once asked for ([`Validation::pairing_of`]).
    pairing: Option<Arc<PairingState>>,
}

impl Validation {
    /// Heap bytes, roughly (for what holds it).
    pub fn bytes(&self) -> usize {
        16 * self.ids.capacity()
            + self
                .open
                .iter()
                .map(|(k, v)| 64 + k.len() + v.len())
                .sum::<usize>()
            + self.pairing.as_ref().map_or(0, |p| p.bytes())
    }

    /// The pairing of `thread`, the thread this state was last brought up
    /// to: from the pairing kept for the thread it extends, reading only
    /// the messages appended, else in full. Kept for the next append.
    pub fn pairing_of(&mut self, thread: &Thread) -> Arc<PairingState> {
        // A state moves only to a thread that starts with its thread's
        // messages, so a kept pairing is one of a prefix.
        let state = match self.pairing.take() {
            Some(base) if base.len() <= thread.messages.len() => thread.pairing_after(&base),
            _ => thread.pairing_state(),
        };
        debug_assert_eq!(
            state,
            thread.pairing_state(),
            "an extended pairing is the whole one"
        );
        let state = Arc::new(state);
        self.pairing = Some(Arc::clone(&state));
        state
    }
}

/// Message ids as [`id_hash`]es (already hashed: the set does not hash again).
type IdHashes = HashSet<u64, BuildHasherDefault<PassThrough>>;

/// A message id's hash for [`Validation`]: a match is confirmed by the full
/// walk, so a collision costs time, never a wrong answer.
fn id_hash(id: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(id.as_bytes())
}

/// Calls and results matched by position.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pairing {
    /// For each call of the thread, in order, the message that answers it;
    /// `None` while the call is pending. Flat, so that a pairing is made
    /// and copied without an allocation per message.
    answers: Vec<Option<usize>>,
    /// Where each message's calls start in `answers` (one more entry than
    /// messages).
    starts: Vec<usize>,
    /// For each tool message, the (message, call index) it answers.
    pub answered: Vec<Option<(usize, usize)>>,
}

/// A thread's [`Pairing`] and the calls still open at its end (by id, the
/// last call of each id, as results look them up), so that the pairing
/// of a thread extending it reads only what was appended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PairingState {
    /// The thread's pairing.
    pub pairing: Pairing,
    open: IdMap<String, (usize, usize)>,
}

impl PairingState {
    /// Messages paired.
    pub fn len(&self) -> usize {
        self.pairing.answered.len()
    }

    /// Whether no message was paired.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Heap bytes, roughly (for what holds it).
    pub fn bytes(&self) -> usize {
        let p = &self.pairing;
        8 * (p.answers.capacity() + p.starts.capacity())
            + 24 * p.answered.capacity()
            + self.open.keys().map(|k| 48 + k.len()).sum::<usize>()
    }

    /// Goes on pairing over `messages`, which follow the ones paired.
    fn extended(mut self, messages: &[Arc<Message>]) -> Self {
        self.pairing.extend(messages, &mut self.open);
        self
    }
}

/// The calls open while pairing, by id: a later call of an id takes its
/// place, and a result answers (and closes) the one there.
trait OpenCalls<'a> {
    fn open(&mut self, id: &'a str, at: (usize, usize));
    fn close(&mut self, id: &str) -> Option<(usize, usize)>;
}

impl<'a> OpenCalls<'a> for IdMap<&'a str, (usize, usize)> {
    fn open(&mut self, id: &'a str, at: (usize, usize)) {
        self.insert(id, at);
    }
    fn close(&mut self, id: &str) -> Option<(usize, usize)> {
        self.remove(id)
    }
}

impl OpenCalls<'_> for IdMap<String, (usize, usize)> {
    fn open(&mut self, id: &str, at: (usize, usize)) {
        self.insert(id.to_owned(), at);
    }
    fn close(&mut self, id: &str) -> Option<(usize, usize)> {
        self.remove(id)
    }
}

impl Pairing {
    /// Pairs `messages`, which follow the ones paired, with `open` the
    /// calls still open after those.
    fn extend<'a>(&mut self, messages: &'a [Arc<Message>], open: &mut impl OpenCalls<'a>) {
        let base = self.answered.len();
        if self.starts.is_empty() {
            self.starts.push(0);
        }
        self.answered.resize(base + messages.len(), None);
        self.starts.reserve(messages.len());
        for m in messages {
            let end = self.answers.len() + m.tool_calls.len();
            self.answers.resize(end, None);
            self.starts.push(end);
        }
        for (i, m) in messages.iter().enumerate().map(|(k, m)| (base + k, m)) {
            for (j, c) in m.tool_calls.iter().enumerate() {
                open.open(&c.id, (i, j));
            }
            if let Some(env) = &m.tool_result {
                if let Some((ci, cj)) = open.close(&env.tool_call_id) {
                    self.answers[self.starts[ci] + cj] = Some(i);
                    self.answered[i] = Some((ci, cj));
                }
            }
        }
    }

    /// For each of message `i`'s tool calls, the message that answers it.
    pub fn answers_of(&self, i: usize) -> &[Option<usize>] {
        match (self.starts.get(i), self.starts.get(i + 1)) {
            (Some(&a), Some(&b)) => &self.answers[a..b],
            _ => &[],
        }
    }

    /// [`Pairing::answers_of`] for every message, in order.
    pub fn answers(&self) -> impl Iterator<Item = &[Option<usize>]> + '_ {
        self.starts.windows(2).map(|w| &self.answers[w[0]..w[1]])
    }

    /// The call (message, call index) that result message `i` answers.
    pub fn call_of(&self, i: usize) -> Option<(usize, usize)> {
        self.answered.get(i).copied().flatten()
    }

    /// Calls without a result, as (message, call index), in thread order.
    pub fn pending(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.answers().enumerate().flat_map(|(i, calls)| {
            calls
                .iter()
                .enumerate()
                .filter(|(_, r)| r.is_none())
                .map(move |(j, _)| (i, j))
        })
    }

    /// True when message `i` has a call without a result.
    pub fn has_pending(&self, i: usize) -> bool {
        self.answers_of(i).iter().any(Option::is_none)
    }
}

/// Checks a message's calls (ids and names set, no id open twice) and
/// opens them.
fn open_calls<'t>(
    m: &'t Message,
    index: usize,
    open: &mut IdMap<&'t str, &'t str>,
    seen: &mut IdSet<&'t str>,
) -> Result<(), ThreadError> {
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
        if open.insert(&c.id, &c.name).is_some() {
            return Err(ThreadError::DuplicateToolCallId {
                index,
                call,
                id: c.id.clone(),
            });
        }
        seen.insert(&c.id);
    }
    Ok(())
}

/// Checks a message's result: a tool message answers a call that is open,
/// under its tool's name; no other message carries one. Closes the call.
fn close_call<'t>(
    m: &'t Message,
    index: usize,
    open: &mut IdMap<&'t str, &'t str>,
    seen: &IdSet<&'t str>,
) -> Result<(), ThreadError> {
    match (m.role, &m.tool_result) {
        (Role::Tool, None) => return Err(ThreadError::MissingToolResult { index }),
        (Role::Tool, Some(env)) => {
            let Some(name) = open.remove(env.tool_call_id.as_str()) else {
                return Err(if seen.contains(env.tool_call_id.as_str()) {
                    ThreadError::DuplicateToolResult {
                        index,
                        id: env.tool_call_id.clone(),
                    }
                } else {
                    ThreadError::OrphanToolResult {
                        index,
                        id: env.tool_call_id.clone(),
                    }
                });
            };
            if name != env.tool_name {
                return Err(ThreadError::ToolNameMismatch {
                    index,
                    expected: name.to_string(),
                    got: env.tool_name.clone(),
                });
            }
        }
        (_, Some(_)) => return Err(ThreadError::UnexpectedToolResult { index }),
        (_, None) => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Limits small enough for every size check to be reached.
    const LIMITS: ThreadLimits = ThreadLimits {
        max_messages: 100,
        max_message_bytes: 40,
        max_id_bytes: 2,
        warn_message_bytes: 1000,
        unknown_items: crate::model::UnknownItems::Refuse,
    };

    /// Messages from small alphabets, mostly well formed, so that valid
    /// prefixes are common and repeated ids, orphan and twice-answered
    /// results, misplaced calls and bad sizes all occur.
    fn message() -> impl Strategy<Value = Message> {
        let id = prop_oneof![
            1 => Just(String::new()),
            1 => Just("eee".to_string()),
            12 => "[a-h]",
        ];
        let role = prop_oneof![
            4 => Just("user"),
            4 => Just("assistant"),
            4 => Just("tool"),
            1 => Just("system"),
        ];
        let text = prop_oneof![
            1 => Just(""),
            8 => Just("hi"),
            1 => Just("long enough to be over forty bytes, surely"),
        ];
        let created = prop_oneof![
            8 => Just(None),
            2 => Just(Some("2026-11-27T10:00:00Z")),
            1 => Just(Some("yesterday")),
        ];
        let call = (
            prop_oneof![1 => Just(""), 6 => Just("c1"), 6 => Just("c2")],
            prop_oneof![1 => Just(""), 6 => Just("f")],
        );
        let result = (
            prop_oneof![4 => Just("c1"), 4 => Just("c2"), 1 => Just("c3")],
            prop_oneof![6 => Just("f"), 1 => Just("g")],
        );
        // Calls belong to assistants and results to tools, but not always.
        let misplaced = proptest::bool::weighted(0.1);
        (
            (id, role, 0u32..2, text, created),
            proptest::collection::vec(call, 0..3),
            result,
            misplaced,
        )
            .prop_map(|((id, role, turn, text, created), calls, result, misplaced)| {
                let mut m = serde_json::json!({"id": id, "role": role, "turn": turn, "content": text});
                if let Some(at) = created {
                    m["metadata"] = serde_json::json!({"created_at": at});
                }
                if !calls.is_empty() && (role == "assistant" || misplaced) {
                    m["tool_calls"] = calls
                        .iter()
                        .map(|(id, name)| serde_json::json!({"id": id, "name": name}))
                        .collect();
                }
                if (role == "tool") != misplaced {
                    let (call, name) = result;
                    m["tool_result"] =
                        serde_json::json!({"tool_call_id": call, "tool_name": name, "content": "ok"});
                }
                serde_json::from_value(m).expect("a message")
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(crate::testing::cases(4096)))]
        /// Checking only what follows a valid prefix gives what checking
        /// the whole thread gives, error for error.
        #[test]
        fn validating_from_a_valid_prefix_is_validating(
            messages in proptest::collection::vec(
                (message(), proptest::bool::weighted(0.05)),
                2..12,
            )
        ) {
            // Turns mostly non-decreasing: each message's drawn turn is a
            // step, now and then one goes back to 0.
            let mut turn = 0;
            let messages = messages
                .into_iter()
                .map(|(mut m, back)| {
                    turn = if back { 0 } else { turn + m.turn };
                    m.turn = turn;
                    m
                })
                .collect();
            let thread = Thread::new("t", messages);
            let whole = thread.validate(&LIMITS);
            for k in 0..=thread.messages.len() {
                let prefix = Thread {
                    id: thread.id.clone(),
                    messages: thread.messages[..k].to_vec(),
                };
                if prefix.validate(&LIMITS).is_ok() {
                    prop_assert_eq!(thread.validate_from(&LIMITS, k), whole.clone(), "prefix {}", k);
                    // From what validating the prefix left: the same answer,
                    // and the state of the whole thread (or, on an error,
                    // the prefix's, untouched).
                    let before = prefix.validation();
                    let mut state = before.clone();
                    prop_assert_eq!(thread.validate_appended(&LIMITS, &mut state), whole.clone(), "prefix {}", k);
                    let expected = if whole.is_ok() { thread.validation() } else { before };
                    prop_assert_eq!(state, expected, "prefix {}", k);
                }
            }
        }

        /// Pairing on from any prefix's pairing, at once or in two steps,
        /// gives the whole thread's, valid or not: repeated call ids,
        /// results that answer nothing and calls on any message included.
        #[test]
        fn pairing_on_from_a_prefix_is_pairing_the_whole(
            messages in proptest::collection::vec(message(), 0..14),
            cut in 0usize..15,
        ) {
            let thread = Thread::new("t", messages);
            let n = thread.messages.len();
            let whole = thread.pairing_state();
            prop_assert_eq!(&whole.pairing, &thread.pairing());
            let prefix = |k: usize| Thread {
                id: thread.id.clone(),
                messages: thread.messages[..k].to_vec(),
            };
            let cut = cut.min(n);
            for k in 0..=n {
                let state = prefix(k).pairing_state();
                prop_assert_eq!(&thread.pairing_after(&state), &whole, "prefix {}", k);
                if k <= cut {
                    let middle = prefix(cut).pairing_after(&state);
                    prop_assert_eq!(&middle, &prefix(cut).pairing_state(), "{} then {}", k, cut);
                    prop_assert_eq!(&thread.pairing_after(&middle), &whole, "{} then {}", k, cut);
                }
            }
            // What a session's validation state keeps: the same, turn
            // after turn.
            let mut validation = prefix(cut).validation();
            prop_assert_eq!(&*validation.pairing_of(&prefix(cut)), &prefix(cut).pairing_state());
            prop_assert_eq!(&*validation.pairing_of(&thread), &whole);
        }
    }

    /// An append is checked against the state alone: the base is not read
    /// again (here a state that says a call is open lets its result in).
    #[test]
    fn an_append_is_checked_against_the_state_alone() {
        let msg = |v: serde_json::Value| -> Message { serde_json::from_value(v).unwrap() };
        let base = Thread::new(
            "t",
            vec![msg(
                serde_json::json!({"id": "a", "role": "user", "turn": 0, "content": "hi"}),
            )],
        );
        let mut state = base.validation();
        state.open.insert("c1".into(), "search".into());
        let mut thread = base.clone();
        thread.messages.push(Arc::new(msg(serde_json::json!({
            "id": "b", "role": "tool", "turn": 0,
            "tool_result": {"tool_call_id": "c1", "tool_name": "search", "content": "ok"}
        }))));
        assert!(thread.validate(&LIMITS).is_err());
        assert_eq!(thread.validate_appended(&LIMITS, &mut state), Ok(()));
        assert_eq!(state.len, 2);
        assert!(state.open.is_empty());
        // A duplicate id is still refused, with the full walk's error.
        let mut state = base.validation();
        let mut dup = base.clone();
        dup.messages.push(Arc::clone(&base.messages[0]));
        assert_eq!(
            dup.validate_appended(&LIMITS, &mut state),
            dup.validate(&LIMITS)
        );
        assert_eq!(state, base.validation());
    }
}
