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

use regex::{Regex, RegexBuilder, RegexSet, RegexSetBuilder};
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
    /// Personal data to redact as well: every class by default. A class
    /// left out is kept as sent, and every audit record says so (see
    /// [`Redactor::off_warnings`]); the prompt keeps the conversation's
    /// own words wherever they are rendered verbatim.
    pub pii: Vec<PiiClass>,
}

impl Default for RedactionConfig {
    fn default() -> Self {
        RedactionConfig {
            defaults: true,
            patterns: Vec::new(),
            pii: PiiClass::ALL.to_vec(),
        }
    }
}

/// A class of personal data [`RedactionConfig::pii`] can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PiiClass {
    /// `name@example.com`.
    Email,
    /// Phone numbers with a `+` country code, a `(area)` code or in the
    /// `555-123-4567` form (bare digit runs are too often ids).
    Phone,
    /// IPv4 and IPv6 addresses.
    IpAddress,
    /// IBANs, checked with their mod-97 digits.
    Iban,
    /// US social security numbers (`123-45-6789`).
    UsSsn,
}

impl PiiClass {
    /// Every class: the default.
    pub const ALL: [PiiClass; 5] = [
        PiiClass::Email,
        PiiClass::Phone,
        PiiClass::IpAddress,
        PiiClass::Iban,
        PiiClass::UsSsn,
    ];

    /// The rule's name in `[REDACTED:<name>]`, its pattern and its check.
    fn rule(self) -> (&'static str, &'static str, Option<Check>) {
        match self {
            PiiClass::Email => (
                "email",
                r"(?-u:\b)[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}(?-u:\b)",
                None,
            ),
            PiiClass::Phone => (
                "phone",
                r"(?:\+\d{1,3}[\s.-]?(?:\(\d{1,4}\)[\s.-]?)?\d{1,4}(?:[\s.-]?\d{2,4}){1,4}|\(\d{3}\)\s?\d{3}[\s.-]\d{4}|(?-u:\b)\d{3}[.-]\d{3}[.-]\d{4})(?-u:\b)",
                None,
            ),
            PiiClass::IpAddress => (
                "ip_address",
                r"(?-u:\b)(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?-u:\b)|(?-u:\b)(?:[0-9A-Fa-f]{1,4}:){7}[0-9A-Fa-f]{1,4}(?-u:\b)|(?-u:\b)(?:[0-9A-Fa-f]{1,4}:){1,6}:(?:[0-9A-Fa-f]{1,4}(?::[0-9A-Fa-f]{1,4}){0,5})?(?-u:\b)",
                Some(not_a_version),
            ),
            PiiClass::Iban => (
                "iban",
                r"(?-u:\b)[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?(?-u:\b)",
                Some(iban_checks),
            ),
            PiiClass::UsSsn => ("us_ssn", r"(?-u:\b)\d{3}-\d{2}-\d{4}(?-u:\b)", None),
        }
    }
}

/// A test a match (`text[at]`) must pass to count: a checksum, or what
/// stands around it.
type Check = fn(&str, std::ops::Range<usize>) -> bool;

/// A dotted quad that is not part of a longer dotted number or a version
/// with a suffix (`5.15.0.91-generic`, `1.2.3.4.5`, `.1.2.3.4`).
fn not_a_version(text: &str, at: std::ops::Range<usize>) -> bool {
    let candidate = &text[at.clone()];
    if !candidate.contains('.') {
        return true;
    }
    let before = text[..at.start].chars().next_back();
    let mut after = text[at.end..].chars();
    let (next, then) = (after.next(), after.next());
    let dotted_on = matches!((next, then), (Some('.'), Some(c)) if c.is_ascii_digit());
    let suffixed = matches!((next, then), (Some('-'), Some(c)) if c.is_ascii_alphabetic());
    !(before == Some('.') || dotted_on || suffixed)
}

/// An IBAN's check digits hold (ISO 13616 mod 97).
fn iban_checks(text: &str, at: std::ops::Range<usize>) -> bool {
    let candidate = &text[at];
    let compact: Vec<char> = candidate.chars().filter(|c| !c.is_whitespace()).collect();
    if !(15..=34).contains(&compact.len()) {
        return false;
    }
    let rotated = compact[4..].iter().chain(&compact[..4]);
    let mut rem: u32 = 0;
    for c in rotated {
        let v = match c.to_digit(36) {
            Some(v) => v,
            None => return false,
        };
        rem = if v >= 10 {
            (rem * 100 + v) % 97
        } else {
            (rem * 10 + v) % 97
        };
    }
    rem == 1
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
    /// A match is a secret only when this holds (a card number's Luhn
    /// digit); `None`: every match is.
    check: Option<Check>,
}

/// The rules whose patterns can be matched together, and which rule each
/// of the set's patterns is.
struct RuleSet {
    set: RegexSet,
    rules: Vec<usize>,
}

impl RuleSet {
    /// Which rules may match `text`: `None` for the rules outside the set
    /// (always run), `Some(false)` for a set rule that does not match.
    fn matching(&self, text: &str, rule_count: usize) -> Vec<Option<bool>> {
        let mut out = vec![None; rule_count];
        let hits = self.set.matches(text);
        for (k, &i) in self.rules.iter().enumerate() {
            out[i] = Some(hits.matched(k));
        }
        out
    }
}

/// Whether `pattern` has a Unicode word boundary (`\b`/`\B` outside `(?-u:…)`).
fn unicode_boundary(pattern: &str) -> bool {
    let ascii = pattern.replace("(?-u:\\b)", "").replace("(?-u:\\B)", "");
    ascii.contains("\\b") || ascii.contains("\\B")
}

/// The compiled rules. Cheap to clone (compiled regexes are shared).
#[derive(Clone)]
pub struct Redactor {
    rules: Vec<Rule>,
    /// Every rule's pattern in one set: a text no rule matches (most tool
    /// output) is scanned once instead of once per rule. `None` when the
    /// set would be too large to build; then every rule runs.
    set: Option<std::sync::Arc<RuleSet>>,
    id: String,
    /// Whether the built-in detectors are on (`redaction.defaults`).
    defaults: bool,
    /// The personal data classes left out of `redaction.pii`.
    pii_off: Vec<PiiClass>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor")
            .field("rules", &self.rules.len())
            .field("id", &self.id)
            .finish()
    }
}

/// Labels whose value is a secret in text (`password=…`, `"token": "…"`):
/// shared by the text rule and the JSON key rule, which adds words only a
/// key can be.
macro_rules! secret_labels {
    () => {
        "api[_-]?key|apikey|secret(?:[_-]?key)?|client[_-]?secret|access[_-]?token|auth[_-]?token|refresh[_-]?token|token|password|passwd|passphrase|private[_-]?key[_-]?id"
    };
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
        // OpenAI, Anthropic, Stripe; GitHub; GitLab; Slack; Google.
        "api_key",
        r"(?-u:\b)(?:sk|pk|rk)[-_](?:[a-z]+[-_])?[A-Za-z0-9_-]{16,}|(?-u:\b)gh[pousr]_[A-Za-z0-9]{30,}|(?-u:\b)github_pat_[A-Za-z0-9_]{30,}|(?-u:\b)glpat-[A-Za-z0-9_-]{20,}|(?-u:\b)xox[abprs]-[A-Za-z0-9-]{10,}|(?-u:\b)AIza[0-9A-Za-z_-]{35}",
        false,
    ),
    (
        // Azure storage and Service Bus connection strings, SAS tokens.
        "azure_key",
        r"(?i)((?-u:\b)(?:AccountKey|SharedAccessKey|SharedAccessSignature)\s*=\s*)[^;\s\x22']{8,}",
        true,
    ),
    (
        // 13 to 19 digits, grouped by spaces or dashes, starting as the card
        // networks' numbers do (2-6); redacted only when the Luhn digit
        // holds, so ids and timestamps pass.
        "card_number",
        r"(?-u:\b)[2-6](?:[ -]?[0-9]){12,18}(?-u:\b)",
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
        // start is the boundary. A quoted value goes whole, spaces and all,
        // its quotes kept (groups 2-5); a bare one runs to a space or
        // separator and must be 4 characters or more ("password: no").
        "secret",
        concat!(
            r#"(?i)((?:^|[^A-Za-z0-9])(?:[A-Za-z0-9]+[_-])*(?:"#,
            secret_labels!(),
            r#")\\?["']?\s*[:=]\s*)(?:(\\?")[^"\n\\]{1,256}(\\?")|(')[^'\n]{1,256}(')|[^\s"'\\,;&]{4,})"#
        ),
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
                    // The connection-string rule keeps `@` as group 2; the
                    // secret rule a value's quotes.
                    if *name == "connection_string_password" {
                        format!("${{1}}[REDACTED:{name}]${{2}}")
                    } else if *name == "secret" {
                        format!("${{1}}${{2}}${{4}}[REDACTED:{name}]${{3}}${{5}}")
                    } else {
                        format!("${{1}}[REDACTED:{name}]")
                    }
                } else {
                    format!("[REDACTED:{name}]")
                };
                id.update(pattern.as_bytes());
                let check = (*name == "card_number").then_some(luhn as Check);
                rules.push(Rule {
                    regex,
                    replacement,
                    check,
                });
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
                check: None,
            });
        }
        let mut pii = config.pii.clone();
        pii.sort_unstable();
        pii.dedup();
        for class in pii {
            let (name, pattern, check) = class.rule();
            let regex = Regex::new(pattern).map_err(|e| RedactionError {
                field: format!("redaction.pii ({name})"),
                message: e.to_string(),
            })?;
            id.update(b"pii\0");
            id.update(pattern.as_bytes());
            rules.push(Rule {
                regex,
                replacement: format!("[REDACTED:{name}]"),
                check,
            });
        }
        // Rules with a Unicode word boundary stay out of the set: the fast
        // engine gives up on those at the first non-ASCII byte, and the set
        // would take every rule down with it. They always run.
        let in_set: Vec<usize> = (0..rules.len())
            .filter(|&i| !unicode_boundary(rules[i].regex.as_str()))
            .collect();
        let set = RegexSetBuilder::new(in_set.iter().map(|&i| rules[i].regex.as_str()))
            .size_limit(64 << 20)
            .build()
            .ok()
            .map(|set| std::sync::Arc::new(RuleSet { set, rules: in_set }));
        let pii_off = PiiClass::ALL
            .into_iter()
            .filter(|c| !config.pii.contains(c))
            .collect();
        Ok(Redactor {
            rules,
            set,
            id: hex::encode(&id.finalize()[..8]),
            defaults: config.defaults,
            pii_off,
        })
    }

    /// The default rules, compiled once (tests, benches, offline runs).
    pub fn standard() -> &'static Redactor {
        static STANDARD: std::sync::LazyLock<Redactor> = std::sync::LazyLock::new(|| {
            // The built-in patterns are constants that a unit test compiles.
            Redactor::from_config(&RedactionConfig::default()).unwrap_or(Redactor {
                rules: Vec::new(),
                set: None,
                id: "none".into(),
                defaults: false,
                pii_off: PiiClass::ALL.to_vec(),
            })
        });
        &STANDARD
    }

    /// Whether the built-in detectors run. Off is a deployment choice that
    /// every audit record states (see [`Redactor::off_warnings`]).
    pub fn detects_defaults(&self) -> bool {
        self.defaults
    }

    /// The audit warnings of a rule set that leaves something out: the
    /// built-in detectors, or classes of personal data.
    pub fn off_warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.defaults {
            out.push(
                "redaction.defaults is off: secrets in this thread were kept and stored as sent"
                    .to_string(),
            );
        }
        if !self.pii_off.is_empty() {
            let names: Vec<&str> = self.pii_off.iter().map(|c| c.rule().0).collect();
            out.push(format!(
                "redaction.pii leaves out {}: personal data of those classes was kept and stored as sent",
                names.join(", ")
            ));
        }
        out
    }

    /// Identifies the rule set (part of plan fingerprints: other rules,
    /// other stored content).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// `text` with every match replaced; borrowed when nothing matched.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        let n = self.rules.len();
        let mut may = self.set.as_ref().map(|set| set.matching(text, n));
        if may
            .as_ref()
            .is_some_and(|m| m.iter().all(|&x| x == Some(false)))
        {
            return out;
        }
        for (i, rule) in self.rules.iter().enumerate() {
            if may.as_ref().is_some_and(|m| m[i] == Some(false)) {
                continue;
            }
            let replaced = match rule.check {
                None => rule.regex.replace_all(&out, rule.replacement.as_str()),
                Some(check) => rule.regex.replace_all(&out, |c: &regex::Captures<'_>| {
                    if c.get(0).is_some_and(|m| check(&out, m.range())) {
                        rule.replacement.clone()
                    } else {
                        c[0].to_string()
                    }
                }),
            };
            if let Cow::Owned(s) = replaced {
                // A checked rule rebuilds the text even when every match
                // was put back: borrowed stays borrowed when nothing changed.
                if s != *out {
                    out = Cow::Owned(s);
                    // A marker can make a match for a later rule (its `]`
                    // is a word boundary): ask the set again.
                    may = self.set.as_ref().map(|set| set.matching(&out, n));
                }
            }
        }
        out
    }

    /// Whether a JSON key or a label names a secret: its value is redacted
    /// whatever it looks like (`"db_password": "x"`, `"client_secret": 42`).
    pub fn names_secret(key: &str) -> bool {
        static KEY: std::sync::LazyLock<Option<Regex>> =
            std::sync::LazyLock::new(|| Regex::new(SECRET_KEY).ok());
        KEY.as_ref().is_some_and(|r| r.is_match(key))
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
        for (k, v) in preserved.iter_mut() {
            redact_keyed(self, k, v);
        }
    }

    /// Redacts kept fields in place: each value by the rules, and whole
    /// when its key names a secret.
    pub fn redact_fields(
        &self,
        fields: &mut std::collections::BTreeMap<String, serde_json::Value>,
    ) {
        for (k, v) in fields.iter_mut() {
            redact_keyed(self, k, v);
        }
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
        use crate::model::{Content, ContentPart};
        let mut out: Option<crate::model::Message> = None;
        match &m.content {
            Content::Text(t) => {
                if let Cow::Owned(r) = self.redact(t) {
                    out.get_or_insert_with(|| m.clone()).content = Content::Text(r);
                }
            }
            Content::Parts(parts) => {
                let changed = parts.iter().any(|p| match p {
                    ContentPart::Text { text } => matches!(self.redact(text), Cow::Owned(_)),
                    ContentPart::Provider(pp) => self.redact_provider(pp).is_some(),
                    _ => false,
                });
                if changed {
                    let parts = parts
                        .iter()
                        .map(|p| match p {
                            ContentPart::Text { text } => ContentPart::Text {
                                text: self.redact(text).into_owned(),
                            },
                            ContentPart::Provider(pp) => ContentPart::Provider(
                                self.redact_provider(pp).unwrap_or_else(|| pp.clone()),
                            ),
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
            if let Cow::Owned(r) = self.redact_envelope(env) {
                out.get_or_insert_with(|| m.clone()).tool_result = Some(r);
            }
        }
        match out {
            Some(m) => Cow::Owned(m),
            None => Cow::Borrowed(m),
        }
    }

    /// A tool result as what compactd keeps may quote it: its output and
    /// key fields redacted (a JSON output's values under keys that name a
    /// secret whole). Borrowed when nothing matched.
    pub fn redact_envelope<'a>(
        &self,
        env: &'a crate::model::ToolResultEnvelope,
    ) -> Cow<'a, crate::model::ToolResultEnvelope> {
        use crate::model::{JsonText, ToolContent};
        let content = match &env.content {
            ToolContent::Text(t) => match self.redact(t) {
                Cow::Owned(r) => Some(ToolContent::Text(r)),
                Cow::Borrowed(_) => None,
            },
            ToolContent::Json(j) => match self.redact(j.as_str()) {
                Cow::Borrowed(_) if !names_a_secret_key(j.as_str()) => None,
                _ => {
                    let mut v = j.parse();
                    redact_json(self, &mut v);
                    Some(ToolContent::Json(JsonText::from_value(&v)))
                }
            },
        };
        let mut key_fields = env.key_fields.clone();
        self.redact_fields(&mut key_fields);
        if content.is_none() && key_fields == env.key_fields {
            return Cow::Borrowed(env);
        }
        let mut out = env.clone();
        if let Some(c) = content {
            out.content = c;
        }
        out.key_fields = key_fields;
        Cow::Owned(out)
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
            for (k, v) in t.key_fields.iter_mut() {
                redact_keyed(self, k, v);
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

/// A key that names a secret: a label, or a word only a key can be
/// (`credentials`, `authorization`: as a label in text its value's first
/// word is a scheme, not the secret), alone or as the last part of a
/// compound (`db_password`, `stripe.apiKey`, `X-Api-Key`).
macro_rules! secret_keys {
    () => {
        concat!(
            secret_labels!(),
            "|id[_-]?token|private[_-]?key|credentials?|authorization|account[_-]?key|shared[_-]?access[_-]?key|connection[_-]?string|cookie|session[_-]?id"
        )
    };
}
const SECRET_KEY: &str = concat!("(?i)^(?:[A-Za-z0-9]+[_.-]?)*?(?:", secret_keys!(), ")$");

/// Whether JSON text has an object key that names a secret (its value
/// must then be redacted whole, which only the parsed value can tell).
fn names_a_secret_key(json: &str) -> bool {
    const QUOTED_KEY: &str = concat!(
        r#"(?i)"(?:[A-Za-z0-9]+[_.-]?)*?(?:"#,
        secret_keys!(),
        r#")"\s*:"#
    );
    static KEYS: std::sync::LazyLock<Option<Regex>> =
        std::sync::LazyLock::new(|| Regex::new(QUOTED_KEY).ok());
    KEYS.as_ref().is_none_or(|r| r.is_match(json))
}

/// What a value under a key that names a secret becomes.
const KEYED_SECRET: &str = "[REDACTED:secret]";

/// Redacts a JSON value in place: strings by the rules, and any scalar
/// under a key that names a secret whole, whatever it looks like.
impl Redactor {
    /// A provider part with its conversation text redacted, `None` when
    /// nothing in it is a secret. Provider state (encrypted content,
    /// signatures) and inline media are left as they are: they are not
    /// text, and the provider refuses them changed.
    pub fn redact_provider(
        &self,
        p: &crate::model::ProviderPart,
    ) -> Option<crate::model::ProviderPart> {
        let mut v = p.value();
        let changed = redact_carried(self, None, &mut v);
        changed.then(|| crate::model::ProviderPart {
            dialect: p.dialect,
            kind: p.kind.clone(),
            json: crate::model::JsonText::from_value(&v),
        })
    }
}

/// Redacts the text of a carried item in place; true when anything changed.
fn redact_carried(r: &Redactor, key: Option<&str>, v: &mut serde_json::Value) -> bool {
    use serde_json::Value;
    match v {
        Value::String(s) => {
            let state = key.is_some_and(|k| crate::model::STATE_KEYS.contains(&k));
            if state || matches!(key, Some("type" | "id" | "call_id")) || crate::model::is_blob(s) {
                return false;
            }
            let before = s.clone();
            let mut x = Value::String(std::mem::take(s));
            match key {
                Some(k) => redact_keyed(r, k, &mut x),
                None => redact_json(r, &mut x),
            }
            *v = x;
            v.as_str() != Some(before.as_str())
        }
        Value::Array(a) => a
            .iter_mut()
            .fold(false, |c, x| redact_carried(r, key, x) | c),
        Value::Object(m) => m
            .iter_mut()
            .fold(false, |c, (k, x)| redact_carried(r, Some(k), x) | c),
        _ => false,
    }
}

fn redact_json(r: &Redactor, v: &mut serde_json::Value) {
    use serde_json::Value;
    match v {
        Value::String(s) => {
            if let Cow::Owned(x) = r.redact(s) {
                *s = x;
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|v| redact_json(r, v)),
        Value::Object(m) => {
            for (k, v) in m.iter_mut() {
                redact_keyed(r, k, v);
            }
        }
        _ => {}
    }
}

/// `v` under `key`: replaced whole when the key names a secret (unless
/// empty, a flag or null), else redacted as any value.
fn redact_keyed(r: &Redactor, key: &str, v: &mut serde_json::Value) {
    use serde_json::Value;
    if !r.rules.is_empty() && Redactor::names_secret(key) {
        // Whatever is under it: a string, a number, a whole object.
        let secret = match v {
            Value::String(s) => !s.is_empty() && !s.starts_with("[REDACTED:"),
            Value::Number(_) => true,
            Value::Object(o) => !o.is_empty(),
            Value::Array(a) => !a.is_empty(),
            Value::Bool(_) | Value::Null => false,
        };
        if secret {
            *v = Value::String(KEYED_SECRET.into());
            return;
        }
    }
    redact_json(r, v);
}

/// The Luhn check of a card number (digits only, separators skipped).
fn luhn(text: &str, at: std::ops::Range<usize>) -> bool {
    let candidate = &text[at];
    let digits: Vec<u32> = candidate.chars().filter_map(|c| c.to_digit(10)).collect();
    if !(13..=19).contains(&digits.len()) || digits.iter().all(|&d| d == digits[0]) {
        return false;
    }
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(i, &d)| {
            if i % 2 == 1 {
                let x = d * 2;
                if x > 9 {
                    x - 9
                } else {
                    x
                }
            } else {
                d
            }
        })
        .sum();
    sum.is_multiple_of(10)
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

    /// The classes a compliance review plants, each in the form it takes in
    /// logs, env files, configs and tool output.
    #[test]
    fn every_detector_class_is_caught() {
        let cases = [
            ("AKIAIOSFODNN7EXAMPLE", "AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE"),
            ("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "aws_secret_access_key: wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
            ("Pa55w0rd!", "mysql://root:Pa55w0rd!@10.0.0.5:3306/app"),
            ("ghp_R2x9aQ7wLm4Kz8Vt1Yc6Nb3Hd5Fg0Js2Pe7U", "git clone https://x:ghp_R2x9aQ7wLm4Kz8Vt1Yc6Nb3Hd5Fg0Js2Pe7U@github.com/o/r"),
            ("glpat-a1B2c3D4e5F6g7H8i9J0", "PRIVATE-TOKEN: glpat-a1B2c3D4e5F6g7H8i9J0"),
            ("xoxb-2048-1024-AbCdEfGhIjKlMnOp", "slack bot xoxb-2048-1024-AbCdEfGhIjKlMnOp posted"),
            ("sk_live_51H8zQ2eZvKYlo2C0a1b2c3d4", "stripe key sk_live_51H8zQ2eZvKYlo2C0a1b2c3d4"),
            ("sk-ant-api03-Zx8Yw7Vu6Ts5Rq4Po3Nm2Lk1", "ANTHROPIC_API_KEY=sk-ant-api03-Zx8Yw7Vu6Ts5Rq4Po3Nm2Lk1"),
            ("eyJzdWIiOiIxMjM0NTY3ODkwIn0", "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"),
            ("MIIEvQIBADANBgkqhkiG9w0BAQEFAASC", "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----"),
            ("4111 1111 1111 1111", "card on file: 4111 1111 1111 1111, exp 12/29"),
            ("5555-5555-5555-4444", "charged 5555-5555-5555-4444 twice"),
            ("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq", "DefaultEndpointsProtocol=https;AccountName=acme;AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq==;EndpointSuffix=core.windows.net"),
            ("correct horse battery", "DB_PASSWORD=\"correct horse battery\""),
            (
                "1f2e3d4c5b6a79880f1e2d3c4b5a69788f7e6d5c",
                r#"{"type": "service_account", "private_key_id": "1f2e3d4c5b6a79880f1e2d3c4b5a69788f7e6d5c", "client_email": "x@p.iam.gserviceaccount.com"}"#,
            ),
            (
                "MIIEvgIBADANBgkqhkiG9w0BAQ",
                r#"{"private_key": "-----BEGIN PRIVATE KEY-----\nMIIEvgIBADANBgkqhkiG9w0BAQ\n-----END PRIVATE KEY-----\n"}"#,
            ),
        ];
        for (secret, text) in cases {
            let out = std_redact(text);
            assert!(!out.contains(secret), "{secret:?} survived in {out:?}");
            assert!(out.contains("[REDACTED:"), "{out:?}");
        }
        // Quotes stay around a redacted quoted value.
        assert_eq!(
            std_redact("DB_PASSWORD=\"correct horse battery\" next"),
            "DB_PASSWORD=\"[REDACTED:secret]\" next"
        );
        // Numbers that are not card numbers pass: a bad Luhn digit, an id
        // or a millisecond timestamp.
        for text in [
            "card 4111 1111 1111 1112 declined",
            "order 1234567890123456",
            "at 1700000000000 ms",
        ] {
            assert_eq!(std_redact(text), text);
        }
    }

    /// The one-pass pre-check never skips a rule that would have matched:
    /// with and without the set, every text comes out the same, secrets of
    /// several classes side by side and non-ASCII text included.
    #[test]
    fn the_set_pre_pass_changes_nothing() {
        let with = Redactor::from_config(&RedactionConfig {
            pii: vec![PiiClass::Email, PiiClass::Phone, PiiClass::IpAddress],
            patterns: vec![RedactionPattern {
                name: "employee_id".into(),
                regex: r"\bEMP-\d{6}\b".into(),
            }],
            ..RedactionConfig::default()
        })
        .unwrap();
        assert!(with.set.is_some(), "the set builds");
        let mut without = with.clone();
        without.set = None;
        let texts = [
            "nothing to see here, just a log line 2026-01-01 ok",
            "Ünïcödé ключ AKIAIOSFODNN7EXAMPLE и пароль password=hunter2 EMP-123456",
            "aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY4111 1111 1111 1111",
            "mail a@b.co from 10.0.0.1, card 5555-5555-5555-4444; token ghp_R2x9aQ7wLm4Kz8Vt1Yc6Nb3Hd5Fg0Js2Pe7U",
            "DB_PASSWORD=\"correct horse\" Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig-nature_x 日本語 EMP-654321",
        ];
        for t in texts {
            assert_eq!(with.redact(t), without.redact(t), "{t}");
        }
    }

    /// Personal data of every class is redacted by default, each with its
    /// own label; look-alikes (versions, dates, ids, a bad IBAN) pass; a
    /// class left out is kept, and the audit warning names it.
    #[test]
    fn pii_classes_are_on_by_default_and_labelled() {
        let text = "Mail jane.doe+travel@example.co.uk or call +44 20 7946 0958, (415) 555-0132 or 212-555-0187. Host 10.20.30.40, fe80::1ff:fe23:4567:890a. IBAN GB82 WEST 1234 5698 7654 32. SSN 078-05-1120.";
        let all = Redactor::standard();
        assert!(all.off_warnings().is_empty(), "{:?}", all.off_warnings());
        let out = all.redact(text);
        for gone in [
            "jane.doe",
            "7946 0958",
            "555-0132",
            "555-0187",
            "10.20.30.40",
            "fe80::1ff",
            "WEST 1234",
            "078-05-1120",
        ] {
            assert!(!out.contains(gone), "{gone} survived: {out}");
        }
        for label in ["email", "phone", "ip_address", "iban", "us_ssn"] {
            assert!(
                out.contains(&format!("[REDACTED:{label}]")),
                "{label}: {out}"
            );
        }
        for text in [
            "version 1.2.3 on 2024-01-15 took 1234 ms",
            "order 1234567890, build 20240115",
            "GB82 WEST 1234 5698 7654 33 fails its check",
            "kernel 5.15.0.91-generic, release 1.2.3.4.5, schema v1.2.3.4, pkg lodash@4.17.21",
            "at 2024-05-15T15:00:00+05:00, took 0.25 s, ratio 3.14",
        ] {
            assert_eq!(all.redact(text), text);
        }
        // Two addresses side by side both go.
        assert_eq!(
            all.redact("from 10.0.0.1 to 10.0.0.2."),
            "from [REDACTED:ip_address] to [REDACTED:ip_address]."
        );
        let none = Redactor::from_config(&RedactionConfig {
            pii: vec![],
            ..RedactionConfig::default()
        })
        .unwrap();
        assert_eq!(none.redact(text), text, "every class turned off");
        assert_ne!(none.id(), all.id(), "other rules, other id");
        assert!(
            none.off_warnings()
                .iter()
                .any(|w| w.contains("email, phone, ip_address, iban, us_ssn")),
            "{:?}",
            none.off_warnings()
        );
        // Only what is named.
        let email = Redactor::from_config(&RedactionConfig {
            pii: vec![PiiClass::Email],
            ..RedactionConfig::default()
        })
        .unwrap();
        let out = email.redact(text);
        assert!(
            out.contains("[REDACTED:email]") && out.contains("10.20.30.40"),
            "{out}"
        );
    }

    /// A value under a key that names a secret goes whole, whatever it
    /// looks like: in call arguments, JSON tool output and key fields.
    #[test]
    fn keys_that_name_a_secret_redact_their_values() {
        use crate::model::{
            Content, Message, MessageMetadata, Outcome, Role, ToolCall, ToolContent,
            ToolResultEnvelope,
        };
        let args = serde_json::json!({
            "db_password": "abc",
            "client_secret": 12345,
            "credentials": {"user": "bob", "pin": "0000"},
            "stripe": {"apiKey": "k1"},
            "max_tokens": 100,
            "path": "/home/bob",
            "verbose": true,
        });
        let m = Message {
            id: "m".into(),
            role: Role::Assistant,
            content: Content::default(),
            tool_calls: vec![ToolCall {
                wire: None,
                id: "c".into(),
                name: "deploy".into(),
                arguments: args,
            }],
            tool_result: None,
            turn: 1,
            metadata: MessageMetadata::default(),
        };
        let r = Redactor::standard();
        let out = r.redact_message(&m);
        let a = &out.tool_calls[0].arguments;
        assert_eq!(a["db_password"], "[REDACTED:secret]");
        assert_eq!(a["client_secret"], "[REDACTED:secret]");
        assert_eq!(a["credentials"], "[REDACTED:secret]");
        assert_eq!(a["stripe"]["apiKey"], "[REDACTED:secret]");
        assert_eq!(a["max_tokens"], 100);
        assert_eq!(a["path"], "/home/bob");
        assert_eq!(a["verbose"], true);

        let json = r#"{"service": "billing", "token": "ab1", "nested": [{"password": "x"}]}"#;
        let mut key_fields = std::collections::BTreeMap::new();
        key_fields.insert("api_key".to_string(), serde_json::json!("short"));
        key_fields.insert("order_id".to_string(), serde_json::json!("A-17"));
        let t = Message {
            id: "t".into(),
            role: Role::Tool,
            content: Content::default(),
            tool_calls: Vec::new(),
            tool_result: Some(ToolResultEnvelope {
                wire: None,
                tool_name: "fetch".into(),
                tool_call_id: "c".into(),
                outcome: Outcome::Success,
                content: ToolContent::Json(crate::model::JsonText::from_value(
                    &serde_json::from_str(json).expect("json"),
                )),
                key_fields,
                durability: None,
                determinism: None,
                started_at: None,
                completed_at: None,
            }),
            turn: 1,
            metadata: MessageMetadata::default(),
        };
        let out = r.redact_message(&t);
        let env = out.tool_result.as_ref().expect("result");
        let text = env.content.to_text();
        assert!(!text.contains("ab1") && !text.contains(r#""x""#), "{text}");
        assert!(text.contains("billing"), "{text}");
        assert_eq!(env.key_fields["api_key"], "[REDACTED:secret]");
        assert_eq!(env.key_fields["order_id"], "A-17");
    }

    #[test]
    fn configured_patterns_are_checked_and_applied() {
        let r = Redactor::from_config(&RedactionConfig {
            defaults: false,
            patterns: vec![RedactionPattern {
                name: "employee_id".into(),
                regex: r"\bEMP-\d{6}\b".into(),
            }],
            pii: Vec::new(),
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
                pii: Vec::new(),
            })
            .unwrap_err();
            assert_eq!(e.field, field, "{e}");
        }
        assert_ne!(r.id(), Redactor::standard().id());
    }
}
