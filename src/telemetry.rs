//! Telemetry: the process's `tracing` subscriber, and with an OTLP endpoint
//! configured, trace export over OTLP/gRPC (batched, flushed at shutdown)
//! with the service's resource attributes.
//!
//! What is exported is what the code records on spans and events: ids,
//! counts, sizes, reasons and names. Message text and secrets are never
//! recorded, so they cannot be exported; tenant ids can be hashed
//! (`telemetry.hash_tenant_ids`) where a tenant's name is itself sensitive.

pub mod events;
pub mod metrics;

pub use metrics::metrics;

/// The OpenTelemetry GenAI semantic-convention names compactd sets on its
/// summarizer spans and metrics (own constants: the semconv crate marks its
/// GenAI names unstable).
pub mod genai {
    /// `chat` for Chat Completions.
    pub const OPERATION_NAME: &str = "gen_ai.operation.name";
    /// Who serves the model (`openai` for any OpenAI-compatible endpoint).
    pub const PROVIDER_NAME: &str = "gen_ai.provider.name";
    /// The model asked for.
    pub const REQUEST_MODEL: &str = "gen_ai.request.model";
    /// The model that answered.
    pub const RESPONSE_MODEL: &str = "gen_ai.response.model";
    /// `input` or `output` on `gen_ai.client.token.usage`.
    pub const TOKEN_TYPE: &str = "gen_ai.token.type";
}

use opentelemetry::trace::TracerProvider as _;
use opentelemetry::KeyValue;
use opentelemetry_otlp::{WithExportConfig, WithTonicConfig};
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use serde::{Deserialize, Serialize};
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::Layer as _;

/// The `telemetry` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetrySettings {
    /// OTLP/gRPC endpoint, e.g. `http://otel-collector:4317`. Unset: the
    /// standard `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`; none of them: no export.
    pub otlp_endpoint: Option<String>,
    /// `service.name` (`OTEL_SERVICE_NAME` wins when set).
    pub service_name: String,
    /// Export a SHA-256 prefix of the tenant id instead of the id.
    pub hash_tenant_ids: bool,
    /// Deadline of one export, in milliseconds (2 s: a collector that is
    /// slower than that is down, and spans queue rather than block calls).
    pub export_timeout_ms: u64,
    /// Longest a finished span waits to be sent, in milliseconds (at least
    /// 10): events are visible within about this long
    /// (`OTEL_BSP_SCHEDULE_DELAY` is the SDK's variable for the same; this
    /// setting wins).
    pub export_delay_ms: u64,
    /// Export OTLP metrics too (to the same endpoint, or
    /// `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`).
    pub metrics: bool,
    /// How often metrics are exported, in ms; unset: `OTEL_METRIC_EXPORT_INTERVAL`
    /// or 60 s.
    pub metrics_interval_ms: Option<u64>,
    /// Metrics carry the tenant (hashed with `hash_tenant_ids`). Off by
    /// default: every tenant becomes a time series of every metric.
    pub tenant_metrics: bool,
    /// Opt-in content capture: `compact.summary_created` carries the
    /// summary text (redacted, at most 8 KiB) as `payload`. Off by default;
    /// nothing else ever carries content.
    pub capture_content: bool,
}

impl Default for TelemetrySettings {
    fn default() -> Self {
        TelemetrySettings {
            otlp_endpoint: None,
            service_name: "compactd".into(),
            hash_tenant_ids: false,
            export_timeout_ms: 2_000,
            export_delay_ms: 200,
            metrics: true,
            metrics_interval_ms: None,
            tenant_metrics: false,
            capture_content: false,
        }
    }
}

impl TelemetrySettings {
    /// Where traces go, if anywhere: the setting, then the environment.
    pub fn endpoint(&self) -> Option<String> {
        self.signal_endpoint("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    }

    /// Where metrics go, if anywhere (and if they are on).
    pub fn metrics_endpoint(&self) -> Option<String> {
        self.metrics
            .then(|| self.signal_endpoint("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"))
            .flatten()
    }

    /// Refuses what `serve` would fail on when it builds the exporters:
    /// each endpoint traces or metrics would go to (the setting, else the
    /// environment) must parse as the gRPC exporter parses it, with an
    /// `http` or `https` scheme. Errors name the setting or the variable.
    pub fn validate(&self) -> Result<(), (String, String)> {
        // What only an export uses is checked only when something exports.
        if self.endpoint().is_some() || self.metrics_endpoint().is_some() {
            let named_by_env = std::env::var_os("OTEL_SERVICE_NAME").is_some();
            if self.service_name.trim().is_empty() && !named_by_env {
                return Err(("telemetry.service_name".into(), "must not be empty".into()));
            }
            if self.export_timeout_ms == 0 {
                return Err((
                    "telemetry.export_timeout_ms".into(),
                    "must be at least 1".into(),
                ));
            }
        }
        let signals = [
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", true),
            ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", self.metrics),
        ];
        for (var, on) in signals {
            let Some(endpoint) = on.then(|| self.signal_endpoint(var)).flatten() else {
                continue;
            };
            if let Err(why) = check_endpoint(&endpoint) {
                return Err((self.endpoint_source(var), why));
            }
        }
        Ok(())
    }

    /// Where an endpoint came from, as [`Self::signal_endpoint`] chose it.
    fn endpoint_source(&self, signal_var: &str) -> String {
        if self.otlp_endpoint.is_some() {
            "telemetry.otlp_endpoint".into()
        } else if std::env::var_os(signal_var).is_some() {
            signal_var.into()
        } else {
            "OTEL_EXPORTER_OTLP_ENDPOINT".into()
        }
    }

    fn signal_endpoint(&self, signal_var: &str) -> Option<String> {
        self.otlp_endpoint
            .clone()
            .or_else(|| std::env::var(signal_var).ok())
            .or_else(|| std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT").ok())
            .filter(|e| !e.trim().is_empty())
    }

    /// Applies the settings that shape every span and metric (tenant
    /// hashing, tenant attributes).
    pub fn apply(&self) {
        HASH_TENANT_IDS.store(self.hash_tenant_ids, std::sync::atomic::Ordering::Relaxed);
        metrics::set_tenant_metrics(self.tenant_metrics);
        CAPTURE_CONTENT.store(self.capture_content, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The target of the lifecycle, audit and quality events: telemetry for the
/// collector, left out of the diagnostic log unless `RUST_LOG` asks for it
/// (an audit line per Render would flood it).
pub const EVENTS: &str = "compactd::events";

/// Whether anyone (an exporter, a log filter) takes the events: what is
/// costly to measure for them is measured only then.
pub fn events_enabled() -> bool {
    tracing::enabled!(target: EVENTS, tracing::Level::INFO)
}

/// Whether events may carry (redacted) content, set once at start-up.
static CAPTURE_CONTENT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether `telemetry.capture_content` is on.
pub fn capture_content() -> bool {
    CAPTURE_CONTENT.load(std::sync::atomic::Ordering::Relaxed)
}

/// Whether tenant ids are hashed in telemetry, set once at start-up.
static HASH_TENANT_IDS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A tenant (or requester) id as telemetry shows it: as is, or hashed when
/// `telemetry.hash_tenant_ids` is set.
pub fn tenant_label(id: &str) -> String {
    if HASH_TENANT_IDS.load(std::sync::atomic::Ordering::Relaxed) {
        use sha2::{Digest, Sha256};
        format!(
            "sha256:{}",
            &hex::encode(Sha256::digest(id.as_bytes()))[..16]
        )
    } else {
        id.to_string()
    }
}

/// A count as a signed integer: the OpenTelemetry bridge exports unsigned
/// `tracing` values as strings, and `i64` ones as integers.
pub fn int<T: TryInto<i64>>(v: T) -> i64 {
    v.try_into().unwrap_or(i64::MAX)
}

/// Why export could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("telemetry: {0}")]
pub struct TelemetryError(String);

/// The exporters, kept to flush and shut them down at exit.
#[derive(Debug, Default)]
pub struct Telemetry {
    tracer: Option<SdkTracerProvider>,
    meter: Option<SdkMeterProvider>,
}

/// `service.name`, `service.version` and a random `service.instance.id`
/// (one per process, shared by traces and metrics).
fn resource(settings: &TelemetrySettings) -> Resource {
    static INSTANCE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let instance = INSTANCE.get_or_init(|| format!("{:032x}", rand::random::<u128>()));
    let mut resource = Resource::builder().with_attributes([
        KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
        KeyValue::new("service.instance.id", instance.clone()),
    ]);
    if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name(settings.service_name.clone());
    }
    resource.build()
}

/// A trace or metric exporter pointed at `endpoint` with the export
/// deadline, and TLS with the system's roots for `https://`.
fn to_endpoint<B: WithExportConfig + WithTonicConfig>(
    builder: B,
    endpoint: &str,
    settings: &TelemetrySettings,
) -> B {
    let builder = builder
        .with_endpoint(endpoint)
        .with_timeout(std::time::Duration::from_millis(settings.export_timeout_ms));
    if endpoint.starts_with("https://") {
        builder.with_tls_config(
            opentelemetry_otlp::tonic_types::transport::ClientTlsConfig::new().with_native_roots(),
        )
    } else {
        builder
    }
}

/// Why `endpoint` cannot be exported to: the exporter hands it to
/// tonic's channel, which takes an absolute URI; only `http` and `https`
/// connect.
fn check_endpoint(endpoint: &str) -> Result<(), String> {
    let uri: http::Uri = endpoint
        .parse()
        .map_err(|e| format!("{endpoint:?} is not a URL: {e}"))?;
    match uri.scheme_str() {
        Some("http" | "https") if uri.host().is_some_and(|h| !h.is_empty()) => {
            tonic::transport::Endpoint::from_shared(endpoint.to_owned())
                .map(drop)
                .map_err(|e| format!("{endpoint:?} is not a gRPC endpoint: {e}"))
        }
        Some("http" | "https") => Err(format!("{endpoint:?} names no host")),
        _ => Err(format!(
            "{endpoint:?} must start with http:// or https:// (e.g. http://otel-collector:4317)"
        )),
    }
}

/// Spans and events of the exporter's own transport are never exported
/// (they would feed on themselves), nor debug noise of the libraries.
fn export_filter() -> Targets {
    Targets::new()
        .with_default(LevelFilter::INFO)
        .with_target("h2", LevelFilter::OFF)
        .with_target("hyper", LevelFilter::OFF)
        .with_target("hyper_util", LevelFilter::OFF)
        .with_target("tonic", LevelFilter::OFF)
        .with_target("tower", LevelFilter::OFF)
        .with_target("opentelemetry", LevelFilter::OFF)
        .with_target("opentelemetry_sdk", LevelFilter::OFF)
        .with_target("opentelemetry_otlp", LevelFilter::OFF)
}

impl Telemetry {
    /// A tracer provider exporting to the configured endpoint, or `None`
    /// without one. Needs a Tokio runtime entered (the gRPC channel spawns
    /// its worker on it).
    pub fn provider(
        settings: &TelemetrySettings,
    ) -> Result<Option<SdkTracerProvider>, TelemetryError> {
        let Some(endpoint) = settings.endpoint() else {
            return Ok(None);
        };
        let exporter = to_endpoint(
            opentelemetry_otlp::SpanExporter::builder().with_tonic(),
            &endpoint,
            settings,
        )
        .build()
        .map_err(|e| TelemetryError(format!("OTLP exporter for {endpoint}: {e}")))?;
        // At least 10 ms: a zero delay makes the exporter's thread spin.
        let delay = settings.export_delay_ms.max(10);
        let batches = opentelemetry_sdk::trace::BatchConfigBuilder::default()
            .with_scheduled_delay(std::time::Duration::from_millis(delay))
            .build();
        let processor = opentelemetry_sdk::trace::BatchSpanProcessor::builder(exporter)
            .with_batch_config(batches)
            .build();
        Ok(Some(
            SdkTracerProvider::builder()
                .with_resource(resource(settings))
                .with_span_processor(processor)
                .build(),
        ))
    }

    /// A meter provider exporting to the metrics endpoint periodically, or
    /// `None` without one. Needs a Tokio runtime entered, like [`Self::provider`].
    pub fn meter_provider(
        settings: &TelemetrySettings,
    ) -> Result<Option<SdkMeterProvider>, TelemetryError> {
        let Some(endpoint) = settings.metrics_endpoint() else {
            return Ok(None);
        };
        let exporter = to_endpoint(
            opentelemetry_otlp::MetricExporter::builder().with_tonic(),
            &endpoint,
            settings,
        )
        .build()
        .map_err(|e| TelemetryError(format!("OTLP metric exporter for {endpoint}: {e}")))?;
        let mut reader = PeriodicReader::builder(exporter);
        if let Some(ms) = settings.metrics_interval_ms {
            reader = reader.with_interval(std::time::Duration::from_millis(ms.max(100)));
        }
        Ok(Some(
            SdkMeterProvider::builder()
                .with_resource(resource(settings))
                .with_reader(reader.build())
                .build(),
        ))
    }

    /// Installs the process's subscriber: human-readable logs on stderr
    /// (`RUST_LOG`, default `info`) and, with an endpoint, OTLP export.
    pub fn install(settings: &TelemetrySettings) -> Result<Telemetry, TelemetryError> {
        settings.apply();
        let provider = Self::provider(settings)?;
        let logs = tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_filter(
                tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                    tracing_subscriber::EnvFilter::new(format!("info,{EVENTS}=warn"))
                }),
            );
        let export = provider.as_ref().map(export_layer);
        let meter = Self::meter_provider(settings)?;
        tracing_subscriber::registry()
            .with(logs)
            .with(export)
            .try_init()
            .map_err(|e| TelemetryError(e.to_string()))?;
        if let Some(m) = &meter {
            opentelemetry::global::set_meter_provider(m.clone());
        }
        Ok(Telemetry {
            tracer: provider,
            meter,
        })
    }

    /// Whether traces are exported.
    pub fn exporting(&self) -> bool {
        self.tracer.is_some()
    }

    /// Whether metrics are exported.
    pub fn exporting_metrics(&self) -> bool {
        self.meter.is_some()
    }

    /// Exports what is still buffered and stops the exporters. Blocks: call
    /// it outside async code, while the runtime still runs.
    pub fn shutdown(self) {
        if let Some(p) = self.tracer {
            if let Err(e) = p.shutdown_with_timeout(std::time::Duration::from_secs(5)) {
                eprintln!("telemetry: flushing traces at shutdown failed: {e}");
            }
        }
        if let Some(m) = self.meter {
            if let Err(e) = m.shutdown_with_timeout(std::time::Duration::from_secs(5)) {
                eprintln!("telemetry: flushing metrics at shutdown failed: {e}");
            }
        }
    }
}

/// A layer exporting to `provider`, for embedders and tests that build their
/// own subscriber.
pub fn export_layer<S>(provider: &SdkTracerProvider) -> impl tracing_subscriber::Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("compactd"))
        .with_filter(export_filter())
}

/// A pipeline step in a span of its own, `reduce <name>`, with the request
/// tokens before and after it: where a compaction spent its time and what
/// each strategy freed. Outside the core, which stays free of telemetry.
pub struct Traced(pub Box<dyn crate::reduce::Reducer>);

impl crate::reduce::Reducer for Traced {
    fn name(&self) -> &'static str {
        self.0.name()
    }

    fn reduce(
        &self,
        p: &mut crate::reduce::Projection<'_>,
        budget: &crate::reduce::TokenBudget,
        state: &mut crate::reduce::PipelineState<'_>,
    ) -> Result<(), crate::reduce::CompactError> {
        let before = p.total();
        let span = tracing::info_span!(
            "compactd.reducer",
            otel.name = %format!("reduce {}", self.0.name()),
            compactd.reducer = self.0.name(),
            compactd.tokens_before = crate::telemetry::int(before),
            compactd.tokens_after = tracing::field::Empty,
            compactd.tokens_freed = tracing::field::Empty,
        );
        let _in = span.enter();
        let out = self.0.reduce(p, budget, state);
        let after = p.total();
        span.record("compactd.tokens_after", int(after));
        span.record("compactd.tokens_freed", int(before.saturating_sub(after)));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_endpoint(e: &str) -> TelemetrySettings {
        TelemetrySettings {
            otlp_endpoint: Some(e.into()),
            ..TelemetrySettings::default()
        }
    }

    /// What the exporter would refuse at start-up is refused by name when
    /// the settings are checked; what it takes passes.
    #[test]
    fn endpoints_are_checked_as_the_exporter_takes_them() {
        for bad in [
            "not a url",
            "otel-collector:4317",
            "ftp://c:21",
            "http://",
            "/v1",
        ] {
            let (field, why) = with_endpoint(bad).validate().expect_err(bad);
            assert_eq!(field, "telemetry.otlp_endpoint", "{bad}");
            assert!(why.contains(bad), "{why}");
        }
        for good in [
            "http://127.0.0.1:4317",
            "https://otel.example.com",
            "http://[::1]:4317/",
        ] {
            assert_eq!(with_endpoint(good).validate(), Ok(()), "{good}");
        }
        let unnamed = TelemetrySettings {
            service_name: " ".into(),
            ..with_endpoint("http://127.0.0.1:4317")
        };
        // The variable, when set, names the service instead.
        if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
            let (field, _) = unnamed.validate().expect_err("blank");
            assert_eq!(field, "telemetry.service_name");
        } else {
            assert_eq!(unnamed.validate(), Ok(()));
        }
        // Nothing exported: nothing of the export is checked.
        let quiet = TelemetrySettings {
            export_timeout_ms: 0,
            ..TelemetrySettings::default()
        };
        if quiet.endpoint().is_none() {
            assert_eq!(quiet.validate(), Ok(()));
        }
    }
}
