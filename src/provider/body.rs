//! Counting a provider body as it will be sent: every text the provider
//! reads, with that provider's framing, taken from the JSON itself rather
//! than from the neutral messages it was built from. The service compares it
//! with what the request was budgeted at before answering, so anything an
//! adapter adds (a continuation message, labels, fillers, rewritten ids)
//! can never push a request over its budget unnoticed. Each format's walk
//! over its body is its `count_body`; this is what they share.

use serde_json::Value;

use crate::render::RequestCounter;
use crate::tokens::{count_tool_schemas, ChatOverhead};

/// The counter a format's `count_body` reads a body with.
pub struct BodyCounter<'a> {
    rc: &'a RequestCounter<'a>,
}

impl<'a> BodyCounter<'a> {
    /// Counting as `rc`'s target reads it.
    pub fn new(rc: &'a RequestCounter<'a>) -> Self {
        BodyCounter { rc }
    }

    /// The target's overheads.
    pub fn overhead(&self) -> ChatOverhead {
        self.rc.overhead
    }

    /// Tokens of a JSON string (0 for anything else).
    pub fn text(&self, v: &Value) -> u32 {
        v.as_str().map_or(0, |s| self.rc.text(s))
    }

    /// Tokens of a JSON value written compactly (tool input as sent).
    pub fn json_text(&self, v: &Value) -> u32 {
        self.rc.text(&serde_json::to_string(v).unwrap_or_default())
    }

    /// Tokens of an item or block compactd does not model, as sent: its
    /// JSON text with inline media emptied, plus each medium's published
    /// cost (see [`crate::model::Media::tokens`]) and one block's framing.
    pub fn provider(&self, v: &Value) -> u32 {
        let (text, media) = crate::model::countable(v);
        let o = self.rc.overhead;
        o.per_block + self.rc.text(&text) + media.iter().map(|m| m.tokens(o.per_image)).sum::<u32>()
    }

    /// Tokens of `body`'s `tools`: each tool's name, description and
    /// parameters under `key_params`, at the top level of the tool (`flat`)
    /// or under its `function`; with the target's tool preamble.
    pub fn tools(&self, body: &Value, key_params: &str, flat: bool) -> u32 {
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
        count_tool_schemas(|s| self.rc.text(s), schemas) + self.rc.overhead.tools_preamble
    }
}

static NULL: Value = Value::Null;

fn str_field<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// The items of `v[key]` (none when it is not an array).
pub fn array<'a>(v: &'a Value, key: &str) -> impl Iterator<Item = &'a Value> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| a.as_slice())
        .unwrap_or_default()
        .iter()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use crate::model::{Content, ContentPart, Role};
    use crate::provider::{
        anthropic, openai_chat as openai, openai_responses as responses, Format,
    };
    use crate::provider::{body_tokens, testgen};
    use crate::render::{ProviderOptions, Request, RequestCounter};
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
                        rest: None,
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
                (Format::OpenAiChat, "gpt-4o"),
                (Format::AnthropicMessages, "claude-sonnet-4-5"),
                (Format::OpenAiResponses, "gpt-5"),
            ] {
                let counter = counter_for_model(model);
                let rc = RequestCounter::for_target(counter.as_ref(), &ledger, Format::target(Some(format), model));
                let opts = ProviderOptions { model: model.into(), max_output_tokens: Some(512), ..Default::default() };
                let body = match format {
                    Format::OpenAiChat => openai::to_openai(&req, &opts),
                    Format::AnthropicMessages => anthropic::to_anthropic(&req, &opts),
                    _ => responses::to_responses(&req, &opts),
                };
                let sent = body_tokens(format, &body, &rc).expect("a provider body");
                let budgeted = rc.request(&req).total;
                prop_assert!(sent <= budgeted, "{:?}: sent {} > budgeted {}", format, sent, budgeted);
            }
        }
    }
}
