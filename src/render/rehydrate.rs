//! Fitting rehydrated artifacts into the request's rehydration reserve.

use std::borrow::Cow;
use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::model::{is_artifact_id, CompactionPlan, Message, Role, Thread};
use crate::recall::tokenize::{is_identifier, terms};
use crate::tokens::truncate_to_tokens;

use super::renderer::render_rehydrated;
use super::{Rehydrated, RenderOptions, RequestCounter};

/// What happened to one artifact asked for (or named by the agent) this turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RehydrationReport {
    /// The artifact.
    pub artifact_id: String,
    /// Its content was cut to fit.
    pub truncated: bool,
    /// Nothing of it fit, or it was blocked; it is not in the request.
    pub omitted: bool,
    /// Found in the agent's latest turn, not asked for explicitly.
    #[serde(default)]
    pub auto: bool,
    /// Why it was not injected, when it was refused before fitting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked: Option<RehydrationBlocked>,
}

/// Why an artifact the agent named was not injected automatically.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RehydrationBlocked {
    /// Confidential or restricted: only an explicit read may return it.
    Sensitivity,
    /// The caller lacks `rehydrate` or `artifact:read:<sensitivity>`.
    Permission,
    /// Already named within the cooldown: it was injected then (loop breaking).
    Cooldown,
    /// More artifacts were named this turn than may be injected.
    TurnLimit,
    /// No such artifact for this tenant and thread (or expired).
    NotFound,
    /// The store did not answer; the turn goes on without it.
    Unavailable,
}

impl RehydrationBlocked {
    /// The wire name (`SENSITIVITY`, …), for events and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            RehydrationBlocked::Sensitivity => "SENSITIVITY",
            RehydrationBlocked::Permission => "PERMISSION",
            RehydrationBlocked::Cooldown => "COOLDOWN",
            RehydrationBlocked::TurnLimit => "TURN_LIMIT",
            RehydrationBlocked::NotFound => "NOT_FOUND",
            RehydrationBlocked::Unavailable => "UNAVAILABLE",
        }
    }
}

/// Automatic rehydration: artifacts the agent names in its latest turn are
/// injected for that turn, within limits that keep it from looping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AutoRehydrate {
    /// On by default; a request may turn it off.
    pub enabled: bool,
    /// Artifacts injected automatically per turn at most.
    pub max_per_turn: u32,
    /// Tokens of one automatically injected artifact at most (cut beyond).
    pub max_tokens_per_artifact: u32,
    /// An artifact named again within this many turns is not injected again.
    pub cooldown_turns: u32,
}

impl Default for AutoRehydrate {
    fn default() -> Self {
        AutoRehydrate {
            enabled: true,
            max_per_turn: 2,
            max_tokens_per_artifact: 1500,
            cooldown_turns: 3,
        }
    }
}

/// Artifact ids (`art_` + 32 lowercase hex, not part of a longer word) in
/// `text`, in order.
pub fn artifact_ids_in(text: &str) -> impl Iterator<Item = &str> {
    let bytes = text.as_bytes();
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    text.match_indices("art_").filter_map(move |(at, _)| {
        let end = at + 36;
        let id = text.get(at..end)?;
        let before_ok = at == 0 || !word(bytes[at - 1]);
        let after_ok = bytes.get(end).is_none_or(|&b| !word(b));
        (is_artifact_id(id) && before_ok && after_ok).then_some(id)
    })
}

/// Where the agent can name an artifact: user and assistant text and the
/// arguments of tool calls (tool results and system text are not the
/// agent asking). Calls the agent made this turn count whether or not
/// their result is in yet.
fn agent_text(m: &Message) -> impl Iterator<Item = Cow<'_, str>> {
    let text = matches!(m.role, Role::User | Role::Assistant).then(|| m.content.text());
    text.into_iter()
        .chain(m.tool_calls.iter().map(|c| Cow::Owned(c.arguments_json())))
}

/// Artifact ids the agent named in `turns`, first mention first, each once.
fn named_in(thread: &Thread, turns: impl std::ops::RangeBounds<u32>) -> Vec<String> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for m in thread.messages.iter().filter(|m| turns.contains(&m.turn)) {
        for text in agent_text(m) {
            for id in artifact_ids_in(&text) {
                if seen.insert(id.to_string()) {
                    out.push(id.to_string());
                }
            }
        }
    }
    out
}

/// Artifact ids the agent named in the thread's latest turn, first mention
/// first, each once.
pub fn named_this_turn(thread: &Thread) -> Vec<String> {
    let turn = thread.current_turn();
    named_in(thread, turn..=turn)
}

/// Ids named in the `cooldown` turns before the latest: they were injected
/// (or refused) then, and injecting them again every turn is how
/// rehydration loops start. Derived from the thread itself, so every
/// replica decides alike without shared state.
pub fn named_recently(thread: &Thread, cooldown: u32) -> BTreeSet<String> {
    let turn = thread.current_turn();
    named_in(thread, turn.saturating_sub(cooldown)..turn)
        .into_iter()
        .collect()
}

/// The identifiers (paths, ids, names with digits or joiners) that a
/// person's message in the thread's latest turn names: what a request can
/// match a rehydrate hint by. Empty when the latest turn has no such
/// message (the agent is working, nobody asked anything new).
pub fn request_identifiers(thread: &Thread) -> BTreeSet<String> {
    let turn = thread.current_turn();
    thread
        .messages
        .iter()
        .rev()
        .take_while(|m| m.turn == turn)
        .find(|m| m.role == Role::User && m.tool_result.is_none())
        .map(|m| {
            terms(&m.content.text())
                .into_iter()
                .filter(|t| is_identifier(t))
                .collect()
        })
        .unwrap_or_default()
}

/// Externalized artifacts the latest request asks for without naming
/// them: their rehydrate hint or summary names an identifier the request
/// names (`wanted`, from [`request_identifiers`]). Most shared identifiers
/// first, then the newest record. Only bound ids (a committed plan's).
pub fn hinted(plan: &CompactionPlan, wanted: &BTreeSet<String>) -> Vec<String> {
    if wanted.is_empty() {
        return Vec::new();
    }
    let mut scored: Vec<(usize, usize, &str)> = Vec::new();
    for (k, r) in plan.externalizations.iter().enumerate() {
        if !is_artifact_id(&r.artifact_id) {
            continue;
        }
        let text = format!("{}\n{}", r.rehydrate_hint, r.summary.render_as_message());
        let named: BTreeSet<String> = terms(&text)
            .into_iter()
            .filter(|t| is_identifier(t))
            .collect();
        let shared = wanted.intersection(&named).count();
        if shared > 0 {
            scored.push((shared, k, &r.artifact_id));
        }
    }
    scored.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)));
    let mut out: Vec<String> = Vec::new();
    for (_, _, id) in scored {
        if !out.iter().any(|o| o == id) {
            out.push(id.to_string());
        }
    }
    out
}

/// Fits artifacts into `reserve` tokens, in request order: each is cut so that
/// its rendered message (framing included) fits what is left; one that does
/// not fit at all is omitted. Returns the content to inject and a report per
/// artifact.
pub fn fit_rehydrated(
    counter: &RequestCounter<'_>,
    fetched: Vec<(String, String)>,
    reserve: u32,
    options: &RenderOptions,
) -> (Vec<Rehydrated>, Vec<RehydrationReport>) {
    let message_tokens = |r: &Rehydrated| counter.message(&render_rehydrated(r, options));
    let mut remaining = reserve;
    let mut injected = Vec::new();
    let mut report = Vec::new();
    for (artifact_id, content) in fetched {
        let mut r = Rehydrated {
            artifact_id: artifact_id.clone(),
            content,
            truncated: false,
        };
        let mut cost = message_tokens(&r);
        if cost > remaining {
            let overhead = message_tokens(&Rehydrated {
                artifact_id: artifact_id.clone(),
                content: String::new(),
                truncated: true,
            });
            let full = std::mem::take(&mut r.content);
            let mut cap = remaining.saturating_sub(overhead);
            r.truncated = true;
            // Token counts of concatenations are not exactly additive: shrink
            // the cap until the whole rendered message fits.
            loop {
                r.content = truncate_to_tokens(counter.counter, &full, cap).0;
                cost = message_tokens(&r);
                if cost <= remaining || cap == 0 {
                    break;
                }
                cap = cap.saturating_sub((cost - remaining).max(1));
            }
            if cost > remaining || r.content.is_empty() {
                report.push(RehydrationReport {
                    artifact_id,
                    truncated: true,
                    omitted: true,
                    auto: false,
                    blocked: None,
                });
                continue;
            }
        }
        remaining -= cost;
        report.push(RehydrationReport {
            artifact_id,
            truncated: r.truncated,
            omitted: false,
            auto: false,
            blocked: None,
        });
        injected.push(r);
    }
    (injected, report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{CompactionPlan, Thread};
    use crate::render::{render, RenderInput, RenderOptions};
    use crate::tokens::{o200k, TokenLedger};

    #[test]
    fn artifacts_are_cut_to_the_reserve_in_order_and_the_rest_omitted() {
        let counter = o200k();
        let ledger = TokenLedger::new(1000);
        let rc = RequestCounter::for_target(
            counter.as_ref(),
            &ledger,
            crate::provider::Format::openai_chat_target(),
        );
        let long = "line of the stored log with some detail\n".repeat(400);
        let fetched = vec![
            ("art_a".to_string(), "short note".to_string()),
            ("art_b".to_string(), long),
            ("art_c".to_string(), "never fits".to_string()),
        ];
        let (injected, report) = fit_rehydrated(&rc, fetched, 300, &RenderOptions::default());
        assert_eq!(injected.len(), 2);
        assert!(!report[0].truncated && !report[0].omitted);
        assert!(report[1].truncated && !report[1].omitted);
        assert!(report[2].omitted, "{report:?}");
        let used: u32 = injected
            .iter()
            .map(|r| {
                let req = render(
                    &Thread {
                        id: String::new(),
                        messages: Vec::new(),
                    },
                    &CompactionPlan::default(),
                    &RenderInput {
                        system: None,
                        tools: &[],
                        rehydrated: std::slice::from_ref(r),
                        options: &RenderOptions::default(),
                        omit_pending_calls: false,
                        summaries: None,
                        workspace: None,
                    },
                );
                req.messages.iter().map(|m| rc.message(m)).sum::<u32>()
            })
            .sum();
        assert!(used <= 300, "{used}");
    }
}
