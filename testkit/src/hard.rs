//! Threads shaped like the ones that break compactors: a user typing while a
//! tool runs, up to 8 parallel calls answered in any order, call ids reused
//! every turn, calls still awaiting approval, images (some of types no
//! provider takes) and multipart messages, instructions arriving mid-thread,
//! thinking blocks and reasoning items, failures, and outputs large enough to
//! force every reducer. Same parameters, same thread; phrasing is drawn from
//! several vocabularies so no test depends on one wording.

use serde_json::json;

use crate::rng::Rng;

use compactd::model::{
    Content, ContentPart, Dialect, Durability, Message, MessageMetadata, Outcome, ProviderPart,
    Role, Thread, ToolCall, ToolContent, ToolResultEnvelope,
};

/// A provider part of `dialect`.
fn carried(dialect: Dialect, kind: &str, v: serde_json::Value) -> ContentPart {
    ContentPart::Provider(ProviderPart::new(dialect, kind, &v))
}

/// What a generated thread may contain.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HardParams {
    /// RNG seed.
    pub seed: u64,
    /// User turns.
    pub turns: u32,
    /// Most parallel calls in one assistant message (1 to 8).
    pub max_parallel: u32,
    /// Chance that a user message arrives between a call and its results.
    pub interleave: f64,
    /// Chance that the thread ends with calls still waiting for a result.
    pub pending: f64,
    /// Chance that a user message carries images.
    pub images: f64,
    /// Chance that a system or developer instruction arrives in a turn.
    pub mid_instructions: f64,
    /// Chance that an assistant message carries thinking or reasoning.
    pub thinking: f64,
    /// Chance that a turn reuses the previous turn's call ids.
    pub reuse_ids: f64,
    /// Chance that a tool fails.
    pub failures: f64,
    /// Largest tool output, in lines.
    pub max_output_lines: u32,
}

impl Default for HardParams {
    fn default() -> Self {
        HardParams {
            seed: 1,
            turns: 12,
            max_parallel: 8,
            interleave: 0.2,
            pending: 0.3,
            images: 0.2,
            mid_instructions: 0.15,
            thinking: 0.3,
            reuse_ids: 0.3,
            failures: 0.15,
            max_output_lines: 300,
        }
    }
}

const ASKS: &[&[&str]] = &[
    &[
        "Could you look into",
        "Please check",
        "Have a look at",
        "Dig into",
    ],
    &["why", "whether", "how", "when"],
    &[
        "the invoice export stalls",
        "the staging cluster drifted",
        "the nightly backfill skipped rows",
        "the webhook retries pile up",
        "our p99 latency doubled",
        "the cache hit rate dropped",
    ],
];
const INTERJECTIONS: &[&str] = &[
    "Oh, and use the blue pool.",
    "wait, also check the tests folder",
    "(sorry: I meant orders_v2, not orders)",
    "Quick note: production is off limits today.",
];
const INSTRUCTIONS: &[&str] = &[
    "From now on, answer in German.",
    "Keep every answer under five sentences.",
    "Do not run anything that writes to production.",
    "Cite the file path for every claim.",
];
const TOOLS: &[&str] = &[
    "read_file",
    "sql_query",
    "http_get",
    "shell",
    "search_docs",
    "list_pods",
];
const ERRORS: &[&str] = &[
    r#"{"status":"error","error":"quota exceeded for region eu-west-3 (code Q9)"}"#,
    "Error: ENOENT: no such file or directory, open 'config/prod.yaml'",
    r#"{"ok":false,"error":{"message":"permission denied for role analyst"}}"#,
    "fatal: not a git repository (or any of the parent directories): .git",
];
const IMAGES: &[&str] = &[
    "https://dashboards.example.com/p99.png",
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==",
    "data:image/svg+xml;base64,PHN2ZyB4bWxucz0iaHR0cDovL3d3dy53My5vcmcvMjAwMC9zdmciLz4=",
];

const STATES: [&str; 3] = ["open", "paid", "void"];

fn output(rng: &mut Rng, tool: &str, lines: u32) -> ToolContent {
    match tool {
        "sql_query" => ToolContent::json(json!({
            "rows": (0..lines.min(120)).map(|i| json!({"id": i, "state": STATES[i as usize % 3], "amount": (i * 37) % 1000})).collect::<Vec<_>>(),
            "row_count": lines,
        })),
        "http_get" => ToolContent::json(
            json!({"status": 200, "request_id": format!("req_{}", rng.next() % 100_000), "body": "x".repeat(lines as usize % 400)}),
        ),
        _ => ToolContent::Text(
            (0..lines)
                .map(|i| {
                    format!(
                        "{i:05} {} worker-{} step {} ok\n",
                        rng.pick(&["INFO", "DEBUG", "WARN"]),
                        i % 7,
                        (i * 31) % 997
                    )
                })
                .collect(),
        ),
    }
}

/// A generated thread; valid by construction.
pub fn thread(p: &HardParams) -> Thread {
    let mut rng = Rng::new(p.seed);
    let mut messages: Vec<Message> = Vec::new();
    let push = |messages: &mut Vec<Message>, role: Role, content: Content, turn: u32| {
        messages.push(Message {
            id: format!("m{}", messages.len()),
            role,
            content,
            tool_calls: Vec::new(),
            tool_result: None,
            turn,
            metadata: MessageMetadata::default(),
        });
        messages.len() - 1
    };
    let system = push(
        &mut messages,
        Role::System,
        Content::Text("You are an operations agent.".into()),
        0,
    );
    messages[system].metadata.protected = rng.chance(0.5);
    let mut call_n = 0u32;
    let mut previous_ids: Vec<String> = Vec::new();
    for turn in 1..=p.turns {
        let ask = format!(
            "{} {} {}?",
            rng.pick(ASKS[0]),
            rng.pick(ASKS[1]),
            rng.pick(ASKS[2])
        );
        let content = if rng.chance(p.images) {
            let mut parts = vec![ContentPart::Text { text: ask }];
            for _ in 0..=rng.below(2) {
                parts.push(ContentPart::Image {
                    url: rng.pick(IMAGES).to_string(),
                });
            }
            Content::Parts(parts)
        } else if rng.chance(p.images) {
            // A caller's cache breakpoint: an Anthropic block carried as it
            // came (its text goes to every format).
            Content::Parts(vec![carried(
                Dialect::AnthropicMessages,
                "text",
                json!({"type": "text", "text": ask, "cache_control": {"type": "ephemeral"}}),
            )])
        } else {
            Content::Text(ask)
        };
        push(&mut messages, Role::User, content, turn);
        if rng.chance(p.mid_instructions) {
            let role = if rng.chance(0.5) {
                Role::System
            } else {
                Role::Developer
            };
            push(
                &mut messages,
                role,
                Content::Text(rng.pick(INSTRUCTIONS).into()),
                turn,
            );
        }
        let last = turn == p.turns;
        let k = 1 + rng.below(u64::from(p.max_parallel.clamp(1, 8))) as usize;
        let reuse = rng.chance(p.reuse_ids) && previous_ids.len() >= k;
        let ids: Vec<String> = if reuse {
            previous_ids[..k].to_vec()
        } else {
            (0..k)
                .map(|_| {
                    call_n += 1;
                    format!("call_{call_n}")
                })
                .collect()
        };
        previous_ids.clone_from(&ids);
        let mut content = Content::Text(
            rng.pick(&["Checking.", "", "Let me look.", "On it."])
                .into(),
        );
        if rng.chance(p.thinking) {
            let mut parts = if rng.chance(0.5) {
                vec![ContentPart::Thinking {
                    thinking: format!("Plan: call {k} tools, then compare.\r\nEdge case: \u{2028} and \"quotes\"."),
                    signature: format!("c2ln{}", rng.next() % 1_000_000),
                }]
            } else {
                vec![ContentPart::Reasoning {
                    rest: None,
                    id: format!("rs_{}", rng.next() % 1_000_000),
                    summary: vec!["Query first, then explain.".into()],
                    encrypted_content: Some(format!("gAAAA{}", rng.next())),
                }]
            };
            if let Content::Text(t) = content {
                if !t.is_empty() {
                    // Now and then as the Responses API returns it: an item
                    // with its id, status and annotations, carried.
                    parts.push(if rng.chance(0.5) {
                        carried(
                            Dialect::OpenAiResponses,
                            "message",
                            json!({"type": "message", "role": "assistant", "id": format!("msg_{turn}"),
                                   "status": "completed",
                                   "content": [{"type": "output_text", "text": t, "annotations": []}]}),
                        )
                    } else {
                        ContentPart::Text { text: t }
                    });
                }
            }
            content = Content::Parts(parts);
        }
        let a = push(&mut messages, Role::Assistant, content, turn);
        let names: Vec<&str> = (0..k).map(|_| rng.pick(TOOLS)).collect();
        for (j, id) in ids.iter().enumerate() {
            let arguments = json!({"target": format!("t{turn}-{j}")});
            // Now and then a Responses call with its item id and status.
            let wire = rng.chance(p.thinking).then(|| {
                Box::new(ProviderPart::new(
                    Dialect::OpenAiResponses,
                    "function_call",
                    &json!({"type": "function_call", "id": format!("fc_{turn}_{j}"), "call_id": id,
                            "name": names[j], "arguments": arguments.to_string(), "status": "completed"}),
                ))
            });
            messages[a].tool_calls.push(ToolCall {
                wire,
                id: id.clone(),
                name: names[j].into(),
                arguments,
            });
        }
        // The last turn may stop with calls still waiting.
        let answered = if last && rng.chance(p.pending) {
            rng.below(k as u64) as usize
        } else {
            k
        };
        let mut order: Vec<usize> = (0..answered).collect();
        rng.shuffle(&mut order);
        let interject_at = rng
            .chance(p.interleave)
            .then(|| rng.below(answered as u64 + 1) as usize);
        for (pos, &j) in order.iter().enumerate() {
            if interject_at == Some(pos) {
                push(
                    &mut messages,
                    Role::User,
                    Content::Text(rng.pick(INTERJECTIONS).into()),
                    turn,
                );
            }
            let failed = rng.chance(p.failures);
            let lines = 1 + rng.below(u64::from(p.max_output_lines.max(1))) as u32;
            let content = if failed {
                ToolContent::Text(rng.pick(ERRORS).into())
            } else {
                output(&mut rng, names[j], lines)
            };
            let r = push(&mut messages, Role::Tool, Content::default(), turn);
            messages[r].tool_result = Some(ToolResultEnvelope {
                wire: None,
                tool_name: names[j].into(),
                tool_call_id: ids[j].clone(),
                outcome: if failed {
                    Outcome::Failure
                } else {
                    Outcome::Success
                },
                content,
                key_fields: Default::default(),
                durability: [
                    None,
                    Some(Durability::Ephemeral),
                    Some(Durability::NonReplayable),
                ][rng.below(3) as usize],
                determinism: None,
                started_at: None,
                completed_at: None,
            });
        }
        if interject_at == Some(order.len()) && answered > 0 {
            push(
                &mut messages,
                Role::User,
                Content::Text(rng.pick(INTERJECTIONS).into()),
                turn,
            );
        }
        if answered == k && !last {
            push(
                &mut messages,
                Role::Assistant,
                Content::Text(format!(
                    "Turn {turn}: {}",
                    rng.pick(&["all clear", "found the cause", "needs a retry", "fixed"])
                )),
                turn,
            );
        }
    }
    Thread::new(format!("hard-{}", p.seed), messages)
}

/// True when the thread has a call without a result.
pub fn has_pending(t: &Thread) -> bool {
    t.pairing().pending().next().is_some()
}
