//! Deterministic synthetic agent threads for tests, benchmarks and demos:
//! dialogue with stated constraints, tool calls with small and very large
//! outputs (search, file reads, queries, API calls), failures and protected
//! messages. Same parameters, same thread.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::rng::Rng;
use compactd::model::{
    Content, Durability, Message, MessageMetadata, Outcome, Role, Thread, ToolCall, ToolContent,
    ToolResultEnvelope,
};

/// Shape of a generated thread.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SynthParams {
    /// RNG seed.
    pub seed: u64,
    /// Number of user turns.
    pub turns: u32,
    /// Chance (0..=1) that an assistant turn calls tools.
    pub tool_density: f64,
    /// Largest tool output, in lines (big outputs are what compaction is for).
    pub max_output_lines: u32,
    /// Number of protected messages sprinkled in.
    pub protected: u32,
}

impl Default for SynthParams {
    fn default() -> Self {
        SynthParams {
            seed: 7,
            turns: 20,
            tool_density: 0.6,
            max_output_lines: 400,
            protected: 1,
        }
    }
}

const TOPICS: &[&str] = &[
    "the billing service",
    "the login flow",
    "the data pipeline",
    "the search index",
    "the deployment scripts",
    "the reporting dashboard",
    "the payment webhook",
    "the cache layer",
];
const WORDS: &[&str] = &[
    "config",
    "latency",
    "retry",
    "schema",
    "migration",
    "endpoint",
    "timeout",
    "queue",
    "handler",
    "token",
    "region",
    "replica",
    "metric",
    "alert",
    "budget",
    "release",
];
/// Constraints the generator states early; tests check they survive compaction.
pub const CONSTRAINTS: &[&str] = &[
    "The user prefers Python for all scripts.",
    "The budget is $1000 for this project.",
    "Never delete production data.",
];

fn sentence(rng: &mut Rng, n: usize) -> String {
    let mut s = String::new();
    for i in 0..n {
        if i > 0 {
            s.push(' ');
        }
        s.push_str(rng.pick(WORDS));
    }
    s
}

/// Generates a thread.
pub fn thread(p: &SynthParams) -> Thread {
    let mut rng = Rng::new(p.seed);
    let mut messages = Vec::new();
    let mut id = 0usize;
    let mut next_id = || {
        id += 1;
        format!("msg-{id:05}")
    };
    let mut call_n = 0usize;
    messages.push(Message {
        id: next_id(),
        role: Role::Developer,
        content: Content::Text(
            "You are a careful engineering agent. Follow the user's constraints.".into(),
        ),
        tool_calls: vec![],
        tool_result: None,
        turn: 0,
        metadata: MessageMetadata::default(),
    });
    let mut protected_left = p.protected;
    for turn in 1..=p.turns {
        let topic = rng.pick(TOPICS);
        let mut text = format!(
            "Please look at {topic} and check the {}.",
            sentence(&mut rng, 3)
        );
        if turn as usize <= CONSTRAINTS.len() {
            text = format!("{} {text}", CONSTRAINTS[turn as usize - 1]);
        }
        let protect = protected_left > 0 && (turn == 2 || rng.chance(0.05));
        if protect {
            protected_left -= 1;
        }
        messages.push(Message {
            id: next_id(),
            role: Role::User,
            content: Content::Text(text),
            tool_calls: vec![],
            tool_result: None,
            turn,
            metadata: MessageMetadata {
                protected: protect,
                ..Default::default()
            },
        });
        if rng.chance(p.tool_density) {
            let ncalls = 1 + rng.below(2) as usize;
            let mut calls = Vec::new();
            let mut results = Vec::new();
            for _ in 0..ncalls {
                call_n += 1;
                let call_id = format!("call_{call_n:05}");
                let (name, args, content, durability, outcome) = tool_output(&mut rng, p, topic);
                calls.push(ToolCall {
                    wire: None,
                    id: call_id.clone(),
                    name: name.to_string(),
                    arguments: args,
                });
                let mut key_fields = BTreeMap::new();
                if name == "create_ticket" {
                    key_fields.insert("ticket_id".into(), json!(format!("T-{call_n}")));
                }
                results.push((call_id, name, content, durability, outcome, key_fields));
            }
            messages.push(Message {
                id: next_id(),
                role: Role::Assistant,
                content: Content::Text(format!("I'll check {topic} first.")),
                tool_calls: calls,
                tool_result: None,
                turn,
                metadata: MessageMetadata::default(),
            });
            for (call_id, name, content, durability, outcome, key_fields) in results {
                messages.push(Message {
                    id: next_id(),
                    role: Role::Tool,
                    content: Content::default(),
                    tool_calls: vec![],
                    tool_result: Some(ToolResultEnvelope {
                        wire: None,
                        tool_name: name.to_string(),
                        tool_call_id: call_id,
                        outcome,
                        content,
                        key_fields,
                        durability,
                        determinism: None,
                        started_at: None,
                        completed_at: None,
                    }),
                    turn,
                    metadata: MessageMetadata::default(),
                });
            }
        }
        let reply = format!(
            "Done with {topic}. We will keep the {} because it reduces {}. Next step: verify the {}.",
            rng.pick(WORDS),
            rng.pick(WORDS),
            sentence(&mut rng, 2)
        );
        messages.push(Message {
            id: next_id(),
            role: Role::Assistant,
            content: Content::Text(reply),
            tool_calls: vec![],
            tool_result: None,
            turn,
            metadata: MessageMetadata::default(),
        });
    }
    Thread::new(format!("synth-{}", p.seed), messages)
}

type ToolOut = (
    &'static str,
    Value,
    ToolContent,
    Option<Durability>,
    Outcome,
);

fn tool_output(rng: &mut Rng, p: &SynthParams, topic: &str) -> ToolOut {
    let lines = 1 + rng.below(u64::from(p.max_output_lines.max(1))) as usize;
    match rng.below(6) {
        0 => {
            let n = 3 + rng.below(12) as usize;
            let results: Vec<Value> = (0..n)
                .map(|i| {
                    json!({
                        "title": format!("Result {i} about {topic}"),
                        "url": format!("https://docs.example.com/{i}"),
                        "snippet": sentence(rng, 30),
                        "body": sentence(rng, lines.min(200)),
                    })
                })
                .collect();
            (
                "web_search",
                json!({"query": topic}),
                ToolContent::json(Value::Array(results)),
                Some(Durability::NonReplayable),
                Outcome::Success,
            )
        }
        1 => {
            let body: Vec<String> = (0..lines)
                .map(|i| match i % 40 {
                    0 => format!("def handler_{i}(event):"),
                    _ => format!(
                        "    {} = {}  # {}",
                        rng.pick(WORDS),
                        rng.below(1000),
                        sentence(rng, 4)
                    ),
                })
                .collect();
            (
                "read_file",
                json!({"path": format!("src/{}.py", rng.pick(WORDS))}),
                ToolContent::Text(body.join("\n")),
                Some(Durability::Replayable),
                Outcome::Success,
            )
        }
        2 => {
            let rows: Vec<Value> = (0..lines)
                .map(|i| json!({"id": i, "name": rng.pick(WORDS), "value": rng.below(10_000)}))
                .collect();
            (
                "sql_query",
                json!({"sql": "select id, name, value from items"}),
                ToolContent::json(Value::Array(rows)),
                None,
                Outcome::Success,
            )
        }
        3 => (
            "create_ticket",
            json!({"title": format!("Fix {topic}")}),
            ToolContent::json(
                json!({"status": 201, "id": format!("T-{}", rng.below(9999)), "detail": sentence(rng, 20)}),
            ),
            Some(Durability::Anchoring),
            Outcome::Success,
        ),
        4 => (
            "run_tests",
            json!({"target": topic}),
            ToolContent::Text(format!(
                "Error: {} failed\n{}",
                rng.pick(WORDS),
                sentence(rng, 20)
            )),
            Some(Durability::Ephemeral),
            Outcome::Failure,
        ),
        _ => {
            let body: Vec<String> = (0..lines).map(|_| sentence(rng, 8)).collect();
            (
                "list_logs",
                json!({"service": topic}),
                ToolContent::Text(body.join("\n")),
                Some(Durability::Ephemeral),
                Outcome::Success,
            )
        }
    }
}
