//! Framing overhead of chat requests: what a provider adds around the text.

use crate::model::ToolSchema;

/// Per-message and per-request framing overhead of a chat format, in tokens.
/// Added to the counts of the texts themselves (message content, tool-call
/// names, ids and arguments), which the caller counts separately.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChatOverhead {
    /// Framing of every message, including its role name.
    pub per_message: u32,
    /// Extra for a `name` (or `tool_call_id`) field, on top of its text.
    pub per_name: u32,
    /// Once per request: the primed assistant header of the reply.
    pub reply_priming: u32,
    /// Framing of each tool call in an assistant message, on top of the name,
    /// id and arguments texts.
    pub per_tool_call: u32,
    /// Fixed cost of one image part (its dimensions are unknown from a URL).
    pub per_image: u32,
    /// Framing of a thinking block or reasoning item, on top of its text.
    pub per_block: u32,
    /// Once per request with tools: a prompt the provider adds for tool use.
    pub tools_preamble: u32,
}

impl ChatOverhead {
    /// OpenAI Chat Completions.
    ///
    /// - `per_message` 4: the OpenAI cookbook ("How to count tokens with
    ///   tiktoken") counts 3 framing tokens per message (`<|start|>`,
    ///   `<|message|>`, `<|end|>`) plus the encoded role, and every role name
    ///   is one token in o200k and cl100k (asserted in a test). Folding the
    ///   role in means callers need not count it.
    /// - `per_name` 1 and `reply_priming` 3: the cookbook's numbers, which
    ///   match the API's `prompt_tokens` for gpt-3.5/4/4o.
    /// - `per_tool_call` 10: OpenAI does not publish it; tiktoken-rs uses 1,
    ///   which undercounts because every call after the first gets its own
    ///   message header (4) plus a recipient and content-type header
    ///   (`to=functions.…`, `json`, about 5) and a terminator (1). Errs high.
    /// - `per_image`: the model's worst case ([`openai_image_tokens`]), since
    ///   a URL says nothing of the image's size.
    pub fn openai() -> Self {
        ChatOverhead {
            per_message: 4,
            per_name: 1,
            reply_priming: 3,
            per_tool_call: 10,
            per_image: 1445,
            per_block: 4,
            tools_preamble: 0,
        }
    }

    /// Anthropic Messages. Anthropic publishes no per-message framing; its
    /// token-counting example (a system prompt and one message, 14 tokens)
    /// implies about 6, so 8 per message and per block. A tool use gets 16
    /// and a tool result's id 4: the adapter may add a `_<n>` suffix to a
    /// reused id. Once per request 8 for the reply header (the
    /// `(continuing conversation)` message the adapter may add is counted
    /// with the request's fixed part). A request with tools pays
    /// Anthropic's hidden tool-use system prompt: 804 tokens at most in its
    /// published table (Opus 4.7, `tool_choice: any`), so 810.
    pub fn anthropic(model: &str) -> Self {
        ChatOverhead {
            per_message: 8,
            per_name: 4,
            reply_priming: 8,
            per_tool_call: 16,
            per_image: anthropic_image_tokens(model),
            per_block: 8,
            tools_preamble: 810,
        }
    }

    /// Providers that publish no framing rules (Google, unknown): OpenAI's
    /// numbers with headroom, and the largest per-image cost any provider
    /// publishes.
    pub fn conservative() -> Self {
        ChatOverhead {
            per_message: 8,
            per_name: 2,
            reply_priming: 8,
            per_tool_call: 16,
            per_image: MAX_IMAGE_TOKENS,
            per_block: 8,
            tools_preamble: 0,
        }
    }

    /// The framing for `provider` when the model is `model`: OpenAI's for
    /// OpenAI models in either OpenAI format, Anthropic's for Anthropic,
    /// [`ChatOverhead::conservative`] otherwise.
    pub fn for_target(provider: super::Provider, model: &str) -> Self {
        use super::Provider;
        match provider {
            Provider::OpenAiChat | Provider::OpenAiResponses
                if super::counter::encoding_known(model) =>
            {
                ChatOverhead {
                    per_image: openai_image_tokens(model),
                    ..Self::openai()
                }
            }
            Provider::Anthropic => Self::anthropic(model),
            _ => Self::conservative(),
        }
    }
}

/// The largest per-image token cost any supported provider publishes
/// (Anthropic's high-resolution models: 4784 visual tokens).
const MAX_IMAGE_TOKENS: u32 = 4784;

/// Worst-case tokens of one image for an OpenAI model (OpenAI's "Images and
/// vision" guide). Tile models scale to 2048×2048 and the short side to 768:
/// at most 8 tiles. Patch models cap at 1536 patches times a multiplier.
/// - gpt-4o, gpt-4.1, gpt-4.5, chatgpt-4o: 85 + 8 × 170 = 1445
/// - o1, o3: 75 + 8 × 150 = 1275
/// - gpt-4o-mini: 2833 + 8 × 5667 = 48169 (its images are billed as tokens
///   at this rate)
/// - gpt-4.1-mini 1536 × 1.62, gpt-4.1-nano 1536 × 2.46, o4-mini 1536 × 1.72
/// - anything else (gpt-5 family and newer): the largest patch cost, 3779
fn openai_image_tokens(model: &str) -> u32 {
    let m = super::target::normalize(model);
    let is = |p: &str| m == p || m.starts_with(&format!("{p}-"));
    if is("gpt-4o-mini") {
        48_169
    } else if is("gpt-4.1-nano") {
        3779
    } else if is("gpt-4.1-mini") {
        2489
    } else if is("o4-mini") {
        2642
    } else if is("o1") || is("o3") {
        1275
    } else if [
        "gpt-4o",
        "gpt-4.1",
        "gpt-4.5",
        "chatgpt-4o",
        "gpt-4-turbo",
        "gpt-4",
    ]
    .iter()
    .any(|p| is(p))
    {
        1445
    } else {
        3779
    }
}

/// Worst-case tokens of one image for a Claude model (Anthropic's vision
/// guide: 28 px patches, capped at 1568 visual tokens, 4784 from Opus 4.7 on).
/// Models known to predate the larger cap get 1600 (the older documented
/// ceiling); any other Claude model gets 4784.
fn anthropic_image_tokens(model: &str) -> u32 {
    let m = super::target::normalize(model);
    let older = m.contains("claude-3")
        || m.contains("claude-sonnet-4")
        || m.contains("claude-haiku-4")
        || m.split("claude-opus-4")
            .nth(1)
            .is_some_and(|rest| match rest.strip_prefix('-') {
                // `claude-opus-4`, or a date (`-20250514`): Opus 4.0.
                None => true,
                Some(v) => {
                    let minor: String = v.chars().take_while(char::is_ascii_digit).collect();
                    minor.len() != 1 || minor.parse::<u32>().is_ok_and(|n| n < 7)
                }
            });
    if older {
        1600
    } else {
        MAX_IMAGE_TOKENS
    }
}

/// How OpenAI renders tools into the prompt (reverse-engineered, not
/// documented): a TypeScript-like namespace in the system message.
const TOOLS_PREAMBLE: &str =
    "# Tools\n\n## functions\n\nnamespace functions {\n\n} // namespace functions\n";
/// The text around each tool: `// {description}\ntype {name} = (_: {params}) => any;\n\n`.
const PER_TOOL_FRAME: &str = "// \ntype  = (_: ) => any;\n\n";
/// A system message may have to be created to hold the tools.
const TOOLS_MESSAGE_FRAME: u32 = 4;

/// Tokens of the tool schemas sent with a request: name, description and the
/// compact JSON of the parameters of each tool, plus the framing text.
///
/// An approximation of the provider's internal formatting, erring high: the
/// provider renders parameters as TypeScript-like declarations, which are
/// shorter than the JSON Schema counted here (no `"type":"object"`,
/// `"properties"`, quotes or braces around every key). Deterministic: the
/// same tools give the same count. 0 for no tools.
///
/// `tools` gives each tool's (name, description, parameters schema; null for
/// none); `count` counts one text, so callers can count through their cache.
pub fn count_tool_schemas<'a>(
    count: impl Fn(&str) -> u32,
    tools: impl IntoIterator<Item = (&'a str, &'a str, &'a serde_json::Value)>,
) -> u32 {
    let mut tools = tools.into_iter().peekable();
    if tools.peek().is_none() {
        return 0;
    }
    let frame = count(PER_TOOL_FRAME);
    let mut total = TOOLS_MESSAGE_FRAME.saturating_add(count(TOOLS_PREAMBLE));
    for (name, description, parameters) in tools {
        total = total
            .saturating_add(frame)
            .saturating_add(count(name))
            .saturating_add(count(description));
        if !parameters.is_null() {
            total = total.saturating_add(count(&parameters.to_string()));
        }
    }
    total
}

/// A tool schema as [`count_tool_schemas`] reads it.
pub fn schema_texts(t: &ToolSchema) -> (&str, &str, &serde_json::Value) {
    (&t.name, &t.description, &t.parameters)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::model::Role;
    use crate::tokens::{cl100k, counter_for_model, o200k, Estimator};
    use crate::tokens::{Provider, TokenCounter};

    fn count(counter: &dyn TokenCounter, tools: &[ToolSchema]) -> u32 {
        count_tool_schemas(
            |s| u32::try_from(counter.count(s)).unwrap_or(u32::MAX),
            tools.iter().map(schema_texts),
        )
    }

    fn tool(name: &str, description: &str, parameters: serde_json::Value) -> ToolSchema {
        ToolSchema {
            name: name.to_string(),
            description: description.to_string(),
            parameters,
        }
    }

    fn weather() -> ToolSchema {
        tool(
            "get_weather",
            "Get the current weather in a given location.",
            json!({
                "type": "object",
                "properties": {
                    "location": {"type": "string", "description": "City and state, e.g. San Francisco, CA"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}
                },
                "required": ["location"]
            }),
        )
    }

    #[test]
    fn role_names_are_one_token() {
        for role in [
            Role::System,
            Role::Developer,
            Role::User,
            Role::Assistant,
            Role::Tool,
        ] {
            assert_eq!(o200k().count(role.as_str()), 1, "{role:?}");
            assert_eq!(cl100k().count(role.as_str()), 1, "{role:?}");
        }
    }

    #[test]
    fn overhead_presets() {
        let o = ChatOverhead::openai();
        assert_eq!((o.per_message, o.per_name, o.reply_priming), (4, 1, 3));
        assert_eq!(
            ChatOverhead::for_target(Provider::for_model("gpt-4o"), "gpt-4o"),
            o
        );
        assert_eq!(
            ChatOverhead::for_target(
                Provider::for_model("claude-sonnet-4-5"),
                "claude-sonnet-4-5"
            ),
            ChatOverhead::anthropic("claude-sonnet-4-5")
        );
        assert_eq!(ChatOverhead::anthropic("x").tools_preamble, 810);
        let c = ChatOverhead::conservative();
        assert!(c.per_message >= o.per_message && c.per_image >= o.per_image);
    }

    #[test]
    fn image_worst_cases() {
        for (m, n) in [
            ("gpt-4o", 1445),
            ("gpt-4o-2024-08-06", 1445),
            ("gpt-4.1", 1445),
            ("gpt-4o-mini", 48_169),
            ("gpt-4.1-mini", 2489),
            ("gpt-4.1-nano", 3779),
            ("o4-mini", 2642),
            ("o3", 1275),
            ("gpt-5", 3779),
        ] {
            assert_eq!(openai_image_tokens(m), n, "{m}");
        }
        for (m, n) in [
            ("claude-3-5-sonnet-20241022", 1600),
            ("claude-sonnet-4-5", 1600),
            ("claude-opus-4-20250514", 1600),
            ("claude-opus-4-1", 1600),
            ("claude-opus-4-6", 1600),
            ("claude-opus-4-7", 4784),
            ("claude-opus-5", 4784),
        ] {
            assert_eq!(anthropic_image_tokens(m), n, "{m}");
        }
        assert_eq!(
            ChatOverhead::for_target(Provider::for_model("gemini-2.5-pro"), "gemini-2.5-pro")
                .per_image,
            MAX_IMAGE_TOKENS
        );
    }

    #[test]
    fn no_tools_cost_nothing() {
        assert_eq!(count(o200k().as_ref(), &[]), 0);
    }

    #[test]
    fn tool_schemas_are_deterministic_and_plausible() {
        let c = o200k();
        let one = count(c.as_ref(), &[weather()]);
        assert_eq!(one, count(c.as_ref(), &[weather()]));
        // More than the bare texts (framing is on top), yet the same order.
        let t = weather();
        let bare = c.count(&t.name) + c.count(&t.description) + c.count(&t.parameters.to_string());
        assert!(
            one as usize > bare && (one as usize) < 2 * bare,
            "{one} vs {bare}"
        );
    }

    #[test]
    fn tool_schemas_monotonic_in_content() {
        for counter in [o200k(), cl100k(), counter_for_model("claude-opus-4")] {
            let c = counter.as_ref();
            let base = count(c, &[weather()]);

            let mut longer = weather();
            longer
                .description
                .push_str(" Returns temperature and conditions.");
            assert!(count(c, &[longer]) > base);

            let mut more_params = weather();
            more_params.parameters["properties"]["days"] =
                json!({"type": "integer", "description": "Forecast days"});
            assert!(count(c, &[more_params]) > base);

            let two = count(c, &[weather(), tool("noop", "", json!(null))]);
            assert!(two > base);

            let mut tools = vec![weather()];
            let mut prev = base;
            for i in 0..20 {
                tools.push(tool(
                    &format!("tool_{i}"),
                    "Does a thing.",
                    json!({"type": "object", "properties": {"x": {"type": "string"}}}),
                ));
                let now = count(c, &tools);
                assert!(now > prev);
                prev = now;
            }
        }
    }

    #[test]
    fn estimator_tool_count_not_below_exact() {
        let tools = [
            weather(),
            tool(
                "search",
                "Search the web.",
                json!({"type": "object", "properties": {"q": {"type": "string"}}}),
            ),
        ];
        let exact = count(o200k().as_ref(), &tools);
        let est = count(&Estimator::default(), &tools);
        assert!(est >= exact, "{est} < {exact}");
    }
}
