//! The compaction policy: what each reducer may do. Serializable so that it
//! can come from a config file or a request, and is part of the plan fingerprint.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::{Durability, Role};
use crate::render::RenderOptions;

/// Retention of one tool's results: age- and count-based.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ToolRetention {
    /// Keep full results for this many turns, then stub them.
    pub keep_turns: Option<u32>,
    /// Keep the last N results of this tool, stub older ones.
    pub keep_last: Option<u32>,
    /// Results are durable facts: never stubbed.
    pub never_evict: bool,
}

/// How costly it is to run a tool again, as its owner states it. A
/// replayable result of an `expensive` tool is kept or externalized, not
/// cleared: clearing it would send the agent back to pay for it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplayCost {
    /// Pure and local (a calculation).
    Free,
    /// Quick and unmetered (reading a local file). The default.
    #[default]
    Cheap,
    /// Paid, rate-limited or slow (a web search, a metered API).
    Expensive,
}

/// One tool's durability policy beyond its durability class (which stays
/// in [`Policy::durability`], so a tool has one durability entry).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ToolPolicy {
    /// Fields of the result that every stub, clear and pointer of it keeps,
    /// read from the output itself (a JSON path such as `order.id`, or a
    /// key anywhere in the JSON, or a `name: value` line of text), on top
    /// of the envelope's own key fields, which win on a clash.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub must_preserve_fields: Vec<String>,
    /// Output above this many tokens is externalized (instead of the
    /// policy-wide threshold).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub externalize_threshold_tokens: Option<u32>,
    /// How costly running the tool again is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay_cost: Option<ReplayCost>,
}

/// A standing window on the dialogue: only the most recent turns (or
/// tokens) are shown, whatever the trigger says. Cut in chunks: the window
/// may grow a quarter past its cap before older turns are dropped down to
/// it, so the prompt's prefix (the provider's cache) changes now and then,
/// not every turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StandingWindow {
    /// Turns shown at most (the newest).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u32>,
    /// Tokens the shown turns may take (whole turns, the newest first; the
    /// last turn is always shown).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
}

/// Per-tier caps: guards inside the single total budget that start
/// eviction early, so one tier cannot starve the others (seed 001: "tool
/// results ≤ 30% of the window"). A tier over its cap is brought down to
/// the cap scaled by `target_ratio / trigger_ratio`, the same hysteresis as
/// the total, so the prompt's prefix changes in chunks.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TierCaps {
    /// Tool results (as rendered: verbatim, stubs, pointers) may take at
    /// most this fraction of `max_input_tokens`, in (0, 1].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_results_ratio: Option<f64>,
}

impl TierCaps {
    /// No cap set (left out of the serialized policy: fingerprints stay).
    pub fn is_empty(&self) -> bool {
        self.tool_results_ratio.is_none()
    }
}

/// The whole policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Policy {
    /// Compaction starts above this fraction of the input limit.
    pub trigger_ratio: f64,
    /// And stops at this fraction (chunked compaction).
    pub target_ratio: f64,
    /// Safety margin in tokens.
    pub safety_buffer_tokens: u32,
    /// Response reserve in tokens.
    pub response_reserve_tokens: u32,
    /// Reserve for auto-rehydrated artifacts.
    pub rehydration_reserve_tokens: u32,
    /// Reserve for per-turn injected content.
    pub injection_reserve_tokens: u32,
    /// The most recent turns kept verbatim (shrunk toward 1 when needed).
    pub keep_recent_turns: u32,
    /// The most recent tool call/result groups kept verbatim (shrunk toward 1).
    pub keep_tool_io_pairs: u32,
    /// Tokens the verbatim tail may take (at most half the target): the
    /// recent turns are kept only as far as they fit, but the last user
    /// message and the calls after it always are.
    pub keep_recent_tokens: u32,
    /// Roles that are never compacted.
    pub roles_never_prune: Vec<Role>,
    /// Tool-result retention for tools without their own entry.
    pub retention_default: ToolRetention,
    /// Per-tool retention.
    pub retention: BTreeMap<String, ToolRetention>,
    /// Durability for tools that do not declare one.
    pub default_durability: Durability,
    /// Per-tool durability overrides (the envelope's own value wins).
    pub durability: BTreeMap<String, Durability>,
    /// Per-tool fields to preserve, externalize threshold and replay cost.
    /// Left out of the serialized policy while empty, so fingerprints of
    /// existing plans do not change.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub tools: BTreeMap<String, ToolPolicy>,
    /// Content above this many tokens is externalized.
    pub externalize_threshold_tokens: u32,
    /// Source tokens per summarization chunk.
    pub summary_chunk_tokens: u32,
    /// Size cap of one rendered summary, in tokens.
    pub summary_max_tokens: u32,
    /// At most this many summary messages; older ones are rolled into one.
    pub max_summaries: u32,
    /// How an LLM summarizer writes summaries; `None`: its configured
    /// style. (The extractive summarizer has one form.) Unset fields are
    /// not serialized, so adding this left existing fingerprints alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary_style: Option<crate::summarize::llm::Style>,
    /// Reducers that may run.
    pub enable: Enabled,
    /// Rendering options (they change token counts, so they are policy).
    pub render: RenderOptions,
    /// A standing window on the dialogue, applied before the trigger.
    /// Unset by default (and then not serialized: fingerprints stay).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<StandingWindow>,
    /// Per-tier caps inside the total budget (none by default).
    #[serde(skip_serializing_if = "TierCaps::is_empty")]
    pub tier_caps: TierCaps,
    /// The key that marks a message protected in a provider's JSON (top
    /// level or under `metadata`): `protected` unless the server's config
    /// names another (then `protected` is an ordinary key). Server config
    /// only; typed messages carry `metadata.protected`.
    #[serde(
        default = "default_protected_flag",
        skip_serializing_if = "is_default_protected_flag"
    )]
    pub protected_flag: String,
}

/// The protected mark's default key.
pub const DEFAULT_PROTECTED_FLAG: &str = "protected";

fn default_protected_flag() -> String {
    DEFAULT_PROTECTED_FLAG.to_string()
}

fn is_default_protected_flag(f: &str) -> bool {
    f == DEFAULT_PROTECTED_FLAG
}

/// Switches for each reducer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Enabled {
    /// Tool-result retention.
    pub retention: bool,
    /// Tool-output post-processing.
    pub compress: bool,
    /// Durability-based clearing.
    pub clear: bool,
    /// Externalization to the artifact store.
    pub externalize: bool,
    /// Summarization.
    pub summarize: bool,
    /// Sliding window / drop.
    pub drop: bool,
    /// Archive the originals of cleared, summarized and dropped messages as
    /// artifacts the prompt names. Left out of the serialized policy while
    /// on (the default), so fingerprints of existing plans do not change.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub archive: bool,
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

impl Default for Enabled {
    fn default() -> Self {
        Enabled {
            retention: true,
            compress: true,
            clear: true,
            externalize: true,
            summarize: true,
            drop: true,
            archive: true,
        }
    }
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            trigger_ratio: 0.85,
            target_ratio: 0.70,
            safety_buffer_tokens: 500,
            response_reserve_tokens: 0,
            rehydration_reserve_tokens: 2000,
            injection_reserve_tokens: 0,
            keep_recent_turns: 6,
            keep_tool_io_pairs: 4,
            keep_recent_tokens: 20_000,
            roles_never_prune: vec![Role::System, Role::Developer],
            retention_default: ToolRetention {
                keep_turns: Some(8),
                keep_last: None,
                never_evict: false,
            },
            retention: BTreeMap::new(),
            default_durability: Durability::Anchoring,
            durability: BTreeMap::new(),
            tools: BTreeMap::new(),
            externalize_threshold_tokens: 1000,
            summary_chunk_tokens: 8000,
            summary_max_tokens: 800,
            max_summaries: 4,
            summary_style: None,
            enable: Enabled::default(),
            render: RenderOptions::default(),
            window: None,
            tier_caps: TierCaps::default(),
            protected_flag: default_protected_flag(),
        }
    }
}

/// A policy value outside its valid range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} {reason}")]
pub struct PolicyError {
    /// Dotted field path ("policy.trigger_ratio").
    pub field: String,
    /// What is wrong.
    pub reason: String,
}

impl Policy {
    /// Checks ranges; errors give the field path.
    pub fn validate(&self) -> Result<(), PolicyError> {
        let err = |field: &str, reason: &str| {
            Err(PolicyError {
                field: format!("policy.{field}"),
                reason: reason.to_string(),
            })
        };
        if !(self.trigger_ratio > 0.0 && self.trigger_ratio <= 1.0) {
            return err("trigger_ratio", "must be in (0.0, 1.0]");
        }
        if !(self.target_ratio > 0.0 && self.target_ratio <= self.trigger_ratio) {
            return err("target_ratio", "must be in (0.0, trigger_ratio]");
        }
        if self.keep_recent_turns == 0 {
            return err("keep_recent_turns", "must be at least 1");
        }
        if self.summary_chunk_tokens == 0 {
            return err("summary_chunk_tokens", "must be at least 1");
        }
        if self.summary_max_tokens < 64 {
            return err("summary_max_tokens", "must be at least 64");
        }
        if self.max_summaries == 0 {
            return err("max_summaries", "must be at least 1");
        }
        if self.externalize_threshold_tokens == 0 {
            return err("externalize_threshold_tokens", "must be at least 1");
        }
        if let Some(w) = &self.window {
            if w.max_turns.is_none() && w.max_tokens.is_none() {
                return err("window", "needs max_turns or max_tokens");
            }
            if w.max_turns == Some(0) {
                return err("window.max_turns", "must be at least 1");
            }
            if w.max_tokens == Some(0) {
                return err("window.max_tokens", "must be at least 1");
            }
        }
        // A provider's own message keys cannot be the mark.
        const TAKEN: [&str; 10] = [
            "role",
            "content",
            "name",
            "label",
            "metadata",
            "tool_calls",
            "tool_call_id",
            "type",
            "id",
            "created_at",
        ];
        let flag = self.protected_flag.as_str();
        if flag.is_empty() || flag.len() > 64 || TAKEN.contains(&flag) {
            return err(
                "protected_flag",
                "must be 1 to 64 bytes and not a key messages already use",
            );
        }
        if let Some(r) = self.tier_caps.tool_results_ratio {
            if !(r > 0.0 && r <= 1.0) {
                return err("tier_caps.tool_results_ratio", "must be in (0, 1]");
            }
        }
        for (tool, t) in &self.tools {
            if t.externalize_threshold_tokens == Some(0) {
                return Err(PolicyError {
                    field: format!("policy.tools[{tool}].externalize_threshold_tokens"),
                    reason: "must be at least 1".into(),
                });
            }
            if let Some(i) = t
                .must_preserve_fields
                .iter()
                .position(|f| f.trim().is_empty() || f.split('.').any(str::is_empty))
            {
                return Err(PolicyError {
                    field: format!("policy.tools[{tool}].must_preserve_fields[{i}]"),
                    reason: "must be a field name or a dotted path of them".into(),
                });
            }
        }
        for (tool, r) in std::iter::once(("*", &self.retention_default))
            .chain(self.retention.iter().map(|(k, v)| (k.as_str(), v)))
        {
            if r.keep_last == Some(0) {
                return Err(PolicyError {
                    field: format!("policy.retention[{tool}].keep_last"),
                    reason: "must be at least 1 (use never_evict or omit it)".into(),
                });
            }
        }
        Ok(())
    }

    /// Retention rules for a tool.
    pub fn retention_for(&self, tool: &str) -> ToolRetention {
        self.retention
            .get(tool)
            .copied()
            .unwrap_or(self.retention_default)
    }

    /// How a result is treated: the envelope's durability, else the tool's,
    /// else the default; a replayable result of a tool that is expensive to
    /// replay counts as non-replayable.
    pub fn durability_of(&self, env: &crate::model::ToolResultEnvelope) -> Durability {
        let d = env
            .durability
            .unwrap_or_else(|| self.durability_for(&env.tool_name));
        let expensive = self.tools.get(&env.tool_name).and_then(|t| t.replay_cost)
            == Some(ReplayCost::Expensive);
        if d == Durability::Replayable && expensive {
            Durability::NonReplayable
        } else {
            d
        }
    }

    /// The externalize threshold for a tool's results.
    pub fn externalize_threshold_for(&self, tool: &str) -> u32 {
        self.tools
            .get(tool)
            .and_then(|t| t.externalize_threshold_tokens)
            .unwrap_or(self.externalize_threshold_tokens)
    }

    /// Fields of a tool's results that every stub keeps (empty for most).
    pub fn must_preserve(&self, tool: &str) -> &[String] {
        self.tools
            .get(tool)
            .map_or(&[], |t| t.must_preserve_fields.as_slice())
    }

    /// Durability of a tool's results when the envelope does not say.
    pub fn durability_for(&self, tool: &str) -> Durability {
        self.durability
            .get(tool)
            .copied()
            .unwrap_or(self.default_durability)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The defaults the seeds give (docs/seeds.md says where ours differ:
    /// a 500-token safety buffer, not 1,500, since counts are exact).
    #[test]
    fn defaults_are_the_documented_ones() {
        let p = Policy::default();
        assert_eq!(p.trigger_ratio, 0.85);
        assert_eq!(p.target_ratio, 0.70);
        assert_eq!(p.keep_recent_turns, 6);
        assert_eq!(p.keep_tool_io_pairs, 4);
        assert_eq!(p.roles_never_prune, [Role::System, Role::Developer]);
        assert_eq!(p.externalize_threshold_tokens, 1000);
        assert_eq!(p.default_durability, Durability::Anchoring);
        assert_eq!(p.safety_buffer_tokens, 500);
        assert_eq!(p.summary_style, None, "the summarizer's own (task_state)");
        assert_eq!(
            crate::summarize::llm::Style::default(),
            crate::summarize::llm::Style::TaskState
        );
        assert!(p.tools.is_empty());
        assert_eq!(p.validate(), Ok(()));
    }

    #[test]
    fn replay_cost_only_changes_replayable_results() {
        let mut p = Policy::default();
        p.tools.insert(
            "search".into(),
            ToolPolicy {
                replay_cost: Some(ReplayCost::Expensive),
                ..ToolPolicy::default()
            },
        );
        let env = |durability| crate::model::ToolResultEnvelope {
            wire: None,
            tool_name: "search".into(),
            tool_call_id: "c1".into(),
            outcome: crate::model::Outcome::Success,
            content: crate::model::ToolContent::Text("x".into()),
            key_fields: BTreeMap::new(),
            durability,
            determinism: None,
            started_at: None,
            completed_at: None,
        };
        assert_eq!(
            p.durability_of(&env(Some(Durability::Replayable))),
            Durability::NonReplayable
        );
        assert_eq!(
            p.durability_of(&env(Some(Durability::Ephemeral))),
            Durability::Ephemeral
        );
        assert_eq!(p.durability_of(&env(None)), Durability::Anchoring);
    }
}
