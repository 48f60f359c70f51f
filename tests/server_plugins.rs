//! The example plugins configured on the real server and seen through gRPC:
//! their proposals are in the committed plan (with their names and
//! versions) and in the rendered prompt; a plugin that fails the handshake
//! stops the server from starting.

use crate::server_common;

use compactd::plugin::{PluginSettings, PluginsSettings};
use compactd::proto::pb;
use compactd_testkit::plugins::{build_c_plugin, build_rust_plugin, PluginDir};
use server_common::*;

/// A query whose 900-row result the sql-results plugin collapses.
fn thread(id: &str) -> pb::Thread {
    let rows: String = (0..900)
        .map(|i| format!(" {i:4} | order-{i:05} | shipped\n"))
        .collect();
    let table =
        format!("  id  | order      | status\n------+------------+--------\n{rows}(900 rows)\n");
    pb::Thread {
        id: id.into(),
        messages: vec![
            text("u1", pb::Role::User, 1, "List last month's orders."),
            call("a1", 1, "c1", "sql_query"),
            result("t1", 1, "c1", "sql_query", table),
            text("a2", pb::Role::Assistant, 1, "900 orders, all shipped."),
            text(
                "u2",
                pb::Role::User,
                2,
                "Thanks. Which carrier did we use most?",
            ),
            text("a3", pb::Role::Assistant, 2, "Mostly DHL."),
        ],
    }
}

fn settings(dir: &PluginDir, name: &str, file: &str) -> PluginSettings {
    PluginSettings {
        name: name.into(),
        path: file.into(),
        sha256: dir.sha256(file),
        after: "start".into(),
        aggressiveness: 50,
        config: serde_json::json!({}),
        timeout_ms: 1_000,
        required: false,
    }
}

#[tokio::test]
async fn a_plugins_proposal_is_in_the_plan_and_the_prompt() {
    let sql = build_rust_plugin("compactd-plugin-sql-results");
    let dir = PluginDir::install(&[("libsql.so", &sql)]);
    let plugins = PluginsSettings {
        dir: Some(dir.path().to_path_buf()),
        load: vec![settings(&dir, "sql-results", "libsql.so")],
    };
    let server = TestServer::start_with(|s| s.plugins = plugins).await;
    let mut client = server.client().await;
    let acme = token("acme", ALL);
    let mut req = compact_req(thread("t-sql"), 6_000);
    req.policy = Some(pb::PolicyOverrides {
        keep_recent_turns: Some(1),
        keep_tool_io_pairs: Some(0),
        ..Default::default()
    });
    let out = within(client.compact(authed(req.clone(), &acme)))
        .await
        .expect("compact")
        .into_inner();
    let plan = out.plan.expect("plan");
    let clear = plan
        .clearings
        .iter()
        .find(|c| c.reason == pb::ClearReason::Plugin as i32)
        .unwrap_or_else(|| panic!("no plugin clear in {:?}", plan.clearings));
    assert!(
        clear.strategy.starts_with("sql-results@"),
        "{}",
        clear.strategy
    );
    assert!(
        clear.replacement.contains("900 rows"),
        "{}",
        clear.replacement
    );
    assert!(out
        .per_reducer
        .iter()
        .any(|r| r.name == "sql-results" && r.tokens_freed > 0));

    let render = pb::RenderRequest {
        thread: req.thread.clone(),
        format: pb::OutputFormat::OpenaiChat as i32,
        model: "gpt-4o".into(),
        max_input_tokens: 6_000,
        system_prompt: req.system_prompt.clone(),
        ..Default::default()
    };
    let rendered = within(client.render(authed(render, &acme)))
        .await
        .expect("render")
        .into_inner();
    assert!(
        rendered
            .provider_payload_json
            .contains("900 rows; columns: id, order, status"),
        "the placeholder is not in the prompt"
    );
    assert!(!rendered.provider_payload_json.contains("order-00150"));
    // The audit record names the plugin whose decision the prompt carries.
    let audit = rendered.audit.expect("audit");
    assert_eq!(audit.strategies, vec![clear.strategy.clone()]);
    server.stop().await.expect("clean stop");
}

#[tokio::test]
async fn a_plugin_of_another_abi_major_stops_the_server() {
    let build = tempfile::tempdir().expect("tempdir");
    let lib = build_c_plugin(build.path(), "c_major2", &["COMPACTD_NOOP_ABI_MAJOR=2"]);
    let dir = PluginDir::install(&[("libc.so", &lib)]);
    let mut s = server_common::settings(build.path());
    s.plugins = PluginsSettings {
        dir: Some(dir.path().to_path_buf()),
        load: vec![settings(&dir, "c-noop", "libc.so")],
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let e = compactd::startup::serve(s, listener, std::future::pending())
        .await
        .expect_err("refused");
    let text = e.to_string();
    assert!(
        text.contains("plugins") && text.contains("ABI 2.0"),
        "{text}"
    );
}

#[tokio::test]
async fn a_required_plugin_out_of_rotation_fails_compaction_with_a_clear_status() {
    let bad = build_rust_plugin("compactd-plugin-misbehave");
    let dir = PluginDir::install(&[("libmis.so", &bad)]);
    let mut required = settings(&dir, "misbehave", "libmis.so");
    required.config = serde_json::json!({"mode": "fail"});
    required.required = true;
    let plugins = PluginsSettings {
        dir: Some(dir.path().to_path_buf()),
        load: vec![required],
    };
    let server = TestServer::start_with(|s| s.plugins = plugins).await;
    let mut client = server.client().await;
    let acme = token("acme", ALL);
    for attempt in 0..2 {
        // The first call poisons it, the second finds it poisoned: both
        // refuse rather than commit a plan made without it.
        let req = compact_req(thread(&format!("t-req-{attempt}")), 6_000);
        let e = within(client.compact(authed(req, &acme)))
            .await
            .expect_err("a required plugin is out");
        assert_status(&e, tonic::Code::FailedPrecondition, Some("plugins"));
        assert!(
            e.message().contains("misbehave@0.0.1 is required"),
            "{}",
            e.message()
        );
    }
    server.stop().await.expect("clean stop");
}

/// The misbehave plugin in `externalize` mode: it moves the oldest free
/// tool result out, with its own summary, hint and estimate.
fn externalizing(dir: &PluginDir) -> PluginsSettings {
    let mut s = settings(dir, "misbehave", "libmis.so");
    s.config = serde_json::json!({
        "mode": "externalize",
        "estimate": 7_000,
        "fact": "900 shipped orders from last month (export key AKIAIOSFODNN7EXAMPLE)",
        "hint": "read when you need a specific order row, key AKIAIOSFODNN7EXAMPLE",
    });
    PluginsSettings {
        dir: Some(dir.path().to_path_buf()),
        load: vec![s],
    }
}

#[tokio::test]
async fn a_plugins_externalization_is_written_read_back_and_shown_as_a_pointer() {
    let bad = build_rust_plugin("compactd-plugin-misbehave");
    let dir = PluginDir::install(&[("libmis.so", &bad)]);
    let server = TestServer::start_with(|s| s.plugins = externalizing(&dir)).await;
    let mut client = server.client().await;
    let acme = token("acme", ALL);
    // A secret in the output, and in the plugin's own fact and hint: none
    // of the three is kept as it is.
    let mut t = thread("t-ext");
    if let Some(pb::tool_result_envelope::Content::ContentText(body)) = t.messages[2]
        .tool_result
        .as_mut()
        .and_then(|r| r.content.as_mut())
    {
        body.push_str("export key: AKIAIOSFODNN7EXAMPLE\n");
    }
    let mut req = compact_req(t, 6_000);
    // Only the plugin may externalize, and nothing else writes artifacts.
    req.policy = Some(pb::PolicyOverrides {
        keep_recent_turns: Some(1),
        keep_tool_io_pairs: Some(0),
        enable_retention: Some(false),
        enable_compress: Some(false),
        enable_clear: Some(false),
        enable_externalize: Some(false),
        enable_summarize: Some(false),
        enable_archive: Some(false),
        ..Default::default()
    });
    let out = within(client.compact(authed(req.clone(), &acme)))
        .await
        .expect("compact")
        .into_inner();
    let plan = out.plan.expect("plan");
    assert!(
        out.warnings.is_empty(),
        "the proposal was valid: {:?}",
        out.warnings
    );
    let [ext] = plan.externalizations.as_slice() else {
        panic!("one externalization: {:?}", plan.externalizations);
    };
    assert_eq!(
        ext.span.as_ref().map(|s| s.message_ids.clone()),
        Some(vec!["t1".to_string()])
    );
    // The plugin's pointer, not the host's defaults, with the secret
    // redacted from both.
    assert!(
        ext.rehydrate_hint
            .starts_with("read when you need a specific order row, key [REDACTED:"),
        "{}",
        ext.rehydrate_hint
    );
    let facts = ext
        .summary
        .as_ref()
        .map(|s| s.facts.clone())
        .unwrap_or_default();
    let [fact] = facts.as_slice() else {
        panic!("one fact: {facts:?}");
    };
    assert!(
        fact.starts_with("900 shipped orders from last month (export key [REDACTED:"),
        "{fact}"
    );
    // Credited to the plugin (name@version), as its clears are.
    assert!(ext.strategy.starts_with("misbehave@"), "{}", ext.strategy);
    // Written before the plan was committed: a real id, not a pending one.
    assert!(ext.artifact_id.starts_with("art_"), "{}", ext.artifact_id);
    assert_eq!(out.new_artifact_ids, vec![ext.artifact_id.clone()]);
    assert!(out
        .per_reducer
        .iter()
        .any(|r| r.name == "misbehave" && r.tokens_freed > 5_000));

    let back = within(client.rehydrate(authed(
        pb::RehydrateRequest {
            thread_id: "t-ext".into(),
            artifact_id: ext.artifact_id.clone(),
            max_tokens: 100_000,
            ..Default::default()
        },
        &acme,
    )))
    .await
    .expect("rehydrate")
    .into_inner();
    assert_eq!(back.message_ids, vec!["t1".to_string()]);
    assert!(!back.truncated, "{} tokens", back.tokens);
    assert!(
        back.content.contains("order-00150") && back.content.contains("(900 rows)"),
        "{}",
        back.content
    );
    // Stored redacted.
    assert!(!back.content.contains("AKIAIOSFODNN7EXAMPLE"));
    assert!(back.content.contains("export key: [REDACTED:"));
    assert_eq!(back.content_hash, ext.content_hash);

    let render = pb::RenderRequest {
        thread: req.thread.clone(),
        format: pb::OutputFormat::OpenaiChat as i32,
        model: "gpt-4o".into(),
        max_input_tokens: 6_000,
        system_prompt: req.system_prompt.clone(),
        ..Default::default()
    };
    let rendered = within(client.render(authed(render, &acme)))
        .await
        .expect("render")
        .into_inner();
    let prompt = &rendered.provider_payload_json;
    assert!(prompt.contains(&ext.artifact_id), "no pointer in {prompt}");
    // The hint stays in the plan record (pointers render without it).
    assert!(prompt.contains("900 shipped orders from last month"));
    assert!(
        !prompt[prompt.find(&ext.artifact_id).unwrap_or(0)..].contains("AKIAIOSFODNN7EXAMPLE"),
        "the pointer quotes the secret"
    );
    assert!(
        !prompt.contains("order-00150"),
        "the rows are still in the prompt"
    );
    server.stop().await.expect("clean stop");
}
