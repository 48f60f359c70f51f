//! The LLM summarizer: an OpenAI-compatible Chat Completions endpoint asked
//! for a [`StructuredSummary`] as JSON. Outside the pure core: the core
//! compacts with the extractive summarizer, and the application upgrades the
//! summaries a compaction created through this (see `app::summaries`), so a
//! slow or failing endpoint can only ever cost the upgrade, never the plan.
//!
//! What is sent and accepted is built in `summarize::llm` (pure); here are
//! the settings, the retries and the failure classification.

mod http;

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tracing::Instrument as _;

pub use http::{Endpoint, KeySource};

use crate::model::{Message, StructuredSummary};
use crate::summarize::llm::{
    chat_body, completion_content, completion_meta, parse_answer, transcript_chunks, user_prompt,
    AnswerError, ResponseFormat, Style,
};
use crate::summarize::{fit_to_size, merge_summaries};

/// Which summarizer writes summaries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SummarizerKind {
    /// The built-in extractive summarizer only (no network).
    #[default]
    Extractive,
    /// An OpenAI-compatible endpoint, with the extractive summary as the
    /// fallback and the quality gate's reference.
    Llm,
}

/// When LLM summaries are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SummaryMode {
    /// Compact waits for them.
    #[default]
    Sync,
    /// Compact commits the extractive summaries and returns; the LLM
    /// summaries are committed in the background as a new plan version,
    /// which the next call picks up.
    Background,
}

/// The `summarizer` section of the configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SummarizerSettings {
    /// `extractive` (default) or `llm`.
    pub kind: SummarizerKind,
    /// Base URL of the API, e.g. `https://api.openai.com/v1`; requests go
    /// to `{base_url}/chat/completions`.
    pub base_url: String,
    /// The summarization model: usually a smaller, cheaper one than the
    /// agent's (`gpt-4o-mini`).
    pub model: String,
    /// Environment variable that holds the API key.
    pub api_key_env: Option<String>,
    /// File that holds the API key (a mounted Secret), read at each call so
    /// rotation needs no restart. Takes precedence over `api_key_env`.
    pub api_key_file: Option<PathBuf>,
    /// Deadline of one attempt, in milliseconds.
    pub timeout_ms: u64,
    /// Retries of a transport error, timeout, 429 or 5xx.
    pub max_retries: u32,
    /// First retry delay in milliseconds; doubles per retry, with jitter.
    pub backoff_ms: u64,
    /// `max_tokens` of a request; halved (at most twice) when the endpoint
    /// reports the answer would not fit.
    pub max_output_tokens: u32,
    /// The summarization model's context, in tokens: a span whose
    /// transcript is larger is summarized in chunks that are merged.
    pub context_tokens: u32,
    /// Prompt template: `task_state`, `brief`, `decision_log`, `code_delta`.
    pub style: Style,
    /// How the JSON answer is requested.
    pub response_format: ResponseFormat,
    /// `sync` or `background`.
    pub mode: SummaryMode,
    /// Send messages marked `restricted` to the endpoint. Off: they are
    /// left out of what is sent (their facts still reach the summary
    /// through the local extractive pass and the gate).
    pub allow_restricted: bool,
    /// Allow a plain `http://` base URL on a non-loopback host (conversation
    /// content would cross the network in cleartext).
    pub allow_insecure_http: bool,
    /// Background summarizations waiting or running, at most.
    pub queue_capacity: usize,
    /// Background summarizations running at once.
    pub concurrency: usize,
    /// Bytes of answers kept in the in-memory layer of the summary cache
    /// (the encrypted artifact-store layer is bounded by artifact TTLs).
    pub cache_max_bytes: u64,
}

impl Default for SummarizerSettings {
    fn default() -> Self {
        SummarizerSettings {
            kind: SummarizerKind::Extractive,
            base_url: "https://api.openai.com/v1".into(),
            model: "gpt-4o-mini".into(),
            api_key_env: Some("OPENAI_API_KEY".into()),
            api_key_file: None,
            timeout_ms: 30_000,
            max_retries: 2,
            backoff_ms: 500,
            max_output_tokens: 2_000,
            context_tokens: 100_000,
            style: Style::TaskState,
            response_format: ResponseFormat::JsonSchema,
            mode: SummaryMode::Sync,
            allow_restricted: false,
            allow_insecure_http: false,
            queue_capacity: 256,
            concurrency: 4,
            cache_max_bytes: 16 << 20,
        }
    }
}

impl SummarizerSettings {
    /// Checks the section; errors name the field.
    pub fn validate(&self) -> Result<(), (String, String)> {
        let bad = |f: &str, why: &str| Err((format!("summarizer.{f}"), why.to_string()));
        if self.kind == SummarizerKind::Extractive {
            return Ok(());
        }
        let url: ::http::Uri = match self.base_url.parse() {
            Ok(u) => u,
            Err(e) => return bad("base_url", &e.to_string()),
        };
        match url.scheme_str() {
            Some("https") => {}
            Some("http") => {
                let host = url.host().unwrap_or("");
                let loopback = host == "localhost"
                    || host
                        .trim_matches(['[', ']'])
                        .parse::<std::net::IpAddr>()
                        .is_ok_and(|ip| ip.is_loopback());
                if !loopback && !self.allow_insecure_http {
                    return bad(
                        "base_url",
                        "plain http to a non-loopback host sends conversation content in \
                         cleartext; use https or set allow_insecure_http",
                    );
                }
            }
            _ => return bad("base_url", "must be an http(s) URL"),
        }
        if self.model.is_empty() {
            return bad("model", "must not be empty");
        }
        if self.timeout_ms == 0 {
            return bad("timeout_ms", "must be at least 1");
        }
        if self.max_output_tokens < 64 {
            return bad("max_output_tokens", "must be at least 64");
        }
        if self.context_tokens < 1_024 {
            return bad("context_tokens", "must be at least 1024");
        }
        if self.max_retries > 10 {
            return bad("max_retries", "must be at most 10");
        }
        if self.queue_capacity == 0 || self.concurrency == 0 {
            return bad(
                "queue_capacity",
                "queue_capacity and concurrency must be at least 1",
            );
        }
        Ok(())
    }

    /// Where the key comes from: the file, else the variable, else none.
    pub fn key_source(&self) -> KeySource {
        match (&self.api_key_file, &self.api_key_env) {
            (Some(f), _) => KeySource::File(f.clone()),
            (None, Some(v)) if !v.is_empty() => KeySource::Env(v.clone()),
            _ => KeySource::None,
        }
    }
}

/// Why the endpoint gave no usable summary. Every one of them ends in the
/// extractive summary being kept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LlmError {
    /// Settings or the key.
    #[error("configuration: {0}")]
    Config(String),
    /// An attempt ran past `timeout_ms`.
    #[error("timed out")]
    Timeout,
    /// Connection or protocol failure.
    #[error("transport: {0}")]
    Transport(String),
    /// A status that is not success.
    #[error("HTTP {status}")]
    Status {
        /// The status.
        status: u16,
    },
    /// The answer was refused, cut off or not a summary.
    #[error(transparent)]
    Answer(#[from] AnswerError),
}

impl LlmError {
    /// Short label for events and metrics (no content).
    pub fn kind(&self) -> String {
        match self {
            LlmError::Config(_) => "config".into(),
            LlmError::Timeout => "timeout".into(),
            LlmError::Transport(_) => "transport".into(),
            LlmError::Status { status } => format!("http_{status}"),
            LlmError::Answer(AnswerError::OverLimit) => "over_limit".into(),
            LlmError::Answer(AnswerError::Refused(_)) => "refused".into(),
            LlmError::Answer(AnswerError::Invalid(_)) => "invalid_answer".into(),
        }
    }

    /// Worth another attempt with the same request.
    fn transient(&self) -> bool {
        matches!(
            self,
            LlmError::Timeout
                | LlmError::Transport(_)
                | LlmError::Status {
                    status: 429 | 500..=599
                }
        )
    }
}

/// A 400 that says the request plus its `max_tokens` do not fit the model.
fn says_over_limit(body: &[u8]) -> bool {
    let text = String::from_utf8_lossy(&body[..body.len().min(4096)]).to_lowercase();
    text.contains("context_length_exceeded")
        || text.contains("maximum context length")
        || text.contains("max_tokens")
        || text.contains("too many tokens")
}

/// One span to summarize, as it may be sent: redacted, restricted messages
/// already left out.
#[derive(Debug)]
pub struct SpanInput<'a> {
    /// The messages not covered by `prior`, in thread order.
    pub messages: &'a [&'a Message],
    /// Summaries the new one replaces (already redacted).
    pub prior: &'a [&'a StructuredSummary],
    /// The extractive summary of the span: its span, artifacts and tool
    /// outcomes are kept as they are.
    pub template: &'a StructuredSummary,
    /// Size the answer must fit, in bytes of its rendering.
    pub max_chars: usize,
    /// The prompt template.
    pub style: Style,
}

/// What one summarization cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallStats {
    /// HTTP requests made.
    pub requests: u32,
    /// Of which retries after a transient failure.
    pub retries: u32,
    /// Of which retries asking for a shorter answer.
    pub shortened: u32,
}

/// The configured endpoint and how it is asked.
#[derive(Debug, Clone)]
pub struct LlmSummarizer {
    endpoint: Endpoint,
    settings: SummarizerSettings,
}

/// `gen_ai.provider.name`: the protocol spoken is OpenAI's Chat Completions,
/// whoever serves it.
const PROVIDER_NAME: &str = "openai";

/// Retries with half the answer size, at most.
const SHORTER_RETRIES: u32 = 2;

impl LlmSummarizer {
    /// From validated settings.
    pub fn new(settings: SummarizerSettings) -> Result<Self, LlmError> {
        settings
            .validate()
            .map_err(|(f, why)| LlmError::Config(format!("{f}: {why}")))?;
        let endpoint = Endpoint::new(
            &settings.base_url,
            settings.key_source(),
            Duration::from_millis(settings.timeout_ms),
        )?;
        Ok(LlmSummarizer { endpoint, settings })
    }

    /// The settings.
    pub fn settings(&self) -> &SummarizerSettings {
        &self.settings
    }

    /// `llm:{model}:{style}@{prompt hash}`: recorded with each summary and
    /// part of the cache key.
    pub fn id(&self, style: Style) -> String {
        format!("llm:{}:{}", self.settings.model, style.prompt_version())
    }

    /// Summarizes a span: chunk by chunk when its transcript exceeds the
    /// model's context (the chunks' answers merged field by field), each
    /// chunk with retries. The answer is not gated here: the caller holds
    /// the reference.
    pub async fn summarize(
        &self,
        input: &SpanInput<'_>,
    ) -> Result<(StructuredSummary, CallStats), LlmError> {
        // ≈3 bytes per token, less the template, what is carried (the
        // prior summaries, or for later chunks the earlier chunks' summary
        // fitted to the cap) and the answer's own room.
        let prior_bytes: usize = input
            .prior
            .iter()
            .map(|p| p.render_as_message().len())
            .sum::<usize>()
            .max(input.max_chars);
        let context = self.settings.context_tokens as usize * 3;
        let reserved = prior_bytes
            + input.style.template().len()
            + self.settings.max_output_tokens as usize * 4
            + 512;
        let room = context.saturating_sub(reserved).max(1_024);
        let chunks = transcript_chunks(input.messages, room);
        let mut stats = CallStats::default();
        let mut merged: Option<StructuredSummary> = None;
        for (k, chunk) in chunks.iter().enumerate() {
            // The prior summaries go with the first chunk; the later chunks
            // continue from what the earlier ones produced, fitted to the cap.
            let fitted = merged
                .as_ref()
                .map(|m| fit_to_size(m.clone(), input.max_chars));
            let carried: Vec<&StructuredSummary> = match &fitted {
                Some(m) => vec![m],
                None => input.prior.to_vec(),
            };
            let answer = self
                .ask(
                    input.style,
                    &carried,
                    chunk,
                    input.template,
                    input.max_chars,
                    &mut stats,
                )
                .await?;
            merged = Some(match merged {
                Some(m) if k > 0 => merge_summaries(input.template.span.clone(), &[&m], &answer),
                _ => answer,
            });
        }
        merged
            .map(|m| (m, stats))
            .ok_or_else(|| LlmError::Config("nothing to summarize".into()))
    }

    /// One chunk: transient failures retried with backoff, an answer that
    /// does not fit retried with half the tokens (and half the size asked for).
    async fn ask(
        &self,
        style: Style,
        prior: &[&StructuredSummary],
        transcript: &str,
        template: &StructuredSummary,
        max_chars: usize,
        stats: &mut CallStats,
    ) -> Result<StructuredSummary, LlmError> {
        let s = &self.settings;
        let mut max_tokens = s.max_output_tokens;
        let mut chars = max_chars;
        let mut transient = 0u32;
        let mut shorter = 0u32;
        loop {
            let body = chat_body(
                &s.model,
                style,
                &user_prompt(prior, transcript, chars),
                max_tokens,
                s.response_format,
            );
            stats.requests += 1;
            let mut retry_after = None;
            let span = self.request_span(max_tokens);
            let started = std::time::Instant::now();
            let reply = self
                .endpoint
                .post(body.to_string().into_bytes())
                .instrument(span.clone())
                .await;
            // The body is parsed once, for its usage and for its answer.
            let json = match &reply {
                Ok(r) => Some(serde_json::from_slice::<serde_json::Value>(&r.body)),
                Err(_) => None,
            };
            let meta = match &json {
                Some(Ok(v)) => completion_meta(v),
                _ => Default::default(),
            };
            let outcome = match reply {
                Ok(reply) if reply.status.is_success() => match json {
                    Some(Ok(v)) => completion_content(&v),
                    Some(Err(e)) => Err(AnswerError::Invalid(format!("response is not JSON: {e}"))),
                    None => Err(AnswerError::Invalid("no response".into())),
                }
                .and_then(|c| parse_answer(&c, template, template.span.last_turn))
                .map_err(LlmError::from),
                Ok(reply) if reply.status.as_u16() == 400 && says_over_limit(&reply.body) => {
                    Err(LlmError::Answer(AnswerError::OverLimit))
                }
                Ok(reply) => {
                    retry_after = reply.retry_after;
                    Err(LlmError::Status {
                        status: reply.status.as_u16(),
                    })
                }
                Err(e) => Err(e),
            };
            self.request_done(&span, started, &meta, outcome.as_ref().err());
            match outcome {
                Ok(summary) => return Ok(summary),
                Err(LlmError::Answer(AnswerError::OverLimit)) if shorter < SHORTER_RETRIES => {
                    shorter += 1;
                    stats.shortened += 1;
                    max_tokens = (max_tokens / 2).max(32);
                    chars = (chars / 2).max(256);
                }
                Err(e) if e.transient() && transient < s.max_retries => {
                    transient += 1;
                    stats.retries += 1;
                    tokio::time::sleep(self.backoff(transient, retry_after)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// A client span per request, named and attributed after the GenAI
    /// semantic conventions (`chat {model}`); no prompt or answer text.
    fn request_span(&self, max_tokens: u32) -> tracing::Span {
        let s = &self.settings;
        let url = self.endpoint.url();
        tracing::info_span!(
            "gen_ai.chat",
            otel.name = %format!("chat {}", s.model),
            otel.kind = "client",
            otel.status_code = tracing::field::Empty,
            gen_ai.operation.name = "chat",
            gen_ai.provider.name = PROVIDER_NAME,
            gen_ai.request.model = %s.model,
            gen_ai.request.max_tokens = crate::telemetry::int(max_tokens),
            gen_ai.response.model = tracing::field::Empty,
            gen_ai.response.finish_reasons = tracing::field::Empty,
            gen_ai.usage.input_tokens = tracing::field::Empty,
            gen_ai.usage.output_tokens = tracing::field::Empty,
            server.address = url.host().unwrap_or(""),
            server.port = crate::telemetry::int(url.port_u16().unwrap_or(if url.scheme_str() == Some("https") { 443 } else { 80 })),
            error.type = tracing::field::Empty,
        )
    }

    /// Records a request's usage and outcome on its span and in the metrics.
    fn request_done(
        &self,
        span: &tracing::Span,
        started: std::time::Instant,
        meta: &crate::summarize::llm::CompletionMeta,
        error: Option<&LlmError>,
    ) {
        if let Some(m) = &meta.response_model {
            span.record("gen_ai.response.model", m.as_str());
        }
        if let Some(f) = &meta.finish_reason {
            span.record("gen_ai.response.finish_reasons", f.as_str());
        }
        if let Some(n) = meta.input_tokens {
            span.record("gen_ai.usage.input_tokens", crate::telemetry::int(n));
        }
        if let Some(n) = meta.output_tokens {
            span.record("gen_ai.usage.output_tokens", crate::telemetry::int(n));
        }
        let kind = error.map(LlmError::kind);
        if let Some(k) = &kind {
            span.record("otel.status_code", "ERROR");
            span.record("error.type", k.as_str());
        }
        crate::telemetry::metrics().gen_ai_request(&crate::telemetry::metrics::GenAiRequest {
            provider: PROVIDER_NAME,
            model: &self.settings.model,
            seconds: started.elapsed().as_secs_f64(),
            input_tokens: meta.input_tokens,
            output_tokens: meta.output_tokens,
            error_type: kind.as_deref(),
        });
    }

    /// `backoff_ms · 2^(attempt-1)`, ±25% jitter, or what the server asked
    /// for (capped at 30 s).
    fn backoff(&self, attempt: u32, asked: Option<Duration>) -> Duration {
        if let Some(d) = asked {
            return d.min(Duration::from_secs(30));
        }
        let base = self
            .settings
            .backoff_ms
            .saturating_mul(1 << attempt.saturating_sub(1).min(10));
        let jitter = rand::random::<f64>() * 0.5 + 0.75;
        Duration::from_millis((base as f64 * jitter) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_http_is_refused_off_loopback() {
        let mut s = SummarizerSettings {
            kind: SummarizerKind::Llm,
            base_url: "http://llm.internal:8000/v1".into(),
            ..SummarizerSettings::default()
        };
        let (field, _) = s.validate().unwrap_err();
        assert_eq!(field, "summarizer.base_url");
        s.allow_insecure_http = true;
        assert!(s.validate().is_ok());
        s.allow_insecure_http = false;
        for ok in [
            "http://127.0.0.1:9/v1",
            "http://localhost:9",
            "http://[::1]:9",
            "https://x/v1",
        ] {
            s.base_url = ok.into();
            assert!(s.validate().is_ok(), "{ok}");
        }
        s.base_url = "ftp://x".into();
        assert!(s.validate().is_err());
    }

    #[test]
    fn over_limit_400s_are_recognized() {
        assert!(says_over_limit(
            br#"{"error":{"code":"context_length_exceeded","message":"This model's maximum context length is 8192 tokens"}}"#
        ));
        assert!(!says_over_limit(
            br#"{"error":{"message":"invalid model"}}"#
        ));
    }
}
