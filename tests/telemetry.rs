//! Traces exported over OTLP/gRPC to a real receiver on 127.0.0.1 (the
//! protocol's own service definition, served with tonic): one span per RPC
//! with the lifecycle events of a compaction, and nothing of the messages
//! (no text, no planted secret) anywhere in what was exported.
//!
//! One test per binary: the trace subscriber is process-global.

mod server_common;

use compactd::proto::pb;
use compactd::telemetry::{export_layer, Telemetry, TelemetrySettings};
use compactd_testkit::otlp::Receiver;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
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
        ..Default::default()
    };
    within(client.render(authed(render, &acme)))
        .await
        .expect("render");
    within(client.rehydrate(authed(
        pb::RehydrateRequest {
            thread_id: "t-otel".into(),
            artifact_id: artifact,
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
    server.stop().await.expect("clean stop");

    let flusher = provider.clone();
    tokio::task::spawn_blocking(move || flusher.force_flush())
        .await
        .expect("join")
        .expect("flush");

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
    assert!(attr(&estimate.attributes, "t_est").is_some());
    assert!(attr(&estimate.attributes, "usage_pct").is_some());
    // Each pipeline step is a child span of the call, with what it freed.
    let steps: Vec<&Span> = spans
        .iter()
        .filter(|s| s.name.starts_with("reduce ") && s.parent_span_id == compact.span_id)
        .collect();
    assert!(!steps.is_empty(), "no reducer spans under the Compact span");
    assert!(steps.iter().any(|s| {
        attr(&s.attributes, "compactd.tokens_freed")
            .is_some_and(|v| !matches!(v, AnyValue::IntValue(0)))
    }));
    let failed = rpc
        .iter()
        .find(|s| {
            s.name.ends_with("/Compact")
                && text_attr(&s.attributes, "rpc.grpc.status_code").as_deref()
                    != Some("IntValue(0)")
        })
        .expect("the failed Compact span");
    assert!(failed.events.iter().any(|e| e.name == "compact.error"));

    let exported = sink.everything();
    assert!(!exported.contains(SECRET), "a secret was exported");
    assert!(!exported.contains(USER_TEXT), "message text was exported");
    assert!(
        !exported.contains("processed batch"),
        "tool output was exported"
    );
}
