//! Small text helpers shared by the extractive summarizer and tool-output
//! compression. Plain code (no regex): everything here is linear and deterministic.

/// Collapses every run of whitespace to one space and trims the ends, so the
/// same sentence always yields the same bytes whatever its line wrapping.
///
/// The same bytes as joining `split_whitespace()` with single spaces, built
/// a char at a time into one buffer: recall runs it over every candidate
/// passage on every Render.
pub(crate) fn collapse_ws(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    // A space is owed before the next word (never at the start).
    let mut gap = false;
    for c in s.chars() {
        if c.is_whitespace() {
            gap = !out.is_empty();
            continue;
        }
        if gap {
            out.push(' ');
            gap = false;
        }
        out.push(c);
    }
    out
}

/// Caps `s` at `max` chars (not bytes, so UTF-8 is never split); a cut is
/// marked with `…`, which counts toward the cap.
pub(crate) fn cap_chars(s: &str, max: usize) -> String {
    if max == 0 {
        return String::new();
    }
    match s.char_indices().nth(max) {
        None => s.to_string(),
        Some(_) => {
            let cut = s
                .char_indices()
                .nth(max - 1)
                .map(|(i, _)| i)
                .unwrap_or(s.len());
            let mut out = s[..cut].trim_end().to_string();
            out.push('…');
            out
        }
    }
}

/// The first `max` bytes of `s`, cut at a char boundary: how much of a large
/// output is scanned.
pub(crate) fn head(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// `collapse_ws` then `cap_chars`.
pub(crate) fn clean(s: &str, max: usize) -> String {
    cap_chars(&collapse_ws(s), max)
}

/// Splits a leading list marker (`- `, `* `, `+ `, `• `, `1. `, `2) `, and a
/// following `[ ]`/`[x]` checkbox) off a trimmed line. Returns whether it was
/// a list item and the rest.
pub(crate) fn strip_list_marker(line: &str) -> (bool, &str) {
    let line = line.trim_start();
    let rest = ["- ", "* ", "+ ", "• ", "– "]
        .iter()
        .find_map(|m| line.strip_prefix(m))
        .or_else(|| {
            let digits = line.bytes().take_while(u8::is_ascii_digit).count();
            if digits == 0 || digits > 3 {
                return None;
            }
            let after = &line[digits..];
            after
                .strip_prefix(". ")
                .or_else(|| after.strip_prefix(") "))
        });
    match rest {
        None => (false, line),
        Some(r) => {
            let r = r.trim_start();
            let r = ["[ ] ", "[x] ", "[X] "]
                .iter()
                .find_map(|m| r.strip_prefix(m))
                .unwrap_or(r);
            (true, r.trim_start())
        }
    }
}

/// Lower-cased words (letters, digits, apostrophes; `’` folded to `'`) for cue
/// matching. Currency symbols and punctuation separate words.
pub(crate) fn words(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for c in s.chars() {
        let c = if c == '’' { '\'' } else { c };
        if c.is_alphanumeric() || c == '\'' {
            cur.extend(c.to_lowercase());
        } else if !cur.is_empty() {
            push_word(&mut out, &mut cur);
        }
    }
    if !cur.is_empty() {
        push_word(&mut out, &mut cur);
    }
    out
}

fn push_word(out: &mut Vec<String>, cur: &mut String) {
    let w = cur.trim_matches('\'');
    if !w.is_empty() {
        out.push(w.to_string());
    }
    cur.clear();
}

/// True when `needle` (a word sequence) occurs in `words`.
pub(crate) fn has_phrase(words: &[String], needle: &[&str]) -> bool {
    !needle.is_empty()
        && words.len() >= needle.len()
        && words
            .windows(needle.len())
            .any(|w| w.iter().zip(needle).all(|(a, b)| a == b))
}

/// Byte offset of `needle` (ASCII) in `hay`, ignoring ASCII case. The offset is
/// always a char boundary of `hay` because the match starts at an ASCII byte.
pub(crate) fn find_ascii_ci(hay: &str, needle: &str) -> Option<usize> {
    let (h, n) = (hay.as_bytes(), needle.as_bytes());
    if n.is_empty() || h.len() < n.len() {
        return None;
    }
    (0..=h.len() - n.len()).find(|&i| h[i..i + n.len()].eq_ignore_ascii_case(n))
}

/// Normalized key for de-duplication: lower case, collapsed whitespace,
/// trailing punctuation removed ("Never X." and "never  x" are the same fact).
pub(crate) fn dedup_key(s: &str) -> String {
    collapse_ws(s)
        .to_lowercase()
        .trim_end_matches(['.', '!', ';', ':', ',', ' '])
        .to_string()
}

/// Unmasked words a statement needs for [`update_key`] to name a subject.
const UPDATE_SUBJECT_WORDS: usize = 4;

/// The subject of a statement that gives a value, and its values: its
/// words with every value (a word holding a digit, or joined by `-`, `_`,
/// `/`, `@`, `.` inside it) masked. Two statements with the same subject
/// say the same thing, perhaps with other values (see [`updates`]). `None`
/// when it holds no value, or too few other words to name a subject. Any
/// script: values are told by their shape, not by words.
pub(crate) fn update_key(s: &str) -> Option<(String, Vec<&str>)> {
    let mut key = String::new();
    let mut values = Vec::new();
    let mut plain = 0usize;
    for token in s.split_whitespace() {
        let t = token.trim_matches(|c: char| !c.is_alphanumeric());
        if t.is_empty() {
            continue;
        }
        let joined = t
            .char_indices()
            .any(|(i, c)| i > 0 && matches!(c, '-' | '_' | '/' | '@' | '.'));
        if t.chars().any(|c| c.is_numeric()) || joined {
            values.push(t);
            key.push_str(" #");
        } else {
            plain += 1;
            key.push(' ');
            key.extend(t.chars().flat_map(char::to_lowercase));
        }
    }
    (!values.is_empty() && plain >= UPDATE_SUBJECT_WORDS).then_some((key, values))
}

/// Whether a later statement with `later` values updates an earlier one
/// of the same subject with `earlier` values: it gives the one value anew,
/// or keeps some of them and changes others ("the codename is X and the
/// deadline is <new date>"). Where every value differs ("topic 1 … bucket
/// 1x7", "topic 3 … bucket 3x7") they are two things, not one updated.
pub(crate) fn updates(earlier: &[&str], later: &[&str]) -> bool {
    earlier.len() == 1 || earlier.iter().any(|v| later.contains(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_update_key_masks_values_and_keeps_the_subject() {
        let key = |s| update_key(s).map(|(k, _)| k);
        let a = key("Budget cap is $201 total. Never exceed it.");
        assert_eq!(a, key("budget cap is $956 total — never exceed it"));
        assert!(a.is_some());
        assert_ne!(
            key("The staging database is MySQL 8 in us-west-2."),
            key("The production database is Postgres 15 in eu-north-5.")
        );
        assert_eq!(
            key("デプロイ先 は eu-west-1 に 変更 です"),
            key("デプロイ先 は ap-south-2 に 変更 です")
        );
        // No value, or no subject: nothing to update.
        assert_eq!(key("We keep the current plan for now."), None);
        assert_eq!(key("port 8080"), None);
        // One value given anew, or some kept and others changed, updates;
        // all of several changed is another thing.
        assert!(updates(&["$201"], &["$956"]));
        assert!(updates(
            &["ESZYC-417", "2027-08-09"],
            &["ESZYC-417", "2027-12-26"]
        ));
        assert!(!updates(
            &["1", "bucket-1x7", "1"],
            &["3", "bucket-3x7", "3"]
        ));
    }

    proptest::proptest! {
        /// The fast path is `split_whitespace` joined by spaces, for any
        /// text: ASCII controls, Unicode spaces, every plane.
        #[test]
        fn collapse_ws_is_split_whitespace_joined(s in "(\\PC|[ \t\n\r\x0b\x0c\u{85}\u{a0}\u{2028}\u{3000}\u{1680}])*") {
            let expected = s.split_whitespace().collect::<Vec<_>>().join(" ");
            proptest::prop_assert_eq!(collapse_ws(&s), expected);
        }
    }

    #[test]
    fn collapse_ws_handles_edges() {
        for s in [
            "",
            " ",
            "a",
            " a ",
            "a\u{3000}b",
            "\u{85}x\u{85}",
            "a\x0bb",
            "é  è\n\t",
        ] {
            let expected = s.split_whitespace().collect::<Vec<_>>().join(" ");
            assert_eq!(collapse_ws(s), expected, "{s:?}");
        }
    }

    #[test]
    fn cap_chars_respects_utf8_and_cap() {
        assert_eq!(cap_chars("héllo", 10), "héllo");
        let c = cap_chars("ééééééééé", 4);
        assert_eq!(c.chars().count(), 4);
        assert!(c.ends_with('…'));
        assert_eq!(cap_chars("abc", 0), "");
    }

    #[test]
    fn list_markers() {
        assert_eq!(strip_list_marker("- do it"), (true, "do it"));
        assert_eq!(strip_list_marker("12) step"), (true, "step"));
        assert_eq!(strip_list_marker("3. [x] done"), (true, "done"));
        assert_eq!(strip_list_marker("1000 rows"), (false, "1000 rows"));
        assert_eq!(strip_list_marker("-5 degrees"), (false, "-5 degrees"));
    }

    #[test]
    fn words_and_phrases() {
        let w = words("Don’t delete $1000-budget, OK?");
        assert_eq!(w, vec!["don't", "delete", "1000", "budget", "ok"]);
        assert!(has_phrase(&w, &["delete", "1000"]));
        assert!(!has_phrase(&w, &["budget", "delete"]));
        assert_eq!(find_ascii_ci("Done BECAUSE x", " because "), Some(4));
    }
}
