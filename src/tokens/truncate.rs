//! Cutting text to a token cap (rehydration caps, injected content).

use super::TokenCounter;

/// The longest prefix of `text` (on a char boundary) of at most `max` tokens,
/// and whether it was cut. Counts with the tokenizer directly: prefixes are
/// one-off texts that would only churn the ledger.
pub fn truncate_to_tokens(counter: &dyn TokenCounter, text: &str, max: u32) -> (String, bool) {
    let max = max as usize;
    if counter.count(text) <= max {
        return (text.to_string(), false);
    }
    let down = |mut i: usize| {
        while !text.is_char_boundary(i) {
            i -= 1;
        }
        i
    };
    let up = |mut i: usize| {
        while !text.is_char_boundary(i) {
            i += 1;
        }
        i
    };
    // Invariant: text[..lo] fits; the answer is a char boundary in [lo, hi].
    // Bound the search first: a token is rarely longer than 16 bytes, so the
    // answer almost always lies within the first 16·max bytes.
    let (mut lo, mut hi) = (0usize, down(text.len() - 1));
    let probe = down(text.len().min(max.saturating_mul(16)));
    if counter.count(&text[..probe]) <= max {
        lo = probe;
    } else {
        hi = down(probe.saturating_sub(1)).max(lo);
    }
    while lo < hi {
        // Round up so `mid` > `lo`: every step shrinks [lo, hi].
        let mid = up(lo + (hi - lo).div_ceil(2)).min(hi);
        if counter.count(&text[..mid]) <= max {
            lo = mid;
        } else {
            hi = down(mid - 1).max(lo);
        }
    }
    (text[..lo].to_string(), true)
}

/// The longest suffix of `text` that counts at most `max` tokens, starting
/// at a char boundary (the mirror of [`truncate_to_tokens`], for keeping a
/// message's end). Binary search over the start: counts are monotone in the
/// suffix length up to a token's merge, which can only shorten the answer.
pub fn tail_within_tokens<'t>(counter: &dyn TokenCounter, text: &'t str, max: u32) -> &'t str {
    let max = max as usize;
    if counter.count(text) <= max {
        return text;
    }
    let up = |mut i: usize| {
        while i < text.len() && !text.is_char_boundary(i) {
            i += 1;
        }
        i
    };
    let fits = |i: usize| counter.count(&text[i..]) <= max;
    // Invariant: text[hi..] fits, no boundary below lo does; the answer is
    // the first char boundary in [lo, hi] that fits.
    let (mut lo, mut hi) = (0usize, text.len());
    let probe = up(text.len().saturating_sub(max.saturating_mul(16)));
    if fits(probe) {
        hi = probe;
    } else {
        lo = probe + 1;
    }
    while lo < hi {
        let mid = up(lo + (hi - lo) / 2);
        if mid >= hi {
            // No boundary strictly between: only `lo` itself is left to try.
            if text.is_char_boundary(lo) && fits(lo) {
                hi = lo;
            }
            break;
        }
        if fits(mid) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    &text[hi..]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::o200k;

    #[test]
    fn truncation_keeps_the_longest_prefix_within_the_cap() {
        let c = o200k();
        let text = "The quick brown fox jumps over the lazy dog. ".repeat(200);
        let (cut, truncated) = truncate_to_tokens(c.as_ref(), &text, 50);
        assert!(truncated);
        assert!(c.count(&cut) <= 50);
        assert!(c.count(&text[..cut.len() + 5]) > 50);
        let (all, truncated) = truncate_to_tokens(c.as_ref(), "short", 50);
        assert_eq!((all.as_str(), truncated), ("short", false));
        let (none, _) = truncate_to_tokens(c.as_ref(), "héllo wörld", 0);
        assert_eq!(none, "");
        // Multi-byte text: the cut is on a char boundary and maximal.
        let text = "日本語のテキストと émojis 🎉 mixed in. ".repeat(50);
        let (cut, truncated) = truncate_to_tokens(c.as_ref(), &text, 37);
        assert!(truncated && c.count(&cut) <= 37);
        let next = text[cut.len()..].chars().next().map_or(0, char::len_utf8);
        assert!(c.count(&text[..cut.len() + next]) > 37);
    }

    #[test]
    fn the_tail_is_the_longest_suffix_within_the_cap() {
        let c = o200k();
        for text in [
            "The quick brown fox jumps over the lazy dog. ".repeat(200),
            "日本語のテキストと émojis 🎉 mixed in. ".repeat(50),
        ] {
            for max in [0u32, 1, 7, 37, 200] {
                let tail = tail_within_tokens(c.as_ref(), &text, max);
                assert!(text.ends_with(tail));
                assert!(c.count(tail) <= max as usize, "{max}");
                // One more char would not fit (a maximal suffix).
                let start = text.len() - tail.len();
                if start > 0 {
                    let prev = text[..start].chars().next_back().map_or(0, char::len_utf8);
                    assert!(c.count(&text[start - prev..]) > max as usize, "{max}");
                }
            }
        }
        assert_eq!(tail_within_tokens(c.as_ref(), "short", 50), "short");
    }
}
