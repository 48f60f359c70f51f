//! Traces and metrics exported over OTLP/gRPC to a real receiver on
//! 127.0.0.1 (the protocol's own service definitions, served with tonic):
//! one span per RPC with the lifecycle events of a compaction, child spans
//! for reducers, artifact writes and LLM requests (GenAI conventions), the
//! audit and quality events, the metrics, and nothing of the messages (no
//! text, no planted secret) anywhere in what was exported unless content
//! capture is on, and then only redacted.
//!
//! One test per binary: the trace subscriber and meter provider are
//! process-global.

mod server_common;

use compactd::llm::{SummarizerKind, SummarizerSettings};
use compactd::proto::pb;
use compactd::provider::thread_from_json;
use compactd::telemetry::{export_layer, Telemetry, TelemetrySettings};
use compactd_testkit::fake_llm::{Behavior, FakeLlm};
use compactd_testkit::otlp::Receiver;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use opentelemetry_proto::tonic::metrics::v1::Metric;
use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::{json, Value};
use server_common::*;
use tracing_subscriber::layer::SubscriberExt as _;

fn attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a AnyValue> {
    attrs
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| v.value.as_ref())
}

fn text_attr(attrs: &[KeyValue], key: &str) -> Option<String> {
    match attr(attrs, key)? {
        AnyValue::StringValue(s) => Some(s.clone()),
        other => Some(format!("{other:?}")),
    }
}

const SECRET: &str = "sk-proj-telemetry0123456789abcd";
const USER_TEXT: &str = "Never delete production data";
const SECOND_SECRET: &str = "hunter2-Telemetry-77";

/// The attribute sets of every data point of `name`.
fn points(metrics: &[Metric], name: &str) -> Vec<Vec<KeyValue>> {
    metrics
        .iter()
        .filter(|m| m.name == name)
        .flat_map(|m| match &m.data {
            Some(Data::Sum(s)) => s.data_points.iter().map(|p| p.attributes.clone()).collect(),
            Some(Data::Histogram(h)) => {
                h.data_points.iter().map(|p| p.attributes.clone()).collect()
            }
            Some(Data::Gauge(g)) => g.data_points.iter().map(|p| p.attributes.clone()).collect(),
            _ => Vec::new(),
        })
        .collect()
}

/// An order placed early, many turns of tool work, and at the end the agent
/// asking the user for what the early messages said.
fn forgetful_thread(id: &str) -> pb::Thread {
    let mut msgs = vec![
        json!({"role": "user", "content": format!(
            "Ship the pallets to warehouse HUB-7731 in Rotterdam. Purchase order PO-99412. Portal password={SECOND_SECRET}")}),
        json!({"role": "assistant", "content": "Understood, I will arrange it."}),
    ];
    for t in 0..24 {
        let call = format!("c{t}");
        let log: String = (0..15)
            .map(|k| format!("crate {t}-{k} loaded on truck {} ok\n", 10 + k))
            .collect();
        msgs.push(json!({"role": "user", "content": format!("Load crate set {t}.")}));
        msgs.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": call, "type": "function", "function": {"name": "load", "arguments": "{}"}}
        ]}));
        msgs.push(json!({"role": "tool", "tool_call_id": call, "content": log}));
        msgs.push(json!({"role": "assistant", "content": format!("Set {t} is loaded.")}));
    }
    msgs.push(json!({"role": "user", "content": "Book the shipment now."}));
    msgs.push(json!({"role": "assistant", "content":
        "Before I book it: which warehouse is the destination, and what is the purchase order?"}));
    msgs.push(json!({"role": "user", "content": "I told you at the start!"}));
    let t = thread_from_json(&Value::Array(msgs), id)
        .expect("thread")
        .thread;
    pb::Thread::from(&t)
}
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rpc_spans_carry_lifecycle_events_and_no_content() {
    let (sink, endpoint) = Receiver::start().await;
    let settings = TelemetrySettings {
        otlp_endpoint: Some(endpoint),
        hash_tenant_ids: true,
        export_timeout_ms: 2_000,
        ..TelemetrySettings::default()
    };
    settings.apply();
    let provider = Telemetry::provider(&settings)
        .expect("exporter")
        .expect("an endpoint is set");
    tracing::subscriber::set_global_default(
        tracing_subscriber::registry().with(export_layer(&provider)),
    )
    .expect("the only subscriber of this test binary");
    let meter = Telemetry::meter_provider(&TelemetrySettings {
        metrics_interval_ms: Some(60_000),
        ..settings.clone()
    })
    .expect("metric exporter")
    .expect("an endpoint is set");
    opentelemetry::global::set_meter_provider(meter.clone());

    let server = TestServer::start().await;
    let mut client = server.client().await;
    let acme = token("acme", ALL);
    let mut thread = big_thread("t-otel", 2000);
    thread.messages[2] = result(
        "t1",
        1,
        "c1",
        "read_file",
        format!("OPENAI_API_KEY={SECRET}\n{}", big_output(2000)),
    );
    let mut req = compact_req(thread.clone(), 8_000);
    req.policy = Some(externalize_policy());
    let out = within(client.compact(authed(req.clone(), &acme)))
        .await
        .expect("compact")
        .into_inner();
    let artifact = out.new_artifact_ids.first().cloned().expect("an artifact");
    let render = pb::RenderRequest {
        thread: Some(thread.clone()),
        format: pb::OutputFormat::OpenaiChat as i32,
        model: "gpt-4o".into(),
        max_input_tokens: 8_000,
        // The caller reports its last task: counted beside compaction.
        task_outcome: pb::TaskOutcome::Succeeded as i32,
        ..Default::default()
    };
    within(client.render(authed(render, &acme)))
        .await
        .expect("render");
    within(client.rehydrate(authed(
        pb::RehydrateRequest {
            thread_id: "t-otel".into(),
            artifact_id: artifact.clone(),
            ..Default::default()
        },
        &acme,
    )))
    .await
    .expect("rehydrate");
    // A failing call: its span says so, by code only.
    let mut bad = req.clone();
    bad.max_input_tokens = 10;
    let _ = within(client.compact(authed(bad, &acme))).await;
    // A compaction only the window may make: it drops messages (002-28).
    let pruned_thread = pb::Thread {
        id: "t-pruned".into(),
        messages: (1..=12)
            .flat_map(|n| agent_turn(n, 20, "shard checksum verified"))
            .collect(),
    };
    let mut req = compact_req(pruned_thread, 2_000);
    req.policy = Some(pb::PolicyOverrides {
        enable_retention: Some(false),
        enable_compress: Some(false),
        enable_clear: Some(false),
        enable_externalize: Some(false),
        enable_summarize: Some(false),
        keep_recent_turns: Some(2),
        ..Default::default()
    });
    let pruned_plan = within(client.compact(authed(req, &acme)))
        .await
        .expect("compact by dropping")
        .into_inner()
        .plan
        .expect("plan");
    let dropped_ids: Vec<String> = pruned_plan
        .drops
        .iter()
        .flat_map(|d| d.span.as_ref().expect("span").message_ids.clone())
        .collect();
    assert!(!dropped_ids.is_empty(), "the window dropped nothing");
    server.stop().await.expect("clean stop");

    // Second part: an LLM summarizer, content capture on, and an agent
    // that asks for what was compacted out.
    let fake = FakeLlm::start(Behavior::Faithful).await.expect("fake llm");
    let base_url = fake.base_url();
    TelemetrySettings {
        capture_content: true,
        ..settings.clone()
    }
    .apply();
    let server = TestServer::start_with(|s| {
        s.summarizer = SummarizerSettings {
            kind: SummarizerKind::Llm,
            base_url,
            model: "summary-mini".into(),
            api_key_env: None,
            backoff_ms: 5,
            ..SummarizerSettings::default()
        };
    })
    .await;
    let mut client = server.client().await;
    let forgetful = forgetful_thread("t-forgetful");
    let mut req = compact_req(forgetful.clone(), 6_000);
    req.policy = Some(pb::PolicyOverrides {
        enable_retention: Some(false),
        enable_clear: Some(false),
        enable_externalize: Some(false),
        keep_recent_turns: Some(2),
        keep_recent_tokens: Some(800),
        ..Default::default()
    });
    let out = within(client.compact(authed(req, &acme)))
        .await
        .expect("compact with the LLM")
        .into_inner();
    let plan = out.plan.expect("plan");
    assert!(
        plan.summarizations
            .iter()
            .any(|s| s.summarizer_id.starts_with("llm:summary-mini")),
        "the LLM wrote no summary"
    );
    // The provider's report on a body, sent with the next call.
    let body_of = |usage: Vec<pb::ProviderUsage>| pb::RenderRequest {
        thread: Some(forgetful.clone()),
        format: pb::OutputFormat::OpenaiChat as i32,
        model: "gpt-4o".into(),
        max_input_tokens: 6_000,
        usage,
        ..Default::default()
    };
    let sent = within(client.render(authed(body_of(Vec::new()), &acme)))
        .await
        .expect("render")
        .into_inner();
    let report = pb::ProviderUsage {
        body_digest: sent.body_digest.clone(),
        input_tokens: 2_000,
        cache_read_tokens: 1_024,
        cache_write_tokens: 0,
    };
    let reported = within(client.render(authed(body_of(vec![report]), &acme)))
        .await
        .expect("render with a report")
        .into_inner();
    assert!(reported.audit.expect("audit").warnings.is_empty());
    let rendered = within(client.render(authed(
        pb::RenderRequest {
            thread: Some(forgetful),
            format: pb::OutputFormat::OpenaiChat as i32,
            model: "gpt-4o".into(),
            max_input_tokens: 6_000,
            ..Default::default()
        },
        &acme,
    )))
    .await
    .expect("render")
    .into_inner();
    let audit = rendered.audit.expect("audit");
    assert_eq!(audit.requester, "agent@acme");
    assert!(audit
        .evicted
        .iter()
        .any(|e| e.action == pb::EvictionAction::Summarized as i32
            && e.strategy.starts_with("llm:summary-mini")
            && e.artifact_id.starts_with("art_")));
    server.stop().await.expect("clean stop");

    let flusher = provider.clone();
    tokio::task::spawn_blocking(move || flusher.force_flush())
        .await
        .expect("join")
        .expect("flush");
    let flusher = meter.clone();
    tokio::task::spawn_blocking(move || flusher.force_flush())
        .await
        .expect("join")
        .expect("flush metrics");

    let spans = sink.spans();
    let rpc: Vec<&Span> = spans
        .iter()
        .filter(|s| s.name.starts_with("compactd.v1.CompactionService/"))
        .collect();
    let methods: Vec<&str> = rpc.iter().map(|s| s.name.as_str()).collect();
    for m in ["Compact", "Render", "Rehydrate"] {
        assert!(
            methods.contains(&format!("compactd.v1.CompactionService/{m}").as_str()),
            "no {m} span in {methods:?}"
        );
    }
    let compact = rpc
        .iter()
        .find(|s| {
            s.name.ends_with("/Compact")
                && text_attr(&s.attributes, "rpc.grpc.status_code").as_deref()
                    == Some("IntValue(0)")
        })
        .expect("the successful Compact span");
    let tenant = text_attr(&compact.attributes, "compactd.tenant").expect("tenant");
    assert!(
        tenant.starts_with("sha256:") && !tenant.contains("acme"),
        "{tenant}"
    );
    let events: Vec<&str> = compact.events.iter().map(|e| e.name.as_str()).collect();
    for e in [
        "compact.token_estimate",
        "compact.trigger_decision",
        "compact.strategy_applied",
        "compact.completed",
    ] {
        assert!(events.contains(&e), "{e} missing from {events:?}");
    }
    let estimate = compact
        .events
        .iter()
        .find(|e| e.name == "compact.token_estimate")
        .expect("estimate");
    assert!(matches!(
        attr(&estimate.attributes, "t_est"),
        Some(AnyValue::IntValue(n)) if *n > 0
    ));
    assert!(attr(&estimate.attributes, "tools_schema_tokens").is_some());
    assert!(attr(&estimate.attributes, "developer_tokens").is_some());
    assert!(attr(&estimate.attributes, "usage_pct").is_some());
    // A lifecycle event per new record: what, by which strategy, over which
    // span, and the tokens it freed; the artifact it wrote.
    let int_of = |e: &opentelemetry_proto::tonic::trace::v1::span::Event, key: &str| match attr(
        &e.attributes,
        key,
    ) {
        Some(AnyValue::IntValue(n)) => *n,
        other => panic!("{key}: {other:?} on {}", e.name),
    };
    let externalized: Vec<_> = compact
        .events
        .iter()
        .filter(|e| e.name == "compact.externalized")
        .collect();
    assert!(
        !externalized.is_empty(),
        "no compact.externalized in {events:?}"
    );
    for e in &externalized {
        assert_eq!(
            text_attr(&e.attributes, "strategy").as_deref(),
            Some("externalize")
        );
        let (before, after) = (int_of(e, "tokens_before"), int_of(e, "tokens_after"));
        assert!(before > after && after > 0, "{before} -> {after}");
        assert_eq!(int_of(e, "tokens_freed"), before - after);
        // The thread's first compaction: everything was verbatim.
        assert_eq!(int_of(e, "tokens_previous"), before);
        assert!(int_of(e, "message_count") >= 1);
        assert!(text_attr(&e.attributes, "first_message_id").is_some());
    }
    assert!(externalized.iter().any(|e| {
        text_attr(&e.attributes, "artifact_id").as_deref() == Some(artifact.as_str())
    }));
    let completed = compact
        .events
        .iter()
        .find(|e| e.name == "compact.completed")
        .expect("completed");
    assert!(int_of(completed, "records_created") >= externalized.len() as i64);
    for key in ["kept_pinned", "kept_recent_turns", "kept_tool_pairs"] {
        int_of(completed, key);
    }
    // Each pipeline step is a child span of the call, with what it freed.
    let steps: Vec<&Span> = spans
        .iter()
        .filter(|s| s.name.starts_with("reduce ") && s.parent_span_id == compact.span_id)
        .collect();
    assert!(!steps.is_empty(), "no reducer spans under the Compact span");
    assert!(steps.iter().any(|s| {
        matches!(
            attr(&s.attributes, "compactd.tokens_freed"),
            Some(AnyValue::IntValue(n)) if *n > 0
        )
    }));
    let failed = rpc
        .iter()
        .find(|s| {
            s.name.ends_with("/Compact")
                && text_attr(&s.attributes, "rpc.grpc.status_code").as_deref()
                    != Some("IntValue(0)")
        })
        .expect("the failed Compact span");
    let error = failed
        .events
        .iter()
        .find(|e| e.name == "compact.error")
        .expect("compact.error");
    // The stable reason and the field, never the message.
    let reason = text_attr(&error.attributes, "error_reason").expect("error_reason");
    assert!(!reason.is_empty(), "no reason");
    assert!(text_attr(&error.attributes, "error_field").is_some());

    // 002-28: the messages the window dropped are reported by one
    // `compact.pruned_messages` event with their count and ids (at most
    // 50 of them), on the Compact span that dropped them.
    let expected_ids = dropped_ids
        .iter()
        .take(50)
        .cloned()
        .collect::<Vec<_>>()
        .join(",");
    let pruned: Vec<_> = rpc
        .iter()
        .filter(|s| s.name.ends_with("/Compact"))
        .flat_map(|s| &s.events)
        .filter(|e| e.name == "compact.pruned_messages")
        .filter(|e| {
            text_attr(&e.attributes, "pruned_ids").as_deref() == Some(expected_ids.as_str())
        })
        .collect();
    assert_eq!(
        pruned.len(),
        1,
        "no compact.pruned_messages naming {expected_ids}: {:?}",
        rpc.iter()
            .flat_map(|s| &s.events)
            .filter(|e| e.name == "compact.pruned_messages")
            .map(|e| text_attr(&e.attributes, "pruned_ids"))
            .collect::<Vec<_>>()
    );
    assert_eq!(int_of(pruned[0], "pruned_count"), dropped_ids.len() as i64);
    int_of(pruned[0], "kept_recent_turns");
    int_of(pruned[0], "kept_tool_pairs");

    // Artifact writes are child spans of the call.
    assert!(spans
        .iter()
        .any(|s| s.name == "artifact put" && s.parent_span_id == compact.span_id));
    // Explicit rehydration: an event on the Rehydrate span.
    let rehydrate = rpc
        .iter()
        .find(|s| s.name.ends_with("/Rehydrate"))
        .expect("rehydrate span");
    assert!(rehydrate
        .events
        .iter()
        .any(|e| e.name == "compact.rehydration"));

    // The LLM request: a GenAI client span under the summary it wrote,
    // under the Compact call.
    let chat = spans
        .iter()
        .find(|s| s.name == "chat summary-mini")
        .expect("a GenAI span");
    assert_eq!(
        text_attr(&chat.attributes, "gen_ai.operation.name").as_deref(),
        Some("chat")
    );
    assert_eq!(
        text_attr(&chat.attributes, "gen_ai.request.model").as_deref(),
        Some("summary-mini")
    );
    assert_eq!(
        text_attr(&chat.attributes, "gen_ai.provider.name").as_deref(),
        Some("openai")
    );
    assert!(
        matches!(
            attr(&chat.attributes, "gen_ai.usage.input_tokens"),
            Some(AnyValue::IntValue(n)) if *n > 0
        ),
        "{:?}",
        chat.attributes
    );
    assert!(attr(&chat.attributes, "gen_ai.usage.output_tokens").is_some());
    let summarize = spans
        .iter()
        .find(|s| s.span_id == chat.parent_span_id)
        .expect("the chat span's parent");
    assert_eq!(summarize.name, "summarize span");
    let call = spans
        .iter()
        .find(|s| s.span_id == summarize.parent_span_id)
        .expect("the summary span's parent");
    assert_eq!(call.name, "compactd.v1.CompactionService/Compact");
    // Content capture: the summary text, redacted, on summary_created.
    let payloads: Vec<String> = call
        .events
        .iter()
        .filter(|e| e.name == "compact.summary_created")
        .filter_map(|e| text_attr(&e.attributes, "payload"))
        .collect();
    assert!(
        payloads.iter().any(|p| p.contains("HUB-7731")),
        "no captured summary: {payloads:?}"
    );
    // The audit and the quality canary on the Render span.
    let render = rpc
        .iter()
        .rev()
        .find(|s| s.name.ends_with("/Render"))
        .expect("render span");
    let audit_event = render
        .events
        .iter()
        .find(|e| e.name == "compact.audit")
        .expect("audit event");
    assert!(text_attr(&audit_event.attributes, "evicted")
        .is_some_and(|v| v.contains("summarized:") && v.contains("art_")));
    assert!(
        text_attr(&audit_event.attributes, "requester").is_some_and(|r| r.starts_with("sha256:"))
    );
    let asked = render
        .events
        .iter()
        .find(|e| e.name == "compact.quality.asked_for_compacted_context")
        .expect("the agent asked for compacted context");
    assert!(text_attr(&asked.attributes, "evicted_message_ids").is_some());

    // Metrics, by name and attributes.
    let metrics = sink.metrics();
    for name in [
        "rpc.server.call.duration",
        "compactd.rpc.errors",
        "compactd.compactions",
        "compactd.compaction.tokens_before",
        "compactd.compaction.tokens_after",
        "compactd.compaction.tokens_freed",
        "compactd.summarizer.calls",
        "compactd.summarizer.duration",
        "gen_ai.client.operation.duration",
        "gen_ai.client.token.usage",
        "compactd.cache.lookups",
        "compactd.rehydrations",
        "compactd.quality.rehydration_requests",
        "compactd.quality.thread_rehydration_requests",
        "compactd.quality.asked_for_compacted_context",
        "compactd.quality.task_outcomes",
        "compactd.cache.predicted_tokens",
        "compactd.cache.actual_tokens",
    ] {
        assert!(!points(&metrics, name).is_empty(), "no {name} metric");
    }
    assert!(points(&metrics, "compactd.quality.task_outcomes")
        .iter()
        .any(|a| text_attr(a, "outcome").as_deref() == Some("succeeded")
            && text_attr(a, "compacted").as_deref() == Some("BoolValue(true)")));
    let has = |name: &str, key: &str, value: &str| {
        points(&metrics, name)
            .iter()
            .any(|attrs| text_attr(attrs, key).as_deref() == Some(value))
    };
    assert!(has("rpc.server.call.duration", "rpc.method", "Render"));
    assert!(has("compactd.compactions", "outcome", "compacted"));
    assert!(has(
        "compactd.compaction.tokens_freed",
        "strategy",
        "summarize"
    ));
    assert!(has("compactd.summarizer.calls", "outcome", "ok"));
    assert!(has("compactd.cache.lookups", "result", "miss"));
    assert!(has("compactd.cache.actual_tokens", "format", "openai"));
    assert!(has("compactd.rehydrations", "mode", "rpc"));
    assert!(has(
        "compactd.quality.rehydration_requests",
        "source",
        "rehydrate_rpc"
    ));
    assert!(has(
        "gen_ai.client.token.usage",
        "gen_ai.token.type",
        "input"
    ));
    assert!(!points(&metrics, "compactd.rpc.errors")
        .iter()
        .any(|a| text_attr(a, "rpc.grpc.status_code").as_deref() == Some("OK")));

    let exported = sink.everything();
    assert!(
        !exported.contains(SECOND_SECRET),
        "a captured secret was not redacted"
    );
    // Tenant ids are hashed in metrics too (when they are there at all).
    assert!(!exported.contains("\"acme\""), "a tenant id was exported");
    assert!(!exported.contains(SECRET), "a secret was exported");
    assert!(!exported.contains(USER_TEXT), "message text was exported");
    assert!(
        !exported.contains("processed batch"),
        "tool output was exported"
    );
}
