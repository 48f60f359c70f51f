//! Counting a provider body as it will be sent: every text the provider
//! reads, with that provider's framing, taken from the JSON itself rather
//! than from the neutral messages it was built from. The service compares it
//! with what the request was budgeted at before answering, so anything an
//! adapter adds (a continuation message, labels, fillers, rewritten ids)
//! can never push a request over its budget unnoticed.

use serde_json::Value;

use crate::tokens::count_tool_schemas;

use super::{OutputFormat, RequestCounter};

/// Tokens of `body` in `format` as the target of `rc` reads it. Neutral
/// output is not a body: `None`.
pub fn body_tokens(format: OutputFormat, body: &Value, rc: &RequestCounter<'_>) -> Option<u32> {
    let o = rc.overhead;
    let text = |v: &Value| v.as_str().map_or(0, |s| rc.text(s));
    let json_text = |v: &Value| rc.text(&serde_json::to_string(v).unwrap_or_default());
    let tools = |key_params: &str, flat: bool| -> u32 {
        let Some(tools) = body.get("tools").and_then(Value::as_array) else {
            return 0;
        };
        let schemas = tools.iter().map(|t| {
            let f = if flat {
                t
            } else {
                t.get("function").unwrap_or(t)
            };
            (
                str_field(f, "name"),
                str_field(f, "description"),
                f.get(key_params).unwrap_or(&NULL),
            )
        });
        count_tool_schemas(|s| rc.text(s), schemas) + o.tools_preamble
    };
    let mut n = o.reply_priming;
    match format {
        OutputFormat::Neutral => return None,
        OutputFormat::OpenAiChat => {
            for m in array(body, "messages") {
                n += o.per_message;
                match m.get("content") {
                    Some(Value::Array(parts)) => {
                        for p in parts {
                            n += match p.get("type").and_then(Value::as_str) {
                                Some("image_url") => o.per_image,
                                _ => text(&p["text"]),
                            };
                        }
                    }
                    Some(c) => n += text(c),
                    None => {}
                }
                for c in array(m, "tool_calls") {
                    n += o.per_tool_call
                        + text(&c["function"]["name"])
                        + text(&c["id"])
                        + text(&c["function"]["arguments"]);
                }
                if let Some(id) = m.get("tool_call_id") {
                    n += o.per_name + text(id);
                }
            }
            n += tools("parameters", false);
        }
        OutputFormat::AnthropicMessages => {
            if let Some(system) = body.get("system") {
                n += o.per_message + text(system);
            }
            let blocks_tokens = |blocks: &[Value]| -> u32 {
                blocks
                    .iter()
                    .map(|b| match b.get("type").and_then(Value::as_str) {
                        Some("text") => text(&b["text"]),
                        Some("image") => o.per_image,
                        Some("thinking") => o.per_block + text(&b["thinking"]),
                        Some("redacted_thinking") => o.per_block + text(&b["data"]),
                        _ => 0,
                    })
                    .sum()
            };
            for m in array(body, "messages") {
                n += o.per_message;
                let blocks: &[Value] = match m.get("content") {
                    Some(Value::Array(blocks)) => blocks,
                    Some(c) => {
                        n += text(c);
                        &[]
                    }
                    None => &[],
                };
                for b in blocks {
                    n += match b.get("type").and_then(Value::as_str) {
                        Some("tool_use") => {
                            o.per_tool_call
                                + text(&b["name"])
                                + text(&b["id"])
                                + json_text(&b["input"])
                        }
                        Some("tool_result") => {
                            o.per_name
                                + text(&b["tool_use_id"])
                                + match b.get("content") {
                                    Some(Value::Array(inner)) => blocks_tokens(inner),
                                    Some(c) => text(c),
                                    None => 0,
                                }
                        }
                        _ => blocks_tokens(std::slice::from_ref(b)),
                    };
                }
            }
            n += tools("input_schema", true);
        }
        OutputFormat::OpenAiResponses => {
            if let Some(instructions) = body.get("instructions") {
                n += o.per_message + text(instructions);
            }
            for item in array(body, "input") {
                n += match item.get("type").and_then(Value::as_str) {
                    Some("function_call") => {
                        o.per_tool_call
                            + text(&item["name"])
                            + text(&item["call_id"])
                            + text(&item["arguments"])
                    }
                    Some("function_call_output") => {
                        o.per_message + o.per_name + text(&item["call_id"]) + text(&item["output"])
                    }
                    Some("reasoning") => {
                        o.per_block
                            + array(item, "summary")
                                .map(|s| text(&s["text"]))
                                .sum::<u32>()
                            + text(&item["encrypted_content"])
                    }
                    _ => {
                        o.per_message
                            + match item.get("content") {
                                Some(Value::Array(parts)) => parts
                                    .iter()
                                    .map(|p| match p.get("type").and_then(Value::as_str) {
                                        Some("input_image") => o.per_image,
                                        _ => text(&p["text"]),
                                    })
                                    .sum(),
                                Some(c) => text(c),
                                None => 0,
                            }
                    }
                };
            }
            n += tools("parameters", true);
        }
    }
    Some(n)
}

static NULL: Value = Value::Null;

fn str_field<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or_default()
}

fn array<'a>(v: &'a Value, key: &str) -> impl Iterator<Item = &'a Value> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| a.as_slice())
        .unwrap_or_default()
        .iter()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::model::{Content, ContentPart, Role};
    use crate::provider::testgen;
    use crate::render::{anthropic, openai, responses, ProviderOptions, Request};
    use crate::tokens::{counter_for_model, TokenLedger};

    /// Variations real requests have and the generator does not: ids reused
    /// by every call, ids Anthropic refuses, thinking and reasoning parts.
    fn vary(mut req: Request, reuse: bool, odd: bool, reasoning: bool) -> Request {
        let rename = |id: &str| {
            let mut id = if reuse {
                "call_0".to_string()
            } else {
                id.to_string()
            };
            if odd {
                id = format!("functions.{id}:7");
            }
            id
        };
        for m in &mut req.messages {
            for c in &mut m.tool_calls {
                c.id = rename(&c.id);
            }
            if let Some(id) = &m.tool_call_id {
                m.tool_call_id = Some(rename(id));
            }
            if reasoning && m.role == Role::Assistant {
                let mut parts = vec![
                    ContentPart::Thinking {
                        thinking: "Weigh the options before calling anything.".into(),
                        signature: "c2ln".into(),
                    },
                    ContentPart::Reasoning {
                        id: "rs_1".into(),
                        summary: vec!["Check first.".into()],
                        encrypted_content: Some("gAAAAB".into()),
                    },
                ];
                match std::mem::take(&mut m.content) {
                    Content::Text(t) => parts.push(ContentPart::Text { text: t }),
                    Content::Parts(p) => parts.extend(p),
                }
                m.content = Content::Parts(parts);
            }
        }
        req
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(crate::testing::cases(256)))]

        /// The service refuses a body that counts more than its request was
        /// budgeted at; this is why that never happens.
        #[test]
        fn bodies_never_count_more_than_their_request(
            req in testgen::request(),
            reuse in any::<bool>(),
            odd in any::<bool>(),
            reasoning in any::<bool>(),
        ) {
            let req = vary(req, reuse, odd, reasoning);
            let ledger = TokenLedger::new(10_000);
            for (format, model) in [
                (OutputFormat::OpenAiChat, "gpt-4o"),
                (OutputFormat::AnthropicMessages, "claude-sonnet-4-5"),
                (OutputFormat::OpenAiResponses, "gpt-5"),
            ] {
                let counter = counter_for_model(model);
                let rc = RequestCounter::for_target(counter.as_ref(), &ledger, OutputFormat::target(Some(format), model));
                let opts = ProviderOptions { model: model.into(), max_output_tokens: Some(512) };
                let body = match format {
                    OutputFormat::OpenAiChat => openai::to_openai(&req, &opts),
                    OutputFormat::AnthropicMessages => anthropic::to_anthropic(&req, &opts),
                    _ => responses::to_responses(&req, &opts),
                };
                let sent = body_tokens(format, &body, &rc).expect("a provider body");
                let budgeted = rc.request(&req).total;
                prop_assert!(sent <= budgeted, "{:?}: sent {} > budgeted {}", format, sent, budgeted);
            }
        }
    }
}
