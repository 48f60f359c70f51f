//! `compactd inspect`: a human view of a plan and its render. Which parts of
//! the thread did the request keep, and what stands in for the rest?
//!
//! The plan is the one `compactd compact` makes of the same input (the same
//! offline Render, [`super::compact::offline`]), or one given with `--plan`.
//! Prints a table of spans in thread order with their fate and tokens
//! before and after, the totals, the budget and the warnings; `--html`
//! writes the same as one self-contained page, `--json` as data.

mod html;
mod memory;
mod table;
mod view;

use std::path::{Path, PathBuf};

use serde::Serialize;

use compactd::app::RenderedOutput;
use compactd::model::CompactionPlan;
use compactd::provider::Format;
use compactd::recall::BLOCK_HEADER;
use compactd::reduce::{budget_for, Policy};
use compactd::render::{render, RenderInput, RequestCounter};
use compactd::tokens::{counter_for, TokenLedger, DEFAULT_MAX_ENTRIES};

use super::compact::{offline, Offline, OfflineArgs};
use super::Failure;

/// Arguments of `compactd inspect`.
#[derive(clap::Args)]
pub struct InspectArgs {
    #[command(flatten)]
    offline: OfflineArgs,
    /// Render this plan instead of compacting: the `plan` object of
    /// `compactd compact`'s output, or that whole output.
    #[arg(long)]
    plan: Option<PathBuf>,
    /// Also write the view as one self-contained HTML page to this file.
    #[arg(long)]
    html: Option<PathBuf>,
    /// Also write the spans, totals, budget and warnings as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// The budget the request was compacted for, and where it landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Budget {
    /// The model's input limit.
    pub max_input_tokens: u32,
    /// The ceiling of the request without read-back content.
    pub hard_limit: u32,
    /// Compaction starts above this.
    pub trigger: u32,
    /// Compaction aims for this once triggered.
    pub target: u32,
    /// The request without a plan.
    pub tokens_before: u32,
    /// The request as rendered (the recall block included).
    pub tokens_after: u32,
    /// Whether the request without a plan crossed the trigger.
    pub triggered: bool,
}

/// Tokens that are the same before and after: system prompt, tool schemas,
/// reply framing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Fixed {
    /// The system prompt with its framing.
    pub system: u32,
    /// The tool schemas.
    pub tools: u32,
    /// Reply priming and other per-request framing.
    pub framing: u32,
}

impl Fixed {
    /// All of it.
    pub fn total(&self) -> u32 {
        self.system + self.tools + self.framing
    }
}

/// Content this request adds for this turn only.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PerTurn {
    /// Tokens of the recall block (0: none).
    pub recall_tokens: u32,
    /// Passages in it.
    pub recall_passages: u32,
    /// Tokens of artifacts read back.
    pub rehydrated_tokens: u32,
    /// The recall block's text, for the page.
    #[serde(skip)]
    pub recall_text: Option<String>,
}

/// Everything `inspect` shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct View {
    /// The thread.
    pub thread_id: String,
    /// The model counted for.
    pub model: String,
    /// Its tokenizer.
    pub tokenizer: String,
    /// The request's format.
    pub format: &'static str,
    /// The plan's version (1: committed by this run).
    pub plan_version: u64,
    /// Where the plan came from.
    pub plan_source: String,
    /// The thread as spans and messages.
    #[serde(flatten)]
    pub spans: view::Spans,
    /// System, tools, framing.
    pub fixed: Fixed,
    /// The recall block and read-back content.
    pub per_turn: PerTurn,
    /// The budget line.
    pub budget: Budget,
    /// Everything the thread, the pipeline and the renderer warned about.
    pub warnings: Vec<String>,
    /// What compactd remembers of the thread now, by kind.
    pub remembers: memory::Memory,
}

impl View {
    /// Tokens of all spans before the plan, and after.
    pub fn span_totals(&self) -> (u32, u32) {
        self.spans.spans.iter().fold((0, 0), |(b, a), s| {
            (b + s.tokens_before, a + s.tokens_after)
        })
    }

    /// The whole request before and after, as this view counts it.
    pub fn totals(&self) -> (u32, u32) {
        let (b, a) = self.span_totals();
        let fixed = self.fixed.total();
        (
            b + fixed,
            a + fixed + self.per_turn.recall_tokens + self.per_turn.rehydrated_tokens,
        )
    }
}

/// Reads `--plan`: a plan object, or a whole `compactd compact` output
/// (`{"plan", "request", "report"}`) whose `plan` is taken.
fn read_plan(path: &Path) -> Result<CompactionPlan, Failure> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Failure::bad_input(format!("--plan {}: {e}", path.display())))?;
    let mut value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| Failure::bad_input(format!("--plan {}: not JSON: {e}", path.display())))?;
    if value.get("thread_id").is_none() {
        if let Some(plan) = value.get_mut("plan") {
            value = plan.take();
        }
    }
    serde_json::from_value(value)
        .map_err(|e| Failure::bad_input(format!("--plan {}: not a plan: {e}", path.display())))
}

/// The recall block's text in the rendered output, wherever the format put it.
fn recall_text(output: &RenderedOutput) -> Option<String> {
    fn find(v: &serde_json::Value) -> Option<String> {
        match v {
            serde_json::Value::String(s) if s.contains(BLOCK_HEADER) => Some(s.clone()),
            serde_json::Value::Array(items) => items.iter().find_map(find),
            serde_json::Value::Object(map) => map.values().find_map(find),
            _ => None,
        }
    }
    match output {
        RenderedOutput::Neutral(r) => r
            .messages
            .iter()
            .find(|m| m.origin == compactd::render::Origin::Recalled)
            .map(|m| m.content.text().into_owned()),
        RenderedOutput::Payload(json) => serde_json::from_str(json).ok().as_ref().and_then(find),
    }
}

/// The view of one offline Render.
fn gather(args: &OfflineArgs, off: &Offline, plan_source: String) -> View {
    let out = &off.out;
    let defaults = off.app.defaults();
    // As the use case makes it effective: no safety buffer below the floor.
    let mut policy = defaults.policy.clone();
    policy.safety_buffer_tokens = policy
        .safety_buffer_tokens
        .max(defaults.min_safety_buffer_tokens);
    let target = Format::target(Some(args.format), &off.model);
    let counter = counter_for(target.framing.tokenizer, &off.model);
    let ledger = TokenLedger::new(DEFAULT_MAX_ENTRIES);
    let rc = RequestCounter::for_target(counter.as_ref(), &ledger, target);
    let mut warnings = off.warnings.clone();
    let mut plan = (*out.plan).clone();
    for w in plan.normalize() {
        warnings.push(w.to_string());
    }
    let input = RenderInput {
        system: off.system.as_deref(),
        tools: &off.tools,
        rehydrated: &[],
        options: &policy.render,
        omit_pending_calls: args.omit_pending_calls,
        summaries: None,
        workspace: None,
    };
    let before = render(&off.thread, &CompactionPlan::new(&off.thread.id), &input);
    let after = render(&off.thread, &plan, &input);
    let recalled: Vec<String> = out.recalled.iter().map(|p| p.message_id.clone()).collect();
    let spans = view::spans(&view::Sources {
        thread: &off.thread,
        plan: &plan,
        before: &before,
        after: &after,
        recalled: &recalled,
        counter: &rc,
    });
    let (system, tools, framing) = rc.fixed(off.system.as_deref(), &off.tools);
    let before_total = rc.request(&before).total;
    let budget = budget_of(off, &policy, &rc, before_total);
    let pinned = compactd::reduce::pinned_messages(&off.thread, &policy);
    let remembers = memory::of(&off.thread, &plan, &spans, &pinned);
    let mut view = View {
        thread_id: off.thread.id.clone(),
        model: off.model.clone(),
        tokenizer: counter.name().to_string(),
        format: args.format.name(),
        plan_version: out.plan.version,
        plan_source,
        spans,
        fixed: Fixed {
            system,
            tools,
            framing,
        },
        per_turn: PerTurn {
            recall_tokens: out.tokens.recalled,
            recall_passages: u32::try_from(out.recalled.len()).unwrap_or(u32::MAX),
            rehydrated_tokens: out.tokens.rehydrated,
            recall_text: recall_text(&out.output),
        },
        budget,
        warnings,
        remembers,
    };
    // The view recounts what it renders itself; say so if that ever
    // disagrees with the count of the request as sent.
    let (vb, va) = view.totals();
    if va != budget.tokens_after || vb != budget.tokens_before {
        view.warnings.push(format!(
            "inspect's per-span recount ({vb} before, {va} after) differs from the render's count ({} before, {} after)",
            budget.tokens_before, budget.tokens_after
        ));
    }
    view
}

/// The budget the render had: the compaction's report when it ran, else
/// worked out from the policy for the request as sent.
fn budget_of(off: &Offline, policy: &Policy, rc: &RequestCounter<'_>, before_total: u32) -> Budget {
    let out = &off.out;
    match out.compaction.as_ref().and_then(|c| c.report.as_ref()) {
        Some(r) => Budget {
            max_input_tokens: r.budget.max_input_tokens,
            hard_limit: r.budget.hard_limit,
            trigger: r.budget.trigger,
            target: r.budget.target,
            tokens_before: r.tokens_before,
            tokens_after: out.tokens.total,
            triggered: r.triggered,
        },
        None => {
            let b = budget_for(
                policy,
                off.max_input_tokens,
                rc,
                off.system.as_deref(),
                &off.tools,
                false,
            );
            Budget {
                max_input_tokens: off.max_input_tokens,
                hard_limit: b.hard_limit(),
                trigger: b.trigger(),
                target: b.target(),
                tokens_before: before_total,
                tokens_after: out.tokens.total,
                triggered: before_total > b.trigger(),
            }
        }
    }
}

/// Writes `contents` to `path`, naming the option on failure.
fn write(option: &str, path: &Path, contents: &str) -> Result<(), Failure> {
    std::fs::write(path, contents)
        .map_err(|e| Failure::other(format!("{option} {}: {e}", path.display())))
}

/// Runs the offline Render (or renders `--plan`) and returns the table to
/// print; writes the page and the JSON when asked.
pub fn run(args: &InspectArgs) -> Result<String, Failure> {
    let plan = args.plan.as_deref().map(read_plan).transpose()?;
    let plan_source = match &args.plan {
        Some(path) => format!("--plan {}", path.display()),
        None => "compacted by this run, as `compactd compact` does".to_string(),
    };
    let off = offline(&args.offline, plan)?;
    let view = gather(&args.offline, &off, plan_source);
    if let Some(path) = &args.html {
        write("--html", path, &html::page(&view))?;
    }
    if let Some(path) = &args.json {
        let mut doc = serde_json::to_value(&view).map_err(Failure::other)?;
        if let serde_json::Value::Object(map) = &mut doc {
            map.insert(
                "plan".into(),
                serde_json::to_value(&off.out.plan).map_err(Failure::other)?,
            );
        }
        let text = serde_json::to_string_pretty(&doc).map_err(Failure::other)?;
        write("--json", path, &text)?;
    }
    Ok(table::table(&view, table::colour_stdout()))
}
