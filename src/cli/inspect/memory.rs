//! What compactd remembers of a thread now, by kind: the messages it never
//! compacts, what its summaries hold, what it can read back, and the recent
//! turns it shows as they are. The answer to "does the agent still know X,
//! and in which form?" without reading the whole prompt.

use serde::Serialize;

use compactd::model::{CompactionPlan, Thread};

use super::view::{Fate, Spans};

/// Longest line quoted from a pinned message.
const QUOTE_CHARS: usize = 120;

/// A message kept whatever the budget.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pinned {
    /// Its id.
    pub id: String,
    /// Its role.
    pub role: &'static str,
    /// The label the caller gave it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Its first line.
    pub first_line: String,
}

/// What one summary holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// The span it stands for, `first..last`.
    pub span: String,
    /// Its turns, `3-17`.
    pub turns: String,
    /// Who wrote it (`extractive` or the LLM's id).
    pub summarizer: String,
    /// The task it says is under way.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current_task: Option<String>,
    /// Its facts and constraints, as written.
    pub facts: Vec<String>,
    /// Decisions, open items and references, counted.
    pub decisions: usize,
    /// Open items.
    pub open_items: usize,
    /// Identifiers and paths.
    pub references: usize,
}

/// Something the agent can read back with `read_artifact`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReadBack {
    /// The artifact.
    pub artifact_id: String,
    /// What it holds: `externalized m4` or `archive of m3..m17`.
    pub holds: String,
    /// When to read it.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub hint: String,
}

/// The recent turns shown verbatim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Recent {
    /// First message of the verbatim tail.
    pub first_id: String,
    /// Its first turn.
    pub first_turn: u32,
    /// Messages in it.
    pub messages: usize,
}

/// The whole answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Memory {
    /// Never compacted.
    pub pinned: Vec<Pinned>,
    /// Summaries, oldest first.
    pub summaries: Vec<Summary>,
    /// What can be read back.
    pub read_back: Vec<ReadBack>,
    /// Results whose content is a placeholder keeping their key fields.
    pub cleared_results: usize,
    /// Messages left out entirely (their archive is in `read_back`).
    pub dropped_messages: usize,
    /// The verbatim tail.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recent: Option<Recent>,
}

/// What `plan` leaves the model of `thread` (the plan normalized; `spans`
/// computed from both); `pinned` is the pipeline's own rule per message
/// (`compactd::reduce::pinned_messages`).
pub fn of(thread: &Thread, plan: &CompactionPlan, spans: &Spans, pinned: &[bool]) -> Memory {
    let pinned = pinned_messages(thread, pinned);
    let turns = |first: u32, last: u32| {
        if first == last {
            first.to_string()
        } else {
            format!("{first}-{last}")
        }
    };
    let mut summaries: Vec<Summary> = plan
        .summarizations
        .iter()
        .map(|r| Summary {
            span: format!("{}..{}", r.span.start_message_id(), r.span.end_message_id()),
            turns: turns(r.span.first_turn, r.span.last_turn),
            summarizer: r.decided_by(compactd::summarize::EXTRACTIVE_ID).to_string(),
            current_task: r.summary.current_task.clone(),
            facts: r.summary.facts.clone(),
            decisions: r.summary.decisions.len(),
            open_items: r.summary.open_items.len(),
            references: r.summary.references.len(),
        })
        .collect();
    let position = |id: &str| thread.index_of(id).unwrap_or(usize::MAX);
    summaries.sort_by_key(|s| position(s.span.split("..").next().unwrap_or("")));
    let read_back = read_back(plan);
    let cleared_results = plan
        .clearings
        .iter()
        .map(|r| r.span.message_ids.len())
        .sum();
    let dropped_messages = plan.drops.iter().map(|r| r.span.message_ids.len()).sum();
    // The tail: the last spans, as long as they are shown verbatim.
    let tail: Vec<_> = spans
        .spans
        .iter()
        .rev()
        .take_while(|s| s.fate == Fate::Kept)
        .collect();
    let recent = tail.last().map(|first| Recent {
        first_id: first.first_id.clone(),
        first_turn: first.first_turn,
        messages: tail.iter().map(|s| s.message_ids.len()).sum(),
    });
    Memory {
        pinned,
        summaries,
        read_back,
        cleared_results,
        dropped_messages,
        recent,
    }
}

/// The pinned messages, each by its first line.
fn pinned_messages(thread: &Thread, pinned: &[bool]) -> Vec<Pinned> {
    thread
        .messages
        .iter()
        .zip(pinned)
        .filter(|(_, &p)| p)
        .map(|(m, _)| {
            let text = m.text();
            let line = text
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("")
                .trim();
            let mut first_line: String = line.chars().take(QUOTE_CHARS).collect();
            if first_line.len() < line.len() {
                first_line.push('…');
            }
            Pinned {
                id: m.id.clone(),
                role: m.role.as_str(),
                label: m.metadata.label.clone(),
                first_line,
            }
        })
        .collect()
}

/// What can be read back, each artifact once: externalized spans (with
/// their hint), and the archives of summarized, cleared and dropped ones.
fn read_back(plan: &CompactionPlan) -> Vec<ReadBack> {
    let mut read_back: Vec<ReadBack> = Vec::new();
    let mut add = |id: &Option<String>, holds: String, hint: &str| {
        if let Some(id) = id {
            if !read_back.iter().any(|r| &r.artifact_id == id) {
                read_back.push(ReadBack {
                    artifact_id: id.clone(),
                    holds,
                    hint: hint.to_string(),
                });
            }
        }
    };
    let span_of = |s: &compactd::model::SpanReference| {
        if s.message_ids.len() == 1 {
            s.start_message_id().to_string()
        } else {
            format!("{}..{}", s.start_message_id(), s.end_message_id())
        }
    };
    for r in &plan.externalizations {
        add(
            &Some(r.artifact_id.clone()),
            format!("externalized {}", span_of(&r.span)),
            &r.rehydrate_hint,
        );
    }
    for r in &plan.summarizations {
        add(
            &r.archive_artifact_id,
            format!("archive of summarized {}", span_of(&r.span)),
            "",
        );
    }
    for r in &plan.clearings {
        add(
            &r.archive_artifact_id,
            "archive of cleared results".into(),
            "",
        );
    }
    for r in &plan.drops {
        add(
            &r.archive_artifact_id,
            format!("archive of dropped {}", span_of(&r.span)),
            "",
        );
    }
    read_back
}

/// The terminal form: a few lines per kind.
pub fn lines(m: &Memory, printable: impl Fn(&str) -> String) -> Vec<String> {
    let mut out = vec!["what compactd remembers now:".to_string()];
    if m.pinned.is_empty() {
        out.push("  pinned: none".into());
    } else {
        out.push(format!("  pinned ({}), never compacted:", m.pinned.len()));
        for p in &m.pinned {
            let label = p
                .label
                .as_deref()
                .map(|l| format!("[{}] ", printable(l)))
                .unwrap_or_default();
            out.push(format!(
                "    {} {} {label}{}",
                p.id,
                p.role,
                printable(&p.first_line)
            ));
        }
    }
    for s in &m.summaries {
        out.push(format!(
            "  summary of {} (turns {}, {}): {} facts, {} decisions, {} open items, {} references",
            printable(&s.span),
            s.turns,
            printable(&s.summarizer),
            s.facts.len(),
            s.decisions,
            s.open_items,
            s.references
        ));
        if let Some(t) = &s.current_task {
            out.push(format!("    task: {}", printable(t)));
        }
        for f in s.facts.iter().take(3) {
            out.push(format!("    - {}", printable(f)));
        }
        if s.facts.len() > 3 {
            out.push(format!("    … {} more facts", s.facts.len() - 3));
        }
    }
    if !m.read_back.is_empty() {
        out.push(format!("  can read back ({}):", m.read_back.len()));
        for r in &m.read_back {
            out.push(format!(
                "    {} {}",
                printable(&r.artifact_id),
                printable(&r.holds)
            ));
        }
    }
    if m.cleared_results > 0 || m.dropped_messages > 0 {
        out.push(format!(
            "  placeholders: {} cleared results (key fields kept); {} messages left out",
            m.cleared_results, m.dropped_messages
        ));
    }
    match &m.recent {
        Some(r) => out.push(format!(
            "  verbatim: the last {} messages, from {} (turn {})",
            r.messages,
            printable(&r.first_id),
            r.first_turn
        )),
        None => out.push("  verbatim: no tail (the last messages are compacted too)".into()),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::view::tests::demo;
    use super::*;

    #[test]
    fn pinned_messages_summaries_read_backs_and_the_tail_are_listed() {
        let (mut t, plan, spans) = demo();
        std::sync::Arc::make_mut(&mut t.messages[0])
            .metadata
            .protected = true;
        std::sync::Arc::make_mut(&mut t.messages[0]).metadata.label =
            Some("Runbook \u{1b}[2J policy".into());
        let pinned: Vec<bool> = t.messages.iter().map(|m| m.metadata.protected).collect();
        let m = of(&t, &plan, &spans, &pinned);
        assert_eq!(m.pinned.len(), 1);
        assert_eq!(m.pinned[0].id, t.messages[0].id);
        assert_eq!(m.summaries.len(), plan.summarizations.len());
        assert!(m
            .read_back
            .iter()
            .any(|r| r.holds.starts_with("externalized")));
        assert_eq!(m.recent.as_ref().map(|r| r.first_id.as_str()), Some("m9"));
        let text = lines(&m, |s| s.replace('\u{1b}', "\\e")).join("\n");
        assert!(text.contains("[Runbook \\e[2J policy]"), "{text}");
        assert!(!text.contains('\u{1b}'));
    }
}
