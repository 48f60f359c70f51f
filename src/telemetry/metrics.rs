//! OTLP metrics: what an operator graphs and alerts on. Instruments come from
//! the global meter provider (a no-op until [`super::Telemetry::install`]
//! sets one), so recording costs next to nothing when export is off.
//!
//! Attributes are bounded sets: method names, status codes, strategy names,
//! outcome labels. Tenants appear only with `telemetry.tenant_metrics`
//! (hashed with `hash_tenant_ids`), because every tenant is a time series.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use opentelemetry::metrics::{Counter, Histogram, Meter};
use opentelemetry::KeyValue;

/// Whether metrics carry the tenant, set once at start-up.
static TENANT_METRICS: AtomicBool = AtomicBool::new(false);

pub(super) fn set_tenant_metrics(on: bool) {
    TENANT_METRICS.store(on, Ordering::Relaxed);
}

/// Seconds: from a fast render (≈1 ms) to a slow LLM summary (minutes).
const SECONDS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];
/// Tokens: from a short thread to a million-token window.
const TOKENS: &[f64] = &[
    1_000.0,
    4_000.0,
    8_000.0,
    16_000.0,
    32_000.0,
    64_000.0,
    128_000.0,
    200_000.0,
    400_000.0,
    1_000_000.0,
    4_000_000.0,
];
/// Small counts (rehydration requests in a thread).
const COUNTS: &[f64] = &[0.0, 1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 21.0, 50.0, 100.0];

/// The instruments.
pub struct Metrics {
    rpc_duration: Histogram<f64>,
    rpc_errors: Counter<u64>,
    compactions: Counter<u64>,
    tokens_before: Histogram<u64>,
    tokens_after: Histogram<u64>,
    tokens_freed: Counter<u64>,
    summarizer_calls: Counter<u64>,
    summarizer_duration: Histogram<f64>,
    gen_ai_duration: Histogram<f64>,
    gen_ai_tokens: Histogram<u64>,
    cache_lookups: Counter<u64>,
    rehydrations: Counter<u64>,
    rehydration_requests: Counter<u64>,
    thread_rehydration_requests: Histogram<u64>,
    asked_for_compacted: Counter<u64>,
    plugin_calls: Counter<u64>,
    plugin_estimate_error: Histogram<u64>,
    turns_between_compactions: Histogram<u64>,
    task_outcomes: Counter<u64>,
    cache_predicted: Counter<u64>,
    cache_actual: Counter<u64>,
}

// Each instrument's name, unit (counters) and description, as exported.
const RPC_DURATION: (&str, &str) = (
    "rpc.server.call.duration",
    "API call latency, by method and status code",
);
const RPC_ERRORS: (&str, &str, &str) = (
    "compactd.rpc.errors",
    "{call}",
    "API calls that ended with a status other than OK, by code",
);
const COMPACTIONS: (&str, &str, &str) = (
    "compactd.compactions",
    "{compaction}",
    "Compact calls by outcome: compacted (a new plan version) or reused",
);
const TOKENS_BEFORE: (&str, &str) = (
    "compactd.compaction.tokens_before",
    "Request tokens before a compaction",
);
const TOKENS_AFTER: (&str, &str) = (
    "compactd.compaction.tokens_after",
    "Request tokens after a compaction",
);
const TOKENS_FREED: (&str, &str, &str) = (
    "compactd.compaction.tokens_freed",
    "{token}",
    "Tokens each strategy freed",
);
const SUMMARIZER_CALLS: (&str, &str, &str) = (
    "compactd.summarizer.calls",
    "{call}",
    "LLM summaries asked for, by outcome (ok, cached or the failure kind)",
);
const SUMMARIZER_DURATION: (&str, &str) = (
    "compactd.summarizer.duration",
    "Time to an LLM summary, retries included",
);
const GEN_AI_DURATION: (&str, &str) = (
    "gen_ai.client.operation.duration",
    "One request to the summarization model",
);
const CACHE_LOOKUPS: (&str, &str, &str) = (
    "compactd.cache.lookups",
    "{lookup}",
    "Cache lookups by cache and result (hit or miss)",
);
const REHYDRATIONS: (&str, &str, &str) = (
    "compactd.rehydrations",
    "{artifact}",
    "Artifacts brought back, explicitly or automatically, and those blocked (with why)",
);
const REHYDRATION_REQUESTS: (&str, &str, &str) = ("compactd.quality.rehydration_requests", "{request}", "Requests for compacted content, by source: read_artifact calls the agent made (each counted once), Rehydrate calls (the platform answering them counts again here: graph the sources apart)");
const TASK_OUTCOMES: (&str, &str, &str) = (
    "compactd.quality.task_outcomes",
    "{task}",
    "Task outcomes callers report, by outcome and whether the thread was compacted then",
);
const ASKED_FOR_COMPACTED: (&str, &str, &str) = ("compactd.quality.asked_for_compacted_context", "{turn}", "Turns in which the agent asked for something the thread had but the prompt no longer showed verbatim");
const CACHE_PREDICTED: (&str, &str, &str) = (
    "compactd.cache.predicted_tokens",
    "{token}",
    "Tokens compactd expected the provider to read from its prompt cache, for the bodies the provider reported on, by format",
);
const CACHE_ACTUAL: (&str, &str, &str) = (
    "compactd.cache.actual_tokens",
    "{token}",
    "Tokens the provider reported reading from its prompt cache, for the same bodies, by format (in the provider's count)",
);
const PLUGIN_CALLS: (&str, &str, &str) = (
    "compactd.plugin.calls",
    "{call}",
    "Plugin calls by plugin and outcome",
);

/// The process's instruments (created from the global meter on first use).
pub fn metrics() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(|| Metrics::new(&opentelemetry::global::meter("compactd")))
}

fn with_tenant(mut attrs: Vec<KeyValue>, tenant: &str) -> Vec<KeyValue> {
    if TENANT_METRICS.load(Ordering::Relaxed) && !tenant.is_empty() {
        attrs.push(KeyValue::new(
            "compactd.tenant",
            super::tenant_label(tenant),
        ));
    }
    attrs
}

impl Metrics {
    fn new(m: &Meter) -> Self {
        let seconds = |(name, what): (&'static str, &'static str)| {
            m.f64_histogram(name)
                .with_unit("s")
                .with_description(what)
                .with_boundaries(SECONDS.to_vec())
                .build()
        };
        let tokens = |(name, what): (&'static str, &'static str)| {
            m.u64_histogram(name)
                .with_unit("{token}")
                .with_description(what)
                .with_boundaries(TOKENS.to_vec())
                .build()
        };
        let count = |(name, unit, what): (&'static str, &'static str, &'static str)| {
            m.u64_counter(name)
                .with_unit(unit)
                .with_description(what)
                .build()
        };
        Metrics {
            rpc_duration: seconds(RPC_DURATION),
            rpc_errors: count(RPC_ERRORS),
            compactions: count(COMPACTIONS),
            tokens_before: tokens(TOKENS_BEFORE),
            tokens_after: tokens(TOKENS_AFTER),
            tokens_freed: count(TOKENS_FREED),
            summarizer_calls: count(SUMMARIZER_CALLS),
            summarizer_duration: seconds(SUMMARIZER_DURATION),
            gen_ai_duration: seconds(GEN_AI_DURATION),
            gen_ai_tokens: m
                .u64_histogram("gen_ai.client.token.usage")
                .with_unit("{token}")
                .with_description("Tokens the summarization model reported, input and output")
                .with_boundaries(vec![
                    64.0, 256.0, 1_024.0, 4_096.0, 16_384.0, 65_536.0, 262_144.0, 1_048_576.0,
                ])
                .build(),
            cache_lookups: count(CACHE_LOOKUPS),
            rehydrations: count(REHYDRATIONS),
            rehydration_requests: count(REHYDRATION_REQUESTS),
            thread_rehydration_requests: m
                .u64_histogram("compactd.quality.thread_rehydration_requests")
                .with_unit("{request}")
                .with_description("read_artifact calls in the whole thread, at each Render")
                .with_boundaries(COUNTS.to_vec())
                .build(),
            turns_between_compactions: m
                .u64_histogram("compactd.quality.turns_since_compaction")
                .with_unit("{turn}")
                .with_description("Turns between one compaction of a thread and the next, recorded at the next")
                .with_boundaries(COUNTS.to_vec())
                .build(),
            task_outcomes: count(TASK_OUTCOMES),
            cache_predicted: count(CACHE_PREDICTED),
            cache_actual: count(CACHE_ACTUAL),
            asked_for_compacted: count(ASKED_FOR_COMPACTED),
            plugin_calls: count(PLUGIN_CALLS),
            // Errors are small next to request sizes: finer buckets.
            plugin_estimate_error: m
                .u64_histogram("compactd.plugin.estimate_error")
                .with_unit("{token}")
                .with_description(
                    "How far a plugin's estimate of the tokens a proposal frees was from what it freed",
                )
                .with_boundaries(vec![
                    0.0, 10.0, 50.0, 100.0, 500.0, 1_000.0, 5_000.0, 20_000.0,
                ])
                .build(),
        }
    }

    /// One API call ended (`code` as its canonical name, e.g. `OK`).
    pub fn rpc(&self, method: &str, code: &str, seconds: f64, tenant: &str) {
        let attrs = with_tenant(
            vec![
                KeyValue::new("rpc.system", "grpc"),
                KeyValue::new("rpc.method", method.to_string()),
                KeyValue::new("rpc.grpc.status_code", code.to_string()),
            ],
            tenant,
        );
        self.rpc_duration.record(seconds, &attrs);
        if code != "OK" {
            self.rpc_errors.add(1, &attrs);
        }
    }

    /// A Compact call produced a plan (`reused`: the stored one still fits).
    pub fn compaction(&self, reused: bool, triggered: bool, before: u32, after: u32, tenant: &str) {
        let attrs = with_tenant(
            vec![
                KeyValue::new("outcome", if reused { "reused" } else { "compacted" }),
                KeyValue::new("triggered", triggered),
            ],
            tenant,
        );
        self.compactions.add(1, &attrs);
        if !reused {
            self.tokens_before.record(u64::from(before), &attrs);
            self.tokens_after.record(u64::from(after), &attrs);
        }
    }

    /// A strategy freed `tokens`.
    pub fn tokens_freed(&self, strategy: &str, tokens: u64) {
        self.tokens_freed
            .add(tokens, &[KeyValue::new("strategy", strategy.to_string())]);
    }

    /// An LLM summary was asked for: `outcome` is `ok`, `cached` or the failure kind.
    pub fn summarizer(&self, model: &str, outcome: &str, seconds: Option<f64>) {
        let attrs = [
            KeyValue::new("gen_ai.request.model", model.to_string()),
            KeyValue::new("outcome", outcome.to_string()),
        ];
        self.summarizer_calls.add(1, &attrs);
        if let Some(s) = seconds {
            self.summarizer_duration.record(s, &attrs);
        }
    }

    /// One request to the summarization model (GenAI semantic conventions).
    pub fn gen_ai_request(&self, r: &GenAiRequest<'_>) {
        let mut attrs = vec![
            KeyValue::new(super::genai::OPERATION_NAME, "chat"),
            KeyValue::new(super::genai::PROVIDER_NAME, r.provider.to_string()),
            KeyValue::new(super::genai::REQUEST_MODEL, r.model.to_string()),
        ];
        if let Some(e) = r.error_type {
            attrs.push(KeyValue::new("error.type", e.to_string()));
        }
        self.gen_ai_duration.record(r.seconds, &attrs);
        for (kind, n) in [("input", r.input_tokens), ("output", r.output_tokens)] {
            if let Some(n) = n {
                let mut a = attrs.clone();
                a.push(KeyValue::new(super::genai::TOKEN_TYPE, kind));
                self.gen_ai_tokens.record(n, &a);
            }
        }
    }

    /// A cache was consulted (`cache`: e.g. `summary`, `plan`).
    pub fn cache(&self, cache: &'static str, hit: bool) {
        self.cache_lookups.add(
            1,
            &[
                KeyValue::new("cache", cache),
                KeyValue::new("result", if hit { "hit" } else { "miss" }),
            ],
        );
    }

    /// An artifact was rehydrated (`blocked`: why it was not).
    pub fn rehydration(&self, mode: &'static str, blocked: Option<&str>, tenant: &str) {
        let attrs = with_tenant(
            vec![
                KeyValue::new("mode", mode),
                KeyValue::new(
                    "outcome",
                    if blocked.is_some() {
                        "blocked"
                    } else {
                        "served"
                    },
                ),
                KeyValue::new("reason", blocked.unwrap_or("").to_string()),
            ],
            tenant,
        );
        self.rehydrations.add(1, &attrs);
    }

    /// Requests for compacted content seen in a turn, by where they came from.
    pub fn rehydration_requests(&self, source: &'static str, n: u64, tenant: &str) {
        if n > 0 {
            self.rehydration_requests.add(
                n,
                &with_tenant(vec![KeyValue::new("source", source)], tenant),
            );
        }
    }

    /// A provider's report on a body beside what compactd expected of it.
    pub fn prompt_cache(
        &self,
        o: &crate::render::cache::CacheObservation,
        format: &'static str,
        tenant: &str,
    ) {
        let attrs = with_tenant(vec![KeyValue::new("format", format)], tenant);
        self.cache_predicted.add(u64::from(o.expected_read), &attrs);
        self.cache_actual
            .add(u64::from(o.usage.cache_read_tokens), &attrs);
    }

    /// The thread's read_artifact calls so far, sampled at a Render.
    pub fn thread_rehydration_requests(&self, n: u64, tenant: &str) {
        self.thread_rehydration_requests
            .record(n, &with_tenant(Vec::new(), tenant));
    }

    /// A compaction ran `turns` turns after the thread's previous one.
    pub fn turns_since_compaction(&self, turns: u32, tenant: &str) {
        self.turns_between_compactions
            .record(u64::from(turns), &with_tenant(Vec::new(), tenant));
    }

    /// A caller reported how its task went (`succeeded`/`failed`), and
    /// whether the prompt it ran on was compacted.
    pub fn task_outcome(&self, outcome: &'static str, compacted: bool, tenant: &str) {
        self.task_outcomes.add(
            1,
            &with_tenant(
                vec![
                    KeyValue::new("outcome", outcome),
                    KeyValue::new("compacted", compacted),
                ],
                tenant,
            ),
        );
    }

    /// The agent asked for context the thread had (a quality canary).
    pub fn asked_for_compacted_context(&self, tenant: &str) {
        self.asked_for_compacted
            .add(1, &with_tenant(Vec::new(), tenant));
    }

    /// A plugin call ended.
    pub fn plugin_call(&self, plugin: &str, outcome: &'static str) {
        self.plugin_calls.add(
            1,
            &[
                KeyValue::new("plugin", plugin.to_string()),
                KeyValue::new("outcome", outcome),
            ],
        );
    }

    /// |estimate − measured| tokens of one applied plugin proposal.
    pub fn plugin_estimate_error(&self, plugin: &str, action: &'static str, tokens: u32) {
        self.plugin_estimate_error.record(
            u64::from(tokens),
            &[
                KeyValue::new("plugin", plugin.to_string()),
                KeyValue::new("action", action),
            ],
        );
    }
}

/// One request to the summarization model, as metrics see it.
pub struct GenAiRequest<'a> {
    /// `gen_ai.provider.name`.
    pub provider: &'a str,
    /// `gen_ai.request.model`.
    pub model: &'a str,
    /// Wall time of the request.
    pub seconds: f64,
    /// `gen_ai.usage.input_tokens`, when the answer reported it.
    pub input_tokens: Option<u64>,
    /// `gen_ai.usage.output_tokens`, when the answer reported it.
    pub output_tokens: Option<u64>,
    /// `error.type` of a failed request.
    pub error_type: Option<&'a str>,
}
