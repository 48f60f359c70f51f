//! What a provider's prompt cache will serve of a rendered body, by the
//! provider's published rules, reckoned on the body's [`PrefixTrace`].
//!
//! - **Breakpoints** (Anthropic): a request writes the prefix up to each of
//!   its marked blocks, when that prefix is at least the model's minimum.
//!   A later request reads the longest written prefix that ends at one of
//!   its own marks or at most [`LOOKBACK_BLOCKS`] blocks before one. The
//!   marker is not part of the cached content (the trace leaves it out).
//! - **Automatic** (OpenAI): the longest prefix sent before is read, from
//!   1,024 tokens on and in steps of 128.
//!
//! Units are whole messages (and the head before them), so a prefix ending
//! inside a message is not seen; compactd marks only message ends. A
//! request is assumed to follow the last within the cache's lifetime
//! (five minutes by default).

use super::prefix::PrefixTrace;

/// Blocks before a mark within which a written prefix is still found.
pub const LOOKBACK_BLOCKS: u32 = 20;

/// Written prefixes remembered per thread: four marks per request, and a
/// few earlier ones the body still starts with.
const MAX_REMEMBERED: usize = 8;

/// Minimum and step of OpenAI's automatic cache.
const AUTOMATIC_MINIMUM: u32 = 1024;
const AUTOMATIC_STEP: u32 = 128;

/// How the provider caches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rules {
    /// Explicit marks.
    Breakpoints {
        /// The model's least cacheable prefix, in tokens.
        minimum: u32,
    },
    /// The longest earlier prefix, automatically.
    Automatic,
}

/// Where a body's blocks and marks are, unit by unit (as the trace cuts it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Layout {
    /// Content blocks per unit (the head's tools and system blocks, then
    /// each message's).
    pub blocks: Vec<u32>,
    /// Units whose last block is marked, in order.
    pub marks: Vec<usize>,
}

/// Sets `trace.cached` and `trace.expected_cache_read` from the body's
/// `layout`, the provider's `rules` and the previous render's trace.
/// `body_tokens` is the body's own count: units are counted on their JSON
/// text, keys and all, so a prefix is taken as its share of the units'
/// tokens, of the body's count, both for the read and for the minimum
/// (`None`: the units' tokens as they are).
pub fn reckon(
    trace: &mut PrefixTrace,
    layout: &Layout,
    rules: Rules,
    previous: Option<&PrefixTrace>,
    body_tokens: Option<u32>,
) {
    let units: u64 = trace.units.iter().map(|u| u64::from(u.1)).sum();
    let in_body = |t: u32| -> u32 {
        match body_tokens {
            Some(body) if units > 0 => {
                let scaled = (u64::from(t) * u64::from(body) / units).min(u64::from(body));
                u32::try_from(scaled).unwrap_or(body)
            }
            _ => t,
        }
    };
    match rules {
        Rules::Automatic => {
            trace.cached.clear();
            trace.expected_cache_read =
                previous.map(|p| automatic_read(in_body(trace.unchanged_since(p).0)));
        }
        Rules::Breakpoints { minimum } => {
            let chain: Vec<(u64, u32)> = chain(&trace.units)
                .into_iter()
                .map(|(h, t)| (h, in_body(t)))
                .collect();
            let held = previous.map_or(&[][..], |p| &p.cached);
            let read = layout
                .marks
                .iter()
                .filter_map(|&m| longest_read(&chain, &layout.blocks, m, held))
                .max();
            trace.expected_cache_read = previous.map(|_| read.unwrap_or(0));
            trace.cached = remembered(&chain, layout, minimum, held);
        }
    }
}

/// What a provider reported for one body it was sent (its `usage`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProviderUsage {
    /// The body, by [`body_digest`].
    pub body_digest: u64,
    /// Every input token the provider counted.
    pub input_tokens: u32,
    /// Of those, read from its cache.
    pub cache_read_tokens: u32,
    /// Of those, written to its cache.
    pub cache_write_tokens: u32,
}

/// A provider's report beside what compactd expected of the same body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheObservation {
    /// Tokens compactd expected to be read from the cache, in its count.
    pub expected_read: u32,
    /// The body's tokens in compactd's count.
    pub counted: u32,
    /// What the provider reported.
    pub usage: ProviderUsage,
}

/// Renders remembered per thread for Explain.
pub const TURNS_KEPT: usize = 8;

/// One render's expected cache read beside the provider's report on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheTurn {
    /// The body, by [`body_digest`].
    pub body_digest: u64,
    /// Its tokens in compactd's count.
    pub counted: u32,
    /// What compactd expected the provider to read from its cache.
    pub expected_read: Option<u32>,
    /// What the provider reported, once a later call brought it.
    pub reported: Option<ProviderUsage>,
}

/// Records `trace`'s render after the reports `seen` (on earlier bodies):
/// the newest [`TURNS_KEPT`], oldest first. A body rendered again (the same
/// digest as the last) keeps one entry.
pub fn record_turn(turns: &mut Vec<CacheTurn>, trace: &PrefixTrace, seen: &[CacheObservation]) {
    for o in seen {
        if let Some(t) = turns
            .iter_mut()
            .rev()
            .find(|t| t.body_digest == o.usage.body_digest)
        {
            t.reported = Some(o.usage);
        }
    }
    let turn = CacheTurn {
        body_digest: body_digest(trace),
        counted: trace.body_tokens,
        expected_read: trace.expected_cache_read,
        reported: None,
    };
    match turns.last_mut() {
        Some(last) if last.body_digest == turn.body_digest => {
            last.counted = turn.counted;
            last.expected_read = turn.expected_read.or(last.expected_read);
        }
        _ => turns.push(turn),
    }
    if turns.len() > TURNS_KEPT {
        let extra = turns.len() - TURNS_KEPT;
        turns.drain(..extra);
    }
}

/// A digest of a traced body's content, cache marks left out: the same on
/// every replica, and cheap (it chains the units' hashes).
pub fn body_digest(trace: &PrefixTrace) -> u64 {
    chain(&trace.units).last().map_or(0, |c| c.0)
}

/// The reports that answer `previous` (the body the last render sent) beside
/// what it expected, and the positions of those that answer another body.
pub fn observe(
    previous: Option<&PrefixTrace>,
    reports: &[ProviderUsage],
) -> (Vec<CacheObservation>, Vec<usize>) {
    let digest = previous.map(body_digest);
    let (mut seen, mut other) = (Vec::new(), Vec::new());
    for (i, r) in reports.iter().enumerate() {
        match previous {
            Some(p) if digest == Some(r.body_digest) => seen.push(CacheObservation {
                expected_read: p.expected_cache_read.unwrap_or(0),
                counted: p.body_tokens,
                usage: *r,
            }),
            _ => other.push(i),
        }
    }
    (seen, other)
}

/// OpenAI's read of an unchanged prefix of `tokens`.
fn automatic_read(tokens: u32) -> u32 {
    if tokens < AUTOMATIC_MINIMUM {
        0
    } else {
        AUTOMATIC_MINIMUM + (tokens - AUTOMATIC_MINIMUM) / AUTOMATIC_STEP * AUTOMATIC_STEP
    }
}

/// Per unit: a hash of the prefix through it, and its tokens.
fn chain(units: &[(u64, u32)]) -> Vec<(u64, u32)> {
    let mut out = Vec::with_capacity(units.len());
    let (mut h, mut tokens) = (0u64, 0u32);
    for &(unit, t) in units {
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&h.to_le_bytes());
        bytes[8..].copy_from_slice(&unit.to_le_bytes());
        h = xxhash_rust::xxh3::xxh3_64(&bytes);
        tokens = tokens.saturating_add(t);
        out.push((h, tokens));
    }
    out
}

/// The tokens of the longest held prefix the mark on unit `mark` reads:
/// the prefix through the mark itself or through a unit ending at most
/// [`LOOKBACK_BLOCKS`] blocks before it.
fn longest_read(
    chain: &[(u64, u32)],
    blocks: &[u32],
    mark: usize,
    held: &[(u64, u32)],
) -> Option<u32> {
    let mut back = 0u32;
    let mut j = mark.min(chain.len().checked_sub(1)?);
    loop {
        if held.iter().any(|h| h.0 == chain[j].0) {
            return Some(chain[j].1);
        }
        back = back.saturating_add(blocks.get(j).copied().unwrap_or(1));
        if j == 0 || back > LOOKBACK_BLOCKS {
            return None;
        }
        j -= 1;
    }
}

/// What the cache holds after this request: the prefixes it writes (its
/// marks at the model's minimum or more), then the earlier ones this body
/// still starts with, at most [`MAX_REMEMBERED`].
fn remembered(
    chain: &[(u64, u32)],
    layout: &Layout,
    minimum: u32,
    held: &[(u64, u32)],
) -> Vec<(u64, u32)> {
    let mut out: Vec<(u64, u32)> = layout
        .marks
        .iter()
        .rev()
        .filter_map(|&m| chain.get(m).copied())
        .filter(|&(_, t)| t >= minimum)
        .collect();
    for h in held {
        if out.len() >= MAX_REMEMBERED {
            break;
        }
        if let Some(&c) = chain.iter().find(|c| c.0 == h.0) {
            if !out.contains(&c) {
                out.push(c);
            }
        }
    }
    out.truncate(MAX_REMEMBERED);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(units: &[(u64, u32)]) -> PrefixTrace {
        PrefixTrace {
            units: units.to_vec(),
            ..PrefixTrace::default()
        }
    }

    fn layout(blocks: &[u32], marks: &[usize]) -> Layout {
        Layout {
            blocks: blocks.to_vec(),
            marks: marks.to_vec(),
        }
    }

    const RULES: Rules = Rules::Breakpoints { minimum: 100 };

    fn report(body_digest: u64) -> ProviderUsage {
        ProviderUsage {
            body_digest,
            input_tokens: 300,
            cache_read_tokens: 200,
            cache_write_tokens: 20,
        }
    }

    #[test]
    fn a_moved_mark_reads_what_the_last_one_wrote() {
        let mut first = trace(&[(1, 500), (2, 50), (3, 50)]);
        reckon(&mut first, &layout(&[1, 1, 1], &[0, 2]), RULES, None, None);
        assert_eq!(first.expected_cache_read, None, "no previous render");
        assert_eq!(first.cached.len(), 2);
        let mut next = trace(&[(1, 500), (2, 50), (3, 50), (4, 50), (5, 50)]);
        reckon(
            &mut next,
            &layout(&[1, 1, 1, 1, 1], &[0, 4]),
            RULES,
            Some(&first),
            None,
        );
        assert_eq!(
            next.expected_cache_read,
            Some(600),
            "the prefix through unit 2"
        );
    }

    /// What a body of `units` laid out as `blocks` with `marks` is
    /// expected to read after `first`.
    fn read_after(
        first: &PrefixTrace,
        units: &[(u64, u32)],
        blocks: &[u32],
        marks: &[usize],
    ) -> Option<u32> {
        let mut t = trace(units);
        reckon(&mut t, &layout(blocks, marks), RULES, Some(first), None);
        t.expected_cache_read
    }

    #[test]
    fn a_prefix_beyond_the_lookback_is_not_read_unless_marked() {
        let mut first = trace(&[(1, 500), (2, 50)]);
        reckon(&mut first, &layout(&[1, 1], &[1]), RULES, None, None);
        let units = [(1, 500), (2, 50), (3, 50), (4, 50)];
        let far = read_after(&first, &units, &[1, 1, 15, 6], &[3]);
        assert_eq!(far, Some(0), "21 blocks back");
        let near = read_after(&first, &units, &[1, 1, 15, 5], &[3]);
        assert_eq!(near, Some(550), "20 blocks back");
        let bridged = read_after(&first, &units, &[1, 1, 15, 6], &[1, 3]);
        assert_eq!(bridged, Some(550), "marked where it was written");
    }

    #[test]
    fn a_changed_unit_ends_the_read_and_short_prefixes_are_not_written() {
        let mut first = trace(&[(1, 50), (2, 500)]);
        reckon(&mut first, &layout(&[1, 1], &[0, 1]), RULES, None, None);
        assert_eq!(
            first.cached,
            vec![chain(&first.units)[1]],
            "the head is under the minimum"
        );
        let mut changed = trace(&[(1, 50), (9, 500), (3, 10)]);
        reckon(
            &mut changed,
            &layout(&[1, 1, 1], &[2]),
            RULES,
            Some(&first),
            None,
        );
        assert_eq!(changed.expected_cache_read, Some(0));
    }

    #[test]
    fn openai_reads_the_unchanged_prefix_in_steps() {
        let first = trace(&[(1, 1000), (2, 300)]);
        let mut next = trace(&[(1, 1000), (2, 300), (3, 10)]);
        reckon(
            &mut next,
            &Layout::default(),
            Rules::Automatic,
            Some(&first),
            None,
        );
        assert_eq!(next.expected_cache_read, Some(1280));
        let mut short = trace(&[(1, 1000), (7, 300)]);
        reckon(
            &mut short,
            &Layout::default(),
            Rules::Automatic,
            Some(&first),
            None,
        );
        assert_eq!(short.expected_cache_read, Some(0));
    }

    #[test]
    fn a_report_is_set_beside_the_body_it_answers() {
        let mut sent = trace(&[(1, 500), (2, 50)]);
        sent.expected_cache_read = Some(400);
        sent.body_tokens = 520;
        let (seen, other) = observe(Some(&sent), &[report(body_digest(&sent)), report(7)]);
        assert_eq!(
            seen,
            vec![CacheObservation {
                expected_read: 400,
                counted: 520,
                usage: report(body_digest(&sent)),
            }]
        );
        assert_eq!(other, vec![1]);
        let changed = trace(&[(1, 500), (3, 50)]);
        assert_ne!(body_digest(&changed), body_digest(&sent));
        assert_eq!(
            observe(None, &[report(1)]).1,
            vec![0],
            "no body sent before"
        );
    }

    #[test]
    fn turns_keep_the_newest_with_their_reports() {
        let mut turns = Vec::new();
        let bodies: Vec<PrefixTrace> = (0..10u64)
            .map(|i| PrefixTrace {
                body_tokens: 1000 + i as u32,
                expected_cache_read: Some(900),
                ..trace(&[(i, 10), (i + 100, 20)])
            })
            .collect();
        for (i, b) in bodies.iter().enumerate() {
            let seen: Vec<CacheObservation> = i
                .checked_sub(1)
                .map(|p| CacheObservation {
                    expected_read: 900,
                    counted: 1000,
                    usage: report(body_digest(&bodies[p])),
                })
                .into_iter()
                .collect();
            record_turn(&mut turns, b, &seen);
        }
        assert_eq!(turns.len(), TURNS_KEPT);
        assert_eq!(turns.last().map(|t| t.counted), Some(1009));
        assert!(turns.last().is_some_and(|t| t.reported.is_none()));
        assert!(turns[..TURNS_KEPT - 1].iter().all(|t| t.reported.is_some()));
        // The same body again is one turn.
        record_turn(&mut turns, &bodies[9], &[]);
        assert_eq!(turns.len(), TURNS_KEPT);
    }
}
