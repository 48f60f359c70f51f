//! Tool-output post-processing: token-heavy outputs are reduced to
//! what the agent needs to act and to re-fetch; errors and small or
//! unrecognized outputs are kept as they are. The shape of the content decides
//! first and the tool name only breaks ties, because tool names are arbitrary.
//! Output is byte-deterministic so a compressed result never breaks the cache prefix.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Map, Value};

use super::text::{cap_chars, clean};
use crate::model::{Outcome, ToolContent, ToolResultEnvelope};

/// Which rule compressed an output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OutputKind {
    /// Web/document search: title, snippet and URL per result.
    SearchResults,
    /// A long file or text: head, tail and an outline with line numbers.
    FileRead,
    /// Many result rows: count, columns, a few sample rows.
    QueryRows,
    /// A JSON API response: status and id-like fields.
    ApiResponse,
}

impl OutputKind {
    /// Wire name (also `preserved["kind"]`).
    pub fn as_str(self) -> &'static str {
        match self {
            OutputKind::SearchResults => "search_results",
            OutputKind::FileRead => "file_read",
            OutputKind::QueryRows => "query_rows",
            OutputKind::ApiResponse => "api_response",
        }
    }
}

/// A compressed tool output.
#[derive(Debug, Clone, PartialEq)]
pub struct Compressed {
    /// The rule that applied.
    pub kind: OutputKind,
    /// The replacement text; starts with a `[compressed …]` header.
    pub text: String,
    /// Structured bits (counts, status, ids, the envelope's key fields) for the
    /// plan's `ClearRecord.preserved_fields`.
    pub preserved: BTreeMap<String, Value>,
}

/// When and how far tool outputs are reduced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompressRules {
    /// Outputs under this many tokens are already compact.
    pub min_tokens: usize,
    /// Text with more lines than this is reduced to head, tail and outline.
    pub file_max_lines: usize,
    /// Row sets with more rows than this are reduced to samples.
    pub query_max_rows: usize,
    /// Sample rows kept from a large row set.
    pub sample_rows: usize,
    /// Search results kept.
    pub search_max_results: usize,
    /// Cap on each kept search snippet, in chars.
    pub snippet_chars: usize,
}

impl Default for CompressRules {
    fn default() -> Self {
        CompressRules {
            min_tokens: 200,
            file_max_lines: 500,
            query_max_rows: 100,
            sample_rows: 5,
            search_max_results: 10,
            snippet_chars: 300,
        }
    }
}

/// Structured data under 500 tokens is kept whole, because the agent may
/// still validate it; a plain API response is only compressed at or above this size.
pub const STRUCTURED_KEEP_TOKENS: usize = 500;

const FILE_HEAD_LINES: usize = 20;
const FILE_TAIL_LINES: usize = 10;
const OUTLINE_MAX: usize = 60;
const LINE_MAX_CHARS: usize = 200;
const OUTLINE_LINE_MAX_CHARS: usize = 120;
const TITLE_MAX_CHARS: usize = 200;
const URL_MAX_CHARS: usize = 500;
const ROW_MAX_CHARS: usize = 500;
const QUERY_TEXT_MAX_CHARS: usize = 300;
const PATH_MAX_CHARS: usize = 300;
const API_MAX_FIELDS: usize = 40;
const API_MAX_DEPTH: usize = 3;
const VALUE_MAX_CHARS: usize = 200;
const RANGE_MAX_COLUMNS: usize = 20;

const SEARCH_LIST_KEYS: &[&str] = &[
    "results",
    "items",
    "hits",
    "organic",
    "organic_results",
    "documents",
    "value",
    "webPages",
    "web",
    "news",
];
const TITLE_KEYS: &[&str] = &["title", "name", "headline"];
const URL_KEYS: &[&str] = &["url", "link", "href", "uri"];
const SNIPPET_KEYS: &[&str] = &[
    "snippet",
    "description",
    "content",
    "text",
    "summary",
    "body",
    "abstract",
    "excerpt",
];
const TOTAL_KEYS: &[&str] = &[
    "total",
    "total_results",
    "totalResults",
    "totalEstimatedMatches",
    "estimatedMatches",
    "nbHits",
    "count",
    "row_count",
    "rowCount",
];
const ROW_LIST_KEYS: &[&str] = &["rows", "data", "records", "results", "items", "values"];
const COLUMN_KEYS: &[&str] = &["columns", "fields", "headers", "column_names"];
const STATUS_KEYS: &[&str] = &["status_code", "statusCode", "status", "code"];
const PATH_ARG_KEYS: &[&str] = &[
    "path",
    "file_path",
    "filepath",
    "file",
    "filename",
    "target_file",
    "uri",
];
const FILE_CONTENT_KEYS: &[&str] = &["content", "contents", "text", "data"];
const API_FIELD_NAMES: &[&str] = &[
    "id",
    "uuid",
    "guid",
    "status",
    "status_code",
    "statuscode",
    "code",
    "error",
    "message",
    "url",
    "href",
    "location",
    "total",
    "count",
    "state",
    "etag",
];
/// Line starts that open a definition worth listing in a file outline.
const CODE_DEF_PREFIXES: &[&str] = &[
    "fn ",
    "pub fn ",
    "pub(crate) fn ",
    "async fn ",
    "pub async fn ",
    "const fn ",
    "pub const fn ",
    "struct ",
    "pub struct ",
    "pub(crate) struct ",
    "enum ",
    "pub enum ",
    "pub(crate) enum ",
    "trait ",
    "pub trait ",
    "impl ",
    "impl<",
    "mod ",
    "pub mod ",
    "macro_rules! ",
    "def ",
    "async def ",
    "class ",
    "function ",
    "async function ",
    "export ",
    "func ",
    "type ",
    "interface ",
    "public ",
    "private ",
    "protected ",
    "module ",
    "package ",
];

/// Compresses a successful, large tool output whose shape a rule recognizes.
/// Returns `None` when it must be kept as is: failures and partial results (the
/// model needs the full error), outputs under `rules.min_tokens` (counted by
/// the caller, who owns the tokenizer), error-shaped content, unrecognized
/// shapes, and when compression would not make the text smaller.
pub fn compress_tool_output(
    env: &ToolResultEnvelope,
    call_arguments: Option<&serde_json::Value>,
    content_tokens: usize,
    rules: &CompressRules,
) -> Option<Compressed> {
    if env.outcome != Outcome::Success || content_tokens < rules.min_tokens {
        return None;
    }
    let original = env.content.to_text();
    let parsed: Option<std::borrow::Cow<'_, Value>> = match &env.content {
        ToolContent::Json(raw) => Some(std::borrow::Cow::Owned(raw.parse())),
        ToolContent::Text(s) => {
            let t = s.trim_start();
            if t.starts_with('{') || t.starts_with('[') {
                serde_json::from_str(t).ok().map(std::borrow::Cow::Owned)
            } else {
                None
            }
        }
    };
    let mut out = match (&parsed, &env.content) {
        (Some(v), _) => compress_json(v, env, call_arguments, content_tokens, rules)?,
        (None, ToolContent::Text(s)) => {
            if looks_like_error_text(s) {
                return None;
            }
            compress_file(s, path_from(call_arguments), rules)?
        }
        (None, ToolContent::Json(_)) => return None,
    };
    // Key fields outlive every replacement of the output, whatever shape
    // the compressor gave it.
    env.push_key_data(&mut out.text);
    if out.text.len() >= original.len() {
        return None;
    }
    out.preserved
        .insert("kind".into(), Value::from(out.kind.as_str()));
    out.preserved
        .insert("tool_name".into(), Value::from(env.tool_name.as_str()));
    if !env.key_fields.is_empty() {
        let kf: Map<String, Value> = env
            .key_fields
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        out.preserved.insert("key_fields".into(), Value::Object(kf));
    }
    Some(out)
}

fn compress_json(
    v: &Value,
    env: &ToolResultEnvelope,
    args: Option<&Value>,
    content_tokens: usize,
    rules: &CompressRules,
) -> Option<Compressed> {
    if is_error_json(v) {
        return None;
    }
    let name = env.tool_name.to_lowercase();
    if let Some(search) = search_items(v) {
        // Rows that happen to carry url/title columns: the tool name breaks the tie.
        if is_query_tool(&name) {
            if let Some(rows) = rows_of(v) {
                if rows.rows.len() > rules.query_max_rows {
                    return Some(compress_rows(&rows, args, rules));
                }
                return None;
            }
        }
        return Some(compress_search(search, v, rules));
    }
    if let Some(rows) = rows_of(v) {
        // A recognized row set under the threshold is small enough to keep whole.
        return (rows.rows.len() > rules.query_max_rows).then(|| compress_rows(&rows, args, rules));
    }
    if is_file_tool(&name) {
        if let Some(obj) = v.as_object() {
            let text = FILE_CONTENT_KEYS
                .iter()
                .find_map(|k| obj.get(*k).and_then(Value::as_str));
            if let Some(text) = text {
                let path = PATH_ARG_KEYS
                    .iter()
                    .find_map(|k| obj.get(*k).and_then(Value::as_str))
                    .map(|p| clean(p, PATH_MAX_CHARS))
                    .or_else(|| path_from(args));
                return compress_file(text, path, rules);
            }
        }
    }
    let obj = v.as_object()?;
    if api_shape(obj) || is_api_tool(&name) {
        if content_tokens < STRUCTURED_KEEP_TOKENS {
            return None;
        }
        return compress_api(obj, env);
    }
    None
}

// ---------------------------------------------------------------- search results

fn search_items(v: &Value) -> Option<&Vec<Value>> {
    fn list_in(o: &Map<String, Value>) -> Option<&Vec<Value>> {
        SEARCH_LIST_KEYS.iter().find_map(|k| match o.get(*k) {
            Some(Value::Array(a)) => Some(a),
            _ => None,
        })
    }
    let arr = match v {
        Value::Array(a) => a,
        Value::Object(o) => list_in(o).or_else(|| {
            // One level down: Bing `webPages.value`, Brave `web.results`.
            SEARCH_LIST_KEYS
                .iter()
                .chain(["data", "response"].iter())
                .find_map(|k| o.get(*k).and_then(Value::as_object).and_then(list_in))
        })?,
        _ => return None,
    };
    let hits = arr.iter().filter(|it| is_search_item(it)).count();
    (hits > 0 && hits * 2 >= arr.len()).then_some(arr)
}

fn str_field<'a>(o: &'a Map<String, Value>, keys: &[&str]) -> Option<&'a str> {
    keys.iter()
        .find_map(|k| o.get(*k).and_then(Value::as_str))
        .filter(|s| !s.trim().is_empty())
}

fn is_search_item(v: &Value) -> bool {
    v.as_object().is_some_and(|o| {
        str_field(o, URL_KEYS).is_some()
            && (str_field(o, TITLE_KEYS).is_some() || str_field(o, SNIPPET_KEYS).is_some())
    })
}

fn reported_total(v: &Value) -> Option<Value> {
    let o = v.as_object()?;
    TOTAL_KEYS
        .iter()
        .find_map(|k| o.get(*k).filter(|x| x.is_number()).cloned())
}

/// Removes `<…>` tags so snippets do not carry HTML.
fn strip_tags(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut in_tag = false;
    for c in s.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => {
                in_tag = false;
                out.push(' ');
            }
            _ if !in_tag => out.push(c),
            _ => {}
        }
    }
    out
}

fn compress_search(items: &[Value], whole: &Value, rules: &CompressRules) -> Compressed {
    let results: Vec<&Map<String, Value>> = items
        .iter()
        .filter(|it| is_search_item(it))
        .filter_map(Value::as_object)
        .collect();
    let kept = results.len().min(rules.search_max_results);
    let mut text = format!(
        "[compressed search results: {kept} of {} results kept]\n",
        items.len()
    );
    let total = reported_total(whole);
    if let Some(t) = &total {
        let _ = writeln!(text, "(source reports {t} total matches)");
    }
    let mut urls = Vec::new();
    for (i, o) in results.iter().take(kept).enumerate() {
        let title = str_field(o, TITLE_KEYS).map(|t| clean(&strip_tags(t), TITLE_MAX_CHARS));
        let url = str_field(o, URL_KEYS).map(|u| clean(u, URL_MAX_CHARS));
        let snippet =
            str_field(o, SNIPPET_KEYS).map(|s| clean(&strip_tags(s), rules.snippet_chars));
        let _ = writeln!(
            text,
            "{}. {}",
            i + 1,
            title.as_deref().unwrap_or("(untitled)")
        );
        if let Some(u) = &url {
            let _ = writeln!(text, "   {u}");
            urls.push(Value::from(u.as_str()));
        }
        if let Some(s) = snippet.filter(|s| !s.is_empty()) {
            let _ = writeln!(text, "   {s}");
        }
    }
    trim_newline(&mut text);
    let mut preserved = BTreeMap::new();
    preserved.insert("result_count".into(), Value::from(items.len()));
    preserved.insert("kept".into(), Value::from(kept));
    preserved.insert("urls".into(), Value::Array(urls));
    if let Some(t) = total {
        preserved.insert("reported_total".into(), t);
    }
    Compressed {
        kind: OutputKind::SearchResults,
        text,
        preserved,
    }
}

// ---------------------------------------------------------------- query rows

struct Rows<'a> {
    rows: &'a [Value],
    column_hint: Option<&'a Vec<Value>>,
    reported_total: Option<Value>,
}

fn is_row_list(a: &[Value]) -> bool {
    a.iter().all(|r| r.is_object() || r.is_array())
}

fn rows_of(v: &Value) -> Option<Rows<'_>> {
    match v {
        Value::Array(a) if is_row_list(a) => Some(Rows {
            rows: a,
            column_hint: None,
            reported_total: None,
        }),
        Value::Object(o) => {
            let rows = ROW_LIST_KEYS.iter().find_map(|k| match o.get(*k) {
                Some(Value::Array(a)) if is_row_list(a) => Some(a),
                _ => None,
            })?;
            Some(Rows {
                rows,
                column_hint: COLUMN_KEYS
                    .iter()
                    .find_map(|k| o.get(*k).and_then(Value::as_array)),
                reported_total: reported_total(v),
            })
        }
        _ => None,
    }
}

fn column_names(rows: &Rows<'_>) -> Vec<String> {
    if let Some(hint) = rows.column_hint {
        let names: Vec<String> = hint
            .iter()
            .filter_map(|c| match c {
                Value::String(s) => Some(s.clone()),
                Value::Object(o) => o.get("name").and_then(Value::as_str).map(String::from),
                _ => None,
            })
            .collect();
        if !names.is_empty() {
            return names;
        }
    }
    let mut names: Vec<String> = Vec::new();
    let mut width = 0;
    for r in rows.rows {
        match r {
            Value::Object(o) => {
                for k in o.keys() {
                    if !names.iter().any(|n| n == k) {
                        names.push(k.clone());
                    }
                }
            }
            Value::Array(a) => width = width.max(a.len()),
            _ => {}
        }
    }
    if names.is_empty() {
        names = (1..=width).map(|i| format!("col{i}")).collect();
    }
    names
}

/// Min and max of a column whose non-null values are all numbers.
fn numeric_range(rows: &[Value], column: &str, index: usize) -> Option<(Value, Value)> {
    let mut range: Option<(f64, &Value, f64, &Value)> = None;
    for r in rows {
        let cell = match r {
            Value::Object(o) => o.get(column),
            Value::Array(a) => a.get(index),
            _ => None,
        };
        match cell {
            None | Some(Value::Null) => {}
            Some(n @ Value::Number(num)) => {
                let x = num.as_f64()?;
                range = Some(match range {
                    None => (x, n, x, n),
                    Some((lo, lv, hi, hv)) => {
                        let (lo, lv) = if x < lo { (x, n) } else { (lo, lv) };
                        let (hi, hv) = if x > hi { (x, n) } else { (hi, hv) };
                        (lo, lv, hi, hv)
                    }
                });
            }
            Some(_) => return None,
        }
    }
    range.map(|(_, lv, _, hv)| (lv.clone(), hv.clone()))
}

fn compress_rows(rows: &Rows<'_>, args: Option<&Value>, rules: &CompressRules) -> Compressed {
    let total = rows.rows.len();
    let columns = column_names(rows);
    let sample = total.min(rules.sample_rows);
    let mut text = format!(
        "[compressed query rows: {sample} of {total} rows kept, {} columns]\n",
        columns.len()
    );
    let query = args
        .and_then(Value::as_object)
        .and_then(|o| str_field(o, &["query", "sql", "statement", "q"]))
        .map(|q| clean(q, QUERY_TEXT_MAX_CHARS));
    if let Some(q) = &query {
        let _ = writeln!(text, "query: {q}");
    }
    if let Some(t) = &rows.reported_total {
        let _ = writeln!(text, "reported total: {t}");
    }
    let _ = writeln!(text, "columns: {}", columns.join(", "));
    let ranges: Vec<String> = columns
        .iter()
        .enumerate()
        .filter_map(|(i, c)| {
            numeric_range(rows.rows, c, i).map(|(lo, hi)| format!("{c} {lo}..{hi}"))
        })
        .take(RANGE_MAX_COLUMNS)
        .collect();
    if !ranges.is_empty() {
        let _ = writeln!(text, "ranges: {}", ranges.join(", "));
    }
    if sample > 0 {
        text.push_str("sample rows:\n");
        for r in &rows.rows[..sample] {
            let _ = writeln!(text, "{}", cap_chars(&r.to_string(), ROW_MAX_CHARS));
        }
    }
    trim_newline(&mut text);
    let mut preserved = BTreeMap::new();
    preserved.insert("row_count".into(), Value::from(total));
    preserved.insert("sample_rows".into(), Value::from(sample));
    preserved.insert(
        "columns".into(),
        Value::Array(columns.into_iter().map(Value::from).collect()),
    );
    if let Some(t) = rows.reported_total.clone() {
        preserved.insert("reported_total".into(), t);
    }
    if let Some(q) = query {
        preserved.insert("query".into(), Value::from(q));
    }
    Compressed {
        kind: OutputKind::QueryRows,
        text,
        preserved,
    }
}

// ---------------------------------------------------------------- file read

fn path_from(args: Option<&Value>) -> Option<String> {
    let o = args?.as_object()?;
    str_field(o, PATH_ARG_KEYS).map(|p| clean(p, PATH_MAX_CHARS))
}

fn is_markdown_path(path: Option<&str>) -> bool {
    path.is_some_and(|p| {
        let p = p.to_lowercase();
        [".md", ".markdown", ".mdx", ".rst", ".txt"]
            .iter()
            .any(|e| p.ends_with(e))
    })
}

/// Outline entries: (1-based line, nesting level 0/1, text).
fn outline(lines: &[&str], path: Option<&str>) -> (Vec<(usize, String)>, usize) {
    let mut defs: Vec<(usize, u8, String)> = Vec::new();
    let mut headings: Vec<(usize, String)> = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let indent: usize = line
            .chars()
            .take_while(|c| c.is_whitespace())
            .map(|c| if c == '\t' { 4 } else { 1 })
            .sum();
        let t = line.trim();
        if indent <= 4 && CODE_DEF_PREFIXES.iter().any(|p| t.starts_with(p)) {
            defs.push((
                i + 1,
                u8::from(indent > 0),
                clean(t, OUTLINE_LINE_MAX_CHARS),
            ));
        }
        let hashes = t.bytes().take_while(|&b| b == b'#').count();
        if indent == 0 && (1..=6).contains(&hashes) && t[hashes..].starts_with(' ') {
            headings.push((i + 1, clean(t, OUTLINE_LINE_MAX_CHARS)));
        }
    }
    let mut entries: Vec<(usize, String)> = if is_markdown_path(path) || defs.is_empty() {
        headings
    } else {
        // Too many definitions: keep the top level only.
        let top_only = defs.len() > OUTLINE_MAX;
        defs.into_iter()
            .filter(|(_, level, _)| !top_only || *level == 0)
            .map(|(n, _, t)| (n, t))
            .collect()
    };
    let more = entries.len().saturating_sub(OUTLINE_MAX);
    entries.truncate(OUTLINE_MAX);
    (entries, more)
}

fn compress_file(text: &str, path: Option<String>, rules: &CompressRules) -> Option<Compressed> {
    let lines: Vec<&str> = text.lines().collect();
    let total = lines.len();
    if total <= rules.file_max_lines || total == 0 {
        return None;
    }
    let head = FILE_HEAD_LINES.min(total);
    let tail = FILE_TAIL_LINES.min(total - head);
    let tail_start = total - tail + 1;
    let (entries, more) = outline(&lines, path.as_deref());
    let width = total.to_string().len();
    let shown_path = path.as_deref().unwrap_or("unknown path");
    let mut out = format!(
        "[compressed file read: {shown_path}, {total} lines, {head}+{tail} lines and {} outline entries kept]\n",
        entries.len()
    );
    let _ = writeln!(out, "lines 1-{head}:");
    for (i, l) in lines[..head].iter().enumerate() {
        let _ = writeln!(out, "{:>width$} | {}", i + 1, cap_chars(l, LINE_MAX_CHARS));
    }
    if !entries.is_empty() {
        out.push_str("outline (line: text):\n");
        for (n, t) in &entries {
            let _ = writeln!(out, "{n:>width$}: {t}");
        }
        if more > 0 {
            let _ = writeln!(out, "… {more} more outline entries");
        }
    }
    if tail > 0 {
        let _ = writeln!(out, "lines {tail_start}-{total}:");
        for (i, l) in lines[total - tail..].iter().enumerate() {
            let _ = writeln!(
                out,
                "{:>width$} | {}",
                tail_start + i,
                cap_chars(l, LINE_MAX_CHARS)
            );
        }
    }
    out.push_str("(re-read any line range with the file tool to see the rest)");
    let mut preserved = BTreeMap::new();
    if let Some(p) = path {
        preserved.insert("path".into(), Value::from(p));
    }
    preserved.insert("total_lines".into(), Value::from(total));
    preserved.insert("bytes".into(), Value::from(text.len()));
    preserved.insert("head_lines".into(), Value::from(vec![1, head]));
    if tail > 0 {
        preserved.insert("tail_lines".into(), Value::from(vec![tail_start, total]));
    }
    preserved.insert("outline_entries".into(), Value::from(entries.len() + more));
    Some(Compressed {
        kind: OutputKind::FileRead,
        text: out,
        preserved,
    })
}

fn looks_like_error_text(s: &str) -> bool {
    let first = s
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
        .to_lowercase();
    [
        "error:",
        "error[",
        "fatal:",
        "traceback (most recent call last)",
        "panic",
        "exception:",
        "exception in thread",
    ]
    .iter()
    .any(|p| first.starts_with(p))
}

// ---------------------------------------------------------------- API response

fn status_number(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// Error-shaped JSON is kept whole: the model needs the full error.
fn is_error_json(v: &Value) -> bool {
    let Some(o) = v.as_object() else {
        return false;
    };
    let http_error = STATUS_KEYS.iter().any(|k| {
        o.get(*k)
            .and_then(status_number)
            .is_some_and(|n| (400..600).contains(&n))
    });
    let error_field = match o.get("error") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => false,
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Object(m)) => !m.is_empty(),
        Some(_) => true,
    };
    let errors = o
        .get("errors")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty());
    let flagged = ["ok", "success"]
        .iter()
        .any(|k| o.get(*k) == Some(&Value::Bool(false)));
    let status_word = o.get("status").and_then(Value::as_str).is_some_and(|s| {
        ["error", "failed", "failure", "fail"].contains(&s.to_lowercase().as_str())
    });
    http_error || error_field || errors || flagged || status_word
}

fn api_shape(o: &Map<String, Value>) -> bool {
    let status = ["status", "status_code", "statusCode"]
        .iter()
        .any(|k| o.get(*k).is_some_and(|v| v.is_number() || v.is_string()))
        || o.get("code").is_some_and(Value::is_number);
    let http = o.contains_key("headers") && (o.contains_key("body") || o.contains_key("data"));
    status || http
}

fn is_key_field(k: &str) -> bool {
    let lower = k.to_lowercase();
    lower.ends_with("_id")
        || lower.ends_with("-id")
        || (k.len() > 2 && (k.ends_with("Id") || k.ends_with("ID")))
        || API_FIELD_NAMES.contains(&lower.as_str())
}

fn collect_fields(
    o: &Map<String, Value>,
    prefix: &str,
    depth: usize,
    out: &mut Vec<(String, Value)>,
) {
    for (k, v) in o {
        if out.len() >= API_MAX_FIELDS {
            return;
        }
        let path = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            Value::Object(inner) if depth < API_MAX_DEPTH => {
                collect_fields(inner, &path, depth + 1, out)
            }
            Value::Object(_) | Value::Null => {}
            Value::Array(a) => out.push((format!("{path}.length"), Value::from(a.len()))),
            Value::String(s) if is_key_field(k) => {
                out.push((path, Value::from(cap_chars(s, VALUE_MAX_CHARS))))
            }
            Value::Number(_) | Value::Bool(_) if is_key_field(k) => out.push((path, v.clone())),
            _ => {}
        }
    }
}

fn compress_api(o: &Map<String, Value>, env: &ToolResultEnvelope) -> Option<Compressed> {
    let status = STATUS_KEYS
        .iter()
        .find_map(|k| o.get(*k).filter(|v| v.is_number() || v.is_string()));
    let mut fields = Vec::new();
    collect_fields(o, "", 0, &mut fields);
    if fields.is_empty() && env.key_fields.is_empty() {
        return None;
    }
    let status_text = match status {
        Some(Value::String(s)) => cap_chars(s, 40),
        Some(v) => v.to_string(),
        None => "unknown".to_string(),
    };
    let mut text = format!(
        "[compressed api response: status {status_text}, {} fields kept]\n",
        fields.len()
    );
    for (k, v) in &fields {
        let _ = writeln!(text, "{k}: {v}");
    }
    if !env.key_fields.is_empty() {
        let kf = serde_json::to_string(&env.key_fields).unwrap_or_default();
        let _ = writeln!(text, "key_fields: {kf}");
    }
    trim_newline(&mut text);
    let mut preserved = BTreeMap::new();
    if let Some(s) = status {
        preserved.insert("status".into(), s.clone());
    }
    preserved.insert("fields".into(), Value::Object(fields.into_iter().collect()));
    Some(Compressed {
        kind: OutputKind::ApiResponse,
        text,
        preserved,
    })
}

// ---------------------------------------------------------------- tool names

fn is_query_tool(name: &str) -> bool {
    [
        "sql",
        "query",
        "db",
        "database",
        "bigquery",
        "postgres",
        "mysql",
        "snowflake",
        "athena",
        "select",
    ]
    .iter()
    .any(|w| name.contains(w))
}

fn is_file_tool(name: &str) -> bool {
    name == "cat"
        || name == "read"
        || (name.contains("file")
            && ["read", "open", "view", "get", "cat", "show"]
                .iter()
                .any(|w| name.contains(w)))
}

fn is_api_tool(name: &str) -> bool {
    ["http", "api", "fetch", "request", "curl", "webhook"]
        .iter()
        .any(|w| name.contains(w))
}

fn trim_newline(s: &mut String) {
    while s.ends_with('\n') {
        s.pop();
    }
}

#[cfg(test)]
mod tests;
