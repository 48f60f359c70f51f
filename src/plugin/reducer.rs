//! A plugin as a pipeline step: it sees the projection where its position
//! puts it (what earlier reducers did, what is pinned or in the tail, the
//! budget) and proposes; the host validates every proposal before applying
//! any, so a plugin can never break the invariants the core keeps: ids
//! exist, spans are consecutive and in order, nothing pinned or in the
//! tail or already evicted is touched, and tool calls and results are never
//! split.
//!
//! Each applied proposal is measured (the request total before and after)
//! and reported beside the plugin's own estimate as a `compact.proposal`
//! event on the plugin's span.

use std::collections::BTreeMap;
use std::sync::Arc;

use prost::Message as _;

use super::wire;
use super::LoadedPlugin;
use crate::model::{ClearReason, SpanReference};
use crate::proto::pb;
use crate::reduce::{CompactError, Externalize, PipelineState, Projection, Reducer, TokenBudget};
use crate::telemetry::events::{self, ProposalApplied, PROPOSAL_EVENTS};

/// The pipeline step of one plugin.
#[derive(Debug, Clone)]
pub(crate) struct PluginReducer {
    plugin: Arc<LoadedPlugin>,
    model: String,
    /// The thread as `AnalyzeRequest` field 1, encoded once per compaction
    /// and shared by its plugin steps (the snapshot never changes).
    thread: Arc<std::sync::OnceLock<Vec<u8>>>,
}

/// `reducers` (the core's, in pipeline order) with the plugins' steps put
/// after the reducer each names; a plugin whose reducer the policy turned
/// off goes where that reducer would have been. Plugins at one position run
/// least aggressive first (seed 000: strategies in order of aggressiveness),
/// ties in configured order: the gentler step may meet the target alone.
pub fn insert_plugins(
    reducers: Vec<Box<dyn Reducer>>,
    plugins: &[Arc<LoadedPlugin>],
    model: &str,
) -> Vec<Box<dyn Reducer>> {
    let mut core: Vec<Option<Box<dyn Reducer>>> = reducers.into_iter().map(Some).collect();
    let mut out: Vec<Box<dyn Reducer>> = Vec::with_capacity(core.len() + plugins.len());
    // One compaction's steps share the thread's encoding.
    let thread = Arc::new(std::sync::OnceLock::new());
    for position in super::POSITIONS {
        if let Some(r) = core
            .iter_mut()
            .find(|r| r.as_ref().is_some_and(|r| r.name() == position))
            .and_then(Option::take)
        {
            out.push(r);
        }
        let mut here: Vec<&Arc<LoadedPlugin>> = plugins
            .iter()
            .filter(|p| p.settings().after == position)
            .collect();
        // Stable: equal aggressiveness keeps the configured order.
        here.sort_by_key(|p| p.settings().aggressiveness);
        for p in here {
            out.push(Box::new(PluginReducer {
                plugin: Arc::clone(p),
                model: model.to_string(),
                thread: Arc::clone(&thread),
            }));
        }
    }
    // A core reducer no position names (none today) keeps its place at the end.
    out.extend(core.into_iter().flatten());
    out
}

/// What the plugin may do with message `i`.
fn state(p: &Projection<'_>, i: usize) -> wire::MessageState {
    if !p.is_included(i) {
        wire::MessageState::Evicted
    } else if p.is_pinned(i) {
        wire::MessageState::Pinned
    } else if p.is_locked(i) {
        wire::MessageState::Tail
    } else {
        wire::MessageState::Free
    }
}

/// A proposal the host checked, ready to apply.
enum Checked {
    Clear {
        i: usize,
        replacement: String,
        preserved: BTreeMap<String, serde_json::Value>,
    },
    Summarize {
        indices: Vec<usize>,
        summary: Box<crate::model::StructuredSummary>,
    },
    Drop {
        indices: Vec<usize>,
        rationale: String,
    },
    Externalize {
        i: usize,
        /// The content and its tokens, as the core's step measures them.
        content: (String, u32),
        summary: Option<Box<crate::model::StructuredSummary>>,
        hint: Option<String>,
    },
}

impl Checked {
    /// The messages it touches.
    fn touched(&self) -> Vec<usize> {
        match self {
            Checked::Clear { i, .. } | Checked::Externalize { i, .. } => vec![*i],
            Checked::Summarize { indices, .. } | Checked::Drop { indices, .. } => indices.clone(),
        }
    }

    /// Its action, as `compact.proposal` names it.
    fn action(&self) -> &'static str {
        match self {
            Checked::Clear { .. } => "clear",
            Checked::Summarize { .. } => "summarize",
            Checked::Drop { .. } => "drop",
            Checked::Externalize { .. } => "externalize",
        }
    }
}

/// A plugin's rationale as a drop reason: one line, at most 200 chars.
fn short(text: &str) -> String {
    let line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    line.chars().take(200).collect()
}

/// Longest placeholder a plugin may put in place of a message.
const MAX_REPLACEMENT_BYTES: usize = 16 * 1024;

/// Longest rehydration hint a plugin may give a pointer (kept in the plan,
/// matched for automatic read-back, and listed by a summary that later
/// absorbs the pointer).
const MAX_HINT_BYTES: usize = 1024;

/// A plugin's summary of the messages at `indices`, checked as the API
/// checks summaries, its span set by the host.
fn summary_of(
    p: &Projection<'_>,
    indices: &[usize],
    summary: pb::StructuredSummary,
) -> Result<crate::model::StructuredSummary, String> {
    let summary = pb::StructuredSummary {
        span: Some(pb::SpanReference::from(&SpanReference::of(
            p.thread, indices,
        ))),
        ..summary
    };
    crate::model::StructuredSummary::try_from(summary)
        .map_err(|e| format!("the summary is invalid: {e}"))
}

impl PluginReducer {
    /// Positions of `ids`: each must exist, be free and follow the previous
    /// one directly; a span that removes messages (`whole_units`) must not
    /// split a tool call from its result. A clear keeps the message, and so
    /// the pairing.
    fn span(
        &self,
        p: &Projection<'_>,
        ids: &[String],
        whole_units: bool,
    ) -> Result<Vec<usize>, String> {
        if ids.is_empty() {
            return Err("a span with no messages".into());
        }
        let mut indices = Vec::with_capacity(ids.len());
        for id in ids {
            let i = p.position(id).ok_or_else(|| format!("no message {id:?}"))?;
            if let Some(&last) = indices.last() {
                if i != last + 1 {
                    return Err(format!(
                        "{id:?} does not directly follow the previous message"
                    ));
                }
            }
            if state(p, i) != wire::MessageState::Free {
                return Err(format!("{id:?} is not free ({:?})", state(p, i)));
            }
            indices.push(i);
        }
        if !whole_units {
            return Ok(indices);
        }
        let (first, last) = (indices[0], indices[indices.len() - 1]);
        let (s, _) = p.units.ranges[p.units.unit_of[first]];
        let (_, e) = p.units.ranges[p.units.unit_of[last]];
        if s != first || e != last {
            return Err("the span splits a tool call from its result".into());
        }
        Ok(indices)
    }

    fn check(&self, p: &Projection<'_>, prop: wire::Proposal) -> Result<Checked, String> {
        use wire::proposal::Action;
        match prop.action {
            Some(Action::Clear(c)) => {
                let i = self.span(p, std::slice::from_ref(&c.message_id), false)?[0];
                if !p.is_tool_result(i) {
                    return Err(format!("{:?} is not a tool result", c.message_id));
                }
                if c.replacement.trim().is_empty() || c.replacement.len() > MAX_REPLACEMENT_BYTES {
                    return Err("a replacement must be 1 to 16384 bytes".into());
                }
                let mut preserved = BTreeMap::new();
                for (k, v) in c.preserved_fields {
                    let v: serde_json::Value = serde_json::from_str(&v)
                        .map_err(|e| format!("preserved field {k:?} is not JSON: {e}"))?;
                    preserved.insert(k, v);
                }
                Ok(Checked::Clear {
                    i,
                    replacement: c.replacement,
                    preserved,
                })
            }
            Some(Action::Summarize(s)) => {
                let indices = self.span(p, &s.message_ids, true)?;
                let summary = s.summary.ok_or("a summary proposal without a summary")?;
                let summary = summary_of(p, &indices, summary)?;
                Ok(Checked::Summarize {
                    indices,
                    summary: Box::new(summary),
                })
            }
            Some(Action::Externalize(x)) => {
                // One message, kept in place as a pointer: no pairing to split.
                let i = self.span(p, std::slice::from_ref(&x.message_id), false)?[0];
                if !p.message(i).tool_calls.is_empty() {
                    return Err(format!(
                        "{:?} carries tool calls (they stay verbatim)",
                        x.message_id
                    ));
                }
                let content = Externalize::content(p, i);
                if content.1 == 0 {
                    return Err(format!("{:?} has no content to move", x.message_id));
                }
                let summary = x
                    .summary
                    .map(|s| summary_of(p, &[i], s).map(Box::new))
                    .transpose()?;
                if x.rehydrate_hint.len() > MAX_HINT_BYTES {
                    return Err("a rehydrate hint must be at most 1024 bytes".into());
                }
                let hint = Some(x.rehydrate_hint.trim())
                    .filter(|h| !h.is_empty())
                    .map(str::to_string);
                Ok(Checked::Externalize {
                    i,
                    content,
                    summary,
                    hint,
                })
            }
            Some(Action::Drop(d)) => Ok(Checked::Drop {
                indices: self.span(p, &d.message_ids, true)?,
                rationale: short(&prop.rationale),
            }),
            None => Err("a proposal with no action".into()),
        }
    }

    /// Applies one checked proposal; false when the host undid it (its
    /// replacement was no smaller) or left it out.
    fn apply(&self, p: &mut Projection<'_>, state: &mut PipelineState<'_>, c: Checked) -> bool {
        let id = self.plugin.id();
        match c {
            Checked::Clear {
                i,
                replacement,
                preserved,
            } => {
                let before = p.cost(i);
                p.clear(i, ClearReason::Plugin, replacement, preserved);
                if p.cost(i) >= before {
                    // A placeholder no smaller than the content is no gain.
                    p.undo_last_clear(i);
                    false
                } else {
                    p.attribute_clear(i, id);
                    true
                }
            }
            Checked::Summarize { indices, summary } => {
                let summary = {
                    let mut s = *summary;
                    state.redactor.redact_summary(&mut s);
                    s
                };
                let kept = p.summarize_unless_larger(&indices, summary);
                if kept {
                    p.attribute_summary(indices[0], &format!("plugin:{id}"));
                }
                kept
            }
            Checked::Drop { indices, rationale } => {
                let reason = if rationale.is_empty() {
                    format!("plugin {id}")
                } else {
                    format!("plugin {id}: {rationale}")
                };
                p.drop_messages(&indices, &reason);
                true
            }
            Checked::Externalize {
                i,
                content,
                summary,
                hint,
            } => {
                // As the core's step: content the agent just read back is
                // not moved out again at once (no fetch loop).
                if state.skip_aggressive {
                    return false;
                }
                let summary = summary.map(|s| {
                    let mut s = *s;
                    state.redactor.redact_summary(&mut s);
                    s
                });
                // The hint is kept and returned with the plan, and may quote content.
                let hint = hint.map(|h| state.redactor.redact(&h).into_owned());
                let done = Externalize::message(p, i, state, content, summary, hint);
                if done {
                    // Credited to the plugin, and never given back by the
                    // refill, like its other decisions.
                    p.attribute_externalization(i, id);
                }
                done
            }
        }
    }

    /// The encoded `AnalyzeRequest`: the thread's field, encoded by the
    /// compaction's first plugin step, then the rest (prost writes fields in
    /// tag order and the thread is field 1, so the bytes are the message's).
    fn request(&self, p: &Projection<'_>, budget: &TokenBudget) -> Vec<u8> {
        let thread = self.thread.get_or_init(|| {
            let mut b = Vec::new();
            prost::encoding::message::encode(1, &pb::Thread::from(p.thread), &mut b);
            b
        });
        let n = p.len();
        let rest = wire::AnalyzeRequest {
            thread: None,
            states: (0..n).map(|i| state(p, i) as i32).collect(),
            message_tokens: (0..n).map(|i| p.cost(i)).collect(),
            total_tokens: p.total(),
            target_tokens: budget.target(),
            hard_limit_tokens: budget.hard_limit(),
            model: self.model.clone(),
            after: self.plugin.settings().after.clone(),
            aggressiveness: self.plugin.settings().aggressiveness,
        }
        .encode_to_vec();
        [thread.as_slice(), &rest].concat()
    }

    /// Takes the plugin out of rotation and says so in the response; a
    /// required plugin fails the compaction.
    fn fault(&self, state: &mut PipelineState<'_>, reason: String) -> Result<(), CompactError> {
        self.outcome("fault");
        state.warn(format!(
            "plugin {} taken out of rotation: {reason}",
            self.plugin.id()
        ));
        self.plugin.poison(reason.clone());
        self.unavailable(reason)
    }

    /// Records how a call ended on the plugin span (entered by `reduce`)
    /// and in the metrics.
    fn outcome(&self, outcome: &'static str) {
        let span = tracing::Span::current();
        span.record("compactd.outcome", outcome);
        if outcome != "ok" {
            span.record("otel.status_code", "ERROR");
        }
        crate::telemetry::metrics().plugin_call(self.plugin.name(), outcome);
    }

    /// `Err` when the plugin is required, else nothing.
    fn unavailable(&self, reason: String) -> Result<(), CompactError> {
        if self.plugin.settings().required {
            return Err(CompactError::StrategyUnavailable {
                strategy: self.plugin.id().to_string(),
                reason,
            });
        }
        Ok(())
    }
}

impl Reducer for PluginReducer {
    fn name(&self) -> &'static str {
        self.plugin.name()
    }

    fn reduce(
        &self,
        p: &mut Projection<'_>,
        budget: &TokenBudget,
        state: &mut PipelineState<'_>,
    ) -> Result<(), CompactError> {
        // The FFI call and the checks of its answer, with the plugin's
        // name@version; a child of the step's `reduce <name>` span.
        let span = tracing::info_span!(
            "compactd.plugin",
            otel.name = %format_args!("plugin {}", self.plugin.id()),
            otel.status_code = tracing::field::Empty,
            compactd.plugin = %self.plugin.id(),
            compactd.outcome = tracing::field::Empty,
            compactd.proposals = tracing::field::Empty,
            compactd.proposal_events_left_out = tracing::field::Empty,
        );
        let _in = span.enter();
        if let Some(reason) = self.plugin.poisoned() {
            self.outcome("skipped");
            state.warn(format!(
                "plugin {} is out of rotation ({reason}); skipped",
                self.plugin.id()
            ));
            return self.unavailable(reason.to_string());
        }
        let bytes = self.request(p, budget);
        let answer = match self.plugin.analyze(bytes) {
            Ok(a) => a,
            Err(fault) => {
                return self.fault(state, fault.to_string());
            }
        };
        let response = match wire::AnalyzeResponse::decode(answer.as_slice()) {
            Ok(r) => r,
            Err(e) => {
                return self.fault(state, format!("returned garbage: {e}"));
            }
        };
        // Every proposal is checked against the projection before any is
        // applied: one bad proposal discards the whole answer.
        let mut checked = Vec::with_capacity(response.proposals.len());
        let mut claimed = std::collections::HashSet::new();
        for (k, prop) in response.proposals.into_iter().enumerate() {
            let estimate = prop.estimated_tokens_freed;
            match self.check(p, prop) {
                Ok(c) => {
                    if c.touched().iter().any(|i| !claimed.insert(*i)) {
                        return self.fault(state, format!("proposal {k} touches a message twice"));
                    }
                    checked.push((c, estimate));
                }
                Err(why) => {
                    return self.fault(state, format!("proposal {k} refused: {why}"));
                }
            }
        }
        self.outcome("ok");
        let id = self.plugin.id();
        let applied = checked.len();
        for (k, (c, estimate)) in checked.into_iter().enumerate() {
            let (action, message_count) = (c.action(), c.touched().len());
            let before = p.total();
            let accepted = self.apply(p, state, c);
            if k < PROPOSAL_EVENTS {
                events::proposal(&ProposalApplied {
                    strategy: id,
                    action,
                    message_count,
                    estimated_tokens_freed: estimate,
                    tokens_freed: before.saturating_sub(p.total()),
                    accepted,
                });
            }
        }
        span.record("compactd.proposals", crate::telemetry::int(applied));
        if applied > PROPOSAL_EVENTS {
            span.record(
                "compactd.proposal_events_left_out",
                crate::telemetry::int(applied - PROPOSAL_EVENTS),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reduce::{Clear, Compress, Retention};

    fn plugin(name: &str, after: &str, aggressiveness: u32) -> Arc<LoadedPlugin> {
        Arc::new(LoadedPlugin::stand_in(super::super::PluginSettings {
            name: name.into(),
            path: format!("lib{name}.so").into(),
            sha256: "0".repeat(64),
            after: after.into(),
            aggressiveness,
            config: serde_json::json!({}),
            timeout_ms: 100,
            required: false,
        }))
    }

    #[test]
    fn plugins_at_one_position_run_least_aggressive_first_ties_in_configured_order() {
        let core: Vec<Box<dyn Reducer>> = vec![
            Box::new(Retention),
            Box::new(Compress::default()),
            Box::new(Clear),
            Box::new(Externalize),
        ];
        // Configured order deliberately not by aggressiveness.
        let plugins = vec![
            plugin("bold", "compress", 90),
            plugin("first-tie", "compress", 40),
            plugin("early", "start", 100),
            plugin("gentle", "compress", 10),
            plugin("second-tie", "compress", 40),
            plugin("late", "externalize", 0),
            plugin("after-clear", "clear", 70),
        ];
        let names: Vec<&str> = insert_plugins(core, &plugins, "gpt-4o")
            .iter()
            .map(|r| r.name())
            .collect();
        assert_eq!(
            names,
            vec![
                "early",
                "retention",
                "compress",
                "gentle",
                "first-tie",
                "second-tie",
                "bold",
                "clear",
                "after-clear",
                "externalize",
                "late",
            ]
        );
    }
}
