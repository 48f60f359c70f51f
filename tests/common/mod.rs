//! Shared helpers for the core integration tests.
#![allow(dead_code)]

use compactd::provider::Format;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use compactd::app::{
    App, AppError, CompactCommand, Defaults, RenderCommand, RenderOutcome, RenderedOutput,
    WrittenArtifact,
};
use compactd::model::{CompactionPlan, Thread, ToolSchema};
use compactd::reduce::{
    compact, CompactError, CompactRequest, Compaction, Engine, Memo, Policy, Report,
};
use compactd::render::{render, RenderInput, Request, RequestCounter, RequestTokens};
use compactd::security::{AuthMethod, Permission, SecurityContext};
use compactd::store::{ArtifactStore, MemoryArtifactStore, MemoryPlanStore, PlanStore};
use compactd::summarize::ExtractiveSummarizer;
use compactd::tokens::{o200k, TokenLedger};

/// Compacts and renders through the application layer, exactly as the
/// service and the offline CLI do, over in-memory stores. Every call runs as
/// a fresh tenant, so `previous` alone decides which plan it builds on.
pub struct Harness {
    pub policy: Policy,
    pub system: Option<String>,
    /// The workspace slot of the assembled context (none by default).
    pub workspace: Option<compactd::render::RenderedMessage>,
    pub tools: Vec<ToolSchema>,
    pub observations: BTreeMap<String, compactd::model::DeterminismMetadata>,
    /// Render with pending tool calls left out (otherwise they are refused).
    pub omit_pending_calls: bool,
    /// An independent tokenizer and ledger, for the full recount check and
    /// for tests of the core alone.
    pub counter: Arc<dyn compactd::tokens::TokenCounter>,
    pub ledger: TokenLedger,
    pub memo: Memo,
    plans: Arc<MemoryPlanStore>,
    artifacts: Arc<MemoryArtifactStore>,
    app: App,
    runtime: tokio::runtime::Runtime,
    calls: AtomicU64,
}

impl Default for Harness {
    fn default() -> Self {
        let plans = Arc::new(MemoryPlanStore::default());
        // Content-addressed ids: golden renders stay byte-stable.
        let artifacts = Arc::new(MemoryArtifactStore::content_addressed());
        let app = App::new(
            Defaults::default(),
            plans.clone(),
            artifacts.clone(),
            100_000,
            compactd::app::Lifecycle::default(),
            std::sync::Arc::new(compactd::redact::Redactor::standard().clone()),
            compactd::app::Extensions::default(),
        );
        Harness {
            policy: Policy::default(),
            system: Some("You are a helpful agent.".into()),
            workspace: None,
            tools: Vec::new(),
            observations: BTreeMap::new(),
            omit_pending_calls: false,
            counter: o200k(),
            ledger: TokenLedger::new(100_000),
            memo: Memo::default(),
            plans,
            artifacts,
            app,
            runtime: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime"),
            calls: AtomicU64::new(0),
        }
    }
}

/// A compaction that was committed, rendered and counted by the app.
pub struct Outcome {
    pub plan: CompactionPlan,
    pub report: Report,
    pub artifacts: Vec<WrittenArtifact>,
    /// What the store holds for each of `artifacts`, read back.
    pub contents: Vec<String>,
    pub request: Request,
    pub tokens: RequestTokens,
}

impl Harness {
    /// The core's engine over the harness's own caches (core-only tests).
    pub fn engine(&self) -> Engine<'_> {
        Engine {
            cancel: compactd::reduce::Cancel::never(),
            redactor: compactd::redact::Redactor::standard(),
            counter: self.counter.as_ref(),
            ledger: &self.ledger,
            summarizer: &ExtractiveSummarizer,
            memo: &self.memo,
        }
    }

    /// The core pipeline alone, without stores or binding.
    pub fn core_compact(
        &self,
        thread: &Thread,
        max_input_tokens: u32,
        skip_aggressive: bool,
    ) -> Result<Compaction, CompactError> {
        self.core_compact_after(thread, max_input_tokens, skip_aggressive, None)
    }

    /// [`Self::core_compact`] starting from `previous`, the plan of an
    /// earlier turn.
    pub fn core_compact_after(
        &self,
        thread: &Thread,
        max_input_tokens: u32,
        skip_aggressive: bool,
        previous: Option<&CompactionPlan>,
    ) -> Result<Compaction, CompactError> {
        let req = CompactRequest {
            thread,
            policy: &self.policy,
            max_input_tokens,
            system: self.system.as_deref(),
            tools: &self.tools,
            workspace: self.workspace.as_ref(),
            previous,
            observations: &self.observations,
            skip_aggressive,
            limits: Default::default(),
            target: compactd::provider::Format::openai_chat_target(),
        };
        compact(&req, &self.engine())
    }

    /// Compact-and-render through the app in `format` for `model` (none:
    /// the default); `previous` is the plan committed last turn (none: a
    /// first compaction). Returns the tenant it ran as and what the app said.
    pub fn render_as(
        &self,
        thread: &Thread,
        max_input_tokens: u32,
        previous: Option<&CompactionPlan>,
        format: Format,
        model: Option<&str>,
    ) -> Result<(String, RenderOutcome), AppError> {
        self.render_recall(thread, max_input_tokens, previous, (format, model), None)
    }

    /// [`Self::render_as`] with recall on, off, or (`None`) as the server's
    /// default says.
    pub fn render_recall(
        &self,
        thread: &Thread,
        max_input_tokens: u32,
        previous: Option<&CompactionPlan>,
        (format, model): (Format, Option<&str>),
        recall: Option<bool>,
    ) -> Result<(String, RenderOutcome), AppError> {
        let tenant = format!("h{}", self.calls.fetch_add(1, Ordering::Relaxed));
        let ctx = SecurityContext {
            tenant_id: tenant.clone(),
            requester_id: "harness".into(),
            permissions: Permission::all(),
            method: AuthMethod::Dev,
        };
        self.runtime.block_on(async {
            if let Some(p) = previous {
                let mut p = p.clone();
                p.thread_id = thread.id.clone();
                self.plans
                    .commit(&tenant, &thread.id, &p, 0)
                    .await
                    .expect("seed the previous plan");
            }
            let mut request = CompactCommand::new(thread.clone(), self.policy.clone());
            request.max_input_tokens = Some(max_input_tokens);
            request.model = model.map(str::to_string);
            request.system = self.system.clone();
            request.workspace = self.workspace.clone();
            request.tools = Arc::new(self.tools.clone());
            request.observations = self.observations.clone();
            let out = self
                .app
                .render(
                    &ctx,
                    RenderCommand {
                        request,
                        compact_first: true,
                        plan_version: 0,
                        format,
                        max_output_tokens: None,
                        prompt_cache: Default::default(),
                        rehydrate_artifact_ids: Vec::new(),
                        omit_pending_calls: self.omit_pending_calls,
                        auto_rehydrate: None,
                        read_artifact_tool: false,
                        search_context_tool: false,
                        recall,
                        injections: Vec::new(),
                    },
                )
                .await?;
            Ok((tenant, out))
        })
    }

    /// Compact-and-render to neutral form through the app; `previous` is the
    /// plan committed last turn (none: a first compaction).
    pub fn compact(
        &self,
        thread: &Thread,
        max_input_tokens: u32,
        previous: Option<&CompactionPlan>,
    ) -> Result<Outcome, AppError> {
        // The plan's own prompt: recall adds per-turn passages the plan
        // does not count (tests/recall.rs covers them).
        let (tenant, out) = self.render_recall(
            thread,
            max_input_tokens,
            previous,
            (Format::Neutral, None),
            Some(false),
        )?;
        let RenderedOutput::Neutral(request) = out.output else {
            panic!("neutral output was asked for");
        };
        let compaction = out.compaction.expect("compact_first reports");
        // The pipeline's count (bound and recounted incrementally) equals a
        // full recount from scratch, and so does what the app reports;
        // pending calls left out only make the request smaller.
        let recount = RequestCounter::for_target(
            self.counter.as_ref(),
            &self.ledger,
            compactd::provider::Format::openai_chat_target(),
        )
        .request(&request);
        assert_eq!(
            out.tokens, recount,
            "reported tokens differ from a full count"
        );
        if self.omit_pending_calls {
            assert!(out.plan.compacted_token_count >= recount.total);
        } else {
            assert_eq!(
                out.plan.compacted_token_count, recount.total,
                "incremental count differs from a full count"
            );
        }
        let mut contents = Vec::new();
        for a in &compaction.artifacts {
            let (_, bytes) = self
                .runtime
                .block_on(self.artifacts.get(&tenant, &thread.id, &a.artifact_id))
                .expect("a written artifact reads back");
            contents.push(String::from_utf8(bytes).expect("UTF-8"));
        }
        Ok(Outcome {
            contents,
            report: compaction.report.expect("a fresh tenant never reuses"),
            artifacts: compaction.artifacts,
            plan: std::sync::Arc::unwrap_or_clone(out.plan),
            request,
            tokens: out.tokens,
        })
    }

    pub fn render(&self, thread: &Thread, plan: &CompactionPlan) -> Request {
        render(
            thread,
            plan,
            &RenderInput {
                system: self.system.as_deref(),
                tools: &self.tools,
                rehydrated: &[],
                options: &self.policy.render,
                omit_pending_calls: false,
                summaries: None,
                workspace: None,
            },
        )
    }
}

/// The words of a user message as rendered (default options delimit
/// them); other text as it is.
pub fn said(text: &str) -> &str {
    compactd::render::undelimit_user_text(text).unwrap_or(text)
}

/// All text of a request, for "does this fact survive" checks.
pub fn request_text(r: &Request) -> String {
    let mut s = r.system.clone().unwrap_or_default();
    for m in &r.messages {
        s.push('\n');
        s.push_str(&m.content.text());
    }
    s
}

use compactd::model::{
    Content, Durability, Message, MessageMetadata, Outcome as ToolOutcomeKind, Role, ToolCall,
    ToolContent, ToolResultEnvelope,
};

/// Builds canonical threads by hand: one `turn()` per user message.
#[derive(Default)]
pub struct ThreadBuilder {
    messages: Vec<Message>,
    turn: u32,
    calls: u32,
}

impl ThreadBuilder {
    fn push(&mut self, role: Role, content: &str) -> &mut Message {
        let id = format!("m{}", self.messages.len());
        self.messages.push(Message {
            id,
            role,
            content: Content::Text(content.to_string()),
            tool_calls: vec![],
            tool_result: None,
            turn: self.turn,
            metadata: MessageMetadata::default(),
        });
        self.messages.last_mut().unwrap()
    }

    pub fn system(&mut self, text: &str) -> &mut Self {
        self.push(Role::System, text);
        self
    }

    pub fn user(&mut self, text: &str) -> &mut Self {
        self.turn += 1;
        self.push(Role::User, text);
        self
    }

    pub fn protected_user(&mut self, text: &str) -> &mut Self {
        self.turn += 1;
        self.push(Role::User, text).metadata.protected = true;
        self
    }

    /// A developer instruction in the current turn (pinned by the default policy).
    pub fn developer(&mut self, text: &str) -> &mut Self {
        self.push(Role::Developer, text);
        self
    }

    pub fn assistant(&mut self, text: &str) -> &mut Self {
        self.push(Role::Assistant, text);
        self
    }

    /// An assistant call and its result in one go; returns the call id.
    pub fn tool(
        &mut self,
        name: &str,
        args: serde_json::Value,
        output: ToolContent,
        outcome: ToolOutcomeKind,
        durability: Option<Durability>,
    ) -> String {
        self.calls += 1;
        let call_id = format!("call_{}", self.calls);
        self.push(Role::Assistant, "").tool_calls.push(ToolCall {
            wire: None,
            id: call_id.clone(),
            name: name.into(),
            arguments: args,
        });
        let m = self.push(Role::Tool, "");
        m.content = Content::default();
        m.tool_result = Some(ToolResultEnvelope {
            wire: None,
            tool_name: name.into(),
            tool_call_id: call_id.clone(),
            outcome,
            content: output,
            key_fields: Default::default(),
            durability,
            determinism: None,
            started_at: None,
            completed_at: None,
        });
        call_id
    }

    /// The last message, for tweaks.
    pub fn last(&mut self) -> &mut Message {
        self.messages.last_mut().unwrap()
    }

    pub fn build(&self, id: &str) -> Thread {
        Thread::new(id, self.messages.clone())
    }
}

/// `lines` lines of log-like text (about 20 tokens a line).
pub fn log_lines(lines: usize) -> String {
    (0..lines)
        .map(|i| {
            format!(
                "2026-01-01T00:00:{:02} INFO worker {i} processed batch ok",
                i % 60
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Runs property `f` over `strategy` for `compactd_testkit::proptest_cases(default_cases)`
/// cases and fails unless at least `min_ok` of them reached the Ok path
/// (`f` returned `Ok(true)`): a generator that drifts into always taking the
/// error branch would otherwise pass while checking nothing. Returns the
/// number of cases run and the number that reached the Ok path.
pub fn run_counted<S: proptest::strategy::Strategy>(
    name: &str,
    strategy: S,
    default_cases: u32,
    min_ok: f64,
    f: impl Fn(S::Value) -> Result<bool, proptest::test_runner::TestCaseError>,
) -> (u32, u32) {
    let cases = compactd_testkit::proptest_cases(default_cases);
    let (ran, ok) = run_cases(name, strategy, cases, f);
    enough_ok(name, ran, ok, min_ok)
}

/// [`run_counted`] with the cases split over two threads, each runner with
/// its own random seed: for the properties whose long run (2,000 cases)
/// would keep one core busy for minutes while the other idles. `strategy`
/// makes each thread's strategy; the Ok-path share is checked on the sums.
pub fn run_counted_split<S: proptest::strategy::Strategy>(
    name: &str,
    strategy: impl Fn() -> S + Sync,
    default_cases: u32,
    min_ok: f64,
    f: impl Fn(S::Value) -> Result<bool, proptest::test_runner::TestCaseError> + Sync,
) -> (u32, u32) {
    let cases = compactd_testkit::proptest_cases(default_cases);
    let (strategy, f) = (&strategy, &f);
    let (ran, ok) = std::thread::scope(|scope| {
        let halves = [cases.div_ceil(2), cases / 2]
            .map(|share| scope.spawn(move || run_cases(name, strategy(), share, f)));
        halves.into_iter().fold((0, 0), |(ran, ok), half| {
            // A failed half has printed its case: the test fails with it.
            let (r, o) = half
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            (ran + r, ok + o)
        })
    });
    enough_ok(name, ran, ok, min_ok)
}

/// `cases` cases of `f` over `strategy`: how many ran and how many reached
/// the Ok path. Panics with the minimal failing input.
fn run_cases<S: proptest::strategy::Strategy>(
    name: &str,
    strategy: S,
    cases: u32,
    f: impl Fn(S::Value) -> Result<bool, proptest::test_runner::TestCaseError>,
) -> (u32, u32) {
    use proptest::test_runner::{Config, TestRunner};
    let mut runner = TestRunner::new(Config {
        cases,
        // Cases are reproducible from the printed minimal input.
        failure_persistence: None,
        ..Config::default()
    });
    let ok = std::cell::Cell::new(0u32);
    let ran = std::cell::Cell::new(0u32);
    let result = runner.run(&strategy, |v| {
        ran.set(ran.get() + 1);
        if f(v)? {
            ok.set(ok.get() + 1);
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{name}: {e}");
    }
    (ran.get(), ok.get())
}

/// Fails unless at least `min_ok` of `ran` cases reached the Ok path.
fn enough_ok(name: &str, ran: u32, ok: u32, min_ok: f64) -> (u32, u32) {
    eprintln!("{name}: {ok} of {ran} cases reached the Ok path");
    assert!(
        f64::from(ok) >= min_ok * f64::from(ran),
        "{name}: only {ok} of {ran} cases reached the Ok path (at least {:.0}% must)",
        min_ok * 100.0
    );
    (ran, ok)
}
