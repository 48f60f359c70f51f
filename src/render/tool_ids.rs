//! The tool call ids a provider body sends. Callers may reuse an id once its
//! call was answered (local model servers name every call `call_0`), and
//! some model servers use characters some providers refuse. Providers that match
//! a result to its call by id across the whole request need every id once:
//! an id used more than once keeps it on its last use and gets `_<n>` on its
//! n-th earlier one; each result carries the id sent for its call.

use std::collections::{BTreeSet, HashMap};

use super::Request;

/// Which ids a provider accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IdRules {
    /// Unique per request, `[a-zA-Z0-9_-]+`: others are sent as `toolu_` and
    /// 24 hex digits of their SHA-256 (Anthropic's rule).
    PlainCharset,
    /// Unique per request, any characters (OpenAI Responses).
    Unique,
}

/// The ids sent for each message's tool calls and tool result.
pub(crate) struct ToolIds {
    /// Per message, the id sent for each of its calls.
    pub calls: Vec<Vec<String>>,
    /// Per message, the id its result is sent with.
    pub results: Vec<Option<String>>,
    /// (sent by the caller, sent to the provider), in request order.
    pub rewrites: Vec<(String, String)>,
}

impl ToolIds {
    pub(crate) fn of(req: &Request, rules: IdRules) -> ToolIds {
        let mut uses: HashMap<&str, usize> = HashMap::new();
        for m in &req.messages {
            for c in &m.tool_calls {
                *uses.entry(c.id.as_str()).or_insert(0) += 1;
            }
        }
        let mut taken: BTreeSet<String> = req
            .messages
            .iter()
            .flat_map(|m| m.tool_calls.iter().map(|c| c.id.clone()))
            .collect();
        let mut seen: HashMap<&str, usize> = HashMap::new();
        // Original id -> id sent for its most recent call (results follow
        // their call in a rendered request).
        let mut open: HashMap<&str, String> = HashMap::new();
        let mut out = ToolIds {
            calls: Vec::with_capacity(req.messages.len()),
            results: Vec::with_capacity(req.messages.len()),
            rewrites: Vec::new(),
        };
        for m in &req.messages {
            let mut calls = Vec::with_capacity(m.tool_calls.len());
            for c in &m.tool_calls {
                let n = seen.entry(c.id.as_str()).or_insert(0);
                *n += 1;
                let base = sent_id(&c.id, rules).into_owned();
                let mut sent = if *n == uses[c.id.as_str()] {
                    base
                } else {
                    format!("{base}_{n}")
                };
                while sent != c.id && !taken.insert(sent.clone()) {
                    sent.push('_');
                }
                if sent != c.id {
                    out.rewrites.push((c.id.clone(), sent.clone()));
                }
                open.insert(c.id.as_str(), sent.clone());
                calls.push(sent);
            }
            out.calls.push(calls);
            out.results.push(m.tool_call_id.as_deref().map(|id| {
                open.remove(id)
                    .unwrap_or_else(|| sent_id(id, rules).into_owned())
            }));
        }
        out
    }
}

/// `id` as the provider accepts it, before any reuse suffix.
pub(crate) fn sent_id(id: &str, rules: IdRules) -> std::borrow::Cow<'_, str> {
    match rules {
        IdRules::PlainCharset if !plain_charset(id) => std::borrow::Cow::Owned(hashed(id)),
        IdRules::PlainCharset | IdRules::Unique => std::borrow::Cow::Borrowed(id),
    }
}

/// Ids of `[a-zA-Z0-9_-]+`, which every provider accepts as they are.
pub(crate) fn plain_charset(id: &str) -> bool {
    !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn hashed(id: &str) -> String {
    use sha2::{Digest, Sha256};
    format!(
        "toolu_{}",
        &hex::encode(Sha256::digest(id.as_bytes()))[..24]
    )
}
