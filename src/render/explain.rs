//! Explain: where a piece of text went under a plan. Was it shown verbatim,
//! carried by a summary the prompt shows, or compacted out (and into which
//! artifact, so `read_artifact` can bring it back)? The answer operators need
//! to tell "compacted out" from "the model ignored it".
//!
//! Pure: the thread's messages and the plan's records are searched here; the
//! artifact contents (I/O, permissions) are searched by the application and
//! merged into the verdict with [`Explanation::verdict_with`].

use serde::{Deserialize, Serialize};

use crate::model::{Action, ActionKind, CompactionPlan, Thread};

/// A thread message that holds the text, and what the plan did with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageHit {
    /// The message.
    pub message_id: String,
    /// What the plan does with it (`Include`: shown verbatim).
    pub action: ActionKind,
    /// The record's span (empty for `Include`).
    pub first_message_id: String,
    /// See `first_message_id`.
    pub last_message_id: String,
    /// The strategy that decided it (empty for `Include`).
    pub strategy: String,
    /// The artifact that holds the original, if any.
    pub artifact_id: String,
    /// What stands in for it in the prompt (a summary, a pointer's summary or
    /// a placeholder) still contains the text.
    pub in_replacement: bool,
}

/// A summary (of a summarized or externalized span) that contains the text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SummaryHit {
    /// Summarized or externalized.
    pub action: ActionKind,
    /// The span it stands for.
    pub first_message_id: String,
    /// See `first_message_id`.
    pub last_message_id: String,
    /// The summarizer (or `externalize`).
    pub strategy: String,
    /// The artifact holding the span's originals, if any.
    pub artifact_id: String,
}

/// Where the text is, as far as the thread and the plan tell.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Explanation {
    /// Thread messages that contain it.
    pub messages: Vec<MessageHit>,
    /// Summaries that contain it.
    pub summaries: Vec<SummaryHit>,
}

/// The short answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// A message the prompt shows verbatim contains it.
    Verbatim,
    /// Not verbatim, but a summary (or placeholder) the prompt shows does:
    /// the model had it.
    InSummary,
    /// Only in messages the plan took out of the prompt, or in artifacts:
    /// compacted out, and retrievable through the artifact ids.
    CompactedOut,
    /// Nowhere that was searched.
    NotFound,
}

impl Verdict {
    /// Wire and display name.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Verbatim => "VERBATIM",
            Verdict::InSummary => "IN_SUMMARY",
            Verdict::CompactedOut => "COMPACTED_OUT",
            Verdict::NotFound => "NOT_FOUND",
        }
    }
}

impl Explanation {
    /// The verdict, given whether an artifact's content held the text.
    pub fn verdict_with(&self, in_artifacts: bool) -> Verdict {
        if self
            .messages
            .iter()
            .any(|h| h.action == ActionKind::Include)
        {
            Verdict::Verbatim
        } else if !self.summaries.is_empty() || self.messages.iter().any(|h| h.in_replacement) {
            Verdict::InSummary
        } else if !self.messages.is_empty() || in_artifacts {
            Verdict::CompactedOut
        } else {
            Verdict::NotFound
        }
    }
}

/// Case-insensitive search, so "Lisbon" finds "lisbon".
pub fn contains(hay: &str, needle_lower: &str) -> bool {
    hay.to_lowercase().contains(needle_lower)
}

/// Searches `thread` (when given) and `plan`'s summaries for `text`.
pub fn explain(thread: Option<&Thread>, plan: &CompactionPlan, text: &str) -> Explanation {
    let needle = text.to_lowercase();
    let mut out = Explanation::default();
    let actions = plan.actions();
    let mut replaced: std::collections::HashMap<(ActionKind, String), bool> = Default::default();
    // Each summary is rendered once: its hit, and the memo of what stands
    // in for the messages it covers.
    for r in &plan.summarizations {
        let found = contains(&r.summary.render_as_message(), &needle);
        replaced.insert(
            (ActionKind::Summarize, r.span.start_message_id().to_string()),
            found,
        );
        if found {
            out.summaries.push(SummaryHit {
                action: ActionKind::Summarize,
                first_message_id: r.span.start_message_id().to_string(),
                last_message_id: r.span.end_message_id().to_string(),
                strategy: r.decided_by(crate::summarize::EXTRACTIVE_ID).to_string(),
                artifact_id: r.archive_artifact_id.clone().unwrap_or_default(),
            });
        }
    }
    for r in &plan.externalizations {
        let found = contains(&r.summary.render_as_message(), &needle);
        replaced.insert(
            (
                ActionKind::Externalize,
                r.span.start_message_id().to_string(),
            ),
            found,
        );
        if found {
            out.summaries.push(SummaryHit {
                action: ActionKind::Externalize,
                first_message_id: r.span.start_message_id().to_string(),
                last_message_id: r.span.end_message_id().to_string(),
                strategy: r.decided_by().into(),
                artifact_id: r.artifact_id.clone(),
            });
        }
    }
    if let Some(thread) = thread {
        for m in &thread.messages {
            if !contains(&m.searchable_text(), &needle) {
                continue;
            }
            let action = actions
                .get(m.id.as_str())
                .copied()
                .unwrap_or(Action::Include);
            let mut hit = message_hit(&m.id, action);
            // Once per record, not once per message it covers.
            if hit.action != ActionKind::Include {
                let key = (hit.action, hit.first_message_id.clone());
                hit.in_replacement = *replaced
                    .entry(key)
                    .or_insert_with(|| contains(&stand_in(action), &needle));
            }
            out.messages.push(hit);
        }
    }
    out
}

/// Where the plan put a message that holds the text: kept, or the record
/// that evicted it (its span, who decided, the artifact holding it).
fn message_hit(id: &str, action: Action<'_>) -> MessageHit {
    let evicted = |action, span, strategy: &str, artifact: Option<&String>| MessageHit {
        message_id: id.to_owned(),
        action,
        first_message_id: crate::model::SpanReference::start_message_id(span).to_string(),
        last_message_id: crate::model::SpanReference::end_message_id(span).to_string(),
        strategy: strategy.to_string(),
        artifact_id: artifact.cloned().unwrap_or_default(),
        in_replacement: false,
    };
    match action {
        Action::Include => MessageHit {
            message_id: id.to_owned(),
            action: ActionKind::Include,
            first_message_id: String::new(),
            last_message_id: String::new(),
            strategy: String::new(),
            artifact_id: String::new(),
            in_replacement: false,
        },
        Action::Summarize(r) => evicted(
            ActionKind::Summarize,
            &r.span,
            r.decided_by(crate::summarize::EXTRACTIVE_ID),
            r.archive_artifact_id.as_ref(),
        ),
        Action::Externalize(r) => evicted(
            ActionKind::Externalize,
            &r.span,
            r.decided_by(),
            Some(&r.artifact_id),
        ),
        Action::Clear(r) => evicted(
            ActionKind::Clear,
            &r.span,
            r.decided_by(),
            r.archive_artifact_id.as_ref(),
        ),
        Action::Drop(r) => evicted(
            ActionKind::Drop,
            &r.span,
            r.decided_by(),
            r.archive_artifact_id.as_ref(),
        ),
    }
}

/// What the prompt shows in place of a message the plan acts on.
fn stand_in(action: Action<'_>) -> String {
    match action {
        Action::Summarize(r) => r.summary.render_as_message(),
        Action::Externalize(r) => r.summary.render_as_message(),
        Action::Clear(r) => r.rendered_text().into_owned(),
        Action::Drop(r) => r.notice().unwrap_or_default(),
        Action::Include => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{
        ClearReason, ClearRecord, Content, DropRecord, DroppedSpanIndex, Message, MessageMetadata,
        Role, SpanReference,
    };

    fn msg(id: &str, turn: u32, text: &str) -> Message {
        Message {
            id: id.into(),
            role: Role::User,
            content: Content::Text(text.into()),
            tool_calls: Vec::new(),
            tool_result: None,
            turn,
            metadata: MessageMetadata::default(),
        }
    }

    fn thread() -> Thread {
        Thread::new(
            "t",
            vec![
                msg("m0", 0, "The vendor is Acme Freight."),
                msg("m1", 1, "Ticket OPS-1142 tracks the outage."),
                msg("m2", 2, "Acme Freight confirmed pickup."),
            ],
        )
    }

    #[test]
    fn verdicts_follow_what_the_prompt_shows() {
        let t = thread();
        let mut plan = CompactionPlan::new("t");
        plan.drops.push(DropRecord {
            span: SpanReference::of(&t, &[0]),
            reason: "over budget".into(),
            index: DroppedSpanIndex {
                keywords: Vec::new(),
                summary: String::new(),
                timestamp: None,
            },
            archive_artifact_id: Some("art_0123456789abcdef0123456789abcdef".into()),
        });
        plan.clearings.push(ClearRecord {
            span: SpanReference::of(&t, &[1]),
            preserved_fields: Default::default(),
            reason: ClearReason::Expired,
            replacement: "[cleared: ticket OPS-1142]".into(),
            archive_artifact_id: None,
            archive_note: None,
            strategy: String::new(),
        });
        // In a dropped message and a verbatim one: verbatim wins.
        let e = explain(Some(&t), &plan, "acme freight");
        assert_eq!(e.verdict_with(false), Verdict::Verbatim);
        assert_eq!(e.messages.len(), 2);
        let dropped = e.messages.iter().find(|h| h.message_id == "m0").unwrap();
        assert_eq!(dropped.action, ActionKind::Drop);
        assert_eq!(dropped.artifact_id, "art_0123456789abcdef0123456789abcdef");
        // Cleared, but the placeholder still says it.
        let e = explain(Some(&t), &plan, "OPS-1142");
        assert_eq!(e.verdict_with(false), Verdict::InSummary);
        assert!(e.messages[0].in_replacement);
        // Only in the dropped message.
        let e = explain(Some(&t), &plan, "the vendor is");
        assert_eq!(e.verdict_with(false), Verdict::CompactedOut);
        // Nowhere; an artifact hit alone still means compacted out.
        let e = explain(Some(&t), &plan, "zebra");
        assert_eq!(e.verdict_with(false), Verdict::NotFound);
        assert_eq!(e.verdict_with(true), Verdict::CompactedOut);
        // Without the thread only records are searched.
        assert_eq!(
            explain(None, &plan, "acme freight").verdict_with(false),
            Verdict::NotFound
        );
    }
}
