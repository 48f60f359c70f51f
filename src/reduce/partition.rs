//! Partition: which messages no reducer may touch this round. Pinned messages
//! (protected flag, never-prune roles) are fixed for the whole call; the recent
//! tail and the recent tool pairs shrink when the budget demands it.

use super::policy::Policy;
use super::projection::Projection;

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
/// tokens or 20,000), and never less than the last user message with the
/// calls and results after it. The last `keep_pairs` tool call groups inside
/// the token bound are kept too. The tail never starts inside a call/result
/// group.
pub fn mark_kept(p: &mut Projection<'_>, keep_turns: u32, keep_pairs: u32, keep_tokens: u32) {
    let n = p.len();
    let mut kept = vec![false; n];
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
    // The floor: the last user message (not a tool result) and what follows.
    let floor = (0..n)
        .rev()
        .find(|&i| {
            let m = p.message(i);
            m.role == crate::model::Role::User && m.tool_result.is_none()
        })
        .map(|i| p.units.ranges[p.units.unit_of[i]].0);
    if n > 0 && keep_turns > 0 {
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
        if first < n {
            let start = p.units.ranges[p.units.unit_of[first]].0;
            let start = start.max(token_start).min(floor.unwrap_or(n));
            for k in kept.iter_mut().skip(start) {
                *k = true;
            }
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
