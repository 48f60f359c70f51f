//! A plugin proposal's estimate beside what it freed, exported over
//! OTLP/gRPC to a real receiver on 127.0.0.1: the `compact.proposal` event
//! on the plugin's span carries the plugin's estimate and the tokens the
//! host measured (the same the step's `per_reducer` entry reports), the
//! estimate's error is a metric, and neither carries message content, ids
//! or the plugin's rationale.
//!
//! One test per binary: the trace subscriber and meter provider are
//! process-global.

mod server_common;

use compactd::plugin::{PluginSettings, PluginsSettings};
use compactd::proto::pb;
use compactd::telemetry::{export_layer, Telemetry, TelemetrySettings};
use compactd_testkit::otlp::Receiver;
use compactd_testkit::plugins::{build_rust_plugin, PluginDir};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use server_common::*;
use tracing_subscriber::layer::SubscriberExt as _;

fn attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a AnyValue> {
    attrs
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| v.value.as_ref())
}

fn int_attr(attrs: &[KeyValue], key: &str) -> i64 {
    match attr(attrs, key) {
        Some(AnyValue::IntValue(n)) => *n,
        other => panic!("{key}: {other:?}"),
    }
}

fn text_attr(attrs: &[KeyValue], key: &str) -> Option<String> {
    match attr(attrs, key)? {
        AnyValue::StringValue(s) => Some(s.clone()),
        other => Some(format!("{other:?}")),
    }
}

/// The plugin's rationale: must never be exported (a rationale may quote
/// content).
const RATIONALE: &str = "test";
/// Text only the moved tool result holds.
const ROW: &str = "order-00150";
const ESTIMATE: i64 = 7_000;

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
            text("u2", pb::Role::User, 2, "Which carrier did we use most?"),
            text("a3", pb::Role::Assistant, 2, "Mostly DHL."),
        ],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proposal_event_carries_the_plugins_estimate_and_the_measured_tokens() {
    let (sink, endpoint) = Receiver::start().await;
    let settings = TelemetrySettings {
        otlp_endpoint: Some(endpoint),
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

    let lib = build_rust_plugin("compactd-plugin-misbehave");
    let dir = PluginDir::install(&[("libmis.so", &lib)]);
    let plugins = PluginsSettings {
        dir: Some(dir.path().to_path_buf()),
        load: vec![PluginSettings {
            name: "misbehave".into(),
            path: "libmis.so".into(),
            sha256: dir.sha256("libmis.so"),
            after: "start".into(),
            aggressiveness: 50,
            config: serde_json::json!({"mode": "externalize", "estimate": ESTIMATE}),
            timeout_ms: 1_000,
            required: false,
        }],
    };
    let server = TestServer::start_with(|s| s.plugins = plugins).await;
    let mut client = server.client().await;
    let acme = token("acme", ALL);
    let mut req = compact_req(thread("t-estimate"), 6_000);
    // The plugin's step is the only one that frees anything, and no
    // archive is written after it: its step total is its proposal's.
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
    let out = within(client.compact(authed(req, &acme)))
        .await
        .expect("compact")
        .into_inner();
    let step = out
        .per_reducer
        .iter()
        .find(|r| r.name == "misbehave")
        .expect("the plugin's step");
    assert!(step.tokens_freed > 0, "the externalization freed nothing");
    assert_eq!(out.plan.expect("plan").externalizations.len(), 1);
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
    let plugin = spans
        .iter()
        .find(|s| s.name == "plugin misbehave@0.0.1")
        .expect("the plugin's span");
    assert_eq!(int_attr(&plugin.attributes, "compactd.proposals"), 1);
    let proposals: Vec<_> = plugin
        .events
        .iter()
        .filter(|e| e.name == "compact.proposal")
        .collect();
    let [event] = proposals.as_slice() else {
        panic!("one compact.proposal: {:?}", plugin.events);
    };
    let a = &event.attributes;
    assert_eq!(text_attr(a, "strategy").as_deref(), Some("misbehave@0.0.1"));
    assert_eq!(text_attr(a, "action").as_deref(), Some("externalize"));
    assert_eq!(int_attr(a, "message_count"), 1);
    assert_eq!(int_attr(a, "estimated_tokens_freed"), ESTIMATE);
    // Measured by the host: what the step freed, not what was claimed.
    let freed = int_attr(a, "tokens_freed");
    assert_eq!(freed, i64::from(step.tokens_freed));
    assert_ne!(freed, ESTIMATE);
    assert_eq!(text_attr(a, "accepted").as_deref(), Some("BoolValue(true)"));
    // Counts only: no ids from the request, no rationale.
    for kv in a {
        let v = text_attr(a, &kv.key).unwrap_or_default();
        assert!(
            v != RATIONALE && !v.contains("t1") && !v.contains("t-estimate"),
            "{} = {v}",
            kv.key
        );
    }

    // The estimate's error, per plugin and action.
    let errors: Vec<_> = sink
        .metrics()
        .into_iter()
        .filter(|m| m.name == "compactd.plugin.estimate_error")
        .flat_map(|m| match m.data {
            Some(Data::Histogram(h)) => h.data_points,
            _ => Vec::new(),
        })
        .collect();
    let point = errors
        .iter()
        .find(|p| {
            text_attr(&p.attributes, "plugin").as_deref() == Some("misbehave@0.0.1")
                && text_attr(&p.attributes, "action").as_deref() == Some("externalize")
        })
        .unwrap_or_else(|| panic!("no estimate_error point: {errors:?}"));
    assert_eq!(point.count, 1);
    assert_eq!(point.sum, Some((ESTIMATE - freed).unsigned_abs() as f64));

    let exported = sink.everything();
    assert!(!exported.contains(ROW), "message content was exported");
}
