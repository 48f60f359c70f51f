//! The token budget threaded through the reducers.
//!
//! A single total is the hard ceiling. The struct is a value passed by reference
//! to every reducer; per-tier caps (tool results ≤ a share of the window)
//! are fields of it, so adding them left the reducer signature unchanged.
//!
//! Reserves count only when they are used: the rehydration reserve only when
//! this turn reads artifacts back, the safety margin only when the counts are
//! estimates (an exact tokenizer with every unknown counted at its worst case
//! needs none). A thread that fits the window is never refused for room kept
//! for something that does not happen.

use serde::{Deserialize, Serialize};

use super::Policy;

/// What this request will use of the policy's reserves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ReserveUse {
    /// The counts are estimates (the safety margin applies).
    pub estimated_counts: bool,
    /// Artifacts are read back this turn (the rehydration reserve applies).
    pub rehydrating: bool,
}

/// How many tokens a request may use, and where compaction starts and stops.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TokenBudget {
    /// The model's input limit.
    pub max_input_tokens: u32,
    /// Compaction starts when the request exceeds this fraction of the limit.
    pub trigger_ratio: f64,
    /// Once triggered, compaction continues down to this fraction, so that it
    /// happens in chunks rather than a little every turn (prompt-cache friendly).
    pub target_ratio: f64,
    /// Margin for tokenizer error (0 when the counts are exact).
    pub safety_buffer: u32,
    /// Space kept for the response, for models whose window includes output.
    pub response_reserve: u32,
    /// Space kept for artifacts rehydrated this turn (0 when none are).
    pub rehydration_reserve: u32,
    /// Space kept for per-turn injected content added after compaction.
    pub injection_reserve: u32,
    /// System prompt tokens (filled in from the request).
    pub system_tokens: u32,
    /// Tool schema tokens (filled in from the request).
    pub tool_tokens: u32,
    /// Reply priming and other per-request framing.
    pub framing_tokens: u32,
    /// The workspace slot of the assembled context (filled in from the request).
    #[serde(default)]
    pub workspace_tokens: u32,
    /// Tool results may render at most this many tokens (a per-tier cap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_results_cap: Option<u32>,
    /// What one pass aims for instead of [`TokenBudget::target`]: a tier
    /// pass aims as far below the current total as its tier is over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<u32>,
}

impl TokenBudget {
    /// The budget under `policy` for a request whose fixed parts (system,
    /// tools, framing) count `fixed`, with the reserves `uses` says apply.
    pub fn for_policy(
        policy: &Policy,
        max_input_tokens: u32,
        fixed: (u32, u32, u32),
        uses: ReserveUse,
    ) -> Self {
        let (system_tokens, tool_tokens, framing_tokens) = fixed;
        let when = |on: bool, n: u32| if on { n } else { 0 };
        TokenBudget {
            max_input_tokens,
            trigger_ratio: policy.trigger_ratio,
            target_ratio: policy.target_ratio,
            safety_buffer: when(uses.estimated_counts, policy.safety_buffer_tokens),
            response_reserve: policy.response_reserve_tokens,
            rehydration_reserve: when(uses.rehydrating, policy.rehydration_reserve_tokens),
            injection_reserve: policy.injection_reserve_tokens,
            system_tokens,
            tool_tokens,
            framing_tokens,
            workspace_tokens: 0,
            tool_results_cap: policy
                .tier_caps
                .tool_results_ratio
                .map(|r| ratio_of(max_input_tokens, r)),
            goal: None,
        }
    }
}

impl TokenBudget {
    /// The most the whole rendered request may take, rehydrated content
    /// included.
    pub fn ceiling(&self) -> u32 {
        self.max_input_tokens
            .saturating_sub(self.safety_buffer)
            .saturating_sub(self.response_reserve)
            .saturating_sub(self.injection_reserve)
    }

    /// The ceiling for the rendered request without rehydrated content.
    /// Never exceeded: a plan that cannot meet it is an error.
    pub fn hard_limit(&self) -> u32 {
        self.ceiling().saturating_sub(self.rehydration_reserve)
    }

    /// Request size above which compaction runs.
    pub fn trigger(&self) -> u32 {
        self.hard_limit()
            .min(ratio_of(self.max_input_tokens, self.trigger_ratio))
    }

    /// Request size compaction aims for once triggered (or this pass's goal).
    pub fn target(&self) -> u32 {
        if let Some(goal) = self.goal {
            return goal;
        }
        self.trigger()
            .min(ratio_of(self.max_input_tokens, self.target_ratio))
    }

    /// What tool results are brought down to once over their cap: the cap
    /// with the total's hysteresis (`target_ratio / trigger_ratio`).
    pub fn tool_results_target(&self) -> Option<u32> {
        let cap = self.tool_results_cap?;
        let scale = if self.trigger_ratio > 0.0 {
            (self.target_ratio / self.trigger_ratio).clamp(0.0, 1.0)
        } else {
            1.0
        };
        // The epsilon keeps 3000 × 0.6 / 0.8 at 2250, not 2249.999….
        Some((f64::from(cap) * scale + 1e-9).floor() as u32)
    }

    /// Tokens of the parts that are not messages.
    pub fn fixed_tokens(&self) -> u32 {
        self.system_tokens + self.tool_tokens + self.framing_tokens + self.workspace_tokens
    }

    /// Tokens left for thread messages under the hard limit.
    pub fn available_for_messages(&self) -> u32 {
        self.hard_limit().saturating_sub(self.fixed_tokens())
    }
}

fn ratio_of(n: u32, r: f64) -> u32 {
    (f64::from(n) * r.clamp(0.0, 1.0)).floor() as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(uses: ReserveUse) -> TokenBudget {
        let policy = Policy {
            trigger_ratio: 0.85,
            target_ratio: 0.6,
            safety_buffer_tokens: 500,
            rehydration_reserve_tokens: 1000,
            ..Policy::default()
        };
        TokenBudget::for_policy(&policy, 10_000, (100, 200, 3), uses)
    }

    #[test]
    fn limits_are_ordered() {
        let b = budget(ReserveUse {
            estimated_counts: true,
            rehydrating: true,
        });
        assert_eq!(b.ceiling(), 9_500);
        assert_eq!(b.hard_limit(), 8_500);
        assert_eq!(b.trigger(), 8_500);
        assert_eq!(b.target(), 6_000);
        assert_eq!(b.available_for_messages(), 8_500 - 303);
    }

    #[test]
    fn reserves_count_only_when_used() {
        let exact = budget(ReserveUse::default());
        assert_eq!(exact.hard_limit(), 10_000);
        assert_eq!(exact.ceiling(), 10_000);
        let estimated = budget(ReserveUse {
            estimated_counts: true,
            rehydrating: false,
        });
        assert_eq!(estimated.hard_limit(), 9_500);
        let rehydrating = budget(ReserveUse {
            estimated_counts: false,
            rehydrating: true,
        });
        assert_eq!(rehydrating.hard_limit(), 9_000);
        assert_eq!(rehydrating.ceiling(), 10_000);
    }

    #[test]
    fn a_tier_cap_is_a_share_of_the_window_with_the_totals_hysteresis() {
        let policy = Policy {
            trigger_ratio: 0.8,
            target_ratio: 0.6,
            tier_caps: crate::reduce::TierCaps {
                tool_results_ratio: Some(0.3),
            },
            ..Policy::default()
        };
        let b = TokenBudget::for_policy(&policy, 10_000, (0, 0, 0), ReserveUse::default());
        assert_eq!(b.tool_results_cap, Some(3_000));
        assert_eq!(b.tool_results_target(), Some(2_250));
        assert_eq!(budget(ReserveUse::default()).tool_results_target(), None);
        let goal = TokenBudget {
            goal: Some(1_234),
            ..b
        };
        assert_eq!(goal.target(), 1_234);
    }

    #[test]
    fn reserves_larger_than_the_window_saturate() {
        let mut b = budget(ReserveUse {
            estimated_counts: true,
            rehydrating: true,
        });
        b.safety_buffer = 20_000;
        assert_eq!(b.hard_limit(), 0);
        assert_eq!(b.available_for_messages(), 0);
    }
}
