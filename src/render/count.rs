//! Exact token accounting of a rendered request, by part. The pipeline counts
//! each message with the same function, so its running total and the final
//! count of the request agree by construction.

use serde::{Deserialize, Serialize};

use crate::model::{Action, Content, ContentPart, Message, Role, ToolCall, ToolSchema};
use crate::tokens::{count_tool_schemas, ChatOverhead, TokenCounter, TokenLedger};

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
    /// Reply priming.
    pub framing: u32,
    /// Everything.
    pub total: u32,
}

/// Counts messages and requests with one tokenizer, through the ledger.
#[derive(Debug, Clone, Copy)]
pub struct RequestCounter<'a> {
    /// The tokenizer.
    pub counter: &'a dyn TokenCounter,
    /// The per-text cache.
    pub ledger: &'a TokenLedger,
    /// Chat framing overhead.
    pub overhead: ChatOverhead,
}

impl<'a> RequestCounter<'a> {
    /// A counter with OpenAI framing.
    pub fn new(counter: &'a dyn TokenCounter, ledger: &'a TokenLedger) -> Self {
        RequestCounter {
            counter,
            ledger,
            overhead: ChatOverhead::openai(),
        }
    }

    /// Tokens of a text, cached.
    pub fn text(&self, text: &str) -> u32 {
        self.ledger.count(self.counter, text)
    }

    /// Tokens of one rendered message including framing.
    pub fn message(&self, m: &RenderedMessage) -> u32 {
        self.framed(
            self.content(&m.content),
            &m.tool_calls,
            m.tool_call_id.as_deref(),
        )
    }

    /// Tokens of thread message `m` rendered verbatim, without building the
    /// rendered message (cloning every message's content dominated warm calls).
    /// Equal to `self.message(&render_message(m, Action::Include, options))`.
    pub fn verbatim(&self, m: &Message, options: &RenderOptions) -> u32 {
        let transformed = (options.delimit_user_content && m.role == Role::User)
            || (options.tool_result_max_chars.is_some() && m.tool_result.is_some());
        if transformed {
            return render_message(m, Action::Include, options).map_or(0, |rm| self.message(&rm));
        }
        let body = match &m.tool_result {
            Some(env) => self.text(&env.content.to_text()),
            None => self.content(&m.content),
        };
        let call_id = m.tool_result.as_ref().map(|e| e.tool_call_id.as_str());
        self.framed(body, &m.tool_calls, call_id)
    }

    /// Tokens of thread message `m` with its content replaced by
    /// `replacement` (a cleared message), without building it. Equal to
    /// counting the message `render_message` gives for a clear record.
    pub fn cleared(&self, m: &Message, replacement: &str) -> u32 {
        let call_id = m.tool_result.as_ref().map(|e| e.tool_call_id.as_str());
        self.framed(self.text(replacement), &m.tool_calls, call_id)
    }

    fn content(&self, c: &Content) -> u32 {
        match c {
            Content::Text(t) => self.text(t),
            Content::Parts(parts) => parts
                .iter()
                .map(|p| match p {
                    ContentPart::Text { text } => self.text(text),
                    ContentPart::Image { .. } => self.overhead.per_image,
                    ContentPart::Thinking { thinking, .. } => {
                        self.overhead.per_block + self.text(thinking)
                    }
                    ContentPart::RedactedThinking { data } => {
                        self.overhead.per_block + self.text(data)
                    }
                    ContentPart::Reasoning {
                        summary,
                        encrypted_content,
                        ..
                    } => {
                        self.overhead.per_block
                            + summary.iter().map(|s| self.text(s)).sum::<u32>()
                            + encrypted_content.as_deref().map_or(0, |e| self.text(e))
                    }
                })
                .sum(),
        }
    }

    /// Adds message framing, tool calls and the answered call id to `body`.
    fn framed(&self, body: u32, calls: &[ToolCall], tool_call_id: Option<&str>) -> u32 {
        let o = &self.overhead;
        let mut n = o.per_message + body;
        for c in calls {
            n += o.per_tool_call + self.text(&c.name) + self.text(&c.id);
            n += self.text(&serde_json::to_string(&c.arguments).unwrap_or_default());
        }
        if let Some(id) = tool_call_id {
            n += o.per_name + self.text(id);
        }
        n
    }

    /// Tokens of the parts that do not depend on the thread: the system prompt,
    /// the tool schemas and the reply priming.
    pub fn fixed(&self, system: Option<&str>, tools: &[ToolSchema]) -> (u32, u32, u32) {
        let system = system.map_or(0, |s| self.overhead.per_message + self.text(s));
        let tools = if tools.is_empty() {
            0
        } else {
            count_tool_schemas(self.counter, tools)
        };
        (system, tools, self.overhead.reply_priming)
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
            } else {
                t.messages += n;
            }
        }
        t.total = t.system + t.tools + t.messages + t.rehydrated + t.framing;
        t
    }
}
