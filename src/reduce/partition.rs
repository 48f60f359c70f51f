//! Partition: which messages no reducer may touch this round. Pinned messages
//! (protected flag, never-prune roles) are fixed for the whole call; the recent
//! tail and the recent tool pairs shrink when the budget demands it.

use super::policy::Policy;
use super::projection::Projection;
use crate::model::ClearReason;

/// Pinned messages: never compacted in any round. Besides the protected flag
/// and never-prune roles, an assistant message with a call that has no result
/// yet: the call is still live (awaiting approval, or running), so it stays
/// verbatim until its result arrives.
pub fn pinned(thread: &crate::model::Thread, policy: &Policy) -> Vec<bool> {
    let pairing = thread.pairing();
    thread
        .messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            m.metadata.protected
                || policy.roles_never_prune.contains(&m.role)
                || pairing.has_pending(i)
        })
        .collect()
}

/// Marks the verbatim tail as kept: the last `keep_turns` turns, but no
/// more of them than fit in `keep_tokens` (an agent's turn can be 200
/// tokens or 20,000, and an agent episode is one user message followed by
/// hundreds of calls), and never less than the newest unit. The last
/// `keep_pairs` tool call groups inside the token bound are kept too. The
/// last user message a person typed is kept wherever it stands, with its
/// unit: it is what the model answers. Older call groups of the current
/// episode are free, as whole units, like anything older. The tail never
/// starts inside a call/result group.
pub fn mark_kept(p: &mut Projection<'_>, keep_turns: u32, keep_pairs: u32, keep_tokens: u32) {
    let n = p.len();
    let mut kept = vec![false; n];
    let Some(&(newest, _)) = p.units.ranges.last() else {
        p.kept = kept;
        return;
    };
    // First message of the longest suffix of whole units within keep_tokens.
    let mut token_start = n;
    let mut used = 0u64;
    for &(s, e) in p.units.ranges.iter().rev() {
        let unit: u64 = (s..=e).map(|i| u64::from(p.cost(i))).sum();
        if used + unit > u64::from(keep_tokens) {
            break;
        }
        used += unit;
        token_start = s;
    }
    if keep_turns > 0 {
        // Turn number of the `keep_turns`-th distinct turn from the end.
        let mut distinct = 0u32;
        let mut cutoff = p.message(n - 1).turn;
        let mut last_seen: Option<u32> = None;
        for i in (0..n).rev() {
            let t = p.message(i).turn;
            if last_seen != Some(t) {
                distinct += 1;
                if distinct > keep_turns {
                    break;
                }
                cutoff = t;
                last_seen = Some(t);
            }
        }
        let first = (0..n).find(|&i| p.message(i).turn >= cutoff).unwrap_or(n);
        let start = p.units.ranges[p.units.unit_of[first.min(n - 1)]].0;
        let start = start.max(token_start).min(newest);
        for k in kept.iter_mut().skip(start) {
            *k = true;
        }
    }
    if let Some(u) = last_user(p) {
        let (s, e) = p.units.ranges[p.units.unit_of[u]];
        for k in kept.iter_mut().take(e + 1).skip(s) {
            *k = true;
        }
    }
    let mut pairs = 0;
    for &(s, e) in p.units.ranges.iter().rev() {
        if pairs >= keep_pairs || s < token_start {
            break;
        }
        if !p.message(s).tool_calls.is_empty() {
            pairs += 1;
            for k in kept.iter_mut().take(e + 1).skip(s) {
                *k = true;
            }
        }
    }
    p.kept = kept;
}

/// The last message a person typed: role user, not a tool result.
pub fn last_user(p: &Projection<'_>) -> Option<usize> {
    (0..p.len()).rev().find(|&i| {
        let m = p.message(i);
        m.role == crate::model::Role::User && m.tool_result.is_none()
    })
}

/// When the last user message alone takes more than `share` tokens, keeps
/// its head (two thirds of the share) and its tail (a third) and leaves the
/// middle out: the archive of the clear keeps the whole message, and the
/// prompt says where. Text parts only; the archive holds any others.
pub fn excerpt_last_user(p: &mut Projection<'_>, share: u32) {
    let Some(i) = last_user(p) else { return };
    if p.is_pinned(i) || !p.is_included(i) || p.cost(i) <= share {
        return;
    }
    let text = p.message(i).text();
    let counter = p.counter.counter;
    let (head, _) = crate::tokens::truncate_to_tokens(counter, &text, share / 3 * 2);
    let tail = crate::tokens::tail_within_tokens(counter, &text[head.len()..], share / 3);
    let left_out = p
        .cost(i)
        .saturating_sub(p.counter.text(&head) + p.counter.text(tail));
    let excerpt = format!(
        "{head}\n[… about {left_out} tokens of this message left out here to fit the context …]\n{tail}"
    );
    let before = p.cost(i);
    p.clear(i, ClearReason::Excerpt, excerpt, Default::default());
    if p.cost(i) >= before {
        p.undo_last_clear(i);
    }
}

/// How much of the newest part stays verbatim: turns, call groups and tokens,
/// shrunk a step at a time while a round does not fit the hard limit, down
/// to the floor (the newest unit and the last user message).
#[derive(Debug, Clone, Copy)]
pub struct TailShare {
    /// Recent turns kept.
    pub turns: u32,
    /// Recent call groups kept.
    pub pairs: u32,
    /// Tokens the kept turns may take.
    pub tokens: u32,
    /// The last round: tool results in the tail may be compressed or externalized.
    pub at_floor: bool,
    pairs_floor: u32,
    rounds: u32,
    /// Counts above this (the message count) keep what it keeps.
    most: u32,
}

impl TailShare {
    /// The policy's tail, its tokens at most half the target.
    pub fn new(policy: &Policy, target: u32) -> Self {
        TailShare {
            turns: policy.keep_recent_turns,
            pairs: policy.keep_tool_io_pairs,
            tokens: policy.keep_recent_tokens.min(target / 2),
            at_floor: false,
            pairs_floor: policy.keep_tool_io_pairs.min(1),
            rounds: 0,
            most: u32::MAX,
        }
    }

    /// For a thread of `messages` messages: shrinking starts from at most
    /// that many turns and pairs (a policy's u32::MAX turns took 4 billion
    /// rounds of one step each).
    pub fn within(mut self, messages: usize) -> Self {
        self.most = u32::try_from(messages).unwrap_or(u32::MAX);
        self
    }

    /// One step smaller; at the floor, marks the last round instead.
    pub fn shrink(&mut self) {
        self.rounds += 1;
        if self.turns > 1 || self.pairs > self.pairs_floor || self.tokens > 0 {
            self.turns = self.turns.min(self.most).saturating_sub(1).max(1);
            self.pairs = self
                .pairs
                .min(self.most)
                .saturating_sub(1)
                .max(self.pairs_floor);
            // Halving reaches the floor in a few rounds from any share.
            self.tokens = if self.tokens < 512 {
                0
            } else {
                self.tokens / 2
            };
        } else {
            self.at_floor = true;
        }
    }

    /// Whether an earlier round did not fit (the last user message may then
    /// be cut to its share).
    pub fn escalated(&self) -> bool {
        self.rounds > 0
    }

    /// Tokens the last user message may keep once cut: the tail's share, but
    /// never less than a quarter of the target (at most 2,048 tokens).
    pub fn user_share(&self, target: u32) -> u32 {
        self.tokens.max(2048.min(target / 4))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kept_counts_shrink_one_step_at_a_time_down_to_one() {
        let policy = Policy {
            keep_recent_turns: 6,
            keep_tool_io_pairs: 4,
            ..Policy::default()
        };
        let mut tail = TailShare::new(&policy, 100_000).within(1_000);
        let mut seen = vec![(tail.turns, tail.pairs)];
        while !tail.at_floor {
            tail.shrink();
            seen.push((tail.turns, tail.pairs));
        }
        let turns: Vec<u32> = seen.iter().map(|s| s.0).collect();
        let pairs: Vec<u32> = seen.iter().map(|s| s.1).collect();
        // Each round gives up one turn and one call group, never more, and
        // stops at one of each (the last user message and the newest call).
        assert_eq!(&turns[..6], &[6, 5, 4, 3, 2, 1]);
        assert!(turns[6..].iter().all(|&t| t == 1), "{turns:?}");
        assert_eq!(&pairs[..4], &[4, 3, 2, 1]);
        assert!(pairs[4..].iter().all(|&p| p == 1), "{pairs:?}");
        assert!(tail.at_floor);
    }

    /// Keep counts at u32::MAX (a valid policy) once shrank one step a
    /// round: 4 billion rounds of compaction for one request.
    #[test]
    fn shrinking_starts_from_the_thread_size() {
        let policy = Policy {
            keep_recent_turns: u32::MAX,
            keep_tool_io_pairs: u32::MAX,
            ..Policy::default()
        };
        let mut tail = TailShare::new(&policy, 10_000).within(5);
        assert_eq!((tail.turns, tail.pairs), (u32::MAX, u32::MAX));
        tail.shrink();
        assert_eq!((tail.turns, tail.pairs), (4, 4));
        for _ in 0..10 {
            tail.shrink();
        }
        assert!(tail.at_floor);
    }
}
