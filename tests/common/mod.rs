//! Shared helpers for the core integration tests.
#![allow(dead_code)]

use std::collections::BTreeMap;

use compactd::model::{CompactionPlan, Thread, ToolSchema};
use compactd::reduce::{compact, CompactError, CompactRequest, Compaction, Engine, Memo, Policy};
use compactd::render::{render, RenderInput, Request, RequestCounter, RequestTokens};
use compactd::summarize::ExtractiveSummarizer;
use compactd::tokens::{o200k, TokenLedger};

/// Everything one compaction needs, owned.
pub struct Harness {
    pub counter: std::sync::Arc<dyn compactd::tokens::TokenCounter>,
    pub ledger: TokenLedger,
    pub summarizer: ExtractiveSummarizer,
    pub memo: Memo,
    pub policy: Policy,
    pub system: Option<String>,
    pub tools: Vec<ToolSchema>,
    pub observations: BTreeMap<String, compactd::model::DeterminismMetadata>,
}

impl Default for Harness {
    fn default() -> Self {
        Harness {
            counter: o200k(),
            ledger: TokenLedger::new(100_000),
            summarizer: ExtractiveSummarizer,
            memo: Memo::default(),
            policy: Policy::default(),
            system: Some("You are a helpful agent.".into()),
            tools: Vec::new(),
            observations: BTreeMap::new(),
        }
    }
}

/// A compaction whose artifacts were bound, rendered and counted.
pub struct Outcome {
    pub compaction: Compaction,
    pub request: Request,
    pub tokens: RequestTokens,
}

impl Harness {
    pub fn engine(&self) -> Engine<'_> {
        Engine {
            counter: self.counter.as_ref(),
            ledger: &self.ledger,
            summarizer: &self.summarizer,
            memo: &self.memo,
        }
    }

    pub fn compact(
        &self,
        thread: &Thread,
        max_input_tokens: u32,
        previous: Option<&CompactionPlan>,
    ) -> Result<Outcome, CompactError> {
        let req = CompactRequest {
            thread,
            policy: &self.policy,
            max_input_tokens,
            system: self.system.as_deref(),
            tools: &self.tools,
            previous,
            observations: &self.observations,
            skip_aggressive: false,
            limits: Default::default(),
        };
        let mut c = compact(&req, &self.engine())?;
        // Bind ids the way a store would: random-looking 32 hex digits.
        let ids: BTreeMap<String, String> = c
            .pending
            .iter()
            .enumerate()
            .map(|(i, a)| {
                (
                    a.placeholder.clone(),
                    format!("art_{:032x}", 0x9e3779b97f4a7c15u128 * (i as u128 + 1)),
                )
            })
            .collect();
        let exact = c.bind(&ids, thread, &self.policy.render, &self.engine());
        let request = self.render(thread, &c.plan);
        let tokens = RequestCounter::new(self.counter.as_ref(), &self.ledger).request(&request);
        // The incremental count after binding equals a full recount.
        assert_eq!(
            exact, tokens.total,
            "Compaction::bind count differs from a full count"
        );
        Ok(Outcome {
            compaction: c,
            request,
            tokens,
        })
    }

    pub fn render(&self, thread: &Thread, plan: &CompactionPlan) -> Request {
        render(
            thread,
            plan,
            &RenderInput {
                system: self.system.as_deref(),
                tools: &self.tools,
                rehydrated: &[],
                options: &self.policy.render,
            },
        )
    }
}

/// All text of a request, for "does this fact survive" checks.
pub fn request_text(r: &Request) -> String {
    let mut s = r.system.clone().unwrap_or_default();
    for m in &r.messages {
        s.push('\n');
        s.push_str(&m.content.text());
    }
    s
}

use compactd::model::{
    Content, Durability, Message, MessageMetadata, Outcome as ToolOutcomeKind, Role, ToolCall,
    ToolContent, ToolResultEnvelope,
};

/// Builds canonical threads by hand: one `turn()` per user message.
#[derive(Default)]
pub struct ThreadBuilder {
    messages: Vec<Message>,
    turn: u32,
    calls: u32,
}

impl ThreadBuilder {
    fn push(&mut self, role: Role, content: &str) -> &mut Message {
        let id = format!("m{}", self.messages.len());
        self.messages.push(Message {
            id,
            role,
            content: Content::Text(content.to_string()),
            tool_calls: vec![],
            tool_result: None,
            turn: self.turn,
            metadata: MessageMetadata::default(),
        });
        self.messages.last_mut().unwrap()
    }

    pub fn system(&mut self, text: &str) -> &mut Self {
        self.push(Role::System, text);
        self
    }

    pub fn user(&mut self, text: &str) -> &mut Self {
        self.turn += 1;
        self.push(Role::User, text);
        self
    }

    pub fn protected_user(&mut self, text: &str) -> &mut Self {
        self.turn += 1;
        self.push(Role::User, text).metadata.protected = true;
        self
    }

    pub fn assistant(&mut self, text: &str) -> &mut Self {
        self.push(Role::Assistant, text);
        self
    }

    /// An assistant call and its result in one go; returns the call id.
    pub fn tool(
        &mut self,
        name: &str,
        args: serde_json::Value,
        output: ToolContent,
        outcome: ToolOutcomeKind,
        durability: Option<Durability>,
    ) -> String {
        self.calls += 1;
        let call_id = format!("call_{}", self.calls);
        self.push(Role::Assistant, "").tool_calls.push(ToolCall {
            id: call_id.clone(),
            name: name.into(),
            arguments: args,
        });
        let m = self.push(Role::Tool, "");
        m.content = Content::default();
        m.tool_result = Some(ToolResultEnvelope {
            tool_name: name.into(),
            tool_call_id: call_id.clone(),
            outcome,
            content: output,
            key_fields: Default::default(),
            durability,
            determinism: None,
            started_at: None,
            completed_at: None,
        });
        call_id
    }

    /// The last message, for tweaks.
    pub fn last(&mut self) -> &mut Message {
        self.messages.last_mut().unwrap()
    }

    pub fn build(&self, id: &str) -> Thread {
        Thread {
            id: id.into(),
            messages: self.messages.clone(),
        }
    }
}

/// `lines` lines of log-like text (about 20 tokens a line).
pub fn log_lines(lines: usize) -> String {
    (0..lines)
        .map(|i| {
            format!(
                "2026-01-01T00:00:{:02} INFO worker {i} processed batch ok",
                i % 60
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}
