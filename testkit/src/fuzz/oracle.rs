//! Runs one input the way the service handles a request and judges what
//! compactd did with it.

use compactd::provider::Format;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, Once};

use serde_json::{json, Map, Value};

use compactd::app::{App, AppError, Extensions, RenderOutcome, RenderedOutput};
use compactd::proto::pb;
use compactd::provider::thread_from_json;
use compactd::provider::{anthropic, openai_chat, openai_responses};
use compactd::reduce::Policy;
use compactd::render::ProviderOptions;
use compactd::security::{AuthMethod, Permission, SecurityContext};
use compactd::server::convert::{explain_command, rehydrate_command, render_command};

/// Every output format, each run for every input.
const FORMATS: [Format; 4] = [
    Format::Neutral,
    Format::OpenAiChat,
    Format::AnthropicMessages,
    Format::OpenAiResponses,
];

/// How many [`tricky_json`] texts there are.
pub(super) const TRICKY_JSON_COUNT: usize = 16;

/// JSON text a gRPC client can send where the API takes JSON as a string
/// (`content_json`, `arguments_json`, `key_fields`, `parameters_json`):
/// serde_json reads some of these and refuses others, and some it takes
/// only as raw text (lone surrogates, 10,000 levels of nesting).
fn tricky_json(i: u8) -> String {
    match usize::from(i) % TRICKY_JSON_COUNT {
        0 => r#""\ud800""#.into(),
        1 => r#"{"k\udfff":"v"}"#.into(),
        2 => r#"["\ude00\ud83d", "注文ID: 4f1c2a9e7b"]"#.into(),
        3 => format!("{}0{}", "[".repeat(10_000), "]".repeat(10_000)),
        4 => format!("{}1{}", r#"{"a":"#.repeat(10_000), "}".repeat(10_000)),
        5 => "1e400".into(),
        6 => "-0".into(),
        7 => "18446744073709551616".into(),
        8 => r#"{"id":1,"id":"2","order_id":"A-17"}"#.into(),
        9 => r#""\u0000\u001b[31m │ 9f86d081 │""#.into(),
        10 => "  [1, 2]  \n".into(),
        11 => r#"{"résumé_id":"ABC123X9","note":"\ud83d\ude00 70→-"}"#.into(),
        12 => String::new(),
        13 => "{".into(),
        14 => format!("{}0{}", "[".repeat(200), "]".repeat(200)),
        _ => format!("{}0{}", "[".repeat(100), "]".repeat(100)),
    }
}

/// JSON text sent over the wire in place of one JSON field of the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WireJson {
    /// 0: a tool result's `content_json`; 1: a call's `arguments_json`; 2: a
    /// `key_fields` value; 3: a tool schema's `parameters_json`.
    pub field: u8,
    /// Which result, call or tool (modulo how many there are).
    pub index: u16,
    /// Which [`tricky_json`] text.
    pub text: u8,
}

/// The request around a thread file.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Knobs {
    /// When non-zero, `max_input_tokens` is the document's token count
    /// times this over 1,000 (at least 1).
    pub budget_per_mille: u32,
    /// Otherwise this (0: the server's default).
    pub max_input_tokens: u32,
    /// Model (tokenizer); empty: the default.
    pub model: String,
    /// Response `max_tokens` for provider payloads.
    pub max_output_tokens: Option<u32>,
    /// Leave pending calls out instead of refusing.
    pub omit_pending_calls: bool,
    /// Auto-rehydration (`None`: the server's setting).
    pub auto_rehydrate: Option<bool>,
    /// Add the `read_artifact` tool.
    pub read_artifact_tool: bool,
    /// Policy overrides by their proto name; `retention.<tool>` and
    /// `durability.<tool>` for the per-tool maps.
    pub policy: Map<String, Value>,
    /// JSON text put on the wire in place of JSON fields.
    pub wire_json: Vec<WireJson>,
    /// A user message appended for a second turn on the committed plan.
    pub next_turn: Option<String>,
    /// Text Explain looks for; also tried as an artifact id.
    pub explain: String,
}

impl Knobs {
    /// The knobs every corpus entry is replayed with: budgets from "fits"
    /// down to a seventh of the thread, absolute budgets, JSON text only
    /// the wire can carry (and JSON it refuses), and a policy at its limits.
    pub fn sweep() -> Vec<Knobs> {
        let base = Knobs {
            omit_pending_calls: true,
            explain: "ID".into(),
            ..Knobs::default()
        };
        let mut policy = Map::new();
        for (k, v) in [
            ("keep_recent_turns", 1),
            ("keep_tool_io_pairs", 0),
            ("summary_max_tokens", 64),
            ("max_summaries", 1),
            ("externalize_threshold_tokens", 1),
            ("tool_result_max_chars", 1),
        ] {
            policy.insert(k.into(), json!(v));
        }
        vec![
            Knobs {
                budget_per_mille: 2_000,
                next_turn: Some("Und jetzt? 注文ID: 4f1c2a9e7b │ 70→-".into()),
                ..base.clone()
            },
            Knobs {
                budget_per_mille: 400,
                next_turn: Some("résumé_id: ABC123X9".into()),
                ..base.clone()
            },
            Knobs {
                budget_per_mille: 150,
                omit_pending_calls: false,
                ..base.clone()
            },
            Knobs {
                // JSON the wire takes: 10,000 levels of tool output (kept
                // as text), duplicate keys, 100 levels of schema.
                max_input_tokens: 1_500,
                wire_json: [(0, 3), (2, 8), (3, 15), (1, 11)]
                    .map(|(field, text)| WireJson {
                        field,
                        index: 0,
                        text,
                    })
                    .to_vec(),
                ..base.clone()
            },
            Knobs {
                // And JSON it refuses: lone surrogates, unreadable depth.
                max_input_tokens: 1_500,
                wire_json: [(1, 0), (2, 1), (3, 4)]
                    .map(|(field, text)| WireJson {
                        field,
                        index: 0,
                        text,
                    })
                    .to_vec(),
                ..base.clone()
            },
            Knobs {
                max_input_tokens: 3_000,
                policy,
                model: "claude-sonnet-4-5".into(),
                ..base
            },
        ]
    }

    /// As JSON, for a crash file's `.knobs.json`.
    pub fn to_json(&self) -> Value {
        json!({
            "budget_per_mille": self.budget_per_mille,
            "max_input_tokens": self.max_input_tokens,
            "model": self.model,
            "max_output_tokens": self.max_output_tokens,
            "omit_pending_calls": self.omit_pending_calls,
            "auto_rehydrate": self.auto_rehydrate,
            "read_artifact_tool": self.read_artifact_tool,
            "policy": self.policy,
            "wire_json": self.wire_json.iter().map(|w| json!([w.field, w.index, w.text])).collect::<Vec<_>>(),
            "next_turn": self.next_turn,
            "explain": self.explain,
        })
    }

    /// Read back from [`Knobs::to_json`]; missing members keep their default.
    pub fn from_json(v: &Value) -> Knobs {
        let u32_of = |k: &str| {
            v.get(k)
                .and_then(Value::as_u64)
                .map(|n| u32::try_from(n).unwrap_or(u32::MAX))
        };
        let str_of = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        Knobs {
            budget_per_mille: u32_of("budget_per_mille").unwrap_or(0),
            max_input_tokens: u32_of("max_input_tokens").unwrap_or(0),
            model: str_of("model").unwrap_or_default(),
            max_output_tokens: u32_of("max_output_tokens"),
            omit_pending_calls: v["omit_pending_calls"].as_bool().unwrap_or(false),
            auto_rehydrate: v["auto_rehydrate"].as_bool(),
            read_artifact_tool: v["read_artifact_tool"].as_bool().unwrap_or(false),
            policy: v["policy"].as_object().cloned().unwrap_or_default(),
            wire_json: v["wire_json"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|w| WireJson {
                            field: w[0].as_u64().unwrap_or(0) as u8,
                            index: w[1].as_u64().unwrap_or(0) as u16,
                            text: w[2].as_u64().unwrap_or(0) as u8,
                        })
                        .collect()
                })
                .unwrap_or_default(),
            next_turn: str_of("next_turn"),
            explain: str_of("explain").unwrap_or_default(),
        }
    }

    fn policy_overrides(&self) -> Option<pb::PolicyOverrides> {
        if self.policy.is_empty() {
            return None;
        }
        let mut p = pb::PolicyOverrides::default();
        for (k, v) in &self.policy {
            let n = v.as_u64().map(|n| u32::try_from(n).unwrap_or(u32::MAX));
            let f = v.as_f64();
            let b = v.as_bool();
            match k.as_str() {
                "trigger_ratio" => p.trigger_ratio = f,
                "target_ratio" => p.target_ratio = f,
                "safety_buffer_tokens" => p.safety_buffer_tokens = n,
                "response_reserve_tokens" => p.response_reserve_tokens = n,
                "rehydration_reserve_tokens" => p.rehydration_reserve_tokens = n,
                "injection_reserve_tokens" => p.injection_reserve_tokens = n,
                "keep_recent_turns" => p.keep_recent_turns = n,
                "keep_tool_io_pairs" => p.keep_tool_io_pairs = n,
                "externalize_threshold_tokens" => p.externalize_threshold_tokens = n,
                "summary_chunk_tokens" => p.summary_chunk_tokens = n,
                "summary_max_tokens" => p.summary_max_tokens = n,
                "max_summaries" => p.max_summaries = n,
                "tool_result_max_chars" => p.tool_result_max_chars = n,
                "keep_recent_tokens" => p.keep_recent_tokens = n,
                "enable_retention" => p.enable_retention = b,
                "enable_compress" => p.enable_compress = b,
                "enable_clear" => p.enable_clear = b,
                "enable_externalize" => p.enable_externalize = b,
                "enable_summarize" => p.enable_summarize = b,
                "enable_drop" => p.enable_drop = b,
                "delimit_user_content" => p.delimit_user_content = b,
                "enable_archive" => p.enable_archive = b,
                k => {
                    if let Some(tool) = k.strip_prefix("retention.") {
                        let n =
                            |m: &str| v[m].as_u64().map(|n| u32::try_from(n).unwrap_or(u32::MAX));
                        p.retention.insert(
                            tool.to_string(),
                            pb::ToolRetention {
                                keep_turns: n("keep_turns"),
                                keep_last: n("keep_last"),
                                never_evict: v["never_evict"].as_bool().unwrap_or(false),
                            },
                        );
                    } else if let Some(tool) = k.strip_prefix("durability.") {
                        let d = v.as_i64().unwrap_or(0) as i32;
                        p.durability.insert(tool.to_string(), d);
                    }
                }
            }
        }
        Some(p)
    }
}

/// What compactd did wrong with an input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding(pub String);

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What the inputs came to, summed over a run: shows that the generator
/// reaches rendering and not only the importer's error paths.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Tally {
    /// Inputs run.
    pub inputs: u64,
    /// Not UTF-8 or not JSON (the CLI's "input is not JSON").
    pub not_json: u64,
    /// JSON the importer refused, naming the field.
    pub not_imported: u64,
    /// Requests refused as INVALID_ARGUMENT (wire JSON, thread, policy).
    pub invalid: u64,
    /// Refused as INSUFFICIENT_BUDGET.
    pub insufficient: u64,
    /// Refused for a pending call.
    pub pending: u64,
    /// Bodies rendered and checked.
    pub rendered: u64,
    /// Of those, second turns on a committed plan.
    pub second_turns: u64,
    /// Compactions in which each reducer freed tokens: shows the budgets
    /// are small enough for every one to run.
    pub reducers: std::collections::BTreeMap<String, u64>,
}

impl std::ops::AddAssign for Tally {
    fn add_assign(&mut self, o: Tally) {
        self.inputs += o.inputs;
        self.not_json += o.not_json;
        self.not_imported += o.not_imported;
        self.invalid += o.invalid;
        self.insufficient += o.insufficient;
        self.pending += o.pending;
        self.rendered += o.rendered;
        self.second_turns += o.second_turns;
        for (name, n) in o.reducers {
            *self.reducers.entry(name).or_default() += n;
        }
    }
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} inputs: {} not JSON, {} not imported; renders: {} bodies checked ({} second turns), {} invalid argument, {} insufficient budget, {} pending call",
            self.inputs,
            self.not_json,
            self.not_imported,
            self.rendered,
            self.second_turns,
            self.invalid,
            self.insufficient,
            self.pending
        )?;
        let ran: Vec<String> = self
            .reducers
            .iter()
            .map(|(name, n)| format!("{name} {n}"))
            .collect();
        write!(f, "; reducers that freed tokens: {}", ran.join(", "))
    }
}

/// The panic message of the last panic on any thread (the compute pool
/// turns a panic into an internal error; this keeps what it said).
static LAST_PANIC: Mutex<Option<String>> = Mutex::new(None);

/// Panics are recorded but not printed (while a finding is shrunk).
static QUIET: AtomicBool = AtomicBool::new(false);

fn record_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if let Ok(mut last) = LAST_PANIC.lock() {
                *last = Some(info.to_string());
            }
            if !QUIET.load(Ordering::Relaxed) {
                previous(info);
            }
        }));
    });
}

fn take_panic() -> Option<String> {
    LAST_PANIC.lock().ok().and_then(|mut l| l.take())
}

/// Inputs between two fresh applications: the in-memory stores keep every
/// tenant's plans and artifacts.
const CHECKS_PER_APP: u64 = 256;

/// Runs inputs through an application over in-memory stores, as the
/// service's handlers do (wire request → command → use case → wire
/// response), every call as a fresh tenant.
pub struct Oracle {
    app: App,
    runtime: tokio::runtime::Runtime,
    base: Policy,
    checks: u64,
    tenants: u64,
}

impl Default for Oracle {
    fn default() -> Self {
        Self::new()
    }
}

impl Oracle {
    /// An oracle with the default policy and redaction.
    pub fn new() -> Self {
        record_panics();
        Oracle {
            app: crate::memory_app(Extensions::default()),
            runtime: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime"),
            base: Policy::default(),
            checks: 0,
            tenants: 0,
        }
    }

    /// Runs `doc` with `knobs` in every output format. `Err` when compactd
    /// panicked, answered an internal or undocumented error, or returned a
    /// body its provider would refuse or one over budget.
    pub fn check(&mut self, doc: &[u8], knobs: &Knobs) -> Result<Tally, Finding> {
        self.checks += 1;
        if self.checks.is_multiple_of(CHECKS_PER_APP) {
            self.app = crate::memory_app(Extensions::default());
        }
        take_panic();
        match std::panic::catch_unwind(AssertUnwindSafe(|| self.run(doc, knobs))) {
            Ok(Ok(t)) => Ok(t),
            Ok(Err(Finding(what))) => Err(Finding(match take_panic() {
                Some(p) => format!("{what}\n  after a panic: {p}"),
                None => what,
            })),
            Err(payload) => {
                let msg = payload
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                Err(Finding(format!("panic: {}", take_panic().unwrap_or(msg))))
            }
        }
    }

    /// Whether panics go unprinted (they are still caught and reported as
    /// findings): for re-running a known finding many times.
    pub fn quiet(&mut self, on: bool) {
        QUIET.store(on, Ordering::Relaxed);
    }

    fn ctx(&mut self) -> SecurityContext {
        self.tenants += 1;
        SecurityContext {
            tenant_id: format!("fuzz{}", self.tenants),
            requester_id: "fuzz".into(),
            permissions: Permission::all(),
            method: AuthMethod::Dev,
        }
    }

    fn run(&mut self, doc: &[u8], knobs: &Knobs) -> Result<Tally, Finding> {
        let mut tally = Tally {
            inputs: 1,
            ..Tally::default()
        };
        // The CLI's edge: the file is read as UTF-8, then parsed.
        let Ok(text) = std::str::from_utf8(doc) else {
            tally.not_json += 1;
            return Ok(tally);
        };
        let Ok(value) = serde_json::from_str::<Value>(text) else {
            tally.not_json += 1;
            return Ok(tally);
        };
        let Ok(input) = thread_from_json(&value, "fuzz") else {
            tally.not_imported += 1;
            return Ok(tally);
        };
        drop(value);
        let budget = if knobs.budget_per_mille > 0 {
            let tokens = compactd::tokens::o200k().count(text) as u64;
            let b = tokens * u64::from(knobs.budget_per_mille) / 1_000;
            u32::try_from(b.max(1)).unwrap_or(u32::MAX)
        } else {
            knobs.max_input_tokens
        };
        let mut req = pb::RenderRequest {
            thread: Some(pb::Thread::from(&input.thread)),
            compact_first: true,
            system_prompt: input.system.clone(),
            tools: input.tools.iter().map(pb::ToolSchema::from).collect(),
            model: knobs.model.clone(),
            max_output_tokens: knobs.max_output_tokens,
            max_input_tokens: budget,
            policy: knobs.policy_overrides(),
            omit_pending_calls: knobs.omit_pending_calls,
            auto_rehydrate: knobs.auto_rehydrate,
            read_artifact_tool: knobs.read_artifact_tool,
            ..pb::RenderRequest::default()
        };
        apply_wire_json(&mut req, &knobs.wire_json);
        for (k, format) in FORMATS.into_iter().enumerate() {
            let mut r = req.clone();
            r.format = pb::OutputFormat::from(format) as i32;
            let ctx = self.ctx();
            let Some(out) = self.render(&ctx, r.clone(), format, &mut tally)? else {
                continue;
            };
            if let Some(text) = &knobs.next_turn {
                let mut next = r;
                if let Some(t) = next.thread.as_mut() {
                    let turn = t.messages.last().map_or(0, |m| m.turn.saturating_add(1));
                    t.messages.push(pb::Message {
                        id: "fuzz-next-turn".into(),
                        role: pb::Role::User as i32,
                        text: text.clone(),
                        turn,
                        ..pb::Message::default()
                    });
                }
                // The agent reads back what the first turn archived.
                if let Some(c) = &out.compaction {
                    next.rehydrate_artifact_ids = c
                        .artifacts
                        .iter()
                        .take(2)
                        .map(|a| a.artifact_id.clone())
                        .collect();
                }
                if self.render(&ctx, next, format, &mut tally)?.is_some() {
                    tally.second_turns += 1;
                }
            }
            if k == 0 {
                self.explain_and_rehydrate(&ctx, &req, &out, knobs)?;
            }
        }
        Ok(tally)
    }

    /// One Render call; `None` when it was refused as documented.
    fn render(
        &mut self,
        ctx: &SecurityContext,
        r: pb::RenderRequest,
        format: Format,
        tally: &mut Tally,
    ) -> Result<Option<RenderOutcome>, Finding> {
        let cmd = match render_command(r, &self.base) {
            Ok(c) => c,
            Err(e) => {
                if std::env::var_os("COMPACTD_FUZZ_VERBOSE").is_some() {
                    eprintln!("refused on the wire: {e}");
                }
                tally.invalid += 1;
                return Ok(None);
            }
        };
        let limit = cmd.request.max_input_tokens;
        let out = match self.runtime.block_on(self.app.render(ctx, cmd)) {
            Ok(out) => out,
            Err(e) => {
                documented(&e, tally).map_err(|w| Finding(format!("{format:?}: {w}")))?;
                return Ok(None);
            }
        };
        check_body(format, &out).map_err(|w| Finding(format!("{format:?}: {w}")))?;
        if let Some(limit) = limit {
            if out.tokens.total > limit {
                return Err(Finding(format!(
                    "{format:?}: {} tokens rendered for a budget of {limit}",
                    out.tokens.total
                )));
            }
        }
        if let Some(c) = &out.compaction {
            let _ = pb::CompactResponse::from(c);
            for r in c.report.iter().flat_map(|r| &r.per_reducer) {
                if r.tokens_freed > 0 {
                    *tally.reducers.entry(r.name.clone()).or_default() += 1;
                }
            }
        }
        let _ = pb::RenderResponse::from(out.clone());
        tally.rendered += 1;
        Ok(Some(out))
    }

    /// Explain over the committed plan, and Rehydrate of what it archived
    /// (and of a made-up id).
    fn explain_and_rehydrate(
        &mut self,
        ctx: &SecurityContext,
        req: &pb::RenderRequest,
        out: &RenderOutcome,
        knobs: &Knobs,
    ) -> Result<(), Finding> {
        let thread_id = req
            .thread
            .as_ref()
            .map(|t| t.id.clone())
            .unwrap_or_default();
        let explain = pb::ExplainRequest {
            thread_id: thread_id.clone(),
            text: knobs.explain.clone(),
            thread: req.thread.clone(),
            search_artifacts: true,
            ..pb::ExplainRequest::default()
        };
        let mut ignored = Tally::default();
        // A text the wire refuses (blank, too long) is a documented refusal.
        if let Ok(cmd) = explain_command(explain, &compactd::reduce::Policy::default()) {
            match self.runtime.block_on(self.app.explain(ctx, cmd)) {
                Ok(e) => {
                    let _ = pb::ExplainResponse::from(e);
                }
                Err(e) => {
                    documented(&e, &mut ignored).map_err(|w| Finding(format!("Explain: {w}")))?
                }
            }
        }
        let written = out
            .compaction
            .as_ref()
            .and_then(|c| c.artifacts.first())
            .map(|a| a.artifact_id.clone());
        for (id, must_exist) in [(written, true), (Some(knobs.explain.clone()), false)] {
            let Some(id) = id else { continue };
            let cmd = rehydrate_command(pb::RehydrateRequest {
                thread_id: thread_id.clone(),
                artifact_id: id,
                max_tokens: if must_exist { 7 } else { 0 },
                model: knobs.model.clone(),
                ..pb::RehydrateRequest::default()
            });
            match self.runtime.block_on(self.app.rehydrate(ctx, cmd)) {
                Ok(r) => {
                    let _ = pb::RehydrateResponse::from(r);
                }
                Err(AppError::NotFound(_) | AppError::InvalidArgument { .. }) if !must_exist => {}
                Err(e) => return Err(Finding(format!("Rehydrate: {e} ({e:?})"))),
            }
        }
        Ok(())
    }
}

/// Ok for the refusals the API documents for bad or unfittable input.
fn documented(e: &AppError, tally: &mut Tally) -> Result<(), String> {
    if std::env::var_os("COMPACTD_FUZZ_VERBOSE").is_some() {
        eprintln!("refused: {e}");
    }
    match e {
        AppError::InvalidArgument { .. } => tally.invalid += 1,
        AppError::InsufficientBudget { .. } => tally.insufficient += 1,
        AppError::PendingToolCall { .. } => tally.pending += 1,
        other => return Err(format!("undocumented error: {other} ({other:?})")),
    }
    Ok(())
}

/// The body passes its provider's structure check; a neutral request passes
/// every provider's once converted.
fn check_body(format: Format, out: &RenderOutcome) -> Result<(), String> {
    let opts = ProviderOptions {
        model: "fuzz".into(),
        max_output_tokens: None,
        ..Default::default()
    };
    match &out.output {
        RenderedOutput::Neutral(req) => {
            openai_chat::check_pairing(&openai_chat::to_openai(req, &opts))
                .map_err(|e| format!("as OpenAI Chat: {e}"))?;
            anthropic::check_structure(&anthropic::to_anthropic(req, &opts))
                .map_err(|e| format!("as Anthropic: {e}"))?;
            openai_responses::check_structure(&openai_responses::to_responses(req, &opts))
                .map_err(|e| format!("as Responses: {e}"))
        }
        RenderedOutput::Payload(json) => {
            let body: Value = match serde_json::from_str(json) {
                Ok(b) => b,
                // Call arguments nested to serde_json's limit of 128 (each
                // JSON text is parsed on its own) sit a few levels deeper
                // in an Anthropic body: still JSON, just past what
                // serde_json reads by default. Checked as JSON text only.
                Err(e) if e.to_string().starts_with("recursion limit exceeded") => {
                    return serde_json::value::RawValue::from_string(json.clone())
                        .map(|_| ())
                        .map_err(|e| format!("the body is not JSON: {e}"));
                }
                Err(e) => return Err(format!("the body is not JSON: {e}")),
            };
            match format {
                Format::OpenAiChat => openai_chat::check_pairing(&body),
                Format::AnthropicMessages => anthropic::check_structure(&body),
                Format::OpenAiResponses => openai_responses::check_structure(&body),
                Format::Neutral => Err("a payload for the neutral format".into()),
            }
        }
    }
}

/// Puts [`tricky_json`] texts on the wire in place of JSON fields.
fn apply_wire_json(req: &mut pb::RenderRequest, wire: &[WireJson]) {
    for w in wire {
        let text = tricky_json(w.text);
        let i = usize::from(w.index);
        let Some(thread) = req.thread.as_mut() else {
            return;
        };
        match w.field % 4 {
            0 => {
                let mut results: Vec<&mut pb::ToolResultEnvelope> = thread
                    .messages
                    .iter_mut()
                    .filter_map(|m| m.tool_result.as_mut())
                    .collect();
                let n = results.len();
                if let Some(r) = results.get_mut(i % n.max(1)) {
                    r.content = Some(pb::tool_result_envelope::Content::ContentJson(text));
                }
            }
            1 => {
                let mut calls: Vec<&mut pb::ToolCall> = thread
                    .messages
                    .iter_mut()
                    .flat_map(|m| m.tool_calls.iter_mut())
                    .collect();
                let n = calls.len();
                if let Some(c) = calls.get_mut(i % n.max(1)) {
                    c.arguments_json = text;
                }
            }
            2 => {
                let mut results: Vec<&mut pb::ToolResultEnvelope> = thread
                    .messages
                    .iter_mut()
                    .filter_map(|m| m.tool_result.as_mut())
                    .collect();
                let n = results.len();
                if let Some(r) = results.get_mut(i % n.max(1)) {
                    r.key_fields.insert("注文ID".into(), text);
                }
            }
            _ => {
                if req.tools.is_empty() {
                    req.tools.push(pb::ToolSchema {
                        name: "read_file".into(),
                        ..pb::ToolSchema::default()
                    });
                }
                let n = req.tools.len();
                req.tools[i % n].parameters_json = text;
            }
        }
    }
}
