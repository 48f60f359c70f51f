//! Exact token accounting of a rendered request, by part. The pipeline counts
//! each message with the same function, so its running total and the final
//! count of the request agree by construction.

use serde::{Deserialize, Serialize};

use crate::model::{Action, Content, ContentPart, Message, Role, ToolCall, ToolSchema};
use crate::tokens::{
    count_tool_schemas, schema_texts, BlankFiller, ChatOverhead, Framing, IdGrowth, Target,
    TokenCounter, TokenLedger,
};

/// What a format that wraps non-object tool input puts around it.
const VALUE_WRAP: &str = "{\"value\": }";

/// A later system or developer message as a labelling format sends it:
/// `[role] ` glued to its first text, or a `[role]` block before a leading
/// image. Counted as sent, because a concatenation need not tokenize like
/// its parts.
fn labeled(role: Role, c: &Content) -> Content {
    let label = format!("[{}]", role.as_str());
    match c {
        Content::Text(t) if t.trim().is_empty() => c.clone(),
        Content::Text(t) => Content::Text(format!("{label} {t}")),
        Content::Parts(parts) => {
            let mut parts: Vec<ContentPart> = parts
                .iter()
                .filter(|p| !matches!(p, ContentPart::Text { text } if text.trim().is_empty()))
                .cloned()
                .collect();
            if let Some(i) = parts.iter().position(|p| !p.is_reasoning()) {
                match &parts[i] {
                    ContentPart::Text { text } => {
                        parts[i] = ContentPart::Text {
                            text: format!("{label} {text}"),
                        };
                    }
                    _ => parts.insert(i, ContentPart::Text { text: label }),
                }
            }
            Content::Parts(parts)
        }
    }
}

/// Content with no visible text or image (what `(empty)` stands in for).
fn blank(c: &Content) -> bool {
    match c {
        Content::Text(t) => t.trim().is_empty(),
        Content::Parts(parts) => parts.iter().all(|p| match p {
            ContentPart::Text { text } => text.trim().is_empty(),
            ContentPart::Image { .. } | ContentPart::Provider(_) => false,
            _ => true,
        }),
    }
}

use super::renderer::{render_message, RenderOptions};
use super::request::{Origin, RenderedMessage, Request};

/// Token counts of a request by part.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RequestTokens {
    /// System prompt, with its message framing.
    pub system: u32,
    /// Tool schemas.
    pub tools: u32,
    /// Thread-derived messages (verbatim, cleared, summaries, pointers).
    pub messages: u32,
    /// Rehydrated artifact content.
    pub rehydrated: u32,
    /// The recall block.
    #[serde(default)]
    pub recalled: u32,
    /// Reply priming.
    pub framing: u32,
    /// Everything.
    pub total: u32,
}

/// Counts messages and requests with one tokenizer, through the ledger, as
/// the target format will send them (its [`Framing`]): only the reasoning
/// parts it sends, and what its adapter adds (`[system]` / `[developer]`
/// labels on later instructions, `(empty)` for blank content, the
/// `{"value": …}` wrapping of non-object tool input, grown ids).
#[derive(Debug, Clone, Copy)]
pub struct RequestCounter<'a> {
    /// The tokenizer.
    pub counter: &'a dyn TokenCounter,
    /// The per-text cache.
    pub ledger: &'a TokenLedger,
    /// Chat framing overhead.
    pub overhead: ChatOverhead,
    /// What the target format adds or leaves out.
    pub framing: Framing,
}

impl<'a> RequestCounter<'a> {
    /// A counter for `target`.
    pub fn for_target(
        counter: &'a dyn TokenCounter,
        ledger: &'a TokenLedger,
        target: Target,
    ) -> Self {
        RequestCounter {
            counter,
            ledger,
            overhead: target.overhead,
            framing: target.framing,
        }
    }

    /// Tokens of a text, cached.
    pub fn text(&self, text: &str) -> u32 {
        self.ledger.count(self.counter, text)
    }

    /// Tokens of one rendered message including framing.
    pub fn message(&self, m: &RenderedMessage) -> u32 {
        self.framed(
            m.role,
            self.body(m.role, &m.content),
            blank(&m.content),
            &m.tool_calls,
            m.tool_call_id.as_deref(),
        )
    }

    /// Tokens of a message's content as the provider is sent it. Responses
    /// sends every role but the user's as one joined string, which need not
    /// tokenize like its parts.
    fn body(&self, role: Role, c: &Content) -> u32 {
        if self.framing.labels_late_instructions && matches!(role, Role::System | Role::Developer) {
            return self.content(&labeled(role, c));
        }
        match c {
            Content::Parts(parts) if self.framing.joins_non_user_parts && role != Role::User => {
                // Reasoning and carried items go as items of their own.
                let reasoning: u32 = parts
                    .iter()
                    .filter(|p| p.is_reasoning() || matches!(p, ContentPart::Provider(_)))
                    .map(|p| self.part(p))
                    .sum();
                reasoning + self.text(&c.flat_text())
            }
            _ => self.content(c),
        }
    }

    /// Tokens of thread message `m` rendered verbatim, without building the
    /// rendered message (cloning every message's content dominated warm calls).
    /// Equal to `self.message(&render_message(m, Action::Include, options))`.
    pub fn verbatim(&self, m: &Message, options: &RenderOptions) -> u32 {
        let transformed = (options.delimit_user_content && m.role == Role::User)
            || (m.tool_result.is_some()
                && (options.delimit_tool_output
                    || options.tool_result_max_chars.is_some_and(|c| c > 0)));
        if transformed {
            return render_message(m, Action::Include, options).map_or(0, |rm| self.message(&rm));
        }
        let (body, is_blank) = match &m.tool_result {
            Some(env) => {
                let text = env.content.to_text();
                (self.text(&text), text.trim().is_empty())
            }
            None => (self.body(m.role, &m.content), blank(&m.content)),
        };
        let call_id = m.tool_result.as_ref().map(|e| e.tool_call_id.as_str());
        self.framed(m.role, body, is_blank, &m.tool_calls, call_id)
    }

    /// Tokens of thread message `m` with its content replaced by
    /// `replacement` (a cleared message), without building it. Equal to
    /// counting the message `render_message` gives for a clear record.
    pub fn cleared(&self, m: &Message, replacement: &str) -> u32 {
        let call_id = m.tool_result.as_ref().map(|e| e.tool_call_id.as_str());
        self.framed(
            m.role,
            self.text(replacement),
            replacement.trim().is_empty(),
            &m.tool_calls,
            call_id,
        )
    }

    fn content(&self, c: &Content) -> u32 {
        match c {
            Content::Text(t) => self.text(t),
            Content::Parts(parts) => parts.iter().map(|p| self.part(p)).sum(),
        }
    }

    fn part(&self, p: &ContentPart) -> u32 {
        match p {
            ContentPart::Text { text } => self.text(text),
            // Where a provider takes no image (some roles, refused
            // types) the image goes as its text reference.
            ContentPart::Image { url } => self
                .overhead
                .per_image
                .max(self.text(&super::images::reference(url))),
            ContentPart::Thinking { thinking, .. } if self.framing.sends_thinking => {
                self.overhead.per_block + self.text(thinking)
            }
            ContentPart::RedactedThinking { data } if self.framing.sends_thinking => {
                self.overhead.per_block + self.text(data)
            }
            ContentPart::Reasoning {
                summary,
                encrypted_content,
                ..
            } if self.framing.sends_reasoning => {
                self.overhead.per_block
                    + summary.iter().map(|s| self.text(s)).sum::<u32>()
                    + encrypted_content.as_deref().map_or(0, |e| self.text(e))
            }
            // Sent as it came (or as its text, which is shorter): its
            // text with media emptied, and each medium's own cost; framed
            // as a message, since a carried item may split the message it
            // is in into items around it.
            ContentPart::Provider(p) => {
                let (text, media) = p.countable();
                let per_image = self.overhead.per_image;
                self.overhead.per_block
                    + self.overhead.per_message
                    + self.text(&text)
                    + media.iter().map(|m| m.tokens(per_image)).sum::<u32>()
            }
            // Not sent to this provider.
            ContentPart::Thinking { .. }
            | ContentPart::RedactedThinking { .. }
            | ContentPart::Reasoning { .. } => 0,
        }
    }

    /// Adds message framing, tool calls and the answered call id to `body`,
    /// and what the format's adapter adds around them.
    fn framed(
        &self,
        role: Role,
        body: u32,
        is_blank: bool,
        calls: &[ToolCall],
        tool_call_id: Option<&str>,
    ) -> u32 {
        let o = &self.overhead;
        // A format may rewrite an id (hash one it refuses, add `_<n>` to a
        // reused one, n below the 100,000-message thread limit): count the
        // longest it can become.
        let id_tokens = |id: &str| match self.framing.id_growth {
            IdGrowth::HashedSuffix => self.text(&format!(
                "{}_99999",
                super::tool_ids::sent_id(id, super::tool_ids::IdRules::PlainCharset)
            )),
            IdGrowth::Suffix => self.text(&format!("{id}_99999")),
            IdGrowth::Verbatim => self.text(id),
        };
        let mut n = o.per_message + body;
        for c in calls {
            n += o.per_tool_call + self.text(&c.name) + id_tokens(&c.id);
            n += self.text(&serde_json::to_string(&c.arguments).unwrap_or_default());
            if self.framing.wraps_scalar_input && !c.arguments.is_object() {
                n += self.text(VALUE_WRAP);
            }
        }
        if let Some(id) = tool_call_id {
            n += o.per_name + id_tokens(id);
        }
        // Blank content the provider would reject is sent as `(empty)`.
        let filled = match self.framing.blank_filler {
            BlankFiller::Always => true,
            BlankFiller::UserOnly => role == Role::User,
            BlankFiller::Never => false,
        };
        if filled && is_blank && calls.is_empty() {
            n += self.text(super::wire::EMPTY_TEXT);
        }
        n
    }

    /// Tokens of the parts that do not depend on the thread: the system prompt,
    /// the tool schemas and the reply priming (with the `(continuing
    /// conversation)` message a format's adapter may add when a
    /// conversation would open with the assistant).
    pub fn fixed(&self, system: Option<&str>, tools: &[ToolSchema]) -> (u32, u32, u32) {
        let system = system.map_or(0, |s| self.overhead.per_message + self.text(s));
        let tools = if tools.is_empty() {
            0
        } else if self.framing.tools_as_sent {
            // As sent: a tool without parameters gets an empty object schema.
            let sent: Vec<serde_json::Value> =
                tools.iter().map(super::wire::input_schema).collect();
            let schemas = tools
                .iter()
                .zip(&sent)
                .map(|(t, p)| (t.name.as_str(), t.description.as_str(), p));
            count_tool_schemas(|s| self.text(s), schemas) + self.overhead.tools_preamble
        } else {
            count_tool_schemas(|s| self.text(s), tools.iter().map(schema_texts))
                + self.overhead.tools_preamble
        };
        let mut framing = self.overhead.reply_priming;
        if self.framing.continuation {
            framing += self.overhead.per_message + self.text(super::wire::CONTINUATION_TEXT);
        }
        (system, tools, framing)
    }

    /// Tokens of a whole request, by part.
    pub fn request(&self, r: &Request) -> RequestTokens {
        let (system, tools, framing) = self.fixed(r.system.as_deref(), &r.tools);
        let mut t = RequestTokens {
            system,
            tools,
            framing,
            ..Default::default()
        };
        for m in &r.messages {
            let n = self.message(m);
            if m.origin == Origin::Rehydrated {
                t.rehydrated += n;
            } else if m.origin == Origin::Recalled {
                t.recalled += n;
            } else {
                t.messages += n;
            }
        }
        t.total = t.system + t.tools + t.messages + t.rehydrated + t.recalled + t.framing;
        t
    }
}
