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
    use crate::tokens::TokenCounter;
    use crate::tokens::{cl100k, counter_for_model, o200k, Estimator};

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
