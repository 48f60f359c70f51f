//! Failed tool calls keep their error text through compaction. Provider logs
//! carry no outcome, so a failure must be recognised on import; once it is,
//! no reducer may turn it into a stub that claims success or lose its error.

use crate::common;

use common::{request_text, Harness};
use compactd::model::{Outcome, Thread};
use compactd::provider::thread_from_json;
use serde_json::{json, Value};

/// Distinct failures, phrased the way different deploy backends report them,
/// with a fragment of each error that must stay visible to the model.
fn failures() -> Vec<(String, Value)> {
    vec![
        (
            "(code Q9)".into(),
            json!({"status": "error", "error": "Deployment failed: quota exceeded for region eu-west-3 (code Q9)"}),
        ),
        (
            "image tag v2.14.1 not found".into(),
            json!({"ok": false, "error": {"message": "image tag v2.14.1 not found in registry"}}),
        ),
        (
            "readiness probe".into(),
            json!({"state": "FAILED", "message": "rollout halted: readiness probe failed on 3/5 pods"}),
        ),
        (
            "permission denied for service account".into(),
            json!({"statusCode": 403, "error": "permission denied for service account deployer@ops"}),
        ),
        (
            "exit status 137".into(),
            json!({"exit_code": 137, "stderr": "helm upgrade: exit status 137 (OOMKilled)"}),
        ),
        (
            "migration 0042".into(),
            json!({"errors": [{"message": "migration 0042 conflicts with an applied migration"}]}),
        ),
        (
            "lock held by".into(),
            Value::String("Error: release lock held by pipeline #8812 since 09:14".into()),
        ),
    ]
}

/// An OpenAI `messages` log of an agent deploying over many turns: large log
/// reads push it over the trigger, failed deploys are spread through it.
fn deploy_log() -> Vec<Value> {
    let failures = failures();
    let asks = [
        "Roll out the payments service to staging.",
        "Try the deploy again, please.",
        "Can you push build 2.14 to the canary pool?",
        "Deploy once more and tell me what happens.",
        "Ship the hotfix branch.",
        "Retry the release with the new chart.",
    ];
    let mut messages = vec![json!({"role": "system", "content": "You are a release engineer."})];
    let mut f = 0;
    for turn in 0..26 {
        messages.push(json!({"role": "user", "content": asks[turn % asks.len()]}));
        let call = format!("call_{turn}");
        let logs = format!("logs_{turn}");
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": logs, "type": "function", "function": {"name": "read_logs", "arguments": "{\"lines\":120}"}}
        ]}));
        let body: String = (0..120)
            .map(|i| {
                format!(
                    "2026-05-0{} 10:{:02}:{:02} INFO builder step {i} cached layer sha256:{:08x}\n",
                    turn % 9 + 1,
                    i % 60,
                    (i * 7) % 60,
                    i * 2654435761u32 as usize % 0xffff_ffff
                )
            })
            .collect();
        messages.push(json!({"role": "tool", "tool_call_id": logs, "content": body}));
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": call, "type": "function", "function": {"name": "deploy", "arguments": format!("{{\"attempt\":{turn}}}")}}
        ]}));
        let result = if turn % 3 == 0 && f < failures.len() {
            f += 1;
            failures[f - 1].1.clone()
        } else {
            json!({"status": "ok", "release": format!("r-{turn}")})
        };
        let content = match result {
            Value::String(s) => s,
            other => other.to_string(),
        };
        messages.push(json!({"role": "tool", "tool_call_id": call, "content": content}));
        messages.push(json!({"role": "assistant", "content": format!("Attempt {turn} finished.")}));
    }
    assert_eq!(f, failures.len(), "every failure is in the log");
    messages
}

fn thread() -> Thread {
    thread_from_json(&Value::Array(deploy_log()), "deploys")
        .expect("imports")
        .thread
}

#[test]
fn imported_errors_are_failures() {
    let t = thread();
    let failed = t
        .messages
        .iter()
        .filter_map(|m| m.tool_result.as_ref())
        .filter(|e| e.outcome == Outcome::Failure)
        .count();
    assert_eq!(failed, failures().len());
}

#[test]
fn every_error_survives_compaction() {
    let t = thread();
    let h = Harness::default();
    let full = h.compact(&t, 1_000_000, None).expect("fits");
    assert!(!full.report.triggered);
    // Over the trigger, with room to spare once old logs are reduced.
    for budget in [
        full.tokens.total,
        full.tokens.total * 3 / 4,
        full.tokens.total / 2,
    ] {
        let out = h.compact(&t, budget, None).expect("compacts");
        assert!(out.report.triggered, "budget {budget}");
        let text = request_text(&out.request);
        for (needle, _) in failures() {
            assert!(
                text.contains(&needle),
                "budget {budget}: the error {needle:?} vanished"
            );
        }
        assert!(
            !text.contains("deploy: success\\nError")
                && !text.contains("[result expired] deploy: failure"),
            "a failure was stubbed"
        );
    }
}

#[test]
fn an_expired_partial_result_keeps_its_error_in_the_stub() {
    use common::{log_lines, ThreadBuilder};
    use compactd::model::ToolContent;
    let mut b = ThreadBuilder::default();
    b.user("Sync the invoices from the ledger.");
    let call = b.tool(
        "sync_invoices",
        json!({"since": "2026-04-01"}),
        ToolContent::json(json!({
            "status": "partial",
            "synced": 312,
            "error": "invoice INV-7731 rejected: currency XAF is not enabled"
        })),
        Outcome::Partial,
        None,
    );
    for t in 0..12 {
        b.user(&format!("Now look at batch {t} of the export."));
        b.tool(
            "read_batch",
            json!({"batch": t}),
            ToolContent::Text(log_lines(60)),
            Outcome::Success,
            None,
        );
        b.assistant("Batch looks consistent.");
    }
    let t = b.build("partial");
    let h = Harness::default();
    let full = h.compact(&t, 1_000_000, None).expect("fits").tokens.total;
    let out = h.compact(&t, full, None).expect("compacts");
    let stub = out
        .request
        .messages
        .iter()
        .find(|m| m.tool_call_id.as_deref() == Some(call.as_str()))
        .expect("the pair stays");
    let text = stub.content.text();
    assert!(
        text.contains("currency XAF is not enabled"),
        "the partial result's error was lost: {text}"
    );
}
