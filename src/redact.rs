//! Redaction: secrets are replaced by `[REDACTED:<kind>]` before content is
//! written to a store or kept in a summary.
//!
//! The prompt itself is never redacted (the model must see what the agent
//! saw); what compactd keeps on its own — artifacts, summaries — is. Rules
//! are regular expressions of the `regex` crate, which runs in time linear
//! in the input whatever the pattern (no backtracking), so a configured
//! pattern cannot be made into a denial of service. The default rules are
//! always on unless turned off; configured rules add to them.

use std::borrow::Cow;

use regex::{Regex, RegexBuilder};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use thiserror::Error;

use crate::model::StructuredSummary;

/// Compiled-size cap of one configured pattern.
const PATTERN_SIZE_LIMIT: usize = 1 << 20;

/// The `redaction:` config section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedactionConfig {
    /// The built-in rules (API keys, passwords, bearer and JWT tokens, AWS
    /// keys, private key blocks, connection-string passwords).
    pub defaults: bool,
    /// More rules: each match is replaced by `[REDACTED:<name>]`.
    pub patterns: Vec<RedactionPattern>,
}

impl Default for RedactionConfig {
    fn default() -> Self {
        RedactionConfig {
            defaults: true,
            patterns: Vec::new(),
        }
    }
}

/// A configured rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedactionPattern {
    /// Shown in the replacement: `[REDACTED:<name>]`; `[a-z0-9_]` only.
    pub name: String,
    /// A `regex` crate pattern (linear time).
    pub regex: String,
}

/// A rule that does not compile, naming its config field.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{field}: {message}")]
pub struct RedactionError {
    /// `redaction.patterns[2].regex`.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

#[derive(Clone)]
struct Rule {
    regex: Regex,
    /// With `$1` kept in front when the pattern captures a label
    /// (`password=`, `Bearer `).
    replacement: String,
}

/// The compiled rules. Cheap to clone (compiled regexes are shared).
#[derive(Clone)]
pub struct Redactor {
    rules: Vec<Rule>,
    id: String,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor")
            .field("rules", &self.rules.len())
            .field("id", &self.id)
            .finish()
    }
}

/// (name, pattern, keeps a label in group 1).
/// `(?-u:\b)` is an ASCII word boundary: with Unicode boundaries the lazy
/// DFA gives up at the first non-ASCII byte and matching gets much slower.
const DEFAULT_RULES: &[(&str, &str, bool)] = &[
    (
        // A block cut off before its END line is redacted to the end.
        "private_key",
        r"(?s)-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?:.*?-----END [A-Z0-9 ]*PRIVATE KEY-----|.*)",
        false,
    ),
    (
        "jwt",
        r"(?-u:\b)eyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}",
        false,
    ),
    (
        // A token has a digit somewhere, so "bearer instrument" is prose.
        "bearer_token",
        r"(?i)((?-u:\b)bearer\s+)[A-Za-z._~+/-]*[0-9][A-Za-z0-9._~+/-]{6,}=*",
        true,
    ),
    (
        "basic_auth",
        r#"(?i)(authorization["']?\s*[:=]\s*["']?basic\s+)[A-Za-z0-9+/]{8,}={0,2}"#,
        true,
    ),
    (
        "aws_access_key_id",
        r"(?-u:\b)(?:AKIA|ASIA)[0-9A-Z]{16}(?-u:\b)",
        false,
    ),
    (
        "aws_secret_access_key",
        r#"(?i)(aws_?secret_?access_?key\\?["']?\s*[:=]\s*\\?["']?)[A-Za-z0-9/+=]{40}"#,
        true,
    ),
    (
        "api_key",
        r"(?-u:\b)(?:sk|pk|rk)[-_](?:[a-z]+[-_])?[A-Za-z0-9_-]{16,}|(?-u:\b)gh[pousr]_[A-Za-z0-9]{30,}|(?-u:\b)xox[abprs]-[A-Za-z0-9-]{10,}|(?-u:\b)AIza[0-9A-Za-z_-]{35}",
        false,
    ),
    (
        "connection_string_password",
        r"(?i)((?-u:\b)[a-z][a-z0-9+.-]*://[^\s:/@]+:)[^\s@/]+(@)",
        true,
    ),
    (
        // Also `POSTGRES_PASSWORD=…`, `OPENAI_API_KEY=…` and escaped JSON
        // (`\"password\":\"…\"`): `_` is a word character, so the key's own
        // start is the boundary.
        "secret",
        r#"(?i)((?:^|[^A-Za-z0-9])(?:[A-Za-z0-9]+[_-])*(?:api[_-]?key|apikey|secret(?:[_-]?key)?|client[_-]?secret|access[_-]?token|auth[_-]?token|token|password|passwd)\\?["']?\s*[:=]\s*\\?["']?)[^\s"'\\,;&]{4,}"#,
        true,
    ),
];

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

impl Redactor {
    /// The rules of `config`; errors name the field.
    pub fn from_config(config: &RedactionConfig) -> Result<Self, RedactionError> {
        let mut rules = Vec::new();
        let mut id = Sha256::new();
        if config.defaults {
            for (name, pattern, label) in DEFAULT_RULES {
                let regex = Regex::new(pattern).map_err(|e| RedactionError {
                    field: format!("redaction (built-in rule {name})"),
                    message: e.to_string(),
                })?;
                let replacement = if *label {
                    // The connection-string rule keeps `@` as group 2.
                    if *name == "connection_string_password" {
                        format!("${{1}}[REDACTED:{name}]${{2}}")
                    } else {
                        format!("${{1}}[REDACTED:{name}]")
                    }
                } else {
                    format!("[REDACTED:{name}]")
                };
                id.update(pattern.as_bytes());
                rules.push(Rule { regex, replacement });
            }
        }
        for (i, p) in config.patterns.iter().enumerate() {
            if !valid_name(&p.name) {
                return Err(RedactionError {
                    field: format!("redaction.patterns[{i}].name"),
                    message: "must be 1-64 characters of [a-z0-9_]".into(),
                });
            }
            let regex = RegexBuilder::new(&p.regex)
                .size_limit(PATTERN_SIZE_LIMIT)
                .build()
                .map_err(|e| RedactionError {
                    field: format!("redaction.patterns[{i}].regex"),
                    message: e.to_string(),
                })?;
            if regex.is_match("") {
                return Err(RedactionError {
                    field: format!("redaction.patterns[{i}].regex"),
                    message: "matches the empty string".into(),
                });
            }
            id.update(p.name.as_bytes());
            id.update([0]);
            id.update(p.regex.as_bytes());
            id.update([0]);
            rules.push(Rule {
                regex,
                replacement: format!("[REDACTED:{}]", p.name),
            });
        }
        Ok(Redactor {
            rules,
            id: hex::encode(&id.finalize()[..8]),
        })
    }

    /// The default rules, compiled once (tests, benches, offline runs).
    pub fn standard() -> &'static Redactor {
        static STANDARD: std::sync::LazyLock<Redactor> = std::sync::LazyLock::new(|| {
            // The built-in patterns are constants that a unit test compiles.
            Redactor::from_config(&RedactionConfig::default()).unwrap_or(Redactor {
                rules: Vec::new(),
                id: "none".into(),
            })
        });
        &STANDARD
    }

    /// Identifies the rule set (part of plan fingerprints: other rules,
    /// other stored content).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// `text` with every match replaced; borrowed when nothing matched.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        for rule in &self.rules {
            if let Cow::Owned(s) = rule.regex.replace_all(&out, rule.replacement.as_str()) {
                out = Cow::Owned(s);
            }
        }
        out
    }

    /// Redacts a compressed tool output (its text and preserved fields).
    pub fn redact_compressed(
        &self,
        text: &mut String,
        preserved: &mut std::collections::BTreeMap<String, serde_json::Value>,
    ) {
        if let Cow::Owned(r) = self.redact(text) {
            *text = r;
        }
        preserved.values_mut().for_each(|v| redact_json(self, v));
    }

    /// Redacts a dropped span's keyword index.
    pub fn redact_drop_index(&self, index: &mut crate::model::DroppedSpanIndex) {
        for k in &mut index.keywords {
            if let Cow::Owned(r) = self.redact(k) {
                *k = r;
            }
        }
        if let Cow::Owned(r) = self.redact(&index.summary) {
            index.summary = r;
        }
    }

    /// `m` as a summarizer may read it: text, tool output, call arguments
    /// and key fields redacted. Borrowed when nothing matched. A value
    /// pulled out of a sentence (an id, a path) no longer has the context
    /// that marks it as a secret, so redaction must come before extraction.
    pub fn redact_message<'a>(
        &self,
        m: &'a crate::model::Message,
    ) -> Cow<'a, crate::model::Message> {
        use crate::model::{Content, ContentPart, JsonText, ToolContent};
        let mut out: Option<crate::model::Message> = None;
        match &m.content {
            Content::Text(t) => {
                if let Cow::Owned(r) = self.redact(t) {
                    out.get_or_insert_with(|| m.clone()).content = Content::Text(r);
                }
            }
            Content::Parts(parts) => {
                let changed = parts.iter().any(|p| {
                    matches!(p, ContentPart::Text { text } if matches!(self.redact(text), Cow::Owned(_)))
                });
                if changed {
                    let parts = parts
                        .iter()
                        .map(|p| match p {
                            ContentPart::Text { text } => ContentPart::Text {
                                text: self.redact(text).into_owned(),
                            },
                            other => other.clone(),
                        })
                        .collect();
                    out.get_or_insert_with(|| m.clone()).content = Content::Parts(parts);
                }
            }
        }
        for (i, call) in m.tool_calls.iter().enumerate() {
            let mut args = call.arguments.clone();
            redact_json(self, &mut args);
            if args != call.arguments {
                out.get_or_insert_with(|| m.clone()).tool_calls[i].arguments = args;
            }
        }
        if let Some(env) = &m.tool_result {
            let content = match &env.content {
                ToolContent::Text(t) => match self.redact(t) {
                    Cow::Owned(r) => Some(ToolContent::Text(r)),
                    Cow::Borrowed(_) => None,
                },
                ToolContent::Json(j) => match self.redact(j.as_str()) {
                    Cow::Borrowed(_) => None,
                    Cow::Owned(_) => {
                        let mut v = j.parse();
                        redact_json(self, &mut v);
                        Some(ToolContent::Json(JsonText::from_value(&v)))
                    }
                },
            };
            let mut key_fields = env.key_fields.clone();
            key_fields.values_mut().for_each(|v| redact_json(self, v));
            let fields_changed = key_fields != env.key_fields;
            if content.is_some() || fields_changed {
                if let Some(r) = out.get_or_insert_with(|| m.clone()).tool_result.as_mut() {
                    if let Some(c) = content {
                        r.content = c;
                    }
                    r.key_fields = key_fields;
                }
            }
        }
        match out {
            Some(m) => Cow::Owned(m),
            None => Cow::Borrowed(m),
        }
    }

    /// Redacts every text of a summary in place.
    pub fn redact_summary(&self, s: &mut StructuredSummary) {
        let fix = |t: &mut String| {
            if let Cow::Owned(r) = self.redact(t) {
                *t = r;
            }
        };
        s.facts.iter_mut().for_each(fix);
        for d in &mut s.decisions {
            fix(&mut d.decision);
            fix(&mut d.rationale);
        }
        for o in &mut s.open_items {
            fix(&mut o.description);
            fix(&mut o.context);
        }
        for a in &mut s.artifacts {
            fix(&mut a.description);
        }
        for t in &mut s.tool_outcomes {
            if let Some(e) = &mut t.error_message {
                fix(e);
            }
            for v in t.key_fields.values_mut() {
                redact_json(self, v);
            }
        }
        if let Some(t) = &mut s.current_task {
            fix(t);
        }
        s.current_plan.iter_mut().for_each(fix);
        s.references.iter_mut().for_each(fix);
        s.requests.iter_mut().for_each(fix);
    }
}

fn redact_json(r: &Redactor, v: &mut serde_json::Value) {
    match v {
        serde_json::Value::String(s) => {
            if let Cow::Owned(x) = r.redact(s) {
                *s = x;
            }
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(|v| redact_json(r, v)),
        serde_json::Value::Object(m) => m.values_mut().for_each(|v| redact_json(r, v)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn std_redact(s: &str) -> String {
        Redactor::from_config(&RedactionConfig::default())
            .expect("built-in rules compile")
            .redact(s)
            .into_owned()
    }

    #[test]
    fn built_in_rules_catch_the_usual_secrets() {
        let cases = [
            ("curl -H 'Authorization: Bearer abcDEF123456789xyz' …", "abcDEF123456789xyz"),
            ("token eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1MSJ9.c2lnbmF0dXJlX2hlcmU done", "eyJzdWIiOiJ1MSJ9"),
            ("key AKIAIOSFODNN7EXAMPLE in use", "AKIAIOSFODNN7EXAMPLE"),
            ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI"),
            ("OPENAI key sk-proj-abcdefghijklmnop1234 set", "abcdefghijklmnop1234"),
            ("gh token ghp_0123456789abcdefghijklmnopqrstuvwxyz ok", "ghp_0123456789"),
            ("DATABASE_URL=postgres://app:s3cr3t-pw@db.internal:5432/main", "s3cr3t-pw"),
            ("config: password=\"hunter2!\" retries=3", "hunter2!"),
            ("API_KEY: 9f8e7d6c5b4a", "9f8e7d6c5b4a"),
            ("POSTGRES_PASSWORD=pg-secret-77", "pg-secret-77"),
            ("export OPENAI_API_KEY=abcd1234efgh", "abcd1234efgh"),
            (r#"{\"password\":\"esc4ped!\"}"#, "esc4ped!"),
            ("STRIPE sk_live_4eC39HqLyjWDarjtT1zdp7dc ok", "4eC39HqLyjWDarjtT1zdp7dc"),
            ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA"),
            ("-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0B (truncated", "MIIEvQIBADANBgkqhkiG9w0B"),

            (
                "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\nabc\n-----END RSA PRIVATE KEY-----",
                "MIIEowIBAAKCAQEA",
            ),
        ];
        for (text, secret) in cases {
            let out = std_redact(text);
            assert!(!out.contains(secret), "{secret:?} survived in {out:?}");
            assert!(out.contains("[REDACTED:"), "{out:?}");
        }
        // Labels stay, so the text still reads.
        assert!(std_redact("password=hunter22").starts_with("password=[REDACTED:secret]"));
        assert!(std_redact("postgres://app:pw1234@db/x")
            .contains("postgres://app:[REDACTED:connection_string_password]@db/x"));
        // Ordinary prose is untouched (and not copied).
        for prose in [
            "The user prefers a monthly budget under 500 EUR; never delete data.",
            "A bearer instrument is payable to whoever holds it.",
            "pwd: /home/user/project and max_tokens: 2000",
            "Füße, naïve café: the token count was high.",
        ] {
            assert!(
                matches!(Redactor::standard().redact(prose), Cow::Borrowed(_)),
                "{prose:?} -> {:?}",
                Redactor::standard().redact(prose)
            );
        }
        let prose = "The user prefers a monthly budget under 500 EUR; never delete data.";
        assert!(matches!(
            Redactor::standard().redact(prose),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn configured_patterns_are_checked_and_applied() {
        let r = Redactor::from_config(&RedactionConfig {
            defaults: false,
            patterns: vec![RedactionPattern {
                name: "employee_id".into(),
                regex: r"\bEMP-\d{6}\b".into(),
            }],
        })
        .expect("compiles");
        assert_eq!(
            r.redact("ask EMP-123456 now"),
            "ask [REDACTED:employee_id] now"
        );
        assert_eq!(r.redact("password=x1234"), "password=x1234", "defaults off");
        for (name, regex, field) in [
            ("Bad Name", "x", "redaction.patterns[0].name"),
            ("ok", "(", "redaction.patterns[0].regex"),
            ("ok", "a*", "redaction.patterns[0].regex"),
        ] {
            let e = Redactor::from_config(&RedactionConfig {
                defaults: true,
                patterns: vec![RedactionPattern {
                    name: name.into(),
                    regex: regex.into(),
                }],
            })
            .unwrap_err();
            assert_eq!(e.field, field, "{e}");
        }
        assert_ne!(r.id(), Redactor::standard().id());
    }
}
