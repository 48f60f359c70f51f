//! The values an agent must not forget, found by their form: identifiers,
//! file paths, URLs, e-mail addresses, error codes, versions, amounts and
//! dates. Recognising them by shape rather than by the words around them is
//! what lets a summary keep `ORD-48213` or `/etc/nginx/nginx.conf` however
//! the sentence that carried it was phrased.

/// What a value looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Shape {
    /// `ERR_QUOTA_EXCEEDED`, `ECONNREFUSED`, `E0277`, `HTTP 503`.
    Code,
    /// `ORD-48213`, `cus_9f8a7`, a UUID, a commit hash, `#1234`.
    Id,
    /// `/etc/hosts`, `src/main.rs`, `config.yaml`, `C:\temp\x.log`.
    Path,
    /// `ops@example.com`.
    Email,
    /// `https://…`, `s3://…`.
    Url,
    /// `v2.3.1`, `15.4`.
    Version,
    /// A code symbol: `pg_partman`, `getUserById`.
    Symbol,
    /// `$4,000`, `€12.50`, `300 USD`.
    Money,
    /// `2025-03-14`, `03/14/2025`.
    Date,
}

impl Shape {
    /// Whether the value is worth listing on its own (a reference), not only
    /// as a mark of a specific sentence.
    pub fn is_reference(self) -> bool {
        !matches!(self, Shape::Money | Shape::Date)
    }

    /// How much losing the value would hurt, relative to the other shapes.
    pub fn weight(self) -> i32 {
        match self {
            Shape::Code => 8,
            Shape::Id => 7,
            Shape::Path | Shape::Email => 6,
            Shape::Money | Shape::Date => 6,
            Shape::Url => 4,
            Shape::Version => 3,
            Shape::Symbol => 2,
        }
    }
}

/// Punctuation around a token that is not part of the value.
const LEADING: &[char] = &['(', '[', '{', '"', '\'', '`', '<', '*', '“', '‘'];
const TRAILING: &[char] = &[
    '.', ',', ';', ':', '!', '?', ')', ']', '}', '"', '\'', '`', '>', '*', '”', '’',
];

/// Characters that never occur inside a value: quotes and brackets of JSON,
/// markup and tables.
const SEPARATORS: &[char] = &['"', '{', '}', '[', ']', '<', '>', '|', '`', '(', ')'];

/// Splits `a,b` and `key=value` (JSON-ish and log text), but not an amount's
/// thousands (`4,000`) or a URL's query.
/// Pushes the pieces of `t` split at list separators (`,` outside a
/// thousands group, `=`, `;`) onto `out`.
fn split_lists<'t>(t: &'t str, out: &mut Vec<&'t str>) {
    if t.contains("://") {
        out.push(t);
        return;
    }
    let b = t.as_bytes();
    let mut start = 0;
    for i in 0..b.len() {
        let thousands = b[i] == b','
            && i > 0
            && b[i - 1].is_ascii_digit()
            && b.get(i + 1).is_some_and(u8::is_ascii_digit);
        if (b[i] == b',' && !thousands) || b[i] == b'=' || b[i] == b';' {
            out.push(&t[start..i]);
            start = i + 1;
        }
    }
    out.push(&t[start..]);
}

/// A word of ASCII letters that is lowercase but perhaps for its first
/// letter ("the", "The"): no shape [`classify`] knows takes such a word
/// (codes are capitals, symbols join parts or change case inside, the rest
/// need digits or punctuation), and most words of any text are such words.
fn plain_word(t: &str) -> bool {
    let b = t.as_bytes();
    b.len() >= 2
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_uppercase())
        && b[1..].iter().all(u8::is_ascii_lowercase)
}

/// Every shaped value in `text`, in order, each once per call.
pub fn scan(text: &str) -> Vec<(Shape, String)> {
    let mut tokens: Vec<&str> = Vec::new();
    for t in text.split(|c: char| c.is_whitespace() || SEPARATORS.contains(&c)) {
        split_lists(t, &mut tokens);
    }
    for t in &mut tokens {
        *t = t.trim_start_matches(LEADING).trim_end_matches(TRAILING);
    }
    let mut out: Vec<(Shape, String)> = Vec::new();
    let mut push = |shape: Shape, value: String| {
        if !out.iter().any(|(_, v)| *v == value) {
            out.push((shape, value));
        }
    };
    for (i, t) in tokens.iter().enumerate() {
        if t.is_empty() {
            continue;
        }
        // Two-token shapes: "HTTP 503", "status 429", "300 USD".
        if let Some(next) = tokens.get(i + 1) {
            let three_digits = next.len() == 3 && next.bytes().all(|b| b.is_ascii_digit());
            if three_digits && matches!(t.to_ascii_lowercase().as_str(), "http" | "status") {
                push(Shape::Code, format!("{t} {next}"));
                continue;
            }
            if is_amount(t) && matches!(*next, "USD" | "EUR" | "GBP" | "usd" | "eur" | "gbp") {
                push(Shape::Money, format!("{t} {next}"));
                continue;
            }
            // "PR #88431", "issue #12": the number is named by the word before it.
            let numbered = next
                .strip_prefix('#')
                .is_some_and(|n| n.len() >= 2 && n.bytes().all(|b| b.is_ascii_digit()));
            if numbered && (1..=12).contains(&t.len()) && t.chars().all(char::is_alphabetic) {
                push(Shape::Id, format!("{t} {next}"));
                continue;
            }
        }
        if plain_word(t) {
            continue;
        }
        // `src/main.rs:42:7` (compiler and grep output): the path without
        // its line and column.
        let t = strip_line_suffix(t);
        if let Some(shape) = classify(t) {
            push(shape, t.to_string());
        }
    }
    out
}

fn strip_line_suffix(t: &str) -> &str {
    let Some(colon) = t.find(':') else {
        return t;
    };
    let (path, suffix) = (&t[..colon], &t[colon + 1..]);
    let numeric = !suffix.is_empty()
        && suffix
            .split(':')
            .all(|p| p.is_empty() || p.bytes().all(|b| b.is_ascii_digit()));
    if numeric && is_path(path) {
        path
    } else {
        t
    }
}

/// The shape of one whitespace-free token, if it has one.
pub fn classify(t: &str) -> Option<Shape> {
    if t.len() < 2 || t.len() > 200 {
        return None;
    }
    if t.contains("://") {
        return Some(Shape::Url);
    }
    if is_email(t) {
        return Some(Shape::Email);
    }
    if is_money(t) {
        return Some(Shape::Money);
    }
    if is_date(t) {
        return Some(Shape::Date);
    }
    if is_path(t) {
        return Some(Shape::Path);
    }
    if is_version(t) {
        return Some(Shape::Version);
    }
    if is_code(t) {
        return Some(Shape::Code);
    }
    if is_id(t) {
        return Some(Shape::Id);
    }
    if is_symbol(t) {
        return Some(Shape::Symbol);
    }
    None
}

fn is_amount(t: &str) -> bool {
    let t = t.trim_end_matches(['k', 'K', 'm', 'M']);
    !t.is_empty()
        && t.starts_with(|c: char| c.is_ascii_digit())
        && t.chars()
            .all(|c| c.is_ascii_digit() || c == ',' || c == '.')
}

fn is_money(t: &str) -> bool {
    let rest = t.trim_start_matches(['-', '~', '+']);
    let mut chars = rest.chars();
    matches!(chars.next(), Some('$' | '€' | '£' | '¥' | '₹')) && is_amount(chars.as_str())
}

fn is_email(t: &str) -> bool {
    let Some((user, domain)) = t.split_once('@') else {
        return false;
    };
    !user.is_empty()
        && !domain.contains('@')
        && domain.contains('.')
        && !domain.starts_with('.')
        && !domain.ends_with('.')
        && user
            .chars()
            .all(|c| c.is_alphanumeric() || "._%+-".contains(c))
        && domain
            .chars()
            .all(|c| c.is_alphanumeric() || c == '.' || c == '-')
}

/// A date (`2025-03-14`, `03/14/2025`), a timestamp (`2026-03-01T10:00:00Z`)
/// or a time of day (`10:00Z`, `09:30:15`).
fn is_date(t: &str) -> bool {
    let (day, time) = match t.split_once('T') {
        Some((d, rest)) if d.len() == 10 => (d, Some(rest)),
        _ => (t, None),
    };
    if let Some(time) = time {
        return is_day(day) && is_time(time);
    }
    is_day(t) || is_time(t)
}

fn is_time(t: &str) -> bool {
    let t = t.trim_end_matches('Z');
    let t = t.split(['+', '.']).next().unwrap_or(t);
    let parts: Vec<&str> = t.split(':').collect();
    (2..=3).contains(&parts.len())
        && parts
            .iter()
            .all(|p| (1..=2).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_digit()))
}

fn is_day(t: &str) -> bool {
    let parts: Vec<&str> = t.split(['-', '/']).collect();
    parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.len() <= 4 && p.bytes().all(|b| b.is_ascii_digit()))
        && parts.iter().any(|p| p.len() == 4)
}

fn is_path(t: &str) -> bool {
    let has_sep = t.contains('/') || t.contains('\\');
    let rooted = t.starts_with('/')
        || t.starts_with("./")
        || t.starts_with("../")
        || t.starts_with("~/")
        || (t.len() > 3 && t.as_bytes()[1] == b':' && t.as_bytes()[2] == b'\\');
    let segments: Vec<&str> = t.split(['/', '\\']).filter(|s| !s.is_empty()).collect();
    // "1/2", "and/or", "yes/no": separators between bare digits or short words.
    let any_letter = t.chars().any(char::is_alphabetic);
    let last = segments.last().copied().unwrap_or("");
    if has_sep {
        return any_letter
            && !segments.is_empty()
            && (rooted || segments.len() >= 3 || has_extension(last));
    }
    // A bare file name: `config.yaml`, `main.rs`, `Dockerfile.prod`.
    has_extension(t) && t.split('.').count() == 2
}

/// `name.ext` with a 1–5 letter extension and a stem that is not a single
/// letter (so "e.g" and "i.e" are not files).
fn has_extension(t: &str) -> bool {
    let Some((stem, ext)) = t.rsplit_once('.') else {
        return false;
    };
    let stem_name = stem.rsplit(['/', '\\']).next().unwrap_or(stem);
    (1..=5).contains(&ext.len())
        && ext.chars().all(|c| c.is_ascii_alphanumeric())
        && ext.chars().any(|c| c.is_ascii_lowercase())
        && stem_name.chars().count() >= 2
        && stem_name
            .chars()
            .all(|c| c.is_alphanumeric() || "_-.".contains(c))
        && stem_name.chars().any(char::is_alphanumeric)
}

fn is_version(t: &str) -> bool {
    let rest = t.strip_prefix(['v', 'V']).unwrap_or(t);
    let parts: Vec<&str> = rest.split('.').collect();
    parts.len() >= 2
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.len() <= 4 && p.bytes().all(|b| b.is_ascii_digit()))
        && (parts.len() >= 3 || t.starts_with(['v', 'V']))
}

/// Upper-case codes: `ERR_TIMEOUT`, `ECONNREFUSED` (an `E` errno name),
/// `E0277`, `TS2345`. Emphasis such as "NEVER" is not a code.
fn is_code(t: &str) -> bool {
    let upper = t
        .chars()
        .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
    if !upper || !t.starts_with(|c: char| c.is_ascii_uppercase()) {
        return false;
    }
    let letters = t.chars().filter(char::is_ascii_uppercase).count();
    let digits = t.chars().filter(char::is_ascii_digit).count();
    (t.contains('_') && letters >= 3)
        || (digits >= 3 && letters <= 3 && t.len() >= 4)
        || ERRNO.contains(&t)
}

/// POSIX errno names as runtimes print them (a closed, standard set: an
/// all-caps word such as "EVERYTHING" has the same form).
const ERRNO: &[&str] = &[
    "EACCES",
    "EADDRINUSE",
    "EADDRNOTAVAIL",
    "EAGAIN",
    "EBADF",
    "EBUSY",
    "ECONNABORTED",
    "ECONNREFUSED",
    "ECONNRESET",
    "EEXIST",
    "EHOSTUNREACH",
    "EINTR",
    "EINVAL",
    "EIO",
    "EISDIR",
    "EMFILE",
    "ENETUNREACH",
    "ENFILE",
    "ENOENT",
    "ENOMEM",
    "ENOSPC",
    "ENOTDIR",
    "ENOTEMPTY",
    "ENOTFOUND",
    "EPERM",
    "EPIPE",
    "EROFS",
    "ETIMEDOUT",
];

/// A code symbol: `snake_case` (`pg_partman`) or `camelCase`
/// (`getUserById`), as identifiers in code and config are written.
fn is_symbol(t: &str) -> bool {
    let snake = t.len() >= 6
        && t.contains('_')
        && !t.starts_with('_')
        && !t.ends_with('_')
        && !t.contains("__")
        && t.chars().all(|c| c.is_ascii_lowercase() || c == '_');
    let camel = t.len() >= 6
        && t.starts_with(|c: char| c.is_ascii_lowercase())
        && t.chars().all(|c| c.is_ascii_alphabetic())
        && t.as_bytes()
            .windows(2)
            .any(|w| w[0].is_ascii_lowercase() && w[1].is_ascii_uppercase());
    snake || camel
}

/// A token mixing letters and digits with separators (`ORD-48213`,
/// `inv_93b2`, `a3f9c2e1`, a UUID), or `#` and digits, or a long number.
/// Quantities (`5GB`, `10am`, `3rd`) are not identifiers.
fn is_id(t: &str) -> bool {
    if let Some(n) = t.strip_prefix('#') {
        return n.len() >= 2 && n.bytes().all(|b| b.is_ascii_digit());
    }
    if !t
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_:.".contains(c))
    {
        return false;
    }
    let digits = t.chars().filter(char::is_ascii_digit).count();
    let letters = t.chars().filter(char::is_ascii_alphabetic).count();
    if digits == 0 {
        return false;
    }
    if letters == 0 {
        // A bare number is an id only when long and not formatted as an amount.
        return digits >= 6 && t.bytes().all(|b| b.is_ascii_digit());
    }
    // A quantity: digits then a short unit ("5GB", "10am", "2nd", "100ms").
    let lead = t.chars().take_while(char::is_ascii_digit).count();
    if lead > 0 && lead == digits && t.len() - lead <= 3 && !t.contains(['-', '_', ':']) {
        return false;
    }
    let separated = t.contains(['-', '_', ':']);
    let hex = t.len() >= 7 && t.chars().all(|c| c.is_ascii_hexdigit()) && letters > 0;
    (separated && t.len() >= 4) || hex || (t.len() >= 5 && letters >= 2 && digits >= 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shapes(text: &str) -> Vec<(Shape, String)> {
        scan(text)
    }

    proptest::proptest! {
        /// What `scan` skips as a plain word, `classify` finds no shape in
        /// (so skipping it changes nothing): words of any letters, any
        /// case, any length, with the ERRNO names among them.
        #[test]
        fn a_plain_word_has_no_shape(word in "[a-zA-Z]{0,12}|[A-Z]?[a-z]{1,30}|E[A-Z]{2,10}") {
            if plain_word(&word) {
                proptest::prop_assert_eq!(classify(&word), None);
            }
        }
    }

    #[test]
    fn values_are_found_by_their_form() {
        let cases = [
            ("order ORD-48213 shipped", Shape::Id, "ORD-48213"),
            ("customer cus_9f8a7c is active", Shape::Id, "cus_9f8a7c"),
            ("see PR #1234.", Shape::Id, "PR #1234"),
            ("see #1234.", Shape::Id, "#1234"),
            ("use pg_partman here", Shape::Symbol, "pg_partman"),
            ("call getUserById first", Shape::Symbol, "getUserById"),
            ("commit a3f9c2e1 broke it", Shape::Id, "a3f9c2e1"),
            (
                "trace 3f2b8c1e-9d4a-4b7e-8c2f-1a2b3c4d5e6f",
                Shape::Id,
                "3f2b8c1e-9d4a-4b7e-8c2f-1a2b3c4d5e6f",
            ),
            ("edit (src/app/main.rs)", Shape::Path, "src/app/main.rs"),
            (
                "the file /etc/nginx/nginx.conf",
                Shape::Path,
                "/etc/nginx/nginx.conf",
            ),
            ("open config.yaml,", Shape::Path, "config.yaml"),
            ("mail ops@example.com.", Shape::Email, "ops@example.com"),
            ("at https://x.io/a?b=1.", Shape::Url, "https://x.io/a?b=1"),
            (
                "failed: ERR_QUOTA_EXCEEDED",
                Shape::Code,
                "ERR_QUOTA_EXCEEDED",
            ),
            ("connect ECONNREFUSED", Shape::Code, "ECONNREFUSED"),
            ("rustc E0277 again", Shape::Code, "E0277"),
            ("got HTTP 503 twice", Shape::Code, "HTTP 503"),
            ("upgrade to v2.3.1", Shape::Version, "v2.3.1"),
            ("spend under $4,000.", Shape::Money, "$4,000"),
            ("about 300 USD", Shape::Money, "300 USD"),
            ("due 2025-03-14", Shape::Date, "2025-03-14"),
            (
                "at 2026-03-01T10:00:00Z",
                Shape::Date,
                "2026-03-01T10:00:00Z",
            ),
            ("since 10:00Z", Shape::Date, "10:00Z"),
            (
                r#"{"id":"PAY-4711","url":"https://t.example.com/PAY-4711"}"#,
                Shape::Id,
                "PAY-4711",
            ),
            (
                r#"{"id":"PAY-4711","url":"https://t.example.com/PAY-4711"}"#,
                Shape::Url,
                "https://t.example.com/PAY-4711",
            ),
            ("path=/var/log/app.log,", Shape::Path, "/var/log/app.log"),
            ("src/lib.rs:42:7: error", Shape::Path, "src/lib.rs"),
        ];
        for (text, shape, value) in cases {
            assert!(
                shapes(text).contains(&(shape, value.to_string())),
                "{text:?}: {:?}",
                shapes(text)
            );
        }
    }

    #[test]
    fn ordinary_words_and_quantities_have_no_shape() {
        for text in [
            "We NEVER do that, and/or yes/no, e.g. this i.e. that.",
            "It takes 5GB and 100ms at 10am on the 2nd, about 1/2 of it.",
            "EVERYTHING is IMPORTANT in 2024 with 300 rows.",
        ] {
            assert_eq!(shapes(text), vec![], "{text:?}");
        }
    }
}
