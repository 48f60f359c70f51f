//! Public agent logs nobody here wrote (`tests/data/`: a Claude Code
//! session, also as an Anthropic body; an OpenHands run; a SWE-agent run; a
//! tau-bench episode), each at 1/4, 1/10 and 1/40 of its size (never below
//! 8,000 tokens) in every output format: a body every time, valid for its
//! provider, within budget, at least 90% of the target when compaction ran,
//! every request a person typed still in the prompt, and the same bytes on
//! a second run.

use crate::common;

use compactd::provider::Format;
use std::collections::BTreeSet;

use common::Harness;
use compactd::app::RenderedOutput;
use compactd::model::{Role, Thread};
use compactd::provider::thread_from_json;
use compactd::provider::{anthropic, openai_chat, openai_responses};
use serde_json::Value;

/// The logs of `tests/data/` (not `sources.json`), with their threads.
fn logs() -> Vec<(String, Thread)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("tests/data") {
        let path = entry.expect("entry").path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.ends_with(".json") || name == "sources.json" {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("readable");
        let value: Value = serde_json::from_str(&text).expect("JSON");
        let input = thread_from_json(&value, name.trim_end_matches(".json"))
            .unwrap_or_else(|e| panic!("{name} imports: {e}"));
        out.push((name, input.thread));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(out.len() >= 4, "the real logs are missing from tests/data");
    out
}

/// Whitespace collapsed, for "is this text in the prompt" checks.
fn squash(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Every string in a JSON value, joined: the prompt's text in any format.
fn strings(v: &Value, out: &mut String) {
    match v {
        Value::String(s) => {
            out.push_str(s);
            out.push('\n');
        }
        Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
        Value::Object(m) => m.values().for_each(|x| strings(x, out)),
        _ => {}
    }
}

/// The log's size as the OpenAI body counts it.
fn whole_tokens(name: &str, thread: &Thread) -> u32 {
    Harness::default()
        .render_as(thread, 10_000_000, None, Format::OpenAiChat, None)
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .1
        .tokens
        .total
}

fn model(format: Format) -> &'static str {
    match format {
        Format::AnthropicMessages => "claude-sonnet-4-5",
        _ => "gpt-4o",
    }
}

#[test]
fn every_real_log_renders_valid_within_budget_at_every_size_and_format() {
    let formats = [
        Format::OpenAiChat,
        Format::AnthropicMessages,
        Format::OpenAiResponses,
    ];
    let mut compacted = 0;
    for (name, thread) in logs() {
        let whole = whole_tokens(&name, &thread);
        let budgets: BTreeSet<u32> = [4, 10, 40].iter().map(|d| (whole / d).max(8_000)).collect();
        // What a person typed (the last user message stays verbatim; the
        // earlier ones are quoted in a summary when they leave).
        let typed: Vec<String> = thread
            .messages
            .iter()
            .filter(|m| m.role == Role::User && m.tool_result.is_none())
            .map(|m| {
                squash(&m.content.text())
                    .chars()
                    .take(200)
                    .collect::<String>()
            })
            .filter(|t| !t.is_empty())
            .collect();
        for &budget in &budgets {
            for format in formats {
                let cell = format!("{name} at {budget} as {format:?}");
                let render = || {
                    Harness::default()
                        .render_as(&thread, budget, None, format, Some(model(format)))
                        .unwrap_or_else(|e| panic!("{cell}: refused: {e}"))
                        .1
                };
                let out = render();
                let RenderedOutput::Payload(json) = &out.output else {
                    panic!("{cell}: a payload was asked for")
                };
                let body: Value = serde_json::from_str(json).expect("JSON body");
                match format {
                    Format::OpenAiChat => openai_chat::check_pairing(&body),
                    Format::AnthropicMessages => anthropic::check_structure(&body),
                    _ => openai_responses::check_structure(&body),
                }
                .unwrap_or_else(|e| panic!("{cell}: invalid body: {e}"));
                assert!(
                    out.tokens.total <= budget,
                    "{cell}: {} tokens",
                    out.tokens.total
                );
                let report = out
                    .compaction
                    .as_ref()
                    .and_then(|c| c.report.clone())
                    .expect("a fresh tenant compacts");
                if report.triggered {
                    compacted += 1;
                    assert!(
                        report.target_use() >= 0.9,
                        "{cell}: {} of the target {}",
                        report.tokens_after,
                        report.budget.target
                    );
                }
                let mut text = String::new();
                strings(&body, &mut text);
                let text = squash(&text);
                for t in &typed {
                    assert!(text.contains(t.as_str()), "{cell}: lost {t:?}");
                }
                // Deterministic: the same input gives the same bytes.
                let again = render();
                assert_eq!(again.output, out.output, "{cell}: not deterministic");
            }
        }
    }
    assert!(
        compacted >= 6,
        "only {compacted} cells compacted: the test proves little"
    );
}

/// A per-tier cap on the real logs: with a window well above each log
/// (so the total never triggers), tool output over 30% of it is reduced
/// to the cap's target or a warning says why not, every body stays valid
/// for its provider and within budget, and what a person typed stays
/// verbatim (the tier pass touches tool output only). At least one log is
/// tool-heavy enough to trigger it.
#[test]
fn a_tool_results_cap_on_real_logs_leaves_dialogue_and_valid_bodies() {
    let formats = [
        Format::OpenAiChat,
        Format::AnthropicMessages,
        Format::OpenAiResponses,
    ];
    let mut triggered = 0;
    for (name, thread) in logs() {
        let whole = whole_tokens(&name, &thread);
        let budget = whole + whole / 2;
        let typed: Vec<String> = thread
            .messages
            .iter()
            .filter(|m| m.role == Role::User && m.tool_result.is_none())
            .map(|m| squash(&m.content.text()))
            .filter(|t| !t.is_empty())
            .collect();
        for format in formats {
            let cell = format!("{name} at {budget} as {format:?}");
            let mut h = Harness::default();
            h.policy.tier_caps.tool_results_ratio = Some(0.3);
            let out = h
                .render_as(&thread, budget, None, format, Some(model(format)))
                .unwrap_or_else(|e| panic!("{cell}: refused: {e}"))
                .1;
            let RenderedOutput::Payload(json) = &out.output else {
                panic!("{cell}: a payload was asked for")
            };
            let body: Value = serde_json::from_str(json).expect("JSON body");
            format
                .check(&body)
                .unwrap_or_else(|e| panic!("{cell}: invalid body: {e}"));
            assert!(out.tokens.total <= budget, "{cell}: {}", out.tokens.total);
            let report = out
                .compaction
                .as_ref()
                .and_then(|c| c.report.clone())
                .expect("a fresh tenant compacts");
            let tier = report.budget.tool_results.expect("the cap is reported");
            if report.tier_triggered {
                triggered += 1;
                assert!(
                    tier.tokens_after <= tier.target
                        || report
                            .warnings
                            .iter()
                            .any(|w| w.contains("over their target")),
                    "{cell}: {tier:?} {:?}",
                    report.warnings
                );
                assert!(tier.tokens_after < tier.tokens_before, "{cell}: {tier:?}");
            } else {
                assert!(tier.tokens_before <= tier.cap, "{cell}: {tier:?}");
            }
            let mut text = String::new();
            strings(&body, &mut text);
            let text = squash(&text);
            for t in &typed {
                assert!(
                    text.contains(t.as_str()),
                    "{cell}: lost {:?}",
                    &t[..t.len().min(80)]
                );
            }
        }
    }
    assert!(triggered >= 3, "only {triggered} cells over the cap");
}

/// The real logs with assembled context at 1/4 and 1/10 of their size in
/// every format: bootstrap text with the system prompt, the workspace file
/// whole right after the compacted history (or before the first message of
/// the conversation), the body valid and within budget with both counted.
#[test]
fn real_logs_with_bootstrap_and_workspace_stay_valid_and_within_budget() {
    use compactd::render::{system_with_bootstrap, workspace_message, ContextFile};
    let formats = [
        Format::OpenAiChat,
        Format::AnthropicMessages,
        Format::OpenAiResponses,
    ];
    let workspace_text =
        "Open file: src/lib.rs\nTODO: keep the public API unchanged; the release is on Friday.";
    for (name, thread) in logs() {
        let whole = whole_tokens(&name, &thread);
        for budget in [(whole / 4).max(8_000), (whole / 10).max(8_000)] {
            for format in formats {
                let cell = format!("{name} at {budget} as {format:?}");
                let mut h = Harness::default();
                h.system = system_with_bootstrap(
                    h.system.clone(),
                    &[ContextFile {
                        name: "AGENTS.md".into(),
                        text: "Run the tests before you commit.".into(),
                    }],
                );
                h.workspace = workspace_message(&[ContextFile {
                    name: "notes.md".into(),
                    text: workspace_text.into(),
                }]);
                let out = h
                    .render_as(&thread, budget, None, format, Some(model(format)))
                    .unwrap_or_else(|e| panic!("{cell}: refused: {e}"))
                    .1;
                let RenderedOutput::Payload(json) = &out.output else {
                    panic!("{cell}: a payload was asked for")
                };
                let body: Value = serde_json::from_str(json).expect("JSON body");
                format
                    .check(&body)
                    .unwrap_or_else(|e| panic!("{cell}: invalid body: {e}"));
                assert!(out.tokens.total <= budget, "{cell}: {}", out.tokens.total);
                let mut text = String::new();
                strings(&body, &mut text);
                assert!(text.contains("<bootstrap name=\"AGENTS.md\">"), "{cell}");
                assert!(
                    text.contains(&format!(
                        "<workspace_file name=\"notes.md\">\n{workspace_text}\n</workspace_file>"
                    )),
                    "{cell}: the workspace is not whole"
                );
                let report = out
                    .compaction
                    .as_ref()
                    .and_then(|c| c.report.clone())
                    .expect("a fresh tenant compacts");
                assert!(report.budget.workspace_tokens > 0, "{cell}");
            }
        }
    }
}

/// The extractive summarizer, counting the threads it runs on and saying
/// whether the pipeline may run it ahead.
struct Counting {
    ahead: bool,
    threads: std::sync::Mutex<BTreeSet<String>>,
    /// The threads merges of two summaries ran on.
    merged_on: std::sync::Mutex<BTreeSet<String>>,
}

impl compactd::summarize::Summarizer for Counting {
    fn id(&self) -> &str {
        compactd::summarize::ExtractiveSummarizer.id()
    }

    fn summarize(
        &self,
        req: &compactd::summarize::SummaryRequest<'_>,
    ) -> Result<compactd::model::StructuredSummary, compactd::summarize::SummarizeError> {
        let thread = format!("{:?}", std::thread::current().id());
        if req.messages.is_empty() && req.prior.len() == 2 {
            self.merged_on.lock().expect("lock").insert(thread.clone());
        }
        self.threads.lock().expect("lock").insert(thread);
        compactd::summarize::ExtractiveSummarizer.summarize(req)
    }

    fn may_run_ahead(&self) -> bool {
        self.ahead
    }
}

/// Summaries made ahead on every core (a long thread's chunks, and the
/// merges of their summaries) are the ones the pipeline would make one by
/// one: the same plan, byte for byte, for every real log at small budgets
/// with small chunks (many of them).
#[test]
fn summaries_made_ahead_leave_the_plan_unchanged() {
    use compactd::reduce::{compact, CompactRequest, Engine, Memo};
    let mut h = Harness::default();
    h.policy.summary_chunk_tokens = 600;
    let (mut ran_ahead, mut merged_ahead) = (false, false);
    for (name, thread) in logs() {
        for max_input_tokens in [3_000, 6_000, 12_000, 24_000] {
            let run = |ahead: bool| {
                let summarizer = Counting {
                    ahead,
                    threads: Default::default(),
                    merged_on: Default::default(),
                };
                let memo = Memo::default();
                let engine = Engine {
                    cancel: compactd::reduce::Cancel::never(),
                    redactor: compactd::redact::Redactor::standard(),
                    counter: h.counter.as_ref(),
                    ledger: &h.ledger,
                    summarizer: &summarizer,
                    memo: &memo,
                };
                let req = CompactRequest {
                    thread: &thread,
                    policy: &h.policy,
                    max_input_tokens,
                    system: h.system.as_deref(),
                    tools: &h.tools,
                    workspace: None,
                    previous: None,
                    observations: &h.observations,
                    skip_aggressive: false,
                    limits: Default::default(),
                    target: Format::openai_chat_target(),
                };
                let out = compact(&req, &engine).unwrap_or_else(|e| panic!("{name}: {e}"));
                let threads = summarizer.threads.lock().expect("lock").len();
                let merged_on = summarizer.merged_on.lock().expect("lock").len();
                (
                    serde_json::to_string(&out.plan).expect("plan JSON"),
                    threads,
                    merged_on,
                )
            };
            let (one_by_one, threads, _) = run(false);
            assert!(
                threads <= 1,
                "{name}: summarized on {threads} threads without ahead"
            );
            let (ahead, threads, merged_on) = run(true);
            assert_eq!(
                ahead, one_by_one,
                "{name} at {max_input_tokens}: plans differ"
            );
            ran_ahead |= threads > 1;
            merged_ahead |= merged_on > 1;
        }
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert!(
        cores < 2 || ran_ahead,
        "{cores} cores, yet no summary was made ahead on another thread"
    );
    assert!(
        cores < 2 || merged_ahead,
        "{cores} cores, yet no merge was made ahead on another thread"
    );
}
