//! A tool's `must_preserve_fields`: values read from its output that every
//! stub, clear and pointer of the result keeps, for tools whose envelopes
//! carry no key fields (most tools of most frameworks send plain strings).
//!
//! The values become key fields of a working copy of the result, made once
//! per compaction and only for the tools that name fields, so every reducer
//! that already keeps key fields (stubs, clears, compressions, summaries'
//! tool outcomes) keeps these too. The caller's thread is never edited.

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;

use crate::model::{Message, Thread, ToolContent};

use super::Policy;

/// A text value longer than this is cut: a key field is an id or a status.
const MAX_VALUE_CHARS: usize = 200;

/// Working copies of the tool results whose tool names fields to preserve
/// and whose output has them, by message index. Empty (no allocation) when
/// the policy names none.
pub fn enriched(thread: &Thread, policy: &Policy) -> HashMap<usize, Message> {
    let mut out = HashMap::new();
    if policy
        .tools
        .values()
        .all(|t| t.must_preserve_fields.is_empty())
    {
        return out;
    }
    for (i, m) in thread.messages.iter().enumerate() {
        let Some(env) = &m.tool_result else { continue };
        let names = policy.must_preserve(&env.tool_name);
        if names.is_empty() {
            continue;
        }
        let found = fields(&env.content, names);
        // The envelope's own key fields win on a clash.
        if found.keys().all(|k| env.key_fields.contains_key(k)) {
            continue;
        }
        let mut copy = (**m).clone();
        if let Some(e) = copy.tool_result.as_mut() {
            for (k, v) in found {
                e.key_fields.entry(k).or_insert(v);
            }
        }
        out.insert(i, copy);
    }
    out
}

/// The values of `names` in a tool's output. JSON (or text that is JSON):
/// a dotted path from the root, else the first value under the path's last
/// name anywhere in the document, depth first. Other text: the first line
/// reading `name: value` or `name = value`. Names not found are left out.
pub fn fields(content: &ToolContent, names: &[String]) -> BTreeMap<String, Value> {
    let text = content.to_text();
    let json: Option<Value> = match content {
        ToolContent::Json(_) => serde_json::from_str(&text).ok(),
        ToolContent::Text(s) => {
            let t = s.trim_start();
            if t.starts_with('{') || t.starts_with('[') {
                serde_json::from_str(t).ok()
            } else {
                None
            }
        }
    };
    let mut out = BTreeMap::new();
    for name in names {
        let v = match &json {
            Some(doc) => in_json(doc, name),
            None => in_text(&text, name),
        };
        if let Some(v) = v {
            out.insert(name.clone(), v);
        }
    }
    out
}

fn in_json(doc: &Value, path: &str) -> Option<Value> {
    let mut at = doc;
    let mut walked = true;
    for seg in path.split('.') {
        match at {
            Value::Object(o) if o.contains_key(seg) => at = &o[seg],
            Value::Array(a) => match seg.parse::<usize>().ok().and_then(|i| a.get(i)) {
                Some(v) => at = v,
                None => {
                    walked = false;
                    break;
                }
            },
            _ => {
                walked = false;
                break;
            }
        }
    }
    if walked {
        return Some(capped(at));
    }
    let last = path.rsplit('.').next().unwrap_or(path);
    find_key(doc, last).map(capped)
}

fn find_key<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    match v {
        Value::Object(o) => o
            .get(key)
            .or_else(|| o.values().find_map(|c| find_key(c, key))),
        Value::Array(a) => a.iter().find_map(|c| find_key(c, key)),
        _ => None,
    }
}

/// Scalars as they are, text cut; a nested object or array is kept whole
/// when short, else as its cut JSON text.
fn capped(v: &Value) -> Value {
    match v {
        Value::String(s) => Value::String(cut(s)),
        Value::Object(_) | Value::Array(_) => {
            let s = v.to_string();
            if s.chars().count() <= MAX_VALUE_CHARS {
                v.clone()
            } else {
                Value::String(cut(&s))
            }
        }
        other => other.clone(),
    }
}

fn cut(s: &str) -> String {
    if s.chars().count() <= MAX_VALUE_CHARS {
        return s.to_string();
    }
    let mut out: String = s.chars().take(MAX_VALUE_CHARS).collect();
    out.push('…');
    out
}

fn in_text(text: &str, name: &str) -> Option<Value> {
    let name = name.rsplit('.').next().unwrap_or(name);
    text.lines().find_map(|line| {
        let line = line.trim_start().trim_start_matches(['-', '*', ' ']);
        let rest = strip_prefix_ci(line, name)?;
        let rest = rest.trim_start_matches(['"', '\'']).trim_start();
        let value = rest
            .strip_prefix(':')
            .or_else(|| rest.strip_prefix('='))?
            .trim()
            .trim_matches(['"', '\'', ','])
            .trim();
        (!value.is_empty()).then(|| Value::String(cut(value)))
    })
}

/// `line` after `name` when it starts with it (ASCII case ignored) and the
/// name ends there (`id` does not match `idle: 3`).
fn strip_prefix_ci<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let line = line.trim_start_matches(['"', '\'']);
    let head = line.get(..name.len())?;
    if !head.eq_ignore_ascii_case(name) {
        return None;
    }
    let rest = &line[name.len()..];
    match rest.chars().next() {
        Some(c) if c.is_alphanumeric() || c == '_' => None,
        _ => Some(rest),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn json_paths_then_keys_anywhere() {
        let c = ToolContent::Text(
            r#"{"order":{"id":"A-17","lines":[{"sku":"X1"}]},"status":"shipped","meta":{"total":12.5}}"#
                .into(),
        );
        let f = fields(
            &c,
            &names(&[
                "order.id",
                "status",
                "total",
                "order.lines.0.sku",
                "missing",
            ]),
        );
        assert_eq!(f["order.id"], json!("A-17"));
        assert_eq!(f["status"], json!("shipped"));
        assert_eq!(f["total"], json!(12.5));
        assert_eq!(f["order.lines.0.sku"], json!("X1"));
        assert!(!f.contains_key("missing"));
    }

    #[test]
    fn text_lines_in_any_script() {
        let c = ToolContent::Text(
            "Deploy finished\n  Status: 成功\nrelease_id = r-2031\nidle: 3\n".into(),
        );
        let f = fields(&c, &names(&["status", "release_id", "id"]));
        assert_eq!(f["status"], json!("成功"));
        assert_eq!(f["release_id"], json!("r-2031"));
        assert!(!f.contains_key("id"), "{f:?}");
    }

    #[test]
    fn long_values_are_cut() {
        let long = "x".repeat(1000);
        let c = ToolContent::Text(format!("{{\"blob\": \"{long}\"}}"));
        let f = fields(&c, &names(&["blob"]));
        assert_eq!(
            f["blob"].as_str().unwrap().chars().count(),
            MAX_VALUE_CHARS + 1
        );
    }
}
