//! The extractive summarizer: no model, only sentence-level cues. Deterministic
//! (same input, same bytes), so it is the always-available fallback and the
//! reference for the invariant tests. It stores the sentences themselves, never
//! paraphrases, so a constraint cannot be reworded away.

use crate::hash::FastSet;

use super::shapes;
use super::text::{clean, head, words};
use super::{SummarizeError, Summarizer, SummaryRequest};
use crate::model::{
    ArtifactReference, Decision, Message, OpenItem, Outcome, Role, SpanReference,
    StructuredSummary, ToolOutcome,
};

mod fit;
mod merge;
mod scoring;
mod sentences;
mod task;
mod words;

pub use fit::*;
pub use merge::*;
pub use scoring::*;
use sentences::*;
pub use task::*;
use words::*;

/// Cache-key id; bump the suffix whenever extraction output changes.
pub const EXTRACTIVE_ID: &str = "extractive-v2";

const FACT_MAX_CHARS: usize = 300;
/// Words a sentence after a fact needs to belong to its statement (fewer
/// is a "Thanks!").
const STATEMENT_TAIL_WORDS: usize = 3;
const DECISION_MAX_CHARS: usize = 240;
const RATIONALE_MAX_CHARS: usize = 200;
const OPEN_ITEM_MAX_CHARS: usize = 240;
/// The current task at most: a request and the reply that follows it.
const TASK_MAX_CHARS: usize = 480;
const PLAN_STEP_MAX_CHARS: usize = 160;
const PLAN_MAX_STEPS: usize = 20;
const ERROR_MAX_CHARS: usize = 240;

/// The deterministic, model-free summarizer ("extractive-v1").
#[derive(Debug, Clone, Copy, Default)]
pub struct ExtractiveSummarizer;

impl Summarizer for ExtractiveSummarizer {
    fn id(&self) -> &str {
        EXTRACTIVE_ID
    }

    fn may_run_ahead(&self) -> bool {
        true
    }

    fn summarize(&self, req: &SummaryRequest<'_>) -> Result<StructuredSummary, SummarizeError> {
        let read = read_back(req);
        let fresh = match &read {
            None => extract(req.span.clone(), req.messages, req.scans, req.digests),
            Some(r) => extract(
                req.span.clone(),
                &r.messages,
                req.scans,
                r.digests.as_deref(),
            ),
        };
        let mut merged = match &read {
            None => merge_summaries(req.span.clone(), req.prior, &fresh),
            Some(r) => {
                // A quote hides the facts it says when rendered: they are
                // read from the quotes again.
                let quotes: Vec<Message> = r.summaries.iter().flat_map(quote_messages).collect();
                let quoted: Vec<&Message> = quotes.iter().collect();
                let mut said = extract(req.span.clone(), &quoted, None, None);
                said.current_task = None;
                let prior: Vec<&StructuredSummary> = req
                    .prior
                    .iter()
                    .copied()
                    .chain(&r.summaries)
                    .chain(std::iter::once(&said))
                    .collect();
                merge_summaries(req.span.clone(), &prior, &fresh)
            }
        };
        if req.rereads_prior {
            // The span's messages were all read again: what the prior
            // summaries left out is back among the candidates, so only this
            // fitting's omissions count.
            merged.omitted = 0;
        }
        let echoes = Echoes::of(req.messages);
        Ok(fit_to_size_with(merged, req.max_chars, &echoes))
    }
}

/// A span's messages that are summaries compactd rendered (a framework
/// that stores the compacted prompt hands them back), read back into their
/// entries, and the span's other messages with their digests.
struct ReadBack<'a> {
    summaries: Vec<StructuredSummary>,
    messages: Vec<&'a Message>,
    digests: Option<Vec<u128>>,
}

/// The user messages a read-back summary's quotes stand for, at their
/// turns, for the facts they say.
fn quote_messages(s: &StructuredSummary) -> Vec<Message> {
    s.requests
        .iter()
        .enumerate()
        .map(|(k, r)| {
            let (turn, text) = split_quote(r);
            Message {
                id: format!("quote-{k}"),
                role: Role::User,
                content: crate::model::Content::Text(text.to_string()),
                tool_calls: Vec::new(),
                tool_result: None,
                turn: turn.unwrap_or(0),
                metadata: Default::default(),
            }
        })
        .collect()
}

/// [`ReadBack`] of `req`'s messages; `None` when none is a summary (the
/// usual case, found without copying anything).
fn read_back<'a>(req: &SummaryRequest<'a>) -> Option<ReadBack<'a>> {
    let read = |m: &Message| {
        if m.role != Role::Assistant || m.tool_result.is_some() {
            return None;
        }
        let text = m.content.text();
        text.starts_with(crate::model::SUMMARY_HEADER)
            .then(|| crate::model::read_rendered(&text, req.span.clone()))
            .flatten()
    };
    let read: Vec<Option<StructuredSummary>> = req.messages.iter().map(|m| read(m)).collect();
    if read.iter().all(Option::is_none) {
        return None;
    }
    let unread = |i: &usize| read[*i].is_none();
    let messages = (0..req.messages.len())
        .filter(unread)
        .map(|i| req.messages[i])
        .collect();
    let digests = req
        .digests
        .map(|d| (0..d.len()).filter(unread).map(|i| d[i]).collect());
    Some(ReadBack {
        summaries: read.into_iter().flatten().collect(),
        messages,
        digests,
    })
}

/// Builds the summary of `messages` alone (no prior, no size cap).
fn extract(
    span: SpanReference,
    messages: &[&Message],
    scans: Option<&dyn super::Scans>,
    digests: Option<&[u128]>,
) -> StructuredSummary {
    let mut s = StructuredSummary::empty(span);
    s.requests = quote_requests(messages);
    let mut refs = References::default();
    let last_assistant_text = messages.iter().rposition(|m| {
        m.role == Role::Assistant && m.tool_result.is_none() && !m.content.text().trim().is_empty()
    });
    // What each message adds depends on that message alone (and where the
    // last assistant text is): parts made on every core, joined in order,
    // are the summary a pass in order makes.
    let at: Vec<usize> = (0..messages.len()).collect();
    let parts = crate::par::map(
        &at,
        |&i| messages[i].byte_len(),
        |&idx| {
            let m = messages[idx];
            let unanswered = m.role == Role::User && last_assistant_text.is_none_or(|j| j < idx);
            match scans {
                Some(kept) => {
                    let digest = digests
                        .and_then(|d| d.get(idx).copied())
                        .unwrap_or_else(|| crate::model::message_digest(m));
                    kept.part(digest, unanswered, &|| message_part(m, unanswered, scans))
                }
                None => std::sync::Arc::new(message_part(m, unanswered, None)),
            }
        },
    );
    for part in parts {
        s.facts.extend_from_slice(&part.facts);
        s.open_items.extend_from_slice(&part.open_items);
        s.decisions.extend_from_slice(&part.decisions);
        s.tool_outcomes.extend_from_slice(&part.tool_outcomes);
        s.artifacts.extend_from_slice(&part.artifacts);
        refs.user.extend_from_slice(&part.refs.user);
        refs.assistant.extend_from_slice(&part.refs.assistant);
        refs.calls.extend_from_slice(&part.refs.calls);
        refs.tools.extend_from_slice(&part.refs.tools);
    }
    s.current_task = current_task(messages);
    s.current_plan = messages
        .iter()
        .rev()
        .filter(|m| m.role == Role::Assistant && m.tool_result.is_none())
        .find_map(|m| last_list(&m.content.text()))
        .unwrap_or_default();
    s.references = refs.ordered();
    s
}

/// What one message adds to a summary, in the order a pass over the span
/// adds it. It depends on the message alone and on whether it is a user
/// message no assistant text follows in its span, so a caller may keep it
/// for the next summary that reads the message (see
/// [`Scans::part`](super::Scans::part)).
#[derive(Debug, Default)]
pub struct MessagePart {
    facts: Vec<String>,
    open_items: Vec<OpenItem>,
    decisions: Vec<Decision>,
    tool_outcomes: Vec<ToolOutcome>,
    artifacts: Vec<ArtifactReference>,
    refs: References,
}

impl MessagePart {
    /// Bytes it holds, about (for a bounded cache).
    pub fn weight(&self) -> u64 {
        use crate::cache::{entries_weight, strings_weight};
        let r = &self.refs;
        160 + strings_weight(&self.facts)
            + entries_weight(
                &self.decisions,
                &self.open_items,
                &self.artifacts,
                &self.tool_outcomes,
            )
            + strings_weight(&r.user)
            + strings_weight(&r.assistant)
            + strings_weight(&r.calls)
            + strings_weight(&r.tools)
    }
}

/// The part of message `m` (`unanswered`: a user message no assistant
/// text follows in its span, so a question in it is still open).
fn message_part(m: &Message, unanswered: bool, scans: Option<&dyn super::Scans>) -> MessagePart {
    let mut part = MessagePart::default();
    for call in &m.tool_calls {
        part.refs.calls.extend(argument_references(&call.arguments));
    }
    if let Some(env) = &m.tool_result {
        let text = env.content.to_text();
        let salient = match scans {
            Some(kept) => kept.salient(&text, TOOL_REFERENCES),
            None => super::salient::salient(&text, TOOL_REFERENCES),
        };
        let error = if env.outcome == Outcome::Success {
            // A success whose output reports an error (a deploy log
            // ending in a failure, a test run with one failing test).
            if let Some(e) = &salient.error {
                // Tool text, quoted as data (cut first, so the quote closes).
                let room = FACT_MAX_CHARS.saturating_sub(env.tool_name.chars().count() + 8);
                let quoted = serde_json::to_string(&clean(e, room)).unwrap_or_default();
                part.facts
                    .push(format!("{TOOL_TAG}{}: {quoted}", env.tool_name));
            }
            None
        } else if text.trim_start().starts_with('{') {
            error_line(env)
        } else {
            salient
                .error
                .clone()
                .map(|e| clean(&e, ERROR_MAX_CHARS))
                .or_else(|| error_line(env))
        };
        if let Some(e) = &error {
            part.refs.calls.extend(reference_values(e));
        }
        part.refs.tools.extend(salient.references);
        part.tool_outcomes.push(ToolOutcome {
            tool_name: env.tool_name.clone(),
            outcome: env.outcome,
            key_fields: env.key_fields.clone(),
            error_message: error,
        });
        for (k, v) in &env.key_fields {
            if let (true, Some(id)) = (is_artifact_key(k), v.as_str()) {
                if !id.trim().is_empty() {
                    part.artifacts.push(ArtifactReference {
                        artifact_id: id.to_string(),
                        description: format!("{} output (turn {})", env.tool_name, m.turn),
                        rehydrate_hint: "read_artifact if you need its full content".to_string(),
                    });
                }
            }
        }
        return part;
    }
    let text = m.content.text();
    if text.trim().is_empty() {
        return part;
    }
    let context = format!("{}, turn {}", m.role.as_str(), m.turn);
    // What a person pasted in a code block (an error, a log) is skipped
    // as prose; its error line and odd values are kept.
    if m.role != Role::Assistant {
        let code = fenced_code(&text);
        if !code.is_empty() {
            let pasted = super::salient::salient(&code, TOOL_REFERENCES);
            if let Some(e) = pasted.error {
                part.facts.push(clean(&e, FACT_MAX_CHARS));
            }
            part.refs.user.extend(pasted.references);
        }
    }
    for block in blocks(&text) {
        let before = part.facts.len();
        let sentences = split_sentences(&block);
        let mut stated = Vec::with_capacity(sentences.len());
        for sent in &sentences {
            let n = part.facts.len();
            sentence_part(m, sent, unanswered, &context, &mut part);
            stated.push(part.facts.len() > n);
        }
        if m.role != Role::Assistant && block.chars().count() <= FACT_MAX_CHARS {
            if let Some(statement) = statement_of(&sentences, &stated) {
                part.facts.truncate(before);
                part.facts.push(statement);
            }
        }
    }
    part
}

/// A short block's facts as one statement, the unit a person states a rule
/// in ("Only Python 3.11. No network calls from the sandbox." is one rule,
/// not two sentences ranked apart): from its first sentence that states a
/// fact to its last sentence that says anything, so what leads up to it
/// ("Hi!", "You are a coding agent.") and a closing "Thanks!" are left out.
/// `None` when no sentence states one.
fn statement_of(sentences: &[Sentence], stated: &[bool]) -> Option<String> {
    let first = stated.iter().position(|&s| s)?;
    let last = (first..sentences.len())
        .rev()
        .find(|&i| {
            stated[i]
                || sentences[i]
                    .text
                    .split_whitespace()
                    .nth(STATEMENT_TAIL_WORDS - 1)
                    .is_some()
        })
        .unwrap_or(first);
    let texts: Vec<&str> = sentences[first..=last]
        .iter()
        .map(|s| s.text.as_str())
        .collect();
    Some(texts.join(" "))
}

/// What sentence `sent` of message `m` adds to `part`.
fn sentence_part(
    m: &Message,
    sent: &Sentence,
    unanswered: bool,
    context: &str,
    part: &mut MessagePart,
) {
    let w = words(&sent.text);
    let c = cues(&sent.text, &w);
    let open_item = |desc: &str| OpenItem {
        description: clean(desc, OPEN_ITEM_MAX_CHARS),
        context: context.to_string(),
        priority: priority_of(&w),
    };
    match m.role {
        Role::System | Role::Developer | Role::User => {
            let lower = sent.text.to_lowercase();
            if sent.question {
                if unanswered || c.open {
                    part.open_items.push(open_item(&sent.text));
                }
                // "Could you format dates DD.MM.YYYY from now on?" is
                // an instruction in question form.
                if is_request_question(&lower)
                    && (c.constraint || opens_with_verb(request_body(&sent.text)))
                {
                    part.facts.push(clean(&sent.text, FACT_MAX_CHARS));
                }
            } else if c.open && !m.metadata.protected {
                part.open_items.push(open_item(&sent.text));
            } else if let Some(d) = (m.role == Role::User)
                .then(|| decision_of(&sent.text, m))
                .flatten()
            {
                // "OK, let's go with the phone check": the user decides too.
                part.decisions.push(d);
            } else if w.len() >= 2
                && (m.metadata.protected
                    || c.constraint
                    || c.soft
                    || c.imperative
                    || specificity(&sent.text) > 0)
            {
                part.facts.push(clean(&sent.text, FACT_MAX_CHARS));
            }
            part.refs.user.extend(reference_values(&sent.text));
        }
        Role::Assistant => {
            if sent.question {
                return;
            }
            if c.open {
                part.open_items.push(open_item(&sent.text));
            } else if let Some(d) = decision_of(&sent.text, m) {
                part.decisions.push(d);
            } else if shapes::scan(&sent.text)
                .iter()
                .any(|(sh, _)| sh.is_reference() || matches!(sh, shapes::Shape::Money))
            {
                // A finding with a concrete value ("the cert at
                // /etc/ssl/api.pem expired"), ranked below the user's.
                let fact = format!("{ASSISTANT_TAG}{}", sent.text);
                part.facts.push(clean(&fact, FACT_MAX_CHARS));
            }
            part.refs.assistant.extend(reference_values(&sent.text));
        }
        Role::Tool => {}
    }
}

/// How many references are taken from one tool result: a result of 500
/// rows names 500 ids, and the few that stand out stand for the rest (the
/// whole result is archived).
const TOOL_REFERENCES: usize = 4;
const REFERENCE_MAX_CHARS: usize = 120;

/// References by where they were found, listed most trusted first so the
/// fitting (which leaves out later entries first among equals) keeps the
/// user's ids before a tool's.
#[derive(Debug, Default)]
struct References {
    user: Vec<String>,
    assistant: Vec<String>,
    calls: Vec<String>,
    tools: Vec<String>,
}

impl References {
    fn ordered(self) -> Vec<String> {
        let mut seen = FastSet::default();
        [self.user, self.assistant, self.calls, self.tools]
            .into_iter()
            .flatten()
            .filter(|r| seen.insert(r.clone()))
            .collect()
    }
}

/// The shaped values of `text` worth listing on their own.
fn reference_values(text: &str) -> Vec<String> {
    shapes::scan(text)
        .into_iter()
        .filter(|(shape, v)| shape.is_reference() && v.chars().count() <= REFERENCE_MAX_CHARS)
        .map(|(_, v)| v)
        .collect()
}

/// Shaped values among a tool call's arguments (a path read, an id looked up).
fn argument_references(args: &serde_json::Value) -> Vec<String> {
    fn walk(v: &serde_json::Value, depth: u32, out: &mut Vec<String>) {
        match v {
            serde_json::Value::String(s) => out.extend(reference_values(head(s, 2048))),
            serde_json::Value::Array(a) if depth < 3 => {
                a.iter().take(16).for_each(|x| walk(x, depth + 1, out));
            }
            serde_json::Value::Object(m) if depth < 3 => {
                m.values().take(32).for_each(|x| walk(x, depth + 1, out));
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(args, 0, &mut out);
    out
}

#[cfg(test)]
mod tests;
