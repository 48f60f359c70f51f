//! The recall tokenizer: words, identifiers and CJK text as search terms.
//!
//! A word is a run of letters and digits, joined by `_ - . / : @ # ~`
//! inside it (`src/app/render.rs`, `ERR_CONN_REFUSED`, `acct-4471`,
//! `user@example.com`). An identifier is sent both whole and as its parts
//! (split at joiners, case changes and letter-digit changes), so a query
//! naming `getUserById` finds `get_user_by_id` and an exact mention ranks
//! first. Chinese, Japanese and Korean text has no spaces: each character
//! and each pair of neighbours is a term. No stop words and no stemming:
//! BM25's inverse document frequency weighs common words down in any
//! language, and no word list can know every language.

/// Longest term kept whole; longer runs (base64, hashes of hashes) keep
/// only their parts.
const MAX_TERM_CHARS: usize = 64;

/// What may join the parts of an identifier.
fn is_joiner(c: char) -> bool {
    matches!(c, '_' | '-' | '.' | '/' | ':' | '@' | '#' | '~')
}

/// Han, kana, Hangul and their punctuation-free neighbours: scripts written
/// without spaces between words.
pub fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF     // Hiragana, Katakana
        | 0x3400..=0x4DBF   // CJK Extension A
        | 0x4E00..=0x9FFF   // CJK Unified Ideographs
        | 0xAC00..=0xD7AF   // Hangul syllables
        | 0xF900..=0xFAFF   // CJK Compatibility Ideographs
        | 0x20000..=0x2FFFF // CJK Extensions B–F
    )
}

/// A term that names something exactly: it has a digit, or joins parts.
pub fn is_identifier(term: &str) -> bool {
    // Digits and joiners are ASCII, so a byte test is the char test.
    term.bytes()
        .any(|b| b.is_ascii_digit() || is_joiner(char::from(b)))
        && term.len() >= 3
        && (term.is_ascii() || term.chars().count() >= 3)
}

/// The search terms of `text`, lowercased, in order (repeats kept: BM25
/// counts them).
pub fn terms(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for_each_term(text, |t| out.push(t.to_string()));
    out
}

/// What a character is to the tokenizer.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    /// Part of a word (a letter, a digit or a joiner).
    Word,
    /// Written without spaces ([`is_cjk`]).
    Cjk,
    /// Ends a word.
    Other,
}

fn class_of(c: char) -> Class {
    if is_cjk(c) {
        Class::Cjk
    } else if c.is_alphanumeric() || is_joiner(c) {
        Class::Word
    } else {
        Class::Other
    }
}

/// [`terms`] one at a time, without a string per term: the recall index
/// weighs every evicted passage of a thread, so this is on the cold path.
/// Words and CJK runs are slices of `text` (each is one contiguous run), and
/// ASCII bytes are classified without decoding: most text an agent
/// produces is ASCII.
pub fn for_each_term(text: &str, mut f: impl FnMut(&str)) {
    let bytes = text.as_bytes();
    let mut scratch = Scratch::default();
    let mut word: Option<usize> = None;
    let mut cjk: Option<usize> = None;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let (class, len) = if b.is_ascii() {
            let c = char::from(b);
            let class = if c.is_ascii_alphanumeric() || is_joiner(c) {
                Class::Word
            } else {
                Class::Other
            };
            (class, 1)
        } else {
            // `i` is always at a character boundary: it advances by whole
            // characters.
            match text.get(i..).and_then(|rest| rest.chars().next()) {
                Some(c) => (class_of(c), c.len_utf8()),
                None => (Class::Other, 1),
            }
        };
        match class {
            Class::Cjk => {
                if let Some(s) = word.take() {
                    flush_word(&text[s..i], &mut scratch, &mut f);
                }
                cjk.get_or_insert(i);
            }
            Class::Word => {
                if let Some(s) = cjk.take() {
                    flush_cjk(&text[s..i], &mut scratch.lower, &mut f);
                }
                word.get_or_insert(i);
            }
            Class::Other => {
                if let Some(s) = word.take() {
                    flush_word(&text[s..i], &mut scratch, &mut f);
                }
                if let Some(s) = cjk.take() {
                    flush_cjk(&text[s..i], &mut scratch.lower, &mut f);
                }
            }
        }
        i += len;
    }
    if let Some(s) = word {
        flush_word(&text[s..], &mut scratch, &mut f);
    }
    if let Some(s) = cjk {
        flush_cjk(&text[s..], &mut scratch.lower, &mut f);
    }
}

/// Buffers reused across the words of one text.
#[derive(Default)]
struct Scratch {
    lower: String,
    part: String,
    parts: Vec<(usize, usize)>,
}

/// Each character of a CJK run, and each pair of neighbours.
fn flush_cjk(run: &str, buf: &mut String, f: &mut impl FnMut(&str)) {
    let mut chars = run.chars().peekable();
    while let Some(c) = chars.next() {
        buf.clear();
        buf.push(c);
        f(buf);
        if let Some(&next) = chars.peek() {
            buf.push(next);
            f(buf);
        }
    }
}

fn flush_word(run: &str, scratch: &mut Scratch, f: &mut impl FnMut(&str)) {
    let word = run.trim_matches(is_joiner);
    if word.is_empty() {
        return;
    }
    // Most words: lowercase letters only, or digits only. One part, already
    // lowercase: the word itself (unless longer than a term may be).
    let b = word.as_bytes();
    if b.iter().all(u8::is_ascii_lowercase) || b.iter().all(u8::is_ascii_digit) {
        if b.len() <= MAX_TERM_CHARS {
            f(word);
        }
        return;
    }
    if word.is_ascii() {
        return ascii_word(word, scratch, f);
    }
    let lower = &mut scratch.lower;
    lower.clear();
    lower.push_str(&word.to_lowercase());
    let long = lower.chars().count() > MAX_TERM_CHARS;
    if !long && single_part(word) {
        // Most words: the word itself, no parts to find.
        f(lower);
        return;
    }
    let parts = parts(word);
    if parts.len() > 1 || long {
        if !long {
            f(lower);
        }
        for p in parts.iter().filter(|p| p.chars().count() <= MAX_TERM_CHARS) {
            f(p);
        }
    } else {
        f(lower);
    }
}

/// [`flush_word`] for an ASCII word: bytes are characters, and the parts
/// are found as ranges of the word (what [`parts`] gives, without a string
/// per part until one is sent).
fn ascii_word(word: &str, scratch: &mut Scratch, f: &mut impl FnMut(&str)) {
    let Scratch { lower, part, parts } = scratch;
    lower.clear();
    lower.push_str(word);
    lower.make_ascii_lowercase();
    let long = word.len() > MAX_TERM_CHARS;
    parts.clear();
    let b = word.as_bytes();
    let mut start = 0;
    for i in 0..=b.len() {
        if i == b.len() || is_joiner(char::from(b[i])) {
            if i > start {
                parts.push((start, i));
            }
            start = i + 1;
            continue;
        }
        if i > start {
            let (x, y) = (b[i - 1], b[i]);
            let next_lower = b.get(i + 1).is_some_and(u8::is_ascii_lowercase);
            let split = (x.is_ascii_lowercase() && y.is_ascii_uppercase())
                || (x.is_ascii_uppercase() && y.is_ascii_uppercase() && next_lower)
                || (x.is_ascii_alphabetic() && y.is_ascii_digit())
                || (x.is_ascii_digit() && y.is_ascii_alphabetic());
            if split {
                parts.push((start, i));
                start = i;
            }
        }
    }
    if parts.len() <= 1 && !long {
        f(lower);
        return;
    }
    if !long {
        f(lower);
    }
    for &(s, e) in parts.iter().filter(|(s, e)| e - s <= MAX_TERM_CHARS) {
        part.clear();
        part.push_str(&lower[s..e]);
        f(part);
    }
}

/// Whether [`parts`] would give `word` back whole: no joiner inside it and
/// no case or letter-digit change.
fn single_part(word: &str) -> bool {
    if word.contains(is_joiner) {
        return false;
    }
    let mut chars = word.chars().peekable();
    let mut prev: Option<char> = None;
    while let Some(b) = chars.next() {
        if let Some(a) = prev {
            let next_lower = chars.peek().is_some_and(|c| c.is_lowercase());
            if boundary(a, b, next_lower) {
                return false;
            }
        }
        prev = Some(b);
    }
    true
}

/// Whether an identifier's parts split between `a` and `b` (`next_lower`:
/// the character after `b` is lowercase).
fn boundary(a: char, b: char, next_lower: bool) -> bool {
    (a.is_lowercase() && b.is_uppercase())
        || (a.is_uppercase() && b.is_uppercase() && next_lower)
        || (a.is_alphabetic() && b.is_numeric())
        || (a.is_numeric() && b.is_alphabetic())
}

/// An identifier's parts, lowercased: split at joiners, at a lower-to-upper
/// case change (`getUser` → `get`, `user`; `HTTPServer` → `http`,
/// `server`) and between letters and digits (`v2` → `v`, `2`).
fn parts(word: &str) -> Vec<String> {
    let mut out = Vec::new();
    for piece in word.split(is_joiner).filter(|p| !p.is_empty()) {
        let chars: Vec<char> = piece.chars().collect();
        let mut start = 0;
        for i in 1..chars.len() {
            let (a, b) = (chars[i - 1], chars[i]);
            let next_lower = chars.get(i + 1).is_some_and(|c| c.is_lowercase());
            if boundary(a, b, next_lower) {
                out.push(chars[start..i].iter().collect::<String>().to_lowercase());
                start = i;
            }
        }
        out.push(chars[start..].iter().collect::<String>().to_lowercase());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_terms_whole_and_in_parts() {
        assert_eq!(
            terms("See src/app/render.rs, line 40."),
            [
                "see",
                "src/app/render.rs",
                "src",
                "app",
                "render",
                "rs",
                "line",
                "40"
            ]
        );
        assert_eq!(
            terms("getUserById failed: ERR_CONN_REFUSED"),
            [
                "getuserbyid",
                "get",
                "user",
                "by",
                "id",
                "failed",
                "err_conn_refused",
                "err",
                "conn",
                "refused"
            ]
        );
        assert_eq!(
            terms("HTTPServer v2"),
            ["httpserver", "http", "server", "v2", "v", "2"]
        );
        assert!(is_identifier("acct-4471") && is_identifier("v2.3") && !is_identifier("hello"));
    }

    #[test]
    fn cjk_text_is_searched_by_characters_and_pairs() {
        assert_eq!(terms("数据库"), ["数", "数据", "据", "据库", "库"]);
        // Mixed scripts split where the script changes.
        assert_eq!(terms("错误E42"), ["错", "错误", "误", "e42", "e", "42"]);
        assert_eq!(terms("서버 오류"), ["서", "서버", "버", "오", "오류", "류"]);
    }

    proptest::proptest! {
        /// The streaming path gives what splitting every word into its
        /// parts gives (the rule `terms` had before it streamed).
        #[test]
        fn streaming_terms_equal_the_parts_rule(text in "([a-zA-Z0-9_./:@#~ ,éÉßİ数据서\u{301}🙂-]|[a-z]{60,70}|[A-Z][a-z]{62,66}[0-9]){0,40}") {
            let mut expected = Vec::new();
            let mut word = String::new();
            let mut cjk: Vec<char> = Vec::new();
            let mut words: Vec<(bool, String)> = Vec::new();
            for c in text.chars() {
                if is_cjk(c) {
                    if !word.is_empty() { words.push((false, std::mem::take(&mut word))); }
                    cjk.push(c);
                } else if c.is_alphanumeric() || is_joiner(c) {
                    if !cjk.is_empty() { words.push((true, cjk.drain(..).collect())); }
                    word.push(c);
                } else {
                    if !word.is_empty() { words.push((false, std::mem::take(&mut word))); }
                    if !cjk.is_empty() { words.push((true, cjk.drain(..).collect())); }
                }
            }
            if !word.is_empty() { words.push((false, word)); }
            if !cjk.is_empty() { words.push((true, cjk.into_iter().collect())); }
            for (is_cjk_run, w) in words {
                if is_cjk_run {
                    let chars: Vec<char> = w.chars().collect();
                    for (i, c) in chars.iter().enumerate() {
                        expected.push(c.to_string());
                        if let Some(n) = chars.get(i + 1) { expected.push([*c, *n].iter().collect()); }
                    }
                    continue;
                }
                let w = w.trim_matches(is_joiner);
                if w.is_empty() { continue; }
                let parts = parts(w);
                let whole = w.to_lowercase();
                if parts.len() > 1 || whole.chars().count() > MAX_TERM_CHARS {
                    if whole.chars().count() <= MAX_TERM_CHARS { expected.push(whole); }
                    expected.extend(parts.into_iter().filter(|p| p.chars().count() <= MAX_TERM_CHARS));
                } else {
                    expected.push(whole);
                }
            }
            proptest::prop_assert_eq!(terms(&text), expected);
        }
    }

    #[test]
    fn any_text_tokenizes_without_panicking() {
        for s in [
            "",
            "///",
            "a\u{0301}b",
            "🙂 emoji",
            "\u{0}",
            "ΑΒΓ δέλτα",
            "x".repeat(500).as_str(),
        ] {
            let t = terms(s);
            assert!(t
                .iter()
                .all(|t| !t.is_empty() && t.chars().count() <= MAX_TERM_CHARS));
        }
    }
}
