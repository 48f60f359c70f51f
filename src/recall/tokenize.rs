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
    term.chars().count() >= 3
        && (term.chars().any(|c| c.is_ascii_digit()) || term.chars().any(is_joiner))
}

/// The search terms of `text`, lowercased, in order (repeats kept: BM25
/// counts them).
pub fn terms(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut cjk = String::new();
    for c in text.chars() {
        if is_cjk(c) {
            flush_word(&mut word, &mut out);
            cjk.push(c);
        } else if c.is_alphanumeric() || is_joiner(c) {
            flush_cjk(&mut cjk, &mut out);
            word.push(c);
        } else {
            flush_word(&mut word, &mut out);
            flush_cjk(&mut cjk, &mut out);
        }
    }
    flush_word(&mut word, &mut out);
    flush_cjk(&mut cjk, &mut out);
    out
}

fn flush_cjk(run: &mut String, out: &mut Vec<String>) {
    let chars: Vec<char> = run.chars().collect();
    for (i, c) in chars.iter().enumerate() {
        out.push(c.to_string());
        if let Some(next) = chars.get(i + 1) {
            out.push([*c, *next].iter().collect());
        }
    }
    run.clear();
}

fn flush_word(run: &mut String, out: &mut Vec<String>) {
    let word = run.trim_matches(is_joiner);
    if !word.is_empty() {
        let parts = parts(word);
        let whole = word.to_lowercase();
        if parts.len() > 1 || whole.chars().count() > MAX_TERM_CHARS {
            if whole.chars().count() <= MAX_TERM_CHARS {
                out.push(whole);
            }
            out.extend(
                parts
                    .into_iter()
                    .filter(|p| p.chars().count() <= MAX_TERM_CHARS),
            );
        } else {
            out.push(whole);
        }
    }
    run.clear();
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
            let boundary = (a.is_lowercase() && b.is_uppercase())
                || (a.is_uppercase() && b.is_uppercase() && next_lower)
                || (a.is_alphabetic() && b.is_numeric())
                || (a.is_numeric() && b.is_alphabetic());
            if boundary {
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
