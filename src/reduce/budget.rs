//! The token budget threaded through the reducers.
//!
//! A single total is the hard ceiling. The struct is a value passed by reference
//! to every reducer, so per-tier caps (e.g. "tool results ≤ 30%") can be added
//! as fields later without changing the reducer signature.

use serde::{Deserialize, Serialize};

use super::Policy;

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
    /// Margin for tokenizer error and provider framing we cannot see.
    pub safety_buffer: u32,
    /// Space kept for the response, for models whose window includes output.
    pub response_reserve: u32,
    /// Space kept for artifacts rehydrated this turn (excluded from pressure).
    pub rehydration_reserve: u32,
    /// Space kept for per-turn injected content added after compaction.
    pub injection_reserve: u32,
    /// System prompt tokens (filled in from the request).
    pub system_tokens: u32,
    /// Tool schema tokens (filled in from the request).
    pub tool_tokens: u32,
    /// Reply priming and other per-request framing.
    pub framing_tokens: u32,
}

impl TokenBudget {
    /// The budget under `policy` for a request whose fixed parts (system,
    /// tools, framing) count `fixed`.
    pub fn for_policy(policy: &Policy, max_input_tokens: u32, fixed: (u32, u32, u32)) -> Self {
        let (system_tokens, tool_tokens, framing_tokens) = fixed;
        TokenBudget {
            max_input_tokens,
            trigger_ratio: policy.trigger_ratio,
            target_ratio: policy.target_ratio,
            safety_buffer: policy.safety_buffer_tokens,
            response_reserve: policy.response_reserve_tokens,
            rehydration_reserve: policy.rehydration_reserve_tokens,
            injection_reserve: policy.injection_reserve_tokens,
            system_tokens,
            tool_tokens,
            framing_tokens,
        }
    }
}

impl TokenBudget {
    /// The ceiling for the rendered request without rehydrated or injected
    /// content. Never exceeded: a plan that cannot meet it is an error.
    pub fn hard_limit(&self) -> u32 {
        self.max_input_tokens
            .saturating_sub(self.safety_buffer)
            .saturating_sub(self.response_reserve)
            .saturating_sub(self.rehydration_reserve)
            .saturating_sub(self.injection_reserve)
    }

    /// Request size above which compaction runs.
    pub fn trigger(&self) -> u32 {
        self.hard_limit()
            .min(ratio_of(self.max_input_tokens, self.trigger_ratio))
    }

    /// Request size compaction aims for once triggered.
    pub fn target(&self) -> u32 {
        self.trigger()
            .min(ratio_of(self.max_input_tokens, self.target_ratio))
    }

    /// Tokens of the parts that are not messages.
    pub fn fixed_tokens(&self) -> u32 {
        self.system_tokens + self.tool_tokens + self.framing_tokens
    }

    /// Tokens left for thread messages under the hard limit.
    pub fn available_for_messages(&self) -> u32 {
        self.hard_limit().saturating_sub(self.fixed_tokens())
    }

    /// Tokens that rehydrated content may use at render time.
    pub fn available_for_rehydration(&self) -> u32 {
        self.rehydration_reserve
    }
}

fn ratio_of(n: u32, r: f64) -> u32 {
    (f64::from(n) * r.clamp(0.0, 1.0)).floor() as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget() -> TokenBudget {
        TokenBudget {
            max_input_tokens: 10_000,
            trigger_ratio: 0.85,
            target_ratio: 0.6,
            safety_buffer: 500,
            response_reserve: 0,
            rehydration_reserve: 1000,
            injection_reserve: 0,
            system_tokens: 100,
            tool_tokens: 200,
            framing_tokens: 3,
        }
    }

    #[test]
    fn limits_are_ordered() {
        let b = budget();
        assert_eq!(b.hard_limit(), 8_500);
        assert_eq!(b.trigger(), 8_500);
        assert_eq!(b.target(), 6_000);
        assert_eq!(b.available_for_messages(), 8_500 - 303);
    }

    #[test]
    fn reserves_larger_than_the_window_saturate() {
        let mut b = budget();
        b.safety_buffer = 20_000;
        assert_eq!(b.hard_limit(), 0);
        assert_eq!(b.available_for_messages(), 0);
    }
}
