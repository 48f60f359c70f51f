//! Archiving evictions: the originals of every cleared, summarized or
//! dropped message go to the artifact store (as pending artifacts the caller
//! writes before committing), and the prompt names the artifact, so nothing
//! that leaves the prompt is lost for good.
//!
//! Batched: one artifact per summary, per dropped span, and per run of up to
//! [`CLEAR_BATCH_MESSAGES`] clears (in thread order, at most
//! [`CLEAR_BATCH_BYTES`] of content), never one per message. The id appears
//! once per artifact in the prompt: in the summary's header, in the notice
//! that stands for a dropped span, and after the first stub of a batch of
//! clears.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use crate::model::Sensitivity;
use crate::redact::Redactor;

use super::{PendingArtifact, Projection, Slot, PENDING_ARTIFACT_PREFIX};

/// Clears per archive artifact at most.
pub const CLEAR_BATCH_MESSAGES: usize = 64;
/// Content bytes per archive of clears at most (one larger message still
/// gets an artifact of its own).
pub const CLEAR_BATCH_BYTES: usize = 512 * 1024;

impl Projection<'_> {
    /// Archives every eviction that has no archive yet (records carried over
    /// from a previous plan keep theirs) and recosts what now names an
    /// artifact. Content is redacted before it becomes an artifact.
    pub fn archive_evictions(&mut self, redactor: &Redactor) {
        self.collect_evictions();
        // Redacting and hashing the new artifacts depend on nothing else:
        // each message's piece on every core (a secret does not span two
        // messages), then each artifact joined and hashed.
        let unsealed = std::mem::take(&mut self.unsealed);
        let pieces: Vec<(usize, usize, usize)> = unsealed
            .iter()
            .flat_map(|(a, starts)| {
                let len = self.pending[*a].content.len();
                starts
                    .iter()
                    .enumerate()
                    .map(move |(k, &from)| (*a, from, starts.get(k + 1).copied().unwrap_or(len)))
            })
            .collect();
        let pending = &self.pending;
        let redacted = crate::par::map(
            &pieces,
            |&(_, from, to)| to - from,
            |&(a, from, to)| match redactor.redact(&pending[a].content[from..to]) {
                std::borrow::Cow::Borrowed(_) => None,
                std::borrow::Cow::Owned(r) => Some(r),
            },
        );
        let mut redacted = redacted.into_iter();
        for (a, starts) in unsealed {
            let artifact = &mut self.pending[a];
            let len = artifact.content.len();
            let mut joined = String::with_capacity(len);
            let mut changed = false;
            for (k, &from) in starts.iter().enumerate() {
                let to = starts.get(k + 1).copied().unwrap_or(len);
                match redacted.next().flatten() {
                    Some(r) => {
                        joined.push_str(&r);
                        changed = true;
                    }
                    None => joined.push_str(&artifact.content[from..to]),
                }
            }
            if changed {
                artifact.content = joined.into();
            }
            artifact.content_hash = hex::encode(Sha256::digest(artifact.content.as_bytes()));
        }
    }

    /// Gives every eviction without an archive a pending artifact holding
    /// its originals (redacted and hashed by the caller).
    fn collect_evictions(&mut self) {
        for r in 0..self.plan.summarizations.len() {
            let rec = &self.plan.summarizations[r];
            if rec.archive_artifact_id.is_some() || rec.span.message_ids.is_empty() {
                continue;
            }
            let idx = self.positions(&rec.span.message_ids);
            let id = self.archive(&idx);
            self.plan.summarizations[r].archive_artifact_id = Some(id);
            if let Some(&first) = idx.first() {
                self.recost(first);
                self.plan.summarizations[r].summary_token_count = self.cost[first];
            }
        }
        for r in 0..self.plan.drops.len() {
            let rec = &self.plan.drops[r];
            if rec.archive_artifact_id.is_some() || rec.span.message_ids.is_empty() {
                continue;
            }
            let idx = self.positions(&rec.span.message_ids);
            let id = self.archive(&idx);
            self.plan.drops[r].archive_artifact_id = Some(id);
            // Only the span's first message renders (as the notice).
            if let Some(&first) = idx.first() {
                self.recost(first);
            }
        }
        self.repair_clear_notes();
        // Clears without an archive, in thread order, batched.
        let mut open: Vec<(usize, usize)> = Vec::new();
        for (r, c) in self.plan.clearings.iter().enumerate() {
            if c.archive_artifact_id.is_some() {
                continue;
            }
            for i in self.positions(&c.span.message_ids) {
                if self.slots[i] == Slot::Clear(r) {
                    open.push((i, r));
                }
            }
        }
        open.sort_unstable();
        let mut batch: Vec<(usize, usize)> = Vec::new();
        let mut bytes = 0;
        for (i, r) in open {
            let size = self.thread.messages[i].archived_text().len();
            if !batch.is_empty()
                && (batch.len() >= CLEAR_BATCH_MESSAGES || bytes + size > CLEAR_BATCH_BYTES)
            {
                self.archive_clears(&std::mem::take(&mut batch));
                bytes = 0;
            }
            batch.push((i, r));
            bytes += size;
        }
        if !batch.is_empty() {
            self.archive_clears(&batch);
        }
    }

    /// A batch whose noted stub was absorbed (summarized, dropped) names its
    /// archive on its first remaining stub instead, so every archived clear
    /// that still renders has its artifact id in the prompt.
    fn repair_clear_notes(&mut self) {
        let mut batches: BTreeMap<String, (bool, Vec<(usize, usize)>)> = BTreeMap::new();
        for (r, c) in self.plan.clearings.iter().enumerate() {
            let Some(id) = &c.archive_artifact_id else {
                continue;
            };
            let live: Vec<usize> = self
                .positions(&c.span.message_ids)
                .into_iter()
                .filter(|&i| self.slots[i] == Slot::Clear(r))
                .collect();
            if live.is_empty() {
                continue;
            }
            let entry = batches.entry(id.clone()).or_default();
            entry.0 |= c.archive_note.is_some();
            entry.1.extend(live.into_iter().map(|i| (i, r)));
        }
        for (id, (noted, mut live)) in batches {
            if noted {
                continue;
            }
            live.sort_unstable();
            self.note_batch(&id, &live);
        }
    }

    /// Puts the note naming `id` on the first of `batch` and recosts it.
    fn note_batch(&mut self, id: &str, batch: &[(usize, usize)]) {
        let (first, r) = batch[0];
        let last = batch[batch.len() - 1].0;
        let (a, b) = (
            self.thread.messages[first].turn,
            self.thread.messages[last].turn,
        );
        let n = batch.len();
        let what = if n == 1 && self.thread.messages[first].tool_result.is_some() {
            "this result".to_string()
        } else if n == 1 {
            "this message".to_string()
        } else {
            format!("the {n} cleared messages of turns {a}-{b}")
        };
        self.plan.clearings[r].archive_note = Some(format!(
            "[original of {what} archived as {id} (read_artifact)]"
        ));
        self.recost(first);
    }

    /// One artifact for a batch of clears (message index, record index);
    /// the note goes on the batch's first stub.
    fn archive_clears(&mut self, batch: &[(usize, usize)]) {
        let idx: Vec<usize> = batch.iter().map(|&(i, _)| i).collect();
        let id = self.archive(&idx);
        for &(_, r) in batch {
            self.plan.clearings[r].archive_artifact_id = Some(id.clone());
        }
        self.note_batch(&id, batch);
    }

    /// Thread positions of `ids`, ascending.
    fn positions(&self, ids: &[String]) -> Vec<usize> {
        let mut out: Vec<usize> = ids
            .iter()
            .filter_map(|id| self.index.get(id.as_str()).copied())
            .collect();
        out.sort_unstable();
        out
    }

    /// A pending artifact holding the originals of the messages at `idx`
    /// (thread order), each under a header naming it; returns its placeholder.
    fn archive(&mut self, idx: &[usize]) -> String {
        let placeholder = format!("{PENDING_ARTIFACT_PREFIX}{:020}", self.next_pending);
        self.next_pending += 1;
        let mut content = String::new();
        let mut sensitivity = Sensitivity::Public;
        let mut tokens: u64 = 0;
        let mut message_ids = Vec::with_capacity(idx.len());
        let mut starts = Vec::with_capacity(idx.len());
        for &i in idx {
            let m = &self.thread.messages[i];
            starts.push(content.len());
            sensitivity = sensitivity.max(m.metadata.sensitivity);
            tokens += u64::from(self.verbatim[i]);
            message_ids.push(m.id.clone());
            content.push_str(&format!(
                "--- message {} · {} · turn {}",
                m.id,
                m.role.as_str(),
                m.turn
            ));
            if let Some(env) = &m.tool_result {
                content.push_str(&format!(
                    " · result of {} (call {})",
                    env.tool_name, env.tool_call_id
                ));
            }
            for c in &m.tool_calls {
                content.push_str(&format!(" · calls {}({})", c.name, c.arguments_json()));
            }
            content.push_str(" ---\n");
            content.push_str(&m.archived_text());
            content.push_str("\n\n");
        }
        // Redacted and hashed by `archive_evictions`, for all at once.
        self.unsealed.push((self.pending.len(), starts));
        self.pending.push(PendingArtifact {
            placeholder: placeholder.clone(),
            message_ids,
            content_hash: String::new(),
            content: content.into(),
            sensitivity,
            tokens: u32::try_from(tokens).unwrap_or(u32::MAX),
        });
        placeholder
    }
}
