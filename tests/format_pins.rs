//! Pins what every wire format renders and counts, byte for byte: each log
//! of `tests/data/` in every output format (and the neutral request counted
//! for an OpenAI, a Claude and an unknown model), whole and at a tenth of
//! its size, as a digest of the body and its exact token count by part.
//! A refactoring of the provider layer must leave this snapshot unchanged;
//! a change of what is sent or counted shows here first, by cell.

use crate::common;

use compactd::provider::Format;
use std::fmt::Write as _;

use common::Harness;
use compactd::app::RenderedOutput;
use compactd::model::ToolSchema;
use compactd::provider::thread_from_json;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// The cells: a format and the model it is counted for.
const CELLS: [(Format, &str); 6] = [
    (Format::OpenAiChat, "gpt-4o"),
    (Format::AnthropicMessages, "claude-sonnet-4-5"),
    (Format::OpenAiResponses, "gpt-4o"),
    (Format::Neutral, "gpt-4o"),
    (Format::Neutral, "claude-sonnet-4-5"),
    (Format::Neutral, "gemini-2.5-pro"),
];

fn harness() -> Harness {
    let mut h = Harness::default();
    // Tools with an object and a scalar schema: the formats frame both.
    h.tools = vec![
        ToolSchema {
            name: "read_file".into(),
            description: "Reads a file of the workspace.".into(),
            parameters: json!({
                "type": "object",
                "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}},
                "required": ["path"]
            }),
        },
        ToolSchema {
            name: "run".into(),
            description: String::new(),
            parameters: json!({"type": "string"}),
        },
    ];
    h
}

fn digest(text: &str) -> String {
    let hash = Sha256::digest(text.as_bytes());
    hash.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

#[test]
fn every_format_renders_and_counts_the_real_logs_as_pinned() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data");
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("tests/data")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json") && n != "sources.json")
        .collect();
    names.sort();
    assert!(
        names.len() >= 4,
        "the real logs are missing from tests/data"
    );
    let h = harness();
    let mut out = String::new();
    for name in names {
        let text = std::fs::read_to_string(format!("{dir}/{name}")).expect("readable");
        let value: Value = serde_json::from_str(&text).expect("JSON");
        let thread = thread_from_json(&value, name.trim_end_matches(".json"))
            .unwrap_or_else(|e| panic!("{name} imports: {e}"))
            .thread;
        for (format, model) in CELLS {
            let render = |budget: u32| {
                h.render_as(&thread, budget, None, format, Some(model))
                    .unwrap_or_else(|e| panic!("{name} as {format:?} for {model}: {e}"))
                    .1
            };
            let whole = render(10_000_000);
            let tenth = (whole.tokens.total / 10).max(8_000);
            for (label, r) in [("whole", whole), ("tenth", render(tenth))] {
                let body = match &r.output {
                    RenderedOutput::Payload(json) => json.clone(),
                    RenderedOutput::Neutral(request) => {
                        serde_json::to_string(request).expect("a request serializes")
                    }
                };
                let t = r.tokens;
                let _ = writeln!(
                    out,
                    "{name} {format:?} {model} {label}: body {} tokens {} = system {} + tools {} + messages {} + framing {}; fingerprint {}",
                    digest(&body),
                    t.total,
                    t.system,
                    t.tools,
                    t.messages,
                    t.framing,
                    digest(&r.plan.fingerprint),
                );
            }
        }
    }
    insta::assert_snapshot!("format_pins", out);
}
