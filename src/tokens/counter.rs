//! Exact OpenAI encodings and the model → encoding mapping.

use std::fmt;
use std::sync::{Arc, LazyLock};

use super::{Estimator, TokenizerRule};
use crate::hash::FastSet;

/// Counts tokens of text. Implementations are cheap to share across threads.
pub trait TokenCounter: Send + Sync + fmt::Debug {
    /// Number of tokens `text` encodes to, all of it ordinary text (a literal
    /// `<|endoftext|>` in user content is counted as the characters it is).
    fn count(&self, text: &str) -> usize;
    /// Stable name, e.g. "o200k_base", "cl100k_base", "estimate-chars/3.5+10%".
    /// Part of cache keys, so two counters that may disagree never share a name.
    fn name(&self) -> &str;
    /// True for exact BPE counts, false for estimates.
    fn is_exact(&self) -> bool;
    /// The calibration against the provider's own count this counter
    /// applies (`None`: an exact count, or an estimate as it is).
    fn calibration(&self) -> Option<super::calibration::Applied> {
        None
    }
}

/// An exact OpenAI encoding. Backed by `bpe-openai`, chosen over `tiktoken-rs`
/// by measurement (`cargo bench --bench tokens -- backend`, 5 MB mixed corpus):
/// o200k 32 vs 18 MiB/s, cl100k 30 vs 10 MiB/s, tables built in 62 vs 172 ms;
/// counts identical (asserted in the tests below). With the token shortcut
/// ([`BpeCounter::piece`]) both encodings count at about 48 MiB/s.
///
/// The text is split into pieces here, not by `bpe_openai::Tokenizer::count`:
/// its regex takes a cache from a pool shared by every thread on each piece,
/// and the pool's owner flag, written by one thread and read by the others
/// on every word, made two threads counting at once no faster than one
/// (`cargo bench --bench tokens -- trace/units`). Here each thread searches
/// with a cache of its own, and only the byte-pair tables are shared.
struct BpeCounter {
    name: &'static str,
    tokenizer: &'static bpe_openai::Tokenizer,
    split: Pretokenizer,
    /// Every token's bytes. A piece that is a token encodes as that one
    /// token (byte-pair merges never split a piece the dictionary holds
    /// whole, and tiktoken takes the same shortcut); most words are, and a
    /// lookup costs a fraction of the encoder's search and allocations.
    tokens: FastSet<&'static [u8]>,
}

impl BpeCounter {
    fn new(
        name: &'static str,
        tokenizer: &'static bpe_openai::Tokenizer,
        split: Pretokenizer,
    ) -> Self {
        let bpe = &tokenizer.bpe;
        let mut tokens = FastSet::with_capacity_and_hasher(bpe.num_tokens(), Default::default());
        tokens.extend((0..bpe.num_tokens() as u32).map(|id| bpe.token_bytes(id)));
        BpeCounter {
            name,
            tokenizer,
            split,
            tokens,
        }
    }

    /// Tokens of one piece of the pre-tokenization.
    fn piece(&self, piece: &[u8]) -> usize {
        if self.tokens.contains(piece) {
            1
        } else {
            self.tokenizer.bpe.count(piece)
        }
    }
}

/// The encoding's pre-tokenization: tiktoken's pattern, with its negative
/// look-ahead `\s+(?!\S)` written as the alternative `\s+\s` whose last
/// character is given back (the regex engine has no look-around).
struct Pretokenizer {
    regex: regex_automata::meta::Regex,
    /// Per pattern of `regex`: whether its match ends in a look-ahead
    /// character that is not part of the piece.
    gives_back_last: Vec<bool>,
    /// This encoding's slot in each thread's [`SEARCH_CACHES`].
    slot: usize,
}

thread_local! {
    /// Each thread's search caches, one per encoding (slot).
    static SEARCH_CACHES: std::cell::RefCell<Vec<Option<regex_automata::meta::Cache>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

impl Pretokenizer {
    fn new(patterns: &[(&str, bool)]) -> Self {
        static SLOTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let regex = regex_automata::meta::Regex::new_many(
            &patterns.iter().map(|(p, _)| *p).collect::<Vec<_>>(),
        )
        .expect("the encoding's split patterns compile");
        Pretokenizer {
            regex,
            gives_back_last: patterns.iter().map(|(_, g)| *g).collect(),
            slot: SLOTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// Calls `piece` with each piece of `text`, in order.
    fn each_piece(&self, text: &str, mut piece: impl FnMut(&str)) {
        use regex_automata::{Anchored, Input};
        let mut run = |cache: &mut regex_automata::meta::Cache| {
            let mut at = 0;
            while at < text.len() {
                let rest = &text[at..];
                let input = Input::new(rest).anchored(Anchored::Yes);
                let Some(m) = self.regex.search_with(cache, &input) else {
                    break;
                };
                let mut end = m.end();
                if self.gives_back_last[m.pattern().as_usize()] {
                    end -= rest[..end].chars().next_back().map_or(0, char::len_utf8);
                }
                // Every pattern consumes a character; a piece never is empty.
                if end == 0 {
                    end = m.end().max(rest.chars().next().map_or(1, char::len_utf8));
                }
                piece(&rest[..end]);
                at += end;
            }
        };
        let cached = SEARCH_CACHES.try_with(|caches| {
            let mut caches = caches.try_borrow_mut().ok()?;
            if caches.len() <= self.slot {
                caches.resize_with(self.slot + 1, || None);
            }
            let cache = caches[self.slot].get_or_insert_with(|| self.regex.create_cache());
            run(cache);
            Some(())
        });
        // A thread being torn down: a cache for this call only.
        if !matches!(cached, Ok(Some(()))) {
            run(&mut self.regex.create_cache());
        }
    }
}

impl fmt::Debug for BpeCounter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BpeCounter")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl TokenCounter for BpeCounter {
    fn count(&self, text: &str) -> usize {
        let mut n = 0;
        self.split
            .each_piece(text, |p| n += self.piece(p.as_bytes()));
        n
    }

    fn name(&self) -> &str {
        self.name
    }

    fn is_exact(&self) -> bool {
        true
    }
}

/// What precedes a word: at most one character that is not a line break,
/// letter or number.
const LEAD: &str = "[^\\r\\n\\p{L}\\p{N}]?";

// One instance per encoding per process: building the tables takes tens of
// milliseconds and megabytes, so they are built once, on first use.
static O200K: LazyLock<Arc<dyn TokenCounter>> = LazyLock::new(|| {
    let upper = "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]";
    let lower = "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]";
    let contraction = "(?i:'s|'t|'re|'ve|'m|'ll|'d)?";
    let words = [
        format!("{LEAD}{upper}*{lower}+{contraction}"),
        format!("{LEAD}{upper}+{lower}*{contraction}"),
        "\\p{N}{1,3}".to_owned(),
        " ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*".to_owned(),
        "\\s*[\\r\\n]+".to_owned(),
        "\\s+$".to_owned(),
    ]
    .join("|");
    Arc::new(BpeCounter::new(
        "o200k_base",
        bpe_openai::o200k_base(),
        Pretokenizer::new(&[(&words, false), ("\\s+\\s", true), ("\\s+", false)]),
    ))
});

static CL100K: LazyLock<Arc<dyn TokenCounter>> = LazyLock::new(|| {
    let words = [
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)".to_owned(),
        format!("{LEAD}\\p{{L}}+"),
        "\\p{N}{1,3}".to_owned(),
        " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*".to_owned(),
        "\\s*[\\r\\n]+".to_owned(),
        "\\s+$".to_owned(),
    ]
    .join("|");
    Arc::new(BpeCounter::new(
        "cl100k_base",
        bpe_openai::cl100k_base(),
        Pretokenizer::new(&[(&words, false), ("\\s+\\s", true), ("\\s+", false)]),
    ))
});

static ESTIMATOR: LazyLock<Arc<dyn TokenCounter>> =
    LazyLock::new(|| Arc::new(Estimator::default()));

static CLAUDE_ESTIMATOR: LazyLock<Arc<dyn TokenCounter>> =
    LazyLock::new(|| Arc::new(Estimator::claude()));

/// The o200k_base encoding (gpt-4o and later). The first call builds the tables.
pub fn o200k() -> Arc<dyn TokenCounter> {
    Arc::clone(&O200K)
}

/// The cl100k_base encoding (gpt-4, gpt-3.5, text-embedding-3). The first call
/// builds the tables.
pub fn cl100k() -> Arc<dyn TokenCounter> {
    Arc::clone(&CL100K)
}

/// The encoding a model uses, or `None` when it has no public tokenizer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    O200k,
    Cl100k,
}

/// Model names arrive as "gpt-4o", "openai/gpt-4o", "ft:gpt-4o-mini:org::id",
/// "GPT-4o" or Azure deployment names ("gpt-35-turbo"); all are recognized.
fn encoding_for_model(model: &str) -> Option<Encoding> {
    let m = normalize_model(model);
    let m = m.as_str();
    // `o1`, `o3`, `o4-mini`… but not some unrelated "o100x".
    let o_series = |p: &str| m == p || m.starts_with(&format!("{p}-"));
    const O200K_PREFIXES: &[&str] = &[
        "gpt-4o",
        "gpt-4.1",
        "gpt-4.5",
        "gpt-5",
        "chatgpt-4o",
        "gpt-oss", // o200k_harmony: same ordinary-text counts as o200k_base
        "codex-",
    ];
    const CL100K_PREFIXES: &[&str] = &[
        "gpt-4",
        "gpt-3.5",
        "gpt-35",
        "text-embedding-3",
        "text-embedding-ada-002",
    ];
    if O200K_PREFIXES.iter().any(|p| m.starts_with(p))
        || ["o1", "o3", "o4", "o4-mini"].iter().any(|p| o_series(p))
    {
        Some(Encoding::O200k)
    } else if CL100K_PREFIXES.iter().any(|p| m.starts_with(p)) {
        Some(Encoding::Cl100k)
    } else {
        None
    }
}

/// True when the model has a public OpenAI encoding (exact counts).
/// Whether an OpenAI tokenizer is known for `model`.
pub fn encoding_known(model: &str) -> bool {
    encoding_for_model(model).is_some()
}

/// Picks the counter for a model: o200k for gpt-4o*, gpt-4.1*, gpt-4.5*, o1*,
/// o3*, o4*, gpt-5*, chatgpt-4o*, gpt-oss*; cl100k for gpt-4*, gpt-3.5*,
/// text-embedding-3*; [`Estimator::claude`] for Claude models and the default
/// [`Estimator`] for everything else (gemini-*, unknown), since those
/// providers publish no tokenizer.
pub fn counter_for_model(model: &str) -> Arc<dyn TokenCounter> {
    match encoding_for_model(model) {
        Some(Encoding::O200k) => o200k(),
        Some(Encoding::Cl100k) => cl100k(),
        None if normalize_model(model).contains("claude") => Arc::clone(&CLAUDE_ESTIMATOR),
        None => Arc::clone(&ESTIMATOR),
    }
}

/// The counter a format's tokenizer rule picks for `model`.
pub fn counter_for(rule: TokenizerRule, model: &str) -> Arc<dyn TokenCounter> {
    match rule {
        TokenizerRule::ClaudeEstimate => Arc::clone(&CLAUDE_ESTIMATOR),
        TokenizerRule::ByModel => counter_for_model(model),
    }
}

/// A model name lowercased, without a fine-tune prefix or a `vendor/` path.
pub fn normalize_model(model: &str) -> String {
    let m = model.trim().to_ascii_lowercase();
    let m = m.strip_prefix("ft:").unwrap_or(&m).to_string();
    m.rsplit('/').next().unwrap_or(&m).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::corpus;

    fn tiktoken_o200k(text: &str) -> usize {
        tiktoken_rs::o200k_base_singleton()
            .encode_ordinary(text)
            .len()
    }

    fn tiktoken_cl100k(text: &str) -> usize {
        tiktoken_rs::cl100k_base_singleton()
            .encode_ordinary(text)
            .len()
    }

    /// Edge cases, whole corpus parts, and slices of them at odd offsets
    /// (UTF-8 boundaries respected) so pieces start mid-word and mid-number.
    fn comparison_corpus() -> Vec<String> {
        let mut texts = corpus::edge_cases();
        let parts = corpus::parts(40_000);
        for p in &parts {
            let t = &p.text;
            for (start, len) in [(0, 10), (3, 100), (17, 1000), (101, 7777), (0, t.len())] {
                let mut s = start.min(t.len());
                while !t.is_char_boundary(s) {
                    s += 1;
                }
                let mut e = (s + len).min(t.len());
                while !t.is_char_boundary(e) {
                    e -= 1;
                }
                texts.push(t[s..e].to_string());
            }
        }
        texts.extend(corpus::messages(200, 7));
        texts
    }

    #[test]
    fn o200k_matches_tiktoken_exactly() {
        let c = o200k();
        for t in comparison_corpus() {
            assert_eq!(c.count(&t), tiktoken_o200k(&t), "o200k mismatch for {t:?}");
        }
    }

    #[test]
    fn cl100k_matches_tiktoken_exactly() {
        let c = cl100k();
        for t in comparison_corpus() {
            assert_eq!(
                c.count(&t),
                tiktoken_cl100k(&t),
                "cl100k mismatch for {t:?}"
            );
        }
    }

    /// The shortcut's premise, over the whole dictionary of each encoding:
    /// the encoder makes every token's bytes into that one token. A piece
    /// the dictionary lacks still goes to the encoder, which the comparisons
    /// with tiktoken above cover.
    #[test]
    fn a_piece_that_is_a_token_counts_one() {
        for tokenizer in [bpe_openai::o200k_base(), bpe_openai::cl100k_base()] {
            let bpe = &tokenizer.bpe;
            for id in 0..bpe.num_tokens() as u32 {
                let bytes = bpe.token_bytes(id);
                assert_eq!(bpe.count(bytes), 1, "token {id} ({bytes:?})");
            }
        }
        // And through the counter: a text that is one token, split into one
        // piece, counts one without the encoder.
        for (c, word) in [(o200k(), " hello"), (cl100k(), " hello"), (o200k(), "\n\n")] {
            assert_eq!(c.count(word), 1, "{word:?}");
        }
    }

    #[test]
    fn known_counts() {
        let (o, c) = (o200k(), cl100k());
        assert_eq!(o.count(""), 0);
        assert_eq!(c.count(""), 0);
        assert_eq!(o.count("hello world"), 2);
        assert_eq!(c.count("hello world"), 2);
        for t in [
            "hello world",
            "Hello, world!",
            "tiktoken is great!",
            "🚀",
            "中文",
        ] {
            assert_eq!(o.count(t), tiktoken_o200k(t), "{t}");
            assert_eq!(c.count(t), tiktoken_cl100k(t), "{t}");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(
            crate::testing::cases(256)
        ))]

        /// The split done here gives bpe-openai's own counts on any text:
        /// runs of spaces and line breaks (the given-back look-ahead),
        /// apostrophes, digits and any Unicode.
        #[test]
        fn the_split_counts_what_bpe_openai_counts(
            t in "([ \t\r\n]{0,3}|'[a-zA-Z]{0,2}|[0-9]{1,5}|[a-zA-Z]{1,6}|\\PC{1,4}|/|\u{0301}){0,24}"
        ) {
            proptest::prop_assert_eq!(o200k().count(&t), bpe_openai::o200k_base().count(t.as_str()));
            proptest::prop_assert_eq!(cl100k().count(&t), bpe_openai::cl100k_base().count(t.as_str()));
        }
    }

    #[test]
    fn threads_counting_at_once_count_what_one_does() {
        let texts = comparison_corpus();
        let (o, c) = (o200k(), cl100k());
        let alone: Vec<(usize, usize)> = texts.iter().map(|t| (o.count(t), c.count(t))).collect();
        std::thread::scope(|s| {
            let at_once: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        texts
                            .iter()
                            .map(|t| (o.count(t), c.count(t)))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            for counts in at_once {
                assert_eq!(counts.join().unwrap(), alone);
            }
        });
    }

    #[test]
    fn special_token_text_is_ordinary_text() {
        let o = o200k();
        let t = "<|endoftext|>";
        // As a special token it would be 1; as text it is several.
        assert_eq!(
            tiktoken_rs::o200k_base_singleton()
                .encode_with_special_tokens(t)
                .len(),
            1
        );
        assert!(o.count(t) > 1);
        assert_eq!(o.count(t), tiktoken_o200k(t));
    }

    #[test]
    fn names_and_exactness() {
        assert_eq!(o200k().name(), "o200k_base");
        assert_eq!(cl100k().name(), "cl100k_base");
        assert!(o200k().is_exact() && cl100k().is_exact());
        let e = counter_for_model("claude-sonnet-4-5");
        assert!(!e.is_exact());
        assert_eq!(e.name(), Estimator::claude().name());
        assert_eq!(
            counter_for_model("gemini-2.5-pro").name(),
            Estimator::default().name()
        );
    }

    #[test]
    fn one_instance_per_encoding() {
        assert!(Arc::ptr_eq(&o200k(), &o200k()));
        assert!(Arc::ptr_eq(&cl100k(), &counter_for_model("gpt-4")));
        assert!(Arc::ptr_eq(
            &counter_for_model("claude-3-haiku"),
            &counter_for_model("anthropic/claude-opus-4-7")
        ));
        assert!(Arc::ptr_eq(
            &counter_for_model("gemini-2.5-pro"),
            &counter_for_model("llama-3.1-70b")
        ));
    }

    #[test]
    fn model_mapping() {
        use Encoding::*;
        let cases: &[(&str, Option<Encoding>)] = &[
            ("gpt-4o", Some(O200k)),
            ("gpt-4o-mini", Some(O200k)),
            ("gpt-4o-2024-08-06", Some(O200k)),
            ("chatgpt-4o-latest", Some(O200k)),
            ("gpt-4.1", Some(O200k)),
            ("gpt-4.1-nano", Some(O200k)),
            ("gpt-4.5-preview", Some(O200k)),
            ("gpt-5", Some(O200k)),
            ("gpt-5-mini", Some(O200k)),
            ("gpt-5.1-codex", Some(O200k)),
            ("o1", Some(O200k)),
            ("o1-preview", Some(O200k)),
            ("o3", Some(O200k)),
            ("o3-mini", Some(O200k)),
            ("o4-mini", Some(O200k)),
            ("o4-mini-2025-04-16", Some(O200k)),
            ("gpt-oss-120b", Some(O200k)),
            ("GPT-4o", Some(O200k)),
            ("openai/gpt-4o", Some(O200k)),
            ("ft:gpt-4o-mini-2024-07-18:acme::abc123", Some(O200k)),
            ("gpt-4", Some(Cl100k)),
            ("gpt-4-turbo", Some(Cl100k)),
            ("gpt-4-32k-0314", Some(Cl100k)),
            ("gpt-3.5-turbo", Some(Cl100k)),
            ("gpt-35-turbo", Some(Cl100k)),
            ("ft:gpt-3.5-turbo-0125:org::x", Some(Cl100k)),
            ("text-embedding-3-small", Some(Cl100k)),
            ("text-embedding-3-large", Some(Cl100k)),
            ("claude-sonnet-4-5", None),
            ("claude-3-5-haiku-20241022", None),
            ("anthropic/claude-opus-4", None),
            ("gemini-2.5-pro", None),
            ("llama-3.1-70b", None),
            ("o100x", None),
            ("", None),
        ];
        for (model, want) in cases {
            assert_eq!(encoding_for_model(model), *want, "{model}");
        }
        assert_eq!(counter_for_model("gpt-4o").name(), "o200k_base");
        assert_eq!(counter_for_model("gpt-4-turbo").name(), "cl100k_base");
    }
}
