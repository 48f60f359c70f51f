//! The offline `compactd compact` and the service run the same use cases:
//! for the same thread, policy and model they render byte-identical requests.
//! Artifact ids are the one thing that differs by design (random in the
//! service, derived from the content offline), so the service's ids are
//! mapped to the offline ones before comparing.

use crate::server_common;

use std::process::Command;

use serde_json::Value;
use server_common::*;

use compactd::proto::pb;
use compactd::provider::thread_from_json;
use compactd::render::RenderedMessage;

const MODEL: &str = "gpt-4o";
const STATES: [&str; 3] = ["open", "paid", "disputed"];

/// `compactd compact` run as a user would; its JSON document.
fn offline(input: &str, max_input_tokens: u32, format: &str) -> Value {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_compactd"));
    cmd.args([
        "compact",
        "--input",
        input,
        "--model",
        MODEL,
        "--max-input-tokens",
        &max_input_tokens.to_string(),
        "--format",
        format,
    ]);
    // Same policy as the test server: no settings from the environment.
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("COMPACTD")) {
        cmd.env_remove(k);
    }
    let out = cmd.output().expect("run compactd");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON document")
}

/// A support thread whose early database export is too large to keep and
/// cannot be replayed: the pipeline externalizes it.
fn export_thread() -> Value {
    let rows: Vec<Value> = (0..400)
        .map(|i| {
            serde_json::json!({
                "invoice": format!("INV-{:05}", 7000 + i),
                "customer": format!("cust-{}", i * 37 % 211),
                "amount_eur": (i * 113 % 9000) as f64 / 7.0,
                "state": STATES[i % 3],
            })
        })
        .collect();
    serde_json::json!({
        "id": "billing-7",
        "system": "You help the billing team reconcile invoices.",
        "messages": [
            {"id": "u1", "role": "user", "turn": 1, "content": "Export every open invoice from the ledger, then tell me which ones are disputed."},
            {"id": "a1", "role": "assistant", "turn": 1, "tool_calls": [
                {"id": "exp1", "name": "ledger_export", "arguments": {"filter": "all", "format": "json"}}
            ]},
            {"id": "t1", "role": "tool", "turn": 1, "tool_result": {
                "tool_name": "ledger_export", "tool_call_id": "exp1", "content": rows,
                "durability": "non_replayable", "key_fields": {"export_id": "EXP-551"}
            }},
            {"id": "a2", "role": "assistant", "turn": 1, "content": "The export finished: 400 invoices, 133 of them disputed."},
            {"id": "u2", "role": "user", "turn": 2, "content": "Which customer has the most disputed invoices?"},
            {"id": "a3", "role": "assistant", "turn": 2, "content": "cust-74 has the most, with 4 disputed invoices."}
        ]
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offline_and_server_render_identical_requests() {
    let dir = tempfile::tempdir().unwrap();
    let export = dir.path().join("billing-7.json");
    std::fs::write(&export, export_thread().to_string()).unwrap();
    let cases = [
        // Both name artifacts: evictions are archived, and billing-7 also
        // names_artifacts its non-replayable result.
        ("examples/threads/incident.json".to_string(), 7000, true),
        (export.display().to_string(), 4000, true),
    ];
    let server = TestServer::start().await;
    for (input, max_input_tokens, names_artifacts) in cases {
        same_requests(&server, &input, max_input_tokens, names_artifacts).await;
    }
}

async fn same_requests(
    server: &TestServer,
    path: &str,
    max_input_tokens: u32,
    names_artifacts: bool,
) {
    let value: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let input = thread_from_json(&value, "thread").expect("thread");
    let mut client = server.client().await;
    // A data block's id hashes its text, so a block that names an artifact
    // gets another id when the artifact id differs.
    let block_id = regex::Regex::new(r"tool_output id=[0-9a-f]{16}").expect("regex");
    for (format, wire) in [
        ("openai", pb::OutputFormat::OpenaiChat),
        ("anthropic", pb::OutputFormat::AnthropicMessages),
        ("neutral", pb::OutputFormat::Neutral),
    ] {
        let doc = offline(path, max_input_tokens, format);
        let request = pb::RenderRequest {
            thread: Some(pb::Thread::from(&input.thread)),
            compact_first: true,
            system_prompt: input.system.clone(),
            tools: input.tools.iter().map(Into::into).collect(),
            format: wire as i32,
            model: MODEL.into(),
            max_input_tokens,
            ..Default::default()
        };
        // Plans are counted for their format's provider: each format starts
        // from no plan, as the offline run does (its own tenant).
        let tok = token(&format!("acme-{format}"), ALL);
        let out = within(client.render(authed(request, &tok)))
            .await
            .expect("render")
            .into_inner();
        let compaction = out.compaction.as_ref().expect("compact_first reports");
        let offline_ids: Vec<String> = doc["report"]["artifacts"]
            .as_array()
            .expect("artifact list")
            .iter()
            .map(|a| a["artifact_id"].as_str().expect("id").to_string())
            .collect();
        assert_eq!(compaction.new_artifact_ids.len(), offline_ids.len());
        let ids: Vec<(String, String)> = compaction
            .new_artifact_ids
            .iter()
            .cloned()
            .zip(offline_ids)
            .collect();
        assert!(
            compaction.tokens_after < compaction.tokens_before,
            "{path}: the thread must be compacted for this test to mean anything"
        );
        assert_eq!(!ids.is_empty(), names_artifacts, "{path}: {ids:?}");
        let blocks = |text: &str| block_id.replace_all(text, "tool_output id=N").into_owned();
        let as_offline = |text: &str| {
            blocks(&ids.iter().fold(text.to_string(), |t, (server, offline)| {
                t.replace(server, offline)
            }))
        };

        // The plan and the token accounting agree. An artifact id is part of
        // the rendered pointer, and two ids need not tokenize alike, so with
        // artifacts the exact totals may differ by a few tokens.
        let tokens = out.tokens.as_ref().expect("tokens");
        let offline_total = doc["report"]["tokens_after"].as_u64().unwrap();
        let limit = doc["report"]["budget"]["hard_limit"].as_u64().unwrap();
        assert!(u64::from(tokens.total) <= limit && offline_total <= limit);
        assert_eq!(
            u64::from(compaction.tokens_before),
            doc["report"]["tokens_before"].as_u64().unwrap()
        );
        let plan = compactd::model::CompactionPlan::try_from(out.plan_version_plan(compaction))
            .expect("plan");
        let mut plan: Value =
            serde_json::from_str(&as_offline(&serde_json::to_string(&plan).unwrap())).unwrap();
        let mut offline_plan = doc["plan"].clone();
        if names_artifacts {
            // Counts that include an artifact id (totals, summary headers).
            for p in [&mut plan, &mut offline_plan] {
                p["compacted_token_count"] = Value::Null;
                for s in p["summarizations"].as_array_mut().into_iter().flatten() {
                    s["summary_token_count"] = Value::Null;
                }
            }
        } else {
            assert_eq!(u64::from(tokens.total), offline_total, "{path} {format}");
        }
        assert_eq!(plan, offline_plan, "{path} {format}: plan");

        if format == "neutral" {
            let messages: Vec<RenderedMessage> = out
                .messages
                .into_iter()
                .map(|m| RenderedMessage::try_from(m).expect("strict"))
                .collect();
            let offline: Vec<RenderedMessage> =
                serde_json::from_value(doc["request"]["messages"].clone()).expect("messages");
            assert_eq!(
                as_offline(&serde_json::to_string(&messages).unwrap()),
                blocks(&serde_json::to_string(&offline).unwrap()),
                "{path}: neutral messages"
            );
            assert_eq!(
                out.system_prompt.as_deref(),
                doc["request"]["system"].as_str()
            );
        } else {
            // The offline document parsed the payload; serde_json writes a
            // parsed payload back byte for byte (sorted keys, same numbers).
            assert_eq!(
                as_offline(&out.provider_payload_json),
                blocks(&serde_json::to_string(&doc["request"]).unwrap()),
                "{path}: {format} payload"
            );
        }
    }
}

/// The plan a compact_first Render committed, as the service sent it.
trait PlanOf {
    fn plan_version_plan(&self, compaction: &pb::CompactResponse) -> pb::CompactionPlan;
}

impl PlanOf for pb::RenderResponse {
    fn plan_version_plan(&self, compaction: &pb::CompactResponse) -> pb::CompactionPlan {
        let plan = compaction.plan.clone().expect("plan");
        assert_eq!(plan.version, self.plan_version);
        plan
    }
}
