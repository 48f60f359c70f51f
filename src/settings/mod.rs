//! The service's settings: plain data that the config file, the
//! environment and the command line fill in, and [`Settings::validate`],
//! the one check `config check` and `serve` both run, so every
//! configuration `serve` refuses, `config check` refuses with the same
//! message and field path.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::app::{Defaults, Lifecycle};
use crate::reduce::Policy;
use crate::security::tls;
use crate::security::{AuthConfig, Authenticator};

mod edge;
mod error;

pub use edge::{AccessLogSink, TenantLimits};
pub use error::{ServeError, Startup};

/// Everything the service needs to run. Plain data, so the config file can
/// embed it; every field has a default that works for a local start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// Address to listen on. Non-loopback addresses require authentication.
    pub listen: SocketAddr,
    /// What loading rewrote from an older config layout (see
    /// [`crate::config::migrate`]), for `serve` to log and `config check`
    /// to print. Never read from or written to a file.
    #[serde(skip)]
    pub deprecations: Vec<String>,
    /// Directory of the embedded plan and artifact stores.
    pub data_dir: PathBuf,
    /// The local keyring that encrypts artifacts; `None`:
    /// `{data_dir}/keys/keyring.json`. Put it outside `data_dir` (another
    /// volume, a mounted Secret) so a copy of the data is not a copy of the key.
    pub keyring_file: Option<PathBuf>,
    /// Where artifacts are stored and which key service wraps their keys
    /// (filesystem + local keyring by default; S3 and KMS).
    pub artifacts: crate::store::backend::ArtifactsSettings,
    /// Where plans are stored (by default wherever artifacts are).
    pub plans: crate::store::backend::PlansSettings,
    /// Render injects public and internal artifacts the agent names in its
    /// latest turn, within these limits.
    pub auto_rehydrate: crate::render::AutoRehydrate,
    /// Render adds passages of compacted content that match the latest
    /// request, within these limits.
    pub recall: crate::recall::RecallSettings,
    /// Largest request message accepted, in bytes (after decompression).
    pub max_message_bytes: usize,
    /// Deadline of one call on the server, in milliseconds (0: none).
    pub request_timeout_ms: u64,
    /// Calls in flight per tenant (0: unlimited).
    pub per_tenant_concurrency: u32,
    /// Sustained calls per second per tenant (0: unlimited).
    pub per_tenant_rps: f64,
    /// Calls a tenant may make in a burst.
    pub per_tenant_burst: u32,
    /// Sustained request bytes per second per tenant (0: unlimited).
    pub per_tenant_bytes_per_second: f64,
    /// Request bytes a tenant may send in a burst (a request larger than
    /// this passes a full bucket, charged as the whole burst).
    pub per_tenant_bytes_burst: u64,
    /// Sustained thread messages per second per tenant (0: unlimited).
    pub per_tenant_messages_per_second: f64,
    /// Thread messages a tenant may send in a burst.
    pub per_tenant_messages_burst: u64,
    /// API calls in flight for the whole server; beyond it calls are shed
    /// with RESOURCE_EXHAUSTED instead of queueing. Health checks and
    /// reflection are never counted or shed.
    pub global_concurrency: usize,
    /// Request bytes the server works on at once (0: no limit): a call
    /// whose request does not fit waits, first come first served, until
    /// calls in flight end, so the memory of calls in flight stays bounded
    /// (docs/operations.md gives its multiple of these bytes).
    pub in_flight_bytes: u64,
    /// How often the plan store is probed for the health status, in ms.
    pub health_probe_interval_ms: u64,
    /// A second, plaintext listener that serves only `grpc.health.v1`
    /// (no auth, no TLS), for probes that cannot speak TLS, such as
    /// kubelet's native gRPC probes. `None`: health is on `listen` only.
    pub health_listen: Option<SocketAddr>,
    /// Threads of the compute pool that runs compactions (0: one per core).
    pub compute_threads: usize,
    /// How much lower the compute threads' OS priority is (Linux nice
    /// increment; 0: the same as request handling). Compactions of huge
    /// threads then yield the cores to other tenants' per-turn calls.
    pub compute_nice: i32,
    /// Entries of the process-wide token ledger.
    pub ledger_max_entries: usize,
    /// HTTP/2 initial stream window, bytes (large requests are the norm).
    pub http2_stream_window_bytes: u32,
    /// HTTP/2 initial connection window, bytes.
    pub http2_connection_window_bytes: u32,
    /// Model used when a request names none (tokenizer and payload `model`).
    pub default_model: String,
    /// Input limit used when a request gives none.
    pub default_max_input_tokens: u32,
    /// No request's policy can lower `safety_buffer_tokens` below this: the
    /// buffer absorbs what a count may miss, above all for models whose
    /// tokenizer is estimated.
    pub min_safety_buffer_tokens: u32,
    /// The compaction policy; requests may override parts of it.
    pub policy: Policy,
    /// Artifact retention, the sweeper and per-tenant quotas.
    pub lifecycle: Lifecycle,
    /// Secrets redacted from everything compactd keeps (artifacts, summaries).
    pub redaction: crate::redact::RedactionConfig,
    /// Where the per-call access log goes (JSON lines; no content).
    pub access_log: AccessLogSink,
    /// Authentication.
    pub auth: AuthConfig,
    /// Server TLS (certificate and key files, reloaded when they change).
    /// `auth.mtls` brings its own files and is not combined with this.
    pub tls: Option<tls::TlsSettings>,
    /// TLS is terminated in front of the service (a mesh sidecar or load
    /// balancer on the same host or network): allow JWT and API-key callers
    /// on a non-loopback plaintext listener. Off by default, because bearer
    /// secrets would otherwise cross the network in cleartext.
    pub allow_plaintext_behind_tls_terminator: bool,
    /// Who writes summaries: the built-in extractive summarizer, or an
    /// OpenAI-compatible endpoint with the extractive one as its fallback.
    pub summarizer: crate::llm::SummarizerSettings,
    /// Strategy plugins loaded at start-up.
    pub plugins: crate::plugin::PluginsSettings,
    /// Trace export (OTLP/gRPC) and how tenants appear in it.
    pub telemetry: crate::telemetry::TelemetrySettings,
    /// How provider bodies are read.
    pub import: ImportSettings,
}

/// How provider bodies are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ImportSettings {
    /// An item or block of a type this release does not know (a provider
    /// added it since): `carry` it as it came, with a warning, or
    /// `refuse` the thread naming it.
    pub unknown_items: crate::model::UnknownItems,
}

impl Default for Settings {
    fn default() -> Self {
        let app = Defaults::default();
        Settings {
            listen: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 50051),
            deprecations: Vec::new(),
            data_dir: PathBuf::from("compactd-data"),
            keyring_file: None,
            artifacts: Default::default(),
            plans: Default::default(),
            auto_rehydrate: Default::default(),
            recall: Default::default(),
            max_message_bytes: 64 * 1024 * 1024,
            request_timeout_ms: 30_000,
            per_tenant_concurrency: 64,
            per_tenant_rps: 500.0,
            per_tenant_burst: 1000,
            per_tenant_bytes_per_second: 64.0 * 1024.0 * 1024.0,
            per_tenant_bytes_burst: 256 * 1024 * 1024,
            per_tenant_messages_per_second: 200_000.0,
            per_tenant_messages_burst: 1_000_000,
            global_concurrency: 1024,
            in_flight_bytes: 64 << 20,
            health_probe_interval_ms: 1000,
            health_listen: None,
            compute_threads: 0,
            compute_nice: 10,
            ledger_max_entries: crate::tokens::DEFAULT_MAX_ENTRIES,
            http2_stream_window_bytes: crate::client::STREAM_WINDOW_BYTES,
            http2_connection_window_bytes: crate::client::CONNECTION_WINDOW_BYTES,
            default_model: app.model,
            default_max_input_tokens: app.max_input_tokens,
            min_safety_buffer_tokens: app.min_safety_buffer_tokens,
            policy: app.policy,
            lifecycle: Lifecycle::default(),
            redaction: crate::redact::RedactionConfig::default(),
            access_log: AccessLogSink::default(),
            auth: AuthConfig::default(),
            tls: None,
            allow_plaintext_behind_tls_terminator: false,
            summarizer: crate::llm::SummarizerSettings::default(),
            plugins: crate::plugin::PluginsSettings::default(),
            telemetry: crate::telemetry::TelemetrySettings::default(),
            import: ImportSettings::default(),
        }
    }
}

impl Settings {
    /// What the use cases fall back on when a request leaves it out.
    pub fn app_defaults(&self) -> Defaults {
        Defaults {
            policy: self.policy.clone(),
            model: self.default_model.clone(),
            max_input_tokens: self.default_max_input_tokens,
            min_safety_buffer_tokens: self.min_safety_buffer_tokens,
            auto_rehydrate: self.auto_rehydrate,
            recall: self.recall,
            unknown_items: self.import.unknown_items,
        }
    }
}

impl Settings {
    /// The admission limits.
    pub fn tenant_limits(&self) -> TenantLimits {
        TenantLimits {
            global_concurrency: self.global_concurrency,
            concurrency: self.per_tenant_concurrency,
            rps: self.per_tenant_rps,
            burst: self.per_tenant_burst,
            bytes_per_second: self.per_tenant_bytes_per_second,
            bytes_burst: self.per_tenant_bytes_burst,
            messages_per_second: self.per_tenant_messages_per_second,
            messages_burst: self.per_tenant_messages_burst,
            in_flight_bytes: self.in_flight_bytes,
        }
    }

    /// The call deadline.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }
}

impl Settings {
    /// What these settings leave unprotected that a deployment is
    /// expected to protect: logged as warnings at start-up and printed by
    /// `config check`, so turning a protection off is never silent.
    pub fn protection_warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.redaction.defaults {
            out.push(format!(
                "redaction.defaults is off: secrets in threads (keys, tokens, passwords, card numbers) are kept unredacted in artifacts, summaries, stubs and plans{}",
                if self.redaction.patterns.is_empty() {
                    "; no redaction rule applies at all".to_string()
                } else {
                    format!("; only the {} configured pattern(s) apply", self.redaction.patterns.len())
                }
            ));
        }
        out
    }

    /// Refuses configurations that would expose the service: no
    /// authentication without an explicit dev mode, dev mode anywhere but
    /// loopback, bearer secrets on a non-loopback plaintext listener. Also
    /// checks ranges, the policy, the summarizer, the stores and plugins as
    /// far as the settings tell, the auth section and the TLS files (key
    /// files are read), and compiles the redaction rules: what it returns is
    /// built once and handed to the server.
    pub fn validate(&self) -> Result<Startup, ServeError> {
        let invalid = |field: &str, message: &str| ServeError::invalid(field, message);
        self.policy
            .validate()
            .map_err(|e| ServeError::invalid(e.field, e.reason))?;
        if self.default_model.is_empty() {
            return Err(invalid("server.default_model", "must not be empty"));
        }
        self.summarizer
            .validate()
            .map_err(|(field, why)| ServeError::invalid(&field, why))?;
        self.telemetry
            .validate()
            .map_err(|(field, why)| ServeError::invalid(&field, why))?;
        if self.min_safety_buffer_tokens > self.policy.safety_buffer_tokens {
            return Err(invalid(
                "server.min_safety_buffer_tokens",
                "must not exceed policy.safety_buffer_tokens",
            ));
        }
        if self.default_max_input_tokens == 0 {
            return Err(invalid(
                "server.default_max_input_tokens",
                "must be at least 1",
            ));
        }
        if self.max_message_bytes == 0 {
            return Err(invalid("server.max_message_bytes", "must be at least 1"));
        }
        if !(0..=19).contains(&self.compute_nice) {
            return Err(invalid("compute_nice", "must be in 0..=19"));
        }
        if self.global_concurrency == 0 {
            return Err(invalid("server.global_concurrency", "must be at least 1"));
        }
        for (field, rate) in [
            ("per_tenant_rps", self.per_tenant_rps),
            (
                "per_tenant_bytes_per_second",
                self.per_tenant_bytes_per_second,
            ),
            (
                "per_tenant_messages_per_second",
                self.per_tenant_messages_per_second,
            ),
        ] {
            if !(rate >= 0.0 && rate.is_finite()) {
                return Err(invalid(field, "must be a finite number >= 0"));
            }
        }
        // What `serve` refuses when it opens the stores and loads the plugins,
        // where no AWS call or library load is needed to know.
        crate::store::backend::check(&self.artifacts, &self.plans)
            .map_err(ServeError::from_open)?;
        crate::plugin::check_all(&self.plugins).map_err(|e| ServeError::invalid("plugins", e))?;
        let auth = Authenticator::from_config(&self.auth)?;
        let loopback = self.listen.ip().is_loopback();
        if auth.is_dev() && !loopback {
            return Err(ServeError::DevModeNotLoopback(self.listen));
        }
        if !auth.is_dev() && !auth.is_configured() {
            return Err(ServeError::NoAuthentication(self.listen));
        }
        let tls = tls_source(self)?.map(tls::load).transpose()?;
        if tls.is_none()
            && !loopback
            && auth.accepts_bearer_secrets()
            && !self.allow_plaintext_behind_tls_terminator
        {
            return Err(ServeError::PlaintextCredentials(self.listen));
        }
        let redactor = crate::redact::Redactor::from_config(&self.redaction)
            .map_err(|e| ServeError::invalid(e.field, e.message))?;
        Ok(Startup {
            authenticator: auth,
            tls,
            redactor,
        })
    }
}

/// Where the listener's key pair comes from: `tls`, or the files of
/// `auth.mtls` (which also verify client certificates); never both.
fn tls_source(settings: &Settings) -> Result<Option<tls::TlsSource>, ServeError> {
    match (&settings.tls, &settings.auth.mtls) {
        (Some(_), Some(_)) => Err(ServeError::invalid(
            "tls",
            "auth.mtls already configures the server certificate; set it in one place",
        )),
        (Some(t), None) => Ok(Some(tls::TlsSource {
            cert_file: t.cert_file.clone(),
            key_file: t.key_file.clone(),
            client_ca_file: None,
            reload_interval: Duration::from_secs(t.reload_interval_seconds),
        })),
        (None, Some(m)) => Ok(Some(tls::TlsSource {
            cert_file: m.cert_file.clone(),
            key_file: m.key_file.clone(),
            client_ca_file: Some(m.ca_file.clone()),
            reload_interval: Duration::from_secs(30),
        })),
        (None, None) => Ok(None),
    }
}
