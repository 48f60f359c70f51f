//! What to keep of a tool's output when the output itself goes: the line
//! that says why it failed, and the few values that stand out from the rest.
//!
//! A deploy log of 50 lines names one change ticket among 40 repetitions of
//! "Warming caches: N keys loaded"; a grep names one runbook among thirty
//! source files. What stands out is what is rare *within the output*: a line
//! whose template (digits and hashes masked) occurs once, a value whose
//! family (its letter prefix, its directory) occurs once. No vocabulary of
//! interesting words is involved, so this holds for outputs nobody foresaw.

use crate::hash::FastMap;

use super::shapes::{self, Shape};
use super::text::{cap_chars, head};

/// How much of an output is read: the salient part of a 5 MB dump is not
/// worth scanning all of it on every compaction.
const SCAN_BYTES: usize = 64 * 1024;
/// Longest error line kept, in characters.
const ERROR_MAX_CHARS: usize = 240;
/// Longest value kept as a reference.
const VALUE_MAX_CHARS: usize = 120;

/// The salient part of one output.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Salient {
    /// The last line that reports an error (`Error X: …`, `FATAL …`,
    /// `SomeException: …`), timestamp and level stripped.
    pub error: Option<String>,
    /// Identifiers, paths, URLs and codes, most distinctive first.
    pub references: Vec<String>,
}

/// The salient error line and up to `max_refs` distinctive values of `text`.
pub fn salient(text: &str, max_refs: usize) -> Salient {
    let text = head(text, SCAN_BYTES);
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let mut template_count: FastMap<String, u32> = FastMap::default();
    let templates: Vec<String> = lines.iter().map(|l| template(l)).collect();
    for t in &templates {
        *template_count.entry(t.clone()).or_default() += 1;
    }

    let mut error = None;
    // (value, shape, whether its line is unique, whether a key names it an id)
    let mut found: Vec<(String, Shape, bool, bool)> = Vec::new();
    let mut family_count: FastMap<String, u32> = FastMap::default();
    for (i, line) in lines.iter().enumerate() {
        let body = strip_prefix_noise(line);
        if reports_error(body) {
            error = Some(cap_chars(body, ERROR_MAX_CHARS));
        }
        let unique = template_count.get(&templates[i]).copied() == Some(1);
        for (shape, value) in shapes::scan(body) {
            // Symbols are the vocabulary of code a tool printed, not values
            // the agent acted on.
            if !shape.is_reference()
                || shape == Shape::Symbol
                || value.chars().count() > VALUE_MAX_CHARS
            {
                continue;
            }
            if found.iter().any(|(v, ..)| *v == value) {
                continue;
            }
            *family_count.entry(family(shape, &value)).or_default() += 1;
            let named_id = names_id(body, &value);
            found.push((value, shape, unique, named_id));
        }
    }
    let mut scored: Vec<(i32, usize, String, Shape)> = found
        .into_iter()
        .enumerate()
        .map(|(pos, (value, shape, unique, named_id))| {
            let rare_family = match family_count.get(&family(shape, &value)).copied() {
                Some(1) => 6,
                Some(2..=3) => 3,
                _ => 0,
            };
            let score = shape.weight()
                + rare_family
                + if unique { 6 } else { 0 }
                + if named_id { 6 } else { 0 };
            (score, pos, value, shape)
        })
        .collect();
    scored.sort_by_key(|&(score, pos, ..)| (std::cmp::Reverse(score), pos));
    // One of each shape in turn, best first: a grep's one odd path is not
    // crowded out by the thirty symbols on its lines.
    let mut by_shape: Vec<(Shape, std::collections::VecDeque<String>)> = Vec::new();
    for (_, _, value, shape) in scored {
        match by_shape.iter_mut().find(|(s, _)| *s == shape) {
            Some((_, q)) => q.push_back(value),
            None => by_shape.push((shape, std::collections::VecDeque::from([value]))),
        }
    }
    let mut references: Vec<String> = Vec::new();
    while references.len() < max_refs && by_shape.iter().any(|(_, q)| !q.is_empty()) {
        for (_, q) in &mut by_shape {
            if references.len() >= max_refs {
                break;
            }
            if let Some(v) = q.pop_front() {
                references.push(v);
            }
        }
    }
    // A value the error line spells out is not repeated.
    if let Some(e) = &error {
        references.retain(|r| !e.contains(r.as_str()));
    }
    Salient { error, references }
}

/// The line with digit runs and hashes masked: lines printed by the same
/// statement share a template.
fn template(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut in_digits = false;
    for c in strip_prefix_noise(line).chars() {
        if c.is_ascii_hexdigit() && (c.is_ascii_digit() || in_digits) {
            if !in_digits {
                out.push('#');
                in_digits = true;
            }
        } else {
            in_digits = false;
            out.push(c);
        }
    }
    out
}

/// The line without a leading timestamp and log level, which every line of
/// a log has and which say nothing about what happened.
fn strip_prefix_noise(line: &str) -> &str {
    let mut rest = line;
    for _ in 0..3 {
        let token_end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        let token = rest[..token_end].trim_matches(['[', ']']);
        let is_time = shapes::classify(token) == Some(Shape::Date);
        let is_level = !token.is_empty()
            && token.len() <= 7
            && token.chars().all(|c| c.is_ascii_uppercase())
            && matches!(
                token,
                "TRACE"
                    | "DEBUG"
                    | "INFO"
                    | "NOTICE"
                    | "WARN"
                    | "WARNING"
                    | "ERROR"
                    | "FATAL"
                    | "CRIT"
            );
        if !(is_time || is_level) || token_end == rest.len() {
            break;
        }
        rest = rest[token_end..].trim_start();
    }
    rest
}

/// Whether the value sits under a key that names an identifier
/// (`"refund_id": "re_k4…"`, `orderId=…`, `ref: …`): structured output
/// says which of its values are ids.
fn names_id(line: &str, value: &str) -> bool {
    let Some(at) = line.find(value) else {
        return false;
    };
    let before = line[..at].trim_end_matches([' ', '"', '\'', ':', '=']);
    // The key is the run of ASCII key characters at the end; cutting where
    // that run starts (not one byte after the char before it) stays on a
    // char boundary when a multi-byte character precedes it (`注文ID: …`).
    let start = before
        .trim_end_matches(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        .len();
    let key = &before[start..];
    let lower = key.to_ascii_lowercase();
    lower == "id"
        || lower.ends_with("_id")
        || lower.ends_with("-id")
        || (key.len() > 2 && key.ends_with("Id"))
        || lower == "ref"
        || lower.ends_with("_ref")
        || lower == "reference"
}

/// `Error X: …`, `error: …`, `FooException: …`, `fatal: …`, `panic: …`,
/// `E0277: …`: an error word or name, then (after an optional code) a colon.
fn reports_error(body: &str) -> bool {
    let Some(colon) = body.find(": ") else {
        return false;
    };
    let head = &body[..colon];
    if head.len() > 60 {
        return false;
    }
    let words: Vec<&str> = head.split_whitespace().collect();
    let Some(first) = words.first() else {
        return false;
    };
    let lower = first.to_ascii_lowercase();
    // `ValueError`, `FooException`, `pkg.errors.ManifestFault`, `fatal`,
    // or an error code alone (`ERR_CHK_3221: …`, `E0277: …`).
    let named = ["error", "exception", "fault", "failure"]
        .iter()
        .any(|k| lower.ends_with(k))
        || lower.contains(".errors.")
        || lower.contains(".exceptions.")
        || matches!(lower.as_str(), "fatal" | "panic" | "failed")
        || (words.len() == 1 && shapes::classify(first) == Some(Shape::Code));
    // "Error 0x87BDCF", "ValueError", "fatal": at most one more word, a code.
    named && words.len() <= 2
}

/// What a value is one of: the letters before its number (`CORE-8187` →
/// `CORE`), the directory of a path, the host of a URL.
fn family(shape: Shape, value: &str) -> String {
    match shape {
        // The top directory: `src/…` thirty times and `docs/…` once.
        Shape::Path => value
            .split(['/', '\\'])
            .find(|s| !s.is_empty() && *s != "." && *s != "..")
            .filter(|_| value.contains(['/', '\\']))
            .unwrap_or("")
            .to_string(),
        Shape::Url => value
            .split("://")
            .nth(1)
            .and_then(|r| r.split('/').next())
            .unwrap_or("")
            .to_string(),
        _ => {
            let prefix: String = value
                .chars()
                .take_while(|c| c.is_ascii_alphabetic() || *c == '#')
                .collect();
            if prefix.is_empty() {
                // Bare hashes and numbers: one family per length.
                format!("#{}", value.len())
            } else {
                prefix
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_one_odd_line_of_a_log_stands_out() {
        let mut log = String::new();
        for i in 0..30 {
            log.push_str(&format!(
                "2024-04-27T10:16:{:02}Z INFO  Warming caches: {i} keys loaded\n",
                i % 60
            ));
            log.push_str(&format!(
                "2024-04-27T10:17:{:02}Z DEBUG Pushing layer sha256:{:064x}\n",
                i % 60,
                i * 7919
            ));
        }
        log.push_str("2024-04-27T10:18:00Z INFO  Change ticket CORE-8187 linked to this rollout\n");
        log.push_str("2024-04-27T10:18:02Z ERROR Error DPL-4517: schema version ahead of binary\n");
        let s = salient(&log, 3);
        assert_eq!(
            s.error.as_deref(),
            Some("Error DPL-4517: schema version ahead of binary")
        );
        assert_eq!(
            s.references.first().map(String::as_str),
            Some("CORE-8187"),
            "{s:?}"
        );
    }

    #[test]
    fn the_path_outside_the_usual_directory_stands_out() {
        let mut grep = String::new();
        for i in 0..20 {
            grep.push_str(&format!(
                "src/app/core/mod_{i}.py:{}:    sync_partition(x)\n",
                i * 3
            ));
        }
        grep.push_str("docs/runbooks/failover.md:12:    sync_partition(topic)\n");
        let s = salient(&grep, 2);
        assert_eq!(
            s.references.first().map(String::as_str),
            Some("docs/runbooks/failover.md")
        );
        assert_eq!(s.error, None);
    }

    #[test]
    fn a_traceback_keeps_its_last_error() {
        let out = "Traceback (most recent call last):\n  File \"/app/x.py\", line 3, in f\n    g()\nValueError: bad cursor 0x87BDCF\n";
        assert_eq!(
            salient(out, 2).error.as_deref(),
            Some("ValueError: bad cursor 0x87BDCF")
        );
    }

    #[test]
    fn a_value_under_an_id_key_stands_out() {
        let mut out = String::from("{\n");
        for i in 0..12 {
            out.push_str(&format!("  \"hop_{i}\": \"HUB-{:04}\",\n", i * 37));
        }
        out.push_str("  \"refund_id\": \"re_k476bjcps24gf5\"\n}");
        let s = salient(&out, 1);
        assert_eq!(s.references, vec!["re_k476bjcps24gf5".to_string()], "{s:?}");
    }

    #[test]
    fn symbols_do_not_crowd_out_the_odd_path() {
        let mut grep = String::new();
        for i in 0..20 {
            grep.push_str(&format!(
                "src/app/mod_{i}.py:{}:    call_handler_{}(CONST_{i}_SQL)\n",
                i * 3,
                ["alpha", "beta", "gamma", "delta"][i % 4]
            ));
        }
        grep.push_str("docs/runbooks/failover.md:12:    sync_partition(topic)\n");
        let s = salient(&grep, 4);
        assert!(
            s.references
                .contains(&"docs/runbooks/failover.md".to_string()),
            "{s:?}"
        );
    }

    #[test]
    fn error_classes_by_their_names() {
        for line in [
            "ledgerline.errors.CompactionManifestFault: [DPL-4538] schema ahead",
            "ShardRebalanceFailure: lease expired",
            "ERR_CHK_3221: checksum mismatch on artifact",
        ] {
            assert_eq!(salient(line, 2).error.as_deref(), Some(line), "{line}");
        }
    }

    /// Real tool output (line-numbered file reads, box-drawn tables,
    /// non-English keys): a multi-byte character right before a value or
    /// its key once made the key cut fall inside that character (a panic).
    #[test]
    fn multi_byte_text_before_a_value_is_read_whole() {
        for line in [
            "70→-",
            // A numbered file read of a Markdown list: the path follows `→-`.
            "    70→- docs/runbooks/failover.md",
            "│ 9f86d081 │",
            "résumé_id: ABC123X9",
            "注文ID: 4f1c2a9e7b",
        ] {
            let _ = salient(line, 4);
            let _ = salient(&format!("{line}\n{line} {line}\n"), 4);
        }
        assert!(names_id("résumé_id: ABC123X9", "ABC123X9"));
        assert!(names_id("注文ID: 4f1c2a9e7b", "4f1c2a9e7b"));
        assert!(!names_id("│ 9f86d081 │", "9f86d081"));
        assert!(!names_id("70→-", "70"));
        assert!(!names_id(
            "    70→- docs/runbooks/failover.md",
            "docs/runbooks/failover.md"
        ));
        assert_eq!(
            salient("注文ID: 4f1c2a9e7b\nwarehouse 7 of 9", 1).references,
            vec!["4f1c2a9e7b".to_string()]
        );
    }

    #[test]
    fn plain_prose_has_no_error() {
        assert_eq!(
            salient("Note: the build is green.\nAll good.", 3).error,
            None
        );
    }
}
