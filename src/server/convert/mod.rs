//! Requests → use-case commands, and outcomes → responses: where the wire
//! meets the use cases. The wire's own types and their strict conversions
//! to the core's are in [`crate::proto`], which knows nothing of the use
//! cases.

use std::sync::Arc;

use crate::app::{
    CompactCommand, CompactOutcome, ExplainCommand, ExplainOutcome, RehydrateCommand,
    RehydrateOutcome, RenderCommand, RenderOutcome, RenderedOutput, SearchCommand, SearchOutcome,
};
use crate::model::ActionKind;
use crate::model::{Thread, ToolSchema};
use crate::provider::thread_from_json_as;
use crate::reduce::{Policy, Report};
use crate::render::explain::Verdict;

use crate::proto::{
    each, observations_from_pb, output_format, pb, policy_from_overrides, sensitivity_to_pb,
    ConvertError,
};
use reuse::thread_reusing;

pub(crate) mod reuse;
pub use reuse::ThreadReuse;

type Result<T> = std::result::Result<T, ConvertError>;

impl From<ConvertError> for crate::app::AppError {
    fn from(e: ConvertError) -> Self {
        crate::app::AppError::InvalidArgument {
            field: e.field,
            message: e.message,
        }
    }
}
use crate::app::{SessionInput, SessionState};

/// The command for what Compact and Render requests both carry (under the
/// same names; the two messages share no type), with the request's
/// overrides applied to `base`. Expands to an expression that uses `?`.
macro_rules! shared_command {
    ($r:ident, $base:expr, $reuse:expr) => {{
        let (thread, session, imported) = provider_input(
            $r.thread,
            $r.append,
            $r.input,
            $r.start_session,
            &$base.protected_flag,
            $reuse,
        )?;
        let mut tools = each::<_, ToolSchema>($r.tools, "tools")?;
        let mut system = $r.system_prompt;
        // A provider body's own system prompt and tools, unless the
        // request sets its own.
        if let Some(imported) = imported {
            system = system.or(imported.system);
            if tools.is_empty() {
                tools = imported.tools;
            }
        }
        let (bootstrap, workspace) = assembly_context($r.context)?;
        CompactCommand {
            session,
            thread,
            policy: Arc::new(policy_from_overrides($base, $r.policy)?),
            model: unset_if_empty($r.model),
            max_input_tokens: unset_if_zero($r.max_input_tokens),
            system: crate::render::system_with_bootstrap(system, &bootstrap),
            tools: Arc::new(tools),
            workspace: crate::render::workspace_message(&workspace),
            expected_version: $r.expected_version,
            observations: observations_from_pb($r.observations),
            rehydrated_this_turn: false,
            task_outcome: task_outcome($r.task_outcome)?,
            usage: provider_usage($r.usage)?,
            format: None,
            extends: $reuse.extends.take(),
        }
    }};
}

/// The bootstrap and workspace files of a request, each checked (the
/// field names the file: `context.workspace[2].name`).
fn assembly_context(
    c: Option<pb::AssemblyContext>,
) -> Result<(
    Vec<crate::render::ContextFile>,
    Vec<crate::render::ContextFile>,
)> {
    let c = c.unwrap_or_default();
    let files = |list: Vec<pb::ContextFile>, field: &str| {
        list.into_iter()
            .enumerate()
            .map(|(i, f)| {
                let f = crate::render::ContextFile {
                    name: f.name,
                    text: f.text,
                };
                match f.problem() {
                    Some((part, reason)) => {
                        Err(ConvertError::new(format!("{field}[{i}].{part}"), reason))
                    }
                    None => Ok(f),
                }
            })
            .collect::<Result<Vec<_>>>()
    };
    Ok((
        files(c.bootstrap, "context.bootstrap")?,
        files(c.workspace, "context.workspace")?,
    ))
}

/// The reported task outcome; unknown values name the field.
fn task_outcome(v: i32) -> Result<Option<crate::app::TaskOutcome>> {
    use crate::app::TaskOutcome;
    match pb::TaskOutcome::try_from(v) {
        Ok(pb::TaskOutcome::Unspecified) => Ok(None),
        Ok(pb::TaskOutcome::Succeeded) => Ok(Some(TaskOutcome::Succeeded)),
        Ok(pb::TaskOutcome::Failed) => Ok(Some(TaskOutcome::Failed)),
        Err(_) => Err(ConvertError::new(
            "task_outcome",
            format!("unknown enum value {v}"),
        )),
    }
}

/// What a provider body carries besides its messages.
struct Imported {
    system: Option<String>,
    tools: Vec<ToolSchema>,
}

/// The shape a provider body is said to be in; unset (zero) leaves it to
/// recognition.
fn stated_shape(v: i32, field: &str) -> Result<Option<crate::provider::Format>> {
    match v {
        0 => Ok(None),
        v => output_format(v, field).map(Some),
    }
}

/// The thread a request gives as [`thread_input`] reads it, or from a
/// provider body (`input`), read by the same importer as the CLI's files.
fn provider_input(
    thread: Option<pb::Thread>,
    append: Option<pb::ThreadAppend>,
    input: Option<pb::ProviderInput>,
    start_session: bool,
    flag: &str,
    reuse: &mut ThreadReuse,
) -> Result<(Arc<Thread>, SessionInput, Option<Imported>)> {
    let Some(input) = input else {
        let (thread, session) = thread_input(thread, append, start_session, flag, reuse)?;
        return Ok((thread, session, None));
    };
    if thread.is_some() || append.is_some() {
        return Err(ConvertError::new(
            "input",
            "set one of thread, append and input, not several",
        ));
    }
    if input.thread_id.trim().is_empty() {
        return Err(ConvertError::new("input.thread_id", "is required"));
    }
    let mut value: serde_json::Value = serde_json::from_str(&input.json)
        .map_err(|e| ConvertError::new("input.json", format!("is not JSON: {e}")))?;
    crate::provider::read_protected_flag_as(&mut value, flag);
    let shape = stated_shape(input.format, "input.format")?;
    let read = thread_from_json_as(&value, &input.thread_id, shape).map_err(|e| {
        ConvertError::new(
            crate::provider::field_with_flag(e.field_under("input.json"), flag),
            e.reason,
        )
    })?;
    let mut thread = read.thread;
    // The request names the thread, whatever a canonical body says.
    thread.id = input.thread_id;
    let session = if start_session {
        SessionInput::Start
    } else {
        SessionInput::Off
    };
    let imported = Imported {
        system: read.system,
        tools: read.tools,
    };
    Ok((Arc::new(thread), session, Some(imported)))
}

/// The thread a request gives: in full (`thread`), or what was appended to
/// an append session (`append`, as a thread of those messages).
fn thread_input(
    thread: Option<pb::Thread>,
    append: Option<pb::ThreadAppend>,
    start_session: bool,
    flag: &str,
    reuse: &mut ThreadReuse,
) -> Result<(Arc<Thread>, SessionInput)> {
    match (thread, append) {
        (Some(_), Some(_)) => Err(ConvertError::new(
            "append",
            "set either thread (the whole thread) or append (what was appended), not both",
        )),
        (None, Some(_)) if start_session => Err(ConvertError::new(
            "start_session",
            "starts a session from the whole thread: send `thread`, not `append`",
        )),
        (None, Some(a)) => {
            if !a.messages_json.is_empty() && !a.messages.is_empty() {
                return Err(ConvertError::new(
                    "append.messages_json",
                    "set either messages or messages_json, not both",
                ));
            }
            let shape = stated_shape(a.messages_format, "append.messages_format")?;
            if shape == Some(crate::provider::Format::Neutral) {
                return Err(ConvertError::new(
                    "append.messages_format",
                    "neutral messages are sent as append.messages",
                ));
            }
            // A configured mark is read as `protected` here, once: the
            // append is small, and the session reads it later as it is.
            let json =
                if a.messages_json.is_empty() || flag == crate::reduce::DEFAULT_PROTECTED_FLAG {
                    a.messages_json
                } else {
                    let mut v: serde_json::Value =
                        serde_json::from_str(&a.messages_json).map_err(|e| {
                            ConvertError::new("append.messages_json", format!("is not JSON: {e}"))
                        })?;
                    crate::provider::read_protected_flag_as(&mut v, flag);
                    v.to_string()
                };
            let input = SessionInput::Append {
                base_version: a.base_version,
                json: (!json.is_empty()).then(|| (json.into(), shape)),
            };
            let t = pb::Thread {
                id: a.thread_id,
                messages: a.messages,
            };
            let thread = Thread::try_from(t).map_err(|e| {
                let e = e.within("append");
                if e.field == "append.id" {
                    ConvertError::new("append.thread_id", e.message)
                } else {
                    e
                }
            })?;
            Ok((Arc::new(thread), input))
        }
        (thread, None) => {
            let input = if start_session {
                SessionInput::Start
            } else {
                SessionInput::Off
            };
            let thread = thread.ok_or_else(|| ConvertError::new("thread", "is required"))?;
            let thread = thread_reusing(thread, reuse).map_err(|e| e.within("thread"))?;
            Ok((thread, input))
        }
    }
}

/// proto3 scalars cannot be absent: the zero value means "the server's default".
fn unset_if_empty(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

/// See [`unset_if_empty`].
fn unset_if_zero(n: u32) -> Option<u32> {
    (n != 0).then_some(n)
}

/// A Compact request as a command; `base` is the server's policy the
/// request's overrides apply to.
pub fn compact_command(r: pb::CompactRequest, base: &Policy) -> Result<CompactCommand> {
    compact_command_reusing(r, base, &mut ThreadReuse::default())
}

/// [`compact_command`], sharing what `reuse` holds of the last thread sent
/// in full under this id (see [`ThreadReuse`]).
pub fn compact_command_reusing(
    r: pb::CompactRequest,
    base: &Policy,
    reuse: &mut ThreadReuse,
) -> Result<CompactCommand> {
    Ok(CompactCommand {
        rehydrated_this_turn: r.rehydrated_this_turn,
        ..shared_command!(r, base, reuse)
    })
}

/// An OpenAI cache field as given: 1 to 64 bytes (the API's limit) without
/// control characters.
fn cache_field(v: Option<String>, field: &str) -> Result<Option<String>> {
    match v {
        Some(s) if s.is_empty() || s.len() > 64 => Err(ConvertError::new(
            field.to_string(),
            "must be 1 to 64 bytes",
        )),
        Some(s) if s.chars().any(char::is_control) => Err(ConvertError::new(
            field.to_string(),
            "must not contain control characters",
        )),
        v => Ok(v),
    }
}

/// Provider reports this call may carry (the last few bodies at most).
const MAX_USAGE_REPORTS: usize = 8;

/// The provider's reports on earlier bodies, checked: a digest as Render
/// returns it, and cache reads and writes within the input they are part of.
fn provider_usage(
    reports: Vec<pb::ProviderUsage>,
) -> Result<Vec<crate::render::cache::ProviderUsage>> {
    if reports.len() > MAX_USAGE_REPORTS {
        return Err(ConvertError::new(
            "usage",
            format!("at most {MAX_USAGE_REPORTS} reports"),
        ));
    }
    reports
        .into_iter()
        .enumerate()
        .map(|(i, u)| {
            let hex =
                u.body_digest.len() == 16 && u.body_digest.bytes().all(|b| b.is_ascii_hexdigit());
            let digest = hex
                .then(|| u64::from_str_radix(&u.body_digest, 16).ok())
                .flatten()
                .ok_or_else(|| {
                    ConvertError::new(
                        format!("usage[{i}].body_digest"),
                        "must be the 16 hex digits of RenderResponse.body_digest",
                    )
                })?;
            if u64::from(u.cache_read_tokens) + u64::from(u.cache_write_tokens)
                > u64::from(u.input_tokens)
            {
                return Err(ConvertError::new(
                    format!("usage[{i}].input_tokens"),
                    "must include the cache reads and writes",
                ));
            }
            Ok(crate::render::cache::ProviderUsage {
                body_digest: digest,
                input_tokens: u.input_tokens,
                cache_read_tokens: u.cache_read_tokens,
                cache_write_tokens: u.cache_write_tokens,
            })
        })
        .collect()
}

/// A Render request as a command.
pub fn render_command(r: pb::RenderRequest, base: &Policy) -> Result<RenderCommand> {
    render_command_reusing(r, base, &mut ThreadReuse::default())
}

/// [`render_command`], sharing what `reuse` holds (see
/// [`compact_command_reusing`]).
pub fn render_command_reusing(
    r: pb::RenderRequest,
    base: &Policy,
    reuse: &mut ThreadReuse,
) -> Result<RenderCommand> {
    Ok(RenderCommand {
        format: output_format(r.format, "format")?,
        compact_first: r.compact_first,
        plan_version: r.plan_version,
        max_output_tokens: r.max_output_tokens,
        prompt_cache: crate::render::PromptCache {
            breakpoints: r.cache_breakpoints.unwrap_or(true),
            key: cache_field(r.prompt_cache_key, "prompt_cache_key")?,
            safety_identifier: cache_field(r.safety_identifier, "safety_identifier")?,
        },
        rehydrate_artifact_ids: r.rehydrate_artifact_ids,
        omit_pending_calls: r.omit_pending_calls,
        auto_rehydrate: r.auto_rehydrate,
        recall: r.recall,
        read_artifact_tool: r.read_artifact_tool,
        search_context_tool: r.search_context_tool,
        injections: r
            .injections
            .into_iter()
            .enumerate()
            .map(|(i, inj)| {
                if inj.hook.trim().is_empty() {
                    return Err(ConvertError::new(
                        format!("injections[{i}].hook"),
                        "must not be empty",
                    ));
                }
                if inj.text.is_empty() {
                    return Err(ConvertError::new(
                        format!("injections[{i}].text"),
                        "must not be empty",
                    ));
                }
                Ok(crate::app::Injection {
                    hook: inj.hook,
                    text: inj.text,
                })
            })
            .collect::<Result<_>>()?,
        request: shared_command!(r, base, reuse),
    })
}

/// An Explain request as a command (the use case checks the text and ids).
pub fn explain_command(r: pb::ExplainRequest, base: &Policy) -> Result<ExplainCommand> {
    if r.append
        .as_ref()
        .is_some_and(|a| a.thread_id != r.thread_id)
    {
        return Err(ConvertError::new(
            "append.thread_id",
            "must equal thread_id",
        ));
    }
    let (thread, session) = match (r.thread, r.append) {
        (None, None) => (None, SessionInput::Off),
        (thread, append) => {
            let reuse = &mut ThreadReuse::default();
            let (thread, session) =
                thread_input(thread, append, false, &base.protected_flag, reuse)?;
            (Some(Arc::unwrap_or_clone(thread)), session)
        }
    };
    Ok(ExplainCommand {
        thread_id: r.thread_id,
        plan_version: r.plan_version,
        text: r.text,
        thread,
        search_artifacts: r.search_artifacts,
        session,
    })
}

fn eviction_action(a: ActionKind) -> i32 {
    pb::EvictionAction::from(a) as i32
}

impl From<ExplainOutcome> for pb::ExplainResponse {
    fn from(out: ExplainOutcome) -> Self {
        let verdict = match out.verdict {
            Verdict::Verbatim => pb::ExplainVerdict::Verbatim,
            Verdict::InSummary => pb::ExplainVerdict::InSummary,
            Verdict::CompactedOut => pb::ExplainVerdict::CompactedOut,
            Verdict::NotFound => pb::ExplainVerdict::NotFound,
        };
        pb::ExplainResponse {
            plan_version: out.plan_version,
            verdict: verdict as i32,
            messages: out
                .explanation
                .messages
                .into_iter()
                .map(|h| pb::ExplainMessageHit {
                    verbatim: h.action == ActionKind::Include,
                    action: eviction_action(h.action),
                    message_id: h.message_id,
                    first_message_id: h.first_message_id,
                    last_message_id: h.last_message_id,
                    strategy: h.strategy,
                    artifact_id: h.artifact_id,
                    in_replacement: h.in_replacement,
                })
                .collect(),
            summaries: out
                .explanation
                .summaries
                .into_iter()
                .map(|h| pb::ExplainSummaryHit {
                    action: eviction_action(h.action),
                    first_message_id: h.first_message_id,
                    last_message_id: h.last_message_id,
                    strategy: h.strategy,
                    artifact_id: h.artifact_id,
                })
                .collect(),
            artifacts: out
                .artifacts
                .into_iter()
                .map(|a| pb::ExplainArtifactHit {
                    artifact_id: a.artifact_id,
                    message_ids: a.message_ids,
                    sensitivity: sensitivity_to_pb(a.sensitivity),
                })
                .collect(),
            artifacts_not_searched: out.not_searched,
            warnings: out.warnings,
            session: out.session.map(Into::into),
            cache_turns: out
                .cache_turns
                .iter()
                .map(|t| pb::CacheTurn {
                    body_digest: format!("{:016x}", t.body_digest),
                    tokens: t.counted,
                    expected_cache_read_tokens: t.expected_read,
                    reported: t.reported.map(|u| pb::ProviderUsage {
                        body_digest: format!("{:016x}", u.body_digest),
                        input_tokens: u.input_tokens,
                        cache_read_tokens: u.cache_read_tokens,
                        cache_write_tokens: u.cache_write_tokens,
                    }),
                })
                .collect(),
        }
    }
}

/// A SearchContext request as a command (the use case checks the query).
pub fn search_command(r: pb::SearchContextRequest, base: &Policy) -> Result<SearchCommand> {
    let reuse = &mut ThreadReuse::default();
    let (thread, session, _) = provider_input(
        r.thread,
        r.append,
        r.input,
        false,
        &base.protected_flag,
        reuse,
    )?;
    Ok(SearchCommand {
        session,
        thread,
        query: r.query,
        max_results: r.max_results,
    })
}

impl From<SearchOutcome> for pb::SearchContextResponse {
    fn from(out: SearchOutcome) -> Self {
        pb::SearchContextResponse {
            plan_version: out.plan_version,
            passages: out
                .passages
                .into_iter()
                .map(|p| pb::ContextPassage {
                    message_id: p.message_id,
                    artifact_id: p.artifact_id.unwrap_or_default(),
                    line: p.line,
                    text: p.text,
                    score: p.score,
                    sensitivity: sensitivity_to_pb(p.sensitivity),
                })
                .collect(),
            withheld: out.withheld,
            session: out.session.map(Into::into),
        }
    }
}

/// A Rehydrate request as a command (the use case checks the ids).
pub fn rehydrate_command(r: pb::RehydrateRequest) -> RehydrateCommand {
    RehydrateCommand {
        thread_id: r.thread_id,
        artifact_id: r.artifact_id,
        max_tokens: unset_if_zero(r.max_tokens),
        model: unset_if_empty(r.model),
    }
}

impl From<&CompactOutcome> for pb::CompactResponse {
    fn from(out: &CompactOutcome) -> Self {
        compact_response(out, None)
    }
}

/// The response to a Compact (or a Render's compaction); the plan is left
/// out when it is the version the caller says it holds.
pub fn compact_response(
    out: &CompactOutcome,
    known_plan_version: Option<u64>,
) -> pb::CompactResponse {
    let report = out.report.as_ref();
    let omitted = known_plan_version == Some(out.plan.version);
    pb::CompactResponse {
        plan: (!omitted).then(|| out.plan.as_ref().into()),
        plan_omitted: omitted,
        version: out.plan.version,
        tokens_before: out.tokens_before(),
        tokens_after: out.tokens_after(),
        per_reducer: report
            .map_or_else(Vec::new, |r| r.per_reducer.iter().map(Into::into).collect()),
        budget: report.map(|r| (&r.budget).into()),
        warnings: out.all_warnings(),
        reused: out.reused,
        triggered: report.is_some_and(|r| r.triggered),
        new_artifact_ids: out
            .artifacts
            .iter()
            .map(|a| a.artifact_id.clone())
            .collect(),
        target_use: report.map_or(0.0, Report::target_use),
        session: out.session.clone().map(Into::into),
        pinned_labels: out.pinned_labels.clone(),
    }
}

/// Consumes the outcome: the rendered text moves into the response.
impl From<RenderOutcome> for pb::RenderResponse {
    fn from(out: RenderOutcome) -> Self {
        render_response(out, None)
    }
}

/// The response to a Render, consuming the outcome; the compaction's plan
/// is left out as in [`compact_response`].
pub fn render_response(out: RenderOutcome, known_plan_version: Option<u64>) -> pb::RenderResponse {
    let (messages, system_prompt, provider_payload_json) = match out.output {
        RenderedOutput::Neutral(req) => (
            req.messages.iter().map(Into::into).collect(),
            req.system,
            String::new(),
        ),
        RenderedOutput::Payload(json) => (Vec::new(), None, json),
    };
    pb::RenderResponse {
        messages,
        system_prompt,
        provider_payload_json,
        tokens: Some((&out.tokens).into()),
        plan_version: out.plan.version,
        audit: Some((&out.audit).into()),
        compaction: out
            .compaction
            .as_ref()
            .map(|c| compact_response(c, known_plan_version)),
        rehydrated: out.rehydrated.iter().map(Into::into).collect(),
        session: out.session.map(Into::into),
        unchanged_prefix_tokens: out.unchanged_prefix_tokens,
        expected_cache_read_tokens: out.expected_cache_read_tokens,
        body_digest: out
            .trace
            .as_ref()
            .map(|t| format!("{:016x}", crate::render::cache::body_digest(t)))
            .unwrap_or_default(),
        counting: Some(crate::proto::counting_to_pb(&out.counting)),
    }
}

impl From<SessionState> for pb::SessionState {
    fn from(s: SessionState) -> Self {
        pb::SessionState {
            version: s.version,
            digest: s.digest,
            messages: u32::try_from(s.messages).unwrap_or(u32::MAX),
        }
    }
}

impl From<RehydrateOutcome> for pb::RehydrateResponse {
    fn from(out: RehydrateOutcome) -> Self {
        pb::RehydrateResponse {
            artifact_id: out.artifact_id,
            content: out.content,
            truncated: out.truncated,
            tokens: out.tokens,
            sensitivity: pb::Sensitivity::from(out.sensitivity) as i32,
            message_ids: out.message_ids,
            content_hash: out.content_hash,
        }
    }
}
