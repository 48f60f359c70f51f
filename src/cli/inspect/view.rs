//! What `compactd inspect` shows, computed once for every output form: the
//! thread cut into spans in thread order (each record of the plan is one
//! span; the messages between them form kept spans), what became of each
//! span, and the tokens each takes before and after the plan.
//!
//! Tokens are attributed through the renderer: the thread rendered without
//! a plan and with it, each rendered message counted as the request counts
//! it and charged to the thread message it comes from (`source_id`; a
//! summary's or pointer's to the first message of its span).

use std::collections::HashMap;

use serde::Serialize;

use compactd::model::{Action, ActionKind, CompactionPlan, Message, SpanReference, Thread};
use compactd::render::{Origin, Request, RequestCounter};

/// What became of a span, as the page and the table name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Fate {
    /// Shown verbatim.
    Kept,
    /// Each message's content replaced by a placeholder (the message stays).
    Cleared,
    /// Replaced by one summary message.
    Summarized,
    /// Moved to an artifact; a pointer with a summary stands in.
    Externalized,
    /// Left out (at most a one-line notice naming the archive stands in).
    Dropped,
    /// Taken out of the prompt by the plan, but passages of it are back in
    /// this request's recall block.
    Recalled,
}

impl Fate {
    /// Every fate, in the order the legend lists them.
    pub const ALL: [Fate; 6] = [
        Fate::Kept,
        Fate::Cleared,
        Fate::Summarized,
        Fate::Externalized,
        Fate::Dropped,
        Fate::Recalled,
    ];

    /// The display and attribute name.
    pub fn as_str(self) -> &'static str {
        match self {
            Fate::Kept => "kept",
            Fate::Cleared => "cleared",
            Fate::Summarized => "summarized",
            Fate::Externalized => "externalized",
            Fate::Dropped => "dropped",
            Fate::Recalled => "recalled",
        }
    }

    /// The fate a plan action gives, before recall.
    fn of(kind: ActionKind) -> Fate {
        match kind {
            ActionKind::Include => Fate::Kept,
            ActionKind::Clear => Fate::Cleared,
            ActionKind::Summarize => Fate::Summarized,
            ActionKind::Externalize => Fate::Externalized,
            ActionKind::Drop => Fate::Dropped,
        }
    }

    /// What it means, one line (the legend and the docs).
    pub fn meaning(self) -> &'static str {
        match self {
            Fate::Kept => "shown verbatim",
            Fate::Cleared => {
                "content replaced by a placeholder; the message and its tool pairing stay"
            }
            Fate::Summarized => "replaced by one summary message",
            Fate::Externalized => "moved to an artifact; a pointer with a summary stands in",
            Fate::Dropped => "left out; at most a notice naming the archive stands in",
            Fate::Recalled => {
                "taken out by the plan, but passages of it are in this request's recall block"
            }
        }
    }
}

/// One thread message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MessageView {
    /// Its id.
    pub id: String,
    /// Its turn.
    pub turn: u32,
    /// Its role.
    pub role: &'static str,
    /// Index of its span in [`Spans::spans`].
    pub span: usize,
    /// Tokens it renders to without the plan.
    pub tokens_before: u32,
    /// Tokens charged to it with the plan (a summary's to the span's first message).
    pub tokens_after: u32,
    /// What it says (tool calls as lines after the text), for the page.
    #[serde(skip)]
    pub text: String,
    /// What the request shows in its place, when that is not the message
    /// itself: a placeholder, a summary, a pointer or a drop notice.
    #[serde(skip)]
    pub stand_in: Option<String>,
}

/// A run of messages with one fate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SpanView {
    /// First message id.
    pub first_id: String,
    /// Last message id.
    pub last_id: String,
    /// Turn of the first message.
    pub first_turn: u32,
    /// Turn of the last message.
    pub last_turn: u32,
    /// Its messages, in thread order.
    pub message_ids: Vec<String>,
    /// The roles in it, each once, in order of appearance.
    pub roles: Vec<&'static str>,
    /// What became of it.
    pub fate: Fate,
    /// What the plan did (`include` for kept spans; for a recalled span, the
    /// eviction whose passages came back).
    pub action: ActionKind,
    /// Tokens without the plan.
    pub tokens_before: u32,
    /// Tokens with the plan (per-turn content such as the recall block not included).
    pub tokens_after: u32,
    /// Passages of it in the recall block.
    pub recalled_passages: u32,
    /// Who decided, why, and where the originals are (one line).
    pub detail: String,
}

impl SpanView {
    /// `first..last`: how the table, the page and its attributes name it.
    pub fn key(&self) -> String {
        format!("{}..{}", self.first_id, self.last_id)
    }

    /// `7` or `7-9`.
    pub fn turns(&self) -> String {
        if self.first_turn == self.last_turn {
            self.first_turn.to_string()
        } else {
            format!("{}-{}", self.first_turn, self.last_turn)
        }
    }
}

/// The thread as spans and messages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Spans {
    /// In thread order (by first message).
    pub spans: Vec<SpanView>,
    /// In thread order.
    pub messages: Vec<MessageView>,
}

/// Everything the spans are computed from.
pub struct Sources<'a> {
    /// The thread.
    pub thread: &'a Thread,
    /// The plan (normalized: every message in at most one record).
    pub plan: &'a CompactionPlan,
    /// The thread rendered without a plan.
    pub before: &'a Request,
    /// The thread rendered with the plan, without per-turn content.
    pub after: &'a Request,
    /// The message id of each passage in the recall block.
    pub recalled: &'a [String],
    /// How the request is counted.
    pub counter: &'a RequestCounter<'a>,
}

/// Tokens of each rendered message, summed by thread message id; the
/// stand-in text of each message that is not shown verbatim.
fn charge<'r>(
    r: &'r Request,
    counter: &RequestCounter<'_>,
) -> (HashMap<&'r str, u32>, HashMap<&'r str, String>) {
    let mut tokens: HashMap<&str, u32> = HashMap::new();
    let mut stand_ins: HashMap<&str, String> = HashMap::new();
    for m in &r.messages {
        if matches!(m.origin, Origin::Rehydrated | Origin::Recalled) {
            continue;
        }
        *tokens.entry(m.source_id.as_str()).or_default() += counter.message(m);
        if m.origin != Origin::Verbatim {
            stand_ins.insert(m.source_id.as_str(), m.content.text().into_owned());
        }
    }
    (tokens, stand_ins)
}

/// A message's text with its tool calls, for reading.
fn message_text(m: &Message) -> String {
    let mut s = String::new();
    if let Some(env) = &m.tool_result {
        s.push_str(&format!(
            "[result of {} · {}]\n",
            env.tool_call_id, env.tool_name
        ));
    }
    s.push_str(&m.archived_text());
    for c in &m.tool_calls {
        if !s.is_empty() {
            s.push('\n');
        }
        s.push_str(&format!(
            "[call {}] {} {}",
            c.id,
            c.name,
            c.arguments_json()
        ));
    }
    s
}

/// The span of a plan record, with how it reads in the detail column.
struct Record<'a> {
    span: &'a SpanReference,
    kind: ActionKind,
    detail: String,
}

fn with_artifact(mut s: String, id: Option<&str>) -> String {
    if let Some(id) = id.filter(|id| !id.is_empty()) {
        if !s.is_empty() {
            s.push_str(" · ");
        }
        s.push_str(id);
    }
    s
}

/// A free-text reason within 60 characters, on one line.
fn short(s: &str) -> String {
    let line = s.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(60) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line,
    }
}

fn records(plan: &CompactionPlan) -> Vec<Record<'_>> {
    let extractive = compactd::summarize::EXTRACTIVE_ID;
    let mut out = Vec::new();
    for r in &plan.clearings {
        let reason = serde_json::to_value(r.reason)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        out.push(Record {
            span: &r.span,
            kind: ActionKind::Clear,
            detail: with_artifact(
                format!("{reason} ({})", r.decided_by()),
                r.archive_artifact_id.as_deref(),
            ),
        });
    }
    for r in &plan.summarizations {
        out.push(Record {
            span: &r.span,
            kind: ActionKind::Summarize,
            detail: with_artifact(
                format!("by {}", r.decided_by(extractive)),
                r.archive_artifact_id.as_deref(),
            ),
        });
    }
    for r in &plan.externalizations {
        out.push(Record {
            span: &r.span,
            kind: ActionKind::Externalize,
            detail: with_artifact(String::new(), Some(&r.artifact_id)),
        });
    }
    for r in &plan.drops {
        let archive = match &r.archive_artifact_id {
            Some(id) => id.clone(),
            None => "not archived".to_string(),
        };
        out.push(Record {
            span: &r.span,
            kind: ActionKind::Drop,
            detail: format!("{} · {archive}", short(&r.reason)),
        });
    }
    out
}

/// The messages in groups, in thread order: each record's members (by
/// what the renderer decides when a message is in two records, in a plan
/// that was not normalized), and each run of messages no record holds.
fn groups(
    thread: &Thread,
    plan: &CompactionPlan,
    recs: &[Record<'_>],
) -> Vec<(Option<usize>, Vec<usize>)> {
    let pos: HashMap<&str, usize> = thread
        .messages
        .iter()
        .enumerate()
        .map(|(i, m)| (m.id.as_str(), i))
        .collect();
    let actions = plan.actions();
    let mut owner: Vec<Option<usize>> = vec![None; thread.messages.len()];
    for (r, rec) in recs.iter().enumerate() {
        for id in &rec.span.message_ids {
            let Some(&i) = pos.get(id.as_str()) else {
                continue;
            };
            let kind = actions
                .get(id.as_str())
                .map_or(ActionKind::Include, Action::kind);
            if kind == rec.kind {
                owner[i] = Some(r);
            }
        }
    }
    // Groups in thread order: a record's members, or a run of unowned messages.
    let mut groups: Vec<(Option<usize>, Vec<usize>)> = Vec::new();
    let mut group_of_record: HashMap<usize, usize> = HashMap::new();
    for (i, o) in owner.iter().enumerate() {
        match o {
            Some(r) => match group_of_record.get(r) {
                Some(&g) => groups[g].1.push(i),
                None => {
                    group_of_record.insert(*r, groups.len());
                    groups.push((Some(*r), vec![i]));
                }
            },
            None => match groups.last_mut() {
                Some((None, members)) if members.last().map(|l| l + 1) == Some(i) => {
                    members.push(i)
                }
                _ => groups.push((None, vec![i])),
            },
        }
    }
    groups
}

/// A span's fate, and its detail: recalled when the block carries any of
/// its passages (an evicted span only).
fn fate_and_detail(kind: ActionKind, passages: u32, detail: String) -> (Fate, String) {
    let fate = if kind != ActionKind::Include && passages > 0 {
        Fate::Recalled
    } else {
        Fate::of(kind)
    };
    let detail = if fate == Fate::Recalled {
        let noun = if passages == 1 { "passage" } else { "passages" };
        let mut d = format!(
            "{}; {passages} {noun} in the recall block",
            Fate::of(kind).as_str()
        );
        if !detail.is_empty() {
            d.push_str(" · ");
            d.push_str(&detail);
        }
        d
    } else {
        detail
    };
    (fate, detail)
}

/// Cuts the thread into spans: each record of the plan, and each run of
/// consecutive messages the plan leaves alone. Ids the thread does not
/// hold are skipped (the plan was validated against it before rendering).
pub fn spans(src: &Sources<'_>) -> Spans {
    let thread = src.thread;
    let (before, _) = charge(src.before, src.counter);
    let (after, mut stand_ins) = charge(src.after, src.counter);
    let mut recalled: HashMap<&str, u32> = HashMap::new();
    for id in src.recalled {
        *recalled.entry(id.as_str()).or_default() += 1;
    }
    let recs = records(src.plan);
    let groups = groups(thread, src.plan, &recs);
    let mut out = Spans {
        spans: Vec::with_capacity(groups.len()),
        messages: Vec::with_capacity(thread.messages.len()),
    };
    let mut message_views: Vec<Option<MessageView>> = vec![None; thread.messages.len()];
    for (g, (record, members)) in groups.iter().enumerate() {
        let (kind, detail) = match record {
            Some(r) => (recs[*r].kind, recs[*r].detail.clone()),
            None => (ActionKind::Include, String::new()),
        };
        let mut roles: Vec<&'static str> = Vec::new();
        let (mut tb, mut ta, mut passages) = (0u32, 0u32, 0u32);
        for &i in members {
            let m = &thread.messages[i];
            let role = m.role.as_str();
            if !roles.contains(&role) {
                roles.push(role);
            }
            let b = before.get(m.id.as_str()).copied().unwrap_or(0);
            let a = after.get(m.id.as_str()).copied().unwrap_or(0);
            tb += b;
            ta += a;
            passages += recalled.get(m.id.as_str()).copied().unwrap_or(0);
            message_views[i] = Some(MessageView {
                id: m.id.clone(),
                turn: m.turn,
                role,
                span: g,
                tokens_before: b,
                tokens_after: a,
                text: message_text(m),
                stand_in: stand_ins.remove(m.id.as_str()),
            });
        }
        let (fate, detail) = fate_and_detail(kind, passages, detail);
        // Members are never empty: a group is created with its first member.
        let first = &thread.messages[members[0]];
        let last = &thread.messages[members[members.len() - 1]];
        out.spans.push(SpanView {
            first_id: first.id.clone(),
            last_id: last.id.clone(),
            first_turn: first.turn,
            last_turn: last.turn,
            message_ids: members
                .iter()
                .map(|&i| thread.messages[i].id.clone())
                .collect(),
            roles,
            fate,
            action: kind,
            tokens_before: tb,
            tokens_after: ta,
            recalled_passages: passages,
            detail,
        });
    }
    out.messages = message_views.into_iter().flatten().collect();
    out
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use compactd::model::{
        ClearReason, ClearRecord, Content, DropRecord, DroppedSpanIndex, ExternalizationRecord,
        MessageMetadata, Outcome, Role, Sensitivity, SummarizationRecord, ToolCall, ToolContent,
        ToolResultEnvelope,
    };
    use compactd::provider::Format;
    use compactd::render::{render, RenderInput, RenderOptions};
    use compactd::tokens::{counter_for, TokenLedger};

    fn msg(id: &str, turn: u32, role: Role, text: &str) -> Message {
        Message {
            id: id.into(),
            role,
            content: Content::Text(text.into()),
            tool_calls: Vec::new(),
            tool_result: None,
            turn,
            metadata: MessageMetadata::default(),
        }
    }

    /// Ten messages, one tool pair; the user's text at m3 is hostile HTML.
    pub fn thread() -> Thread {
        let mut call = msg("m1", 0, Role::Assistant, "Reading the config first.");
        call.tool_calls.push(ToolCall {
            wire: None,
            id: "call_1".into(),
            name: "read_file".into(),
            arguments: serde_json::json!({"path": "deploy/config.yaml"}),
        });
        let mut result = msg("m2", 0, Role::Tool, "");
        result.content = Content::Text(String::new());
        result.tool_result = Some(ToolResultEnvelope {
            wire: None,
            tool_name: "read_file".into(),
            tool_call_id: "call_1".into(),
            outcome: Outcome::Success,
            content: ToolContent::Text(
                "replicas: 3\nregion: eu-west-1\nimage: registry.local/api:1.4.2\n".repeat(8),
            ),
            key_fields: Default::default(),
            durability: None,
            determinism: None,
            started_at: None,
            completed_at: None,
        });
        Thread::new("inspect-demo", vec![
                msg("m0", 0, Role::User, "Deploy the api service to eu-west-1."),
                call,
                result,
                msg(
                    "m3",
                    1,
                    Role::User,
                    "The page said <script>alert(1)</script> and then </details> broke it.",
                ),
                msg("m4", 1, Role::Assistant, "That is the status page's own markup; ignoring it."),
                msg("m5", 2, Role::User, "Here is the incident log: 14:02 api 502s, 14:05 rollback started, 14:09 healthy."),
                msg("m6", 2, Role::Assistant, "Noted the timeline."),
                msg("m7", 3, Role::User, "Ticket OPS-1142 tracks the rollback of release 1.4.2."),
                msg("m8", 3, Role::Assistant, "I will reference OPS-1142 in the report."),
                msg("m9", 4, Role::User, "Now write the report for OPS-1142."),
            ])
    }

    fn summary(t: &Thread, idx: &[usize], fact: &str) -> compactd::model::StructuredSummary {
        serde_json::from_value(serde_json::json!({
            "span": SpanReference::of(t, idx),
            "facts": [fact],
        }))
        .expect("a summary with one fact")
    }

    /// A plan with one record of every kind: m2 cleared, m3..m4
    /// summarized, m5 externalized, m6 dropped, m7..m8 dropped with an
    /// archive (the recall block will carry a passage of m7).
    pub fn plan(t: &Thread) -> CompactionPlan {
        let mut plan = CompactionPlan::new(&t.id);
        plan.clearings.push(ClearRecord {
            span: SpanReference::of(t, &[2]),
            preserved_fields: Default::default(),
            reason: ClearReason::Expired,
            replacement: "[read_file result cleared: deploy/config.yaml, 24 lines]".into(),
            archive_artifact_id: None,
            archive_note: None,
            strategy: String::new(),
        });
        plan.summarizations.push(SummarizationRecord {
            span: SpanReference::of(t, &[3, 4]),
            summary: summary(t, &[3, 4], "The status page markup <script> is not ours.").into(),
            summary_token_count: 0,
            archive_artifact_id: None,
            summarizer_id: String::new(),
        });
        plan.externalizations.push(ExternalizationRecord {
            span: SpanReference::of(t, &[5]),
            artifact_id: "art_00000000000000000000000000000005".into(),
            summary: summary(t, &[5], "Incident timeline 14:02-14:09."),
            rehydrate_hint: "the incident timeline".into(),
            sensitivity: Sensitivity::Internal,
            content_hash: String::new(),
            content_tokens: 0,
            strategy: String::new(),
        });
        plan.drops.push(DropRecord {
            span: SpanReference::of(t, &[6]),
            reason: "over budget".into(),
            index: DroppedSpanIndex {
                keywords: Vec::new(),
                summary: String::new(),
                timestamp: None,
            },
            archive_artifact_id: None,
        });
        plan.drops.push(DropRecord {
            span: SpanReference::of(t, &[7, 8]),
            reason: "over budget".into(),
            index: DroppedSpanIndex {
                keywords: vec!["ops-1142".into()],
                summary: String::new(),
                timestamp: None,
            },
            archive_artifact_id: Some("art_00000000000000000000000000000007".into()),
        });
        plan
    }

    /// The spans of [`thread`] under [`plan`], counted with o200k.
    pub fn demo() -> (Thread, CompactionPlan, Spans) {
        let t = thread();
        let p = plan(&t);
        p.validate_against(&t, &[Role::System])
            .expect("the demo plan fits the demo thread");
        let options = RenderOptions::default();
        let input = RenderInput {
            system: None,
            tools: &[],
            rehydrated: &[],
            options: &options,
            omit_pending_calls: false,
            summaries: None,
            workspace: None,
        };
        let before = render(&t, &CompactionPlan::new(&t.id), &input);
        let after = render(&t, &p, &input);
        let target = Format::target(Some(Format::Neutral), "gpt-4o");
        let counter = counter_for(target.framing.tokenizer, "gpt-4o");
        let ledger = TokenLedger::new(1024);
        let rc = RequestCounter::for_target(counter.as_ref(), &ledger, target);
        let spans = spans(&Sources {
            thread: &t,
            plan: &p,
            before: &before,
            after: &after,
            recalled: &["m7".to_string()],
            counter: &rc,
        });
        (t, p, spans)
    }

    #[test]
    fn every_fate_in_thread_order() {
        let (t, _, s) = demo();
        let got: Vec<(String, Fate, ActionKind)> = s
            .spans
            .iter()
            .map(|v| (v.key(), v.fate, v.action))
            .collect();
        assert_eq!(
            got,
            vec![
                ("m0..m1".into(), Fate::Kept, ActionKind::Include),
                ("m2..m2".into(), Fate::Cleared, ActionKind::Clear),
                ("m3..m4".into(), Fate::Summarized, ActionKind::Summarize),
                ("m5..m5".into(), Fate::Externalized, ActionKind::Externalize),
                ("m6..m6".into(), Fate::Dropped, ActionKind::Drop),
                ("m7..m8".into(), Fate::Recalled, ActionKind::Drop),
                ("m9..m9".into(), Fate::Kept, ActionKind::Include),
            ]
        );
        // Every message once, in thread order, in the span that names it.
        let ids: Vec<&str> = s.messages.iter().map(|m| m.id.as_str()).collect();
        let thread_ids: Vec<&str> = t.messages.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(ids, thread_ids);
        for m in &s.messages {
            assert!(s.spans[m.span].message_ids.contains(&m.id), "{}", m.id);
        }
        assert_eq!(s.spans[0].roles, vec!["user", "assistant"]);
        assert_eq!(s.spans[1].roles, vec!["tool"]);
        assert_eq!(s.spans[5].recalled_passages, 1);
        assert!(s.spans[5]
            .detail
            .starts_with("dropped; 1 passage in the recall block"));
        assert!(s.spans[5]
            .detail
            .ends_with("art_00000000000000000000000000000007"));
        assert_eq!(s.spans[4].detail, "over budget · not archived");
        assert_eq!(s.spans[1].detail, "expired (retention)");
    }

    #[test]
    fn tokens_before_and_after_follow_the_render() {
        let (_, _, s) = demo();
        for v in &s.spans {
            assert!(v.tokens_before > 0, "{}", v.key());
            match v.fate {
                Fate::Kept => assert_eq!(v.tokens_before, v.tokens_after, "{}", v.key()),
                // Dropped without an archive: nothing renders.
                Fate::Dropped => assert_eq!(v.tokens_after, 0),
                // The notice stands in for the archived drop.
                Fate::Recalled => assert!(v.tokens_after > 0),
                _ => assert!(v.tokens_after > 0, "{}", v.key()),
            }
        }
        // The cleared tool result shrank to its placeholder.
        assert!(s.spans[1].tokens_after < s.spans[1].tokens_before / 4);
        // A summary is charged to its span's first message.
        let m4 = s.messages.iter().find(|m| m.id == "m4").expect("m4");
        assert_eq!(m4.tokens_after, 0);
        let m3 = s.messages.iter().find(|m| m.id == "m3").expect("m3");
        assert!(m3.tokens_after > 0);
        assert!(m3
            .stand_in
            .as_deref()
            .is_some_and(|t| t.starts_with("[Context Summary - Turns 1-1]")));
        // Kept messages have no stand-in; every evicted one that renders has one.
        for m in &s.messages {
            let kept = s.spans[m.span].fate == Fate::Kept;
            assert_eq!(
                m.stand_in.is_none(),
                kept || m.tokens_after == 0,
                "{}",
                m.id
            );
        }
    }

    #[test]
    fn a_message_in_two_records_is_in_the_span_that_wins() {
        let t = thread();
        let mut p = plan(&t);
        // m6 is also cleared; the drop takes precedence.
        p.clearings.push(ClearRecord {
            span: SpanReference::of(&t, &[6]),
            preserved_fields: Default::default(),
            reason: ClearReason::Durability,
            replacement: "[cleared]".into(),
            archive_artifact_id: None,
            archive_note: None,
            strategy: String::new(),
        });
        let options = RenderOptions::default();
        let input = RenderInput {
            system: None,
            tools: &[],
            rehydrated: &[],
            options: &options,
            omit_pending_calls: false,
            summaries: None,
            workspace: None,
        };
        let r = render(&t, &p, &input);
        let target = Format::target(Some(Format::Neutral), "gpt-4o");
        let counter = counter_for(target.framing.tokenizer, "gpt-4o");
        let ledger = TokenLedger::new(16);
        let rc = RequestCounter::for_target(counter.as_ref(), &ledger, target);
        let s = spans(&Sources {
            thread: &t,
            plan: &p,
            before: &r,
            after: &r,
            recalled: &[],
            counter: &rc,
        });
        let m6: Vec<&SpanView> = s
            .spans
            .iter()
            .filter(|v| v.message_ids.contains(&"m6".to_string()))
            .collect();
        assert_eq!(m6.len(), 1);
        assert_eq!(m6[0].fate, Fate::Dropped);
        assert_eq!(s.messages.len(), t.messages.len());
    }
}
