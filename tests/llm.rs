//! The LLM summarizer against a real local HTTP server that speaks the
//! OpenAI Chat Completions protocol (testkit's `FakeLlm`): what is sent
//! (redacted, no restricted text, versioned prompt, JSON schema), retries
//! with a shorter answer, the extractive fallback on every kind of failure
//! with nothing of the failure committed, the quality gate over ten rolling
//! cycles with a model that paraphrases and drops details, the summary
//! cache, and background mode.

use compactd::provider::Format;
use std::sync::Arc;
use std::time::Duration;

use compactd::app::{App, CompactCommand, LlmSummaries, RenderCommand, RenderedOutput};
use compactd::llm::{LlmSummarizer, SummarizerKind, SummarizerSettings, SummaryMode};
use compactd::model::{CompactionPlan, Sensitivity, Thread};
use compactd::provider::thread_from_json;
use compactd::reduce::Policy;
use compactd::security::SecurityContext;
use compactd::store::{ArtifactStore, MemoryArtifactStore};
use compactd::summarize::llm::Style;
use compactd_testkit::fake_llm::{Behavior, FakeLlm};
use serde_json::{json, Value};

const MODEL: &str = "summary-mini";
const SECRET: &str = "sk-live-4f9a8b7c6d5e4f3a2b1c";
const RESTRICTED: &str = "diagnosis code Z-88.1 for the account holder";
const RULE: &str = "Never email the customer before 9am CET.";
const ORDER: &str = "ORD-77812";
/// Personal data said beside the order: redacted by default.
const PERSONAL: [&str; 4] = [
    "jeanne.martin@example.fr",
    "+33 6 12 34 56 78",
    "GB82 WEST 1234 5698 7654 32",
    "078-05-1120",
];

fn settings(base_url: &str) -> SummarizerSettings {
    SummarizerSettings {
        kind: SummarizerKind::Llm,
        base_url: base_url.into(),
        model: MODEL.into(),
        api_key_env: None,
        timeout_ms: 2_000,
        max_retries: 2,
        backoff_ms: 5,
        ..SummarizerSettings::default()
    }
}

fn app_with(settings: Option<SummarizerSettings>, artifacts: Arc<MemoryArtifactStore>) -> App {
    let llm = settings.map(|s| LlmSummaries::new(LlmSummarizer::new(s).expect("valid settings")));
    compactd_testkit::memory_app_on(
        artifacts,
        compactd::app::Extensions {
            llm,
            ..Default::default()
        },
    )
}

fn store() -> Arc<MemoryArtifactStore> {
    Arc::new(MemoryArtifactStore::content_addressed())
}

/// A support agent's thread: the rule and the order id early, a secret and
/// a restricted note in the middle, then `turns` turns of tool work.
fn thread(turns: usize) -> Thread {
    let openers = [
        "Could you look into the refund status for this customer?",
        "Next, check whether the replacement shipment left the warehouse.",
        "Please pull the latest carrier scan for the parcel.",
        "What does the billing ledger say about last month's invoice?",
        "Summarize what the customer told support on the phone.",
    ];
    let mut msgs = vec![
        json!({"role": "user", "content": "I'm handling a complaint from a customer in Lyon; help me work through it."}),
        json!({"role": "assistant", "content": "Happy to help. What do you need first?"}),
    ];
    // Said in passing between tool turns, as users do, so that they sit in
    // the spans that get summarized.
    let asides = [
        (2, format!("One ground rule from the account team: {RULE}")),
        (
            3,
            format!(
                "Their order is {ORDER}; the warehouse token is {SECRET}. Reach them at {} or {}, refund to {}, SSN {}.",
                PERSONAL[0], PERSONAL[1], PERSONAL[2], PERSONAL[3]
            ),
        ),
        (4, format!("Internal note: {RESTRICTED}.")),
    ];
    let mut restricted = 0;
    for t in 0..turns {
        let id = format!("c{t}");
        let log: String = (0..15)
            .map(|k| {
                format!(
                    "2026-11-0{} 10:{k:02} scan event {k} at depot {} status in transit\n",
                    t % 9 + 1,
                    100 + k
                )
            })
            .collect();
        let opener = match asides.iter().find(|(at, _)| *at == t) {
            Some((4, text)) => {
                restricted = msgs.len();
                text.clone()
            }
            Some((_, text)) => text.clone(),
            None => openers[t % openers.len()].to_string(),
        };
        msgs.push(json!({"role": "user", "content": opener}));
        msgs.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": id, "type": "function", "function": {"name": "lookup", "arguments": format!("{{\"q\":\"step {t}\"}}")}}
        ]}));
        msgs.push(json!({"role": "tool", "tool_call_id": id, "content": log}));
        msgs.push(json!({"role": "assistant", "content": format!("Step {t} checked; nothing unusual in the scans.")}));
    }
    let mut t = thread_from_json(&Value::Array(msgs), "support-1")
        .expect("thread")
        .thread;
    std::sync::Arc::make_mut(&mut t.messages[restricted])
        .metadata
        .sensitivity = Sensitivity::Restricted;
    t
}

/// Only summarization (and the last-resort window) may run, so every
/// compaction of a long thread summarizes.
fn policy() -> Policy {
    let mut p = Policy::default();
    p.enable.retention = false;
    p.enable.compress = false;
    p.enable.clear = false;
    p.enable.externalize = false;
    p.keep_recent_turns = 2;
    p.keep_recent_tokens = 1_500;
    p
}

fn command(t: &Thread, policy: &Policy, limit: u32) -> CompactCommand {
    let mut cmd = CompactCommand::new(t.clone(), policy.clone());
    cmd.max_input_tokens = Some(limit);
    cmd
}

async fn compact(app: &App, t: &Thread, limit: u32) -> compactd::app::CompactOutcome {
    app.compact(&SecurityContext::dev(), command(t, &policy(), limit))
        .await
        .expect("compacts")
}

/// The prompt the committed plan renders to, as OpenAI chat JSON text.
async fn rendered(app: &App, t: &Thread, limit: u32) -> String {
    let out = app
        .render(
            &SecurityContext::dev(),
            RenderCommand {
                request: command(t, &policy(), limit),
                compact_first: false,
                plan_version: 0,
                format: Format::OpenAiChat,
                max_output_tokens: None,
                prompt_cache: Default::default(),
                rehydrate_artifact_ids: Vec::new(),
                omit_pending_calls: false,
                auto_rehydrate: Some(false),
                read_artifact_tool: false,
                search_context_tool: false,
                recall: None,
                injections: Vec::new(),
            },
        )
        .await
        .expect("renders");
    match out.output {
        RenderedOutput::Payload(p) => p,
        other => panic!("expected a payload, got {other:?}"),
    }
}

fn llm_ids(plan: &CompactionPlan) -> Vec<&str> {
    plan.summarizations
        .iter()
        .map(|r| r.summarizer_id.as_str())
        .collect()
}

#[tokio::test]
async fn what_is_sent_is_redacted_restricted_free_versioned_and_schema_bound() {
    let fake = FakeLlm::start(Behavior::Faithful).await.expect("fake llm");
    let app = app_with(Some(settings(&fake.base_url())), store());
    let out = compact(&app, &thread(30), 8_000).await;
    assert!(
        !out.plan.summarizations.is_empty(),
        "nothing was summarized"
    );
    let requests = fake.requests();
    assert!(!requests.is_empty(), "the endpoint was never asked");
    let expected_id = format!("llm:{MODEL}:{}", Style::TaskState.prompt_version());
    assert!(
        llm_ids(&out.plan).contains(&expected_id.as_str()),
        "no summary written by the LLM: {:?}; warnings {:?}",
        llm_ids(&out.plan),
        out.report.as_ref().map(|r| &r.warnings)
    );
    for r in &requests {
        let text = r.prompt_text();
        assert!(!text.contains(SECRET), "the secret was sent");
        for p in PERSONAL {
            assert!(!text.contains(p), "personal data was sent: {p}");
        }
        assert!(!text.contains("Z-88.1"), "restricted text was sent");
        assert_eq!(
            r.body["model"], MODEL,
            "the summarization model, not the agent's"
        );
        assert_eq!(
            r.body["messages"][0]["content"],
            Style::TaskState.template()
        );
        assert_eq!(r.body["response_format"]["type"], "json_schema");
        assert_eq!(r.body["response_format"]["json_schema"]["strict"], true);
        assert_eq!(r.body["max_tokens"], 2_000);
        assert!(r.authorization.is_none(), "no key configured, none sent");
    }
    // The order id (next to the secret) and the restricted note were in
    // summarized spans, so this checks what was done to them.
    assert!(requests.iter().any(|r| r.user_text().contains(ORDER)));
    let t = thread(30);
    let restricted = t
        .messages
        .iter()
        .find(|m| m.metadata.sensitivity == Sensitivity::Restricted)
        .map(|m| m.id.clone())
        .expect("a restricted message");
    assert!(out
        .plan
        .summarizations
        .iter()
        .any(|r| r.span.message_ids.contains(&restricted)));
    // The rendered prompt carries the LLM's summary, redacted.
    let prompt = rendered(&app, &thread(30), 8_000).await;
    assert!(
        prompt.contains("continue the task"),
        "LLM summary not rendered"
    );
    assert!(!prompt.contains(SECRET));
    for p in PERSONAL {
        assert!(!prompt.contains(p), "personal data in the summary: {p}");
    }
}

#[tokio::test]
async fn the_key_comes_from_a_mounted_file() {
    let fake = FakeLlm::start(Behavior::Faithful).await.expect("fake llm");
    let dir = tempfile::tempdir().expect("tempdir");
    let key = dir.path().join("api-key");
    std::fs::write(&key, "test-key-123\n").expect("write key");
    let mut s = settings(&fake.base_url());
    s.api_key_file = Some(key);
    let app = app_with(Some(s), store());
    compact(&app, &thread(30), 8_000).await;
    let requests = fake.requests();
    assert!(!requests.is_empty());
    assert!(requests
        .iter()
        .all(|r| r.authorization.as_deref() == Some("Bearer test-key-123")));
}

#[tokio::test]
async fn an_answer_that_does_not_fit_is_asked_again_shorter_at_most_twice() {
    let fake = FakeLlm::start(Behavior::Faithful).await.expect("fake llm");
    fake.script([Behavior::CutOff, Behavior::ContextExceeded]);
    let app = app_with(Some(settings(&fake.base_url())), store());
    let out = compact(&app, &thread(30), 8_000).await;
    let asked: Vec<u64> = fake
        .requests()
        .iter()
        .map(|r| r.body["max_tokens"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(&asked[..3], &[2_000, 1_000, 500], "{asked:?}");
    assert!(llm_ids(&out.plan).iter().any(|id| id.starts_with("llm:")));

    // Cut off three times: two shorter retries, then the fallback.
    let fake = FakeLlm::start(Behavior::CutOff).await.expect("fake llm");
    let app = app_with(Some(settings(&fake.base_url())), store());
    let out = compact(&app, &thread(30), 8_000).await;
    assert!(llm_ids(&out.plan).iter().all(|id| id.is_empty()));
    let warnings = &out.report.expect("compacted").warnings;
    assert!(
        warnings.iter().any(|w| w.contains("(over_limit)")),
        "{warnings:?}"
    );
}

#[tokio::test]
async fn every_failure_falls_back_to_the_extractive_plan_and_commits_nothing_of_it() {
    let baseline = compact(&app_with(None, store()), &thread(30), 8_000).await;
    let spans = baseline.plan.summarizations.len();
    assert!(spans >= 2, "the thread must summarize more than one span");
    // (behavior, its kind, requests per span, whether it is an outage)
    let cases = [
        (Behavior::Status(500), "http_500", 3, true),
        (Behavior::Status(401), "http_401", 1, false),
        (Behavior::Delay(Duration::from_secs(3)), "timeout", 3, true),
        (Behavior::NotJson, "invalid_answer", 1, false),
        (Behavior::Refuse, "refused", 1, false),
    ];
    for (behavior, kind, attempts, outage) in cases {
        let fake = FakeLlm::start(behavior.clone()).await.expect("fake llm");
        let mut s = settings(&fake.base_url());
        s.timeout_ms = 200;
        let app = app_with(Some(s), store());
        let out = compact(&app, &thread(30), 8_000).await;
        assert_eq!(
            out.plan.summarizations, baseline.plan.summarizations,
            "{behavior:?}: the committed summaries are not the extractive ones"
        );
        assert_eq!(
            out.plan.compacted_token_count,
            baseline.plan.compacted_token_count
        );
        let warnings = &out.report.expect("compacted").warnings;
        assert!(
            warnings.iter().any(|w| w.contains(&format!("({kind})"))),
            "{behavior:?}: no event in {warnings:?}"
        );
        // An outage pauses the summarizer at its first span; any other
        // failure is the span's own, and every span is tried once.
        let spans_asked = if outage { 1 } else { spans };
        assert_eq!(fake.request_count(), attempts * spans_asked, "{behavior:?}");
    }
}

#[tokio::test]
async fn a_rule_and_an_order_id_survive_ten_cycles_with_a_lossy_model() {
    let fake = FakeLlm::start(Behavior::Lossy).await.expect("fake llm");
    let app = app_with(Some(settings(&fake.base_url())), store());
    let mut upgraded_cycles = 0;
    for cycle in 1..=10 {
        let t = thread(6 + 4 * cycle);
        let out = compact(&app, &t, 8_000).await;
        if out
            .plan
            .summarizations
            .iter()
            .any(|r| r.summarizer_id.starts_with("llm:"))
        {
            upgraded_cycles += 1;
        }
        let prompt = rendered(&app, &t, 8_000).await;
        assert!(
            prompt.contains(RULE),
            "cycle {cycle}: the rule drifted:\n{prompt}"
        );
        assert!(
            prompt.contains(ORDER),
            "cycle {cycle}: the order id was lost"
        );
    }
    assert!(
        upgraded_cycles >= 8,
        "only {upgraded_cycles} of 10 cycles used the LLM; the test would prove nothing"
    );
    // The lossy model really did drop them: the gate put them back. A
    // summary the previous cycle's plan already holds is not asked again,
    // so fewer requests than upgraded cycles.
    assert!(
        fake.request_count() >= 6,
        "asked {} times",
        fake.request_count()
    );
}

#[tokio::test]
async fn identical_summaries_come_from_the_cache_and_any_version_change_misses() {
    let fake = FakeLlm::start(Behavior::Faithful).await.expect("fake llm");
    let artifacts = store();
    let t = thread(30);
    let first = app_with(Some(settings(&fake.base_url())), Arc::clone(&artifacts));
    compact(&first, &t, 8_000).await;
    let asked = fake.request_count();
    assert!(asked > 0);

    // Memory layer: the plan reset, the same summaries asked for again.
    first
        .reset_plan(&SecurityContext::dev(), &t.id, None)
        .await
        .expect("reset");
    let again = compact(&first, &t, 8_000).await;
    assert!(!again.reused);
    assert_eq!(fake.request_count(), asked, "the memory layer missed");

    // Store layer: another process over the same (encrypted) store.
    let second = app_with(Some(settings(&fake.base_url())), Arc::clone(&artifacts));
    let out = compact(&second, &t, 8_000).await;
    assert_eq!(fake.request_count(), asked, "the store layer missed");
    assert!(llm_ids(&out.plan).iter().any(|id| id.starts_with("llm:")));

    // Another model, another prompt style, another policy: misses.
    let mut other_model = settings(&fake.base_url());
    other_model.model = "summary-large".into();
    compact(
        &app_with(Some(other_model), Arc::clone(&artifacts)),
        &t,
        8_000,
    )
    .await;
    let after_model = fake.request_count();
    assert!(after_model > asked, "a changed model hit the cache");
    let mut other_style = settings(&fake.base_url());
    other_style.style = Style::Brief;
    compact(
        &app_with(Some(other_style), Arc::clone(&artifacts)),
        &t,
        8_000,
    )
    .await;
    let after_style = fake.request_count();
    assert!(
        after_style > after_model,
        "a changed prompt version hit the cache"
    );
    let app = app_with(Some(settings(&fake.base_url())), Arc::clone(&artifacts));
    let mut p = policy();
    p.summary_max_tokens = 300;
    app.compact(&SecurityContext::dev(), command(&t, &p, 8_000))
        .await
        .expect("compacts");
    assert!(
        fake.request_count() > after_style,
        "a changed policy hit the cache"
    );
}

#[tokio::test]
async fn background_mode_returns_the_extractive_plan_and_commits_the_llm_summary_later() {
    let fake = FakeLlm::start(Behavior::Delay(Duration::from_millis(300)))
        .await
        .expect("fake llm");
    let mut s = settings(&fake.base_url());
    s.mode = SummaryMode::Background;
    let app = app_with(Some(s), store());
    let t = thread(30);
    let out = compact(&app, &t, 8_000).await;
    assert!(!out.plan.summarizations.is_empty());
    assert!(
        llm_ids(&out.plan).iter().all(|id| id.is_empty()),
        "sync upgrade in background mode"
    );
    assert!(
        app.drain_summaries(Duration::from_secs(10)).await,
        "queue not drained"
    );
    let prompt = rendered(&app, &t, 8_000).await;
    assert!(
        prompt.contains("continue the task"),
        "the LLM summary did not appear"
    );
    // The next Compact of the same thread reuses the upgraded plan.
    let next = compact(&app, &t, 8_000).await;
    assert!(next.reused);
    assert_eq!(next.plan.version, out.plan.version + 1);
    assert!(llm_ids(&next.plan).iter().any(|id| id.starts_with("llm:")));
}

#[tokio::test]
async fn cached_answers_are_stored_under_the_thread_and_go_with_it() {
    let fake = FakeLlm::start(Behavior::Faithful).await.expect("fake llm");
    let artifacts = store();
    let app = app_with(Some(settings(&fake.base_url())), Arc::clone(&artifacts));
    let t = thread(30);
    compact(&app, &t, 8_000).await;
    let before = artifacts.scan(Some("dev")).await.expect("scan").len();
    assert!(before > 0);
    app.delete_thread(&SecurityContext::dev(), &t.id)
        .await
        .expect("delete");
    assert_eq!(artifacts.scan(Some("dev")).await.expect("scan").len(), 0);
    // Nothing cached survives the thread: the next compaction asks again.
    let asked = fake.request_count();
    compact(&app, &t, 8_000).await;
    assert!(fake.request_count() > asked);
}

#[tokio::test]
async fn a_request_picks_its_style_and_the_style_is_recorded() {
    let fake = FakeLlm::start(Behavior::Faithful).await.expect("fake llm");
    let app = app_with(Some(settings(&fake.base_url())), store());
    let mut p = policy();
    p.summary_style = Some(Style::CodeDelta);
    let out = app
        .compact(&SecurityContext::dev(), command(&thread(30), &p, 8_000))
        .await
        .expect("compacts");
    let id = format!("llm:{MODEL}:{}", Style::CodeDelta.prompt_version());
    assert!(
        llm_ids(&out.plan).contains(&id.as_str()),
        "{:?}",
        llm_ids(&out.plan)
    );
    let requests = fake.requests();
    assert!(!requests.is_empty());
    assert!(requests
        .iter()
        .all(|r| r.body["messages"][0]["content"] == Style::CodeDelta.template()));
}

#[tokio::test]
async fn a_span_larger_than_the_models_context_is_summarized_in_chunks_and_merged() {
    let fake = FakeLlm::start(Behavior::Faithful).await.expect("fake llm");
    let mut s = settings(&fake.base_url());
    s.context_tokens = 2_048;
    s.max_output_tokens = 64;
    let app = app_with(Some(s), store());
    let out = compact(&app, &thread(30), 8_000).await;
    let upgraded: Vec<_> = out
        .plan
        .summarizations
        .iter()
        .filter(|r| r.summarizer_id.starts_with("llm:"))
        .collect();
    assert!(!upgraded.is_empty());
    let requests = fake.requests();
    assert!(
        requests.len() > out.plan.summarizations.len(),
        "{} requests for {} summaries: nothing was chunked",
        requests.len(),
        out.plan.summarizations.len()
    );
    // Each request stayed within the model's context (≈3 bytes per token).
    for r in &requests {
        let sent = r.prompt_text().len();
        assert!(sent <= 2_048 * 3, "{sent} bytes sent");
    }
    // Later chunks continue from the earlier chunks' summary.
    assert!(requests
        .iter()
        .skip(1)
        .any(|r| r.user_text().starts_with("Earlier summary")));
}

#[tokio::test]
async fn a_background_upgrade_overtaken_by_a_newer_plan_is_redone_on_it() {
    // Long enough that the second compaction commits first even on a
    // loaded machine (a debug build, the whole suite running beside it).
    let fake = FakeLlm::start(Behavior::Delay(Duration::from_millis(1500)))
        .await
        .expect("fake llm");
    let mut s = settings(&fake.base_url());
    s.mode = SummaryMode::Background;
    let app = app_with(Some(s), store());
    let first = compact(&app, &thread(30), 8_000).await;
    // The thread grows, in a window a little smaller, before the first
    // upgrade lands: that upgrade loses its compare-and-swap, and the
    // summaries the new plan carries over are upgraded by the second job
    // instead. (In the same window an append below the trigger would be
    // answered by the committed plan, with no new version.)
    let grown = thread(32);
    let second = compact(&app, &grown, 7_900).await;
    assert_eq!(second.plan.version, first.plan.version + 1);
    assert!(app.drain_summaries(Duration::from_secs(10)).await);
    let latest = compact(&app, &grown, 7_900).await;
    assert!(latest.reused);
    assert!(
        latest
            .plan
            .summarizations
            .iter()
            .all(|r| r.summarizer_id.starts_with("llm:")),
        "{:?}",
        llm_ids(&latest.plan)
    );
}

/// Golden summaries: a real log compacted with an LLM whose answer is fixed
/// (a plausible, lossy one per fixture, in `tests/fixtures/summaries/`).
/// The rubric: every listed constraint and identifier that sat in a
/// summarized span is in the summary that replaced it, whatever the model
/// left out; the requests carry temperature 0 and the fixed seed; and the
/// summaries are pinned as snapshots.
#[tokio::test]
async fn golden_fixtures_meet_their_rubric_whatever_the_model_left_out() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let mut names: Vec<String> = std::fs::read_dir(dir.join("fixtures/summaries"))
        .expect("fixtures")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".json"))
        .collect();
    names.sort();
    assert!(names.len() >= 3, "{names:?}");
    for name in names {
        let fixture: Value = serde_json::from_slice(
            &std::fs::read(dir.join("fixtures/summaries").join(&name)).expect("fixture"),
        )
        .expect("fixture JSON");
        let log: Value = serde_json::from_slice(
            &std::fs::read(dir.join("data").join(fixture["log"].as_str().expect("log")))
                .expect("log"),
        )
        .expect("log JSON");
        let t = thread_from_json(&log, &name).expect("thread").thread;
        let answer = fixture["answer"].to_string();
        let fake = FakeLlm::start(Behavior::Fixed(answer))
            .await
            .expect("fake llm");
        let app = app_with(Some(settings(&fake.base_url())), store());
        let budget = fixture["budget"].as_u64().expect("budget") as u32;
        let out = compact(&app, &t, budget).await;
        let llm: Vec<_> = out
            .plan
            .summarizations
            .iter()
            .filter(|r| r.summarizer_id.starts_with("llm:"))
            .collect();
        assert!(
            !llm.is_empty(),
            "{name}: no LLM summary; warnings {:?}",
            out.report.as_ref().map(|r| &r.warnings)
        );
        for r in fake.requests() {
            assert_eq!(r.body["temperature"], 0, "{name}");
            assert_eq!(r.body["seed"], compactd::summarize::llm::SEED, "{name}");
        }
        let mut checked = 0;
        for item in fixture["must_keep"].as_array().expect("must_keep") {
            let item = item.as_str().expect("a string");
            let Some(source) = t.messages.iter().find(|m| m.text().contains(item)) else {
                panic!("{name}: {item:?} is not in the log");
            };
            let Some(record) = llm.iter().find(|r| r.span.message_ids.contains(&source.id)) else {
                continue;
            };
            checked += 1;
            let text = record.summary.render_as_message();
            assert!(
                text.contains(item),
                "{name}: {item:?} (from {}) lost from its summary:\n{text}",
                source.id
            );
        }
        assert!(
            checked > 0,
            "{name}: no rubric item was in a summarized span"
        );
        let pinned: Vec<String> = llm.iter().map(|r| r.summary.render_as_message()).collect();
        insta::assert_snapshot!(
            format!("golden_summary_{}", name.trim_end_matches(".json")),
            pinned.join("\n---\n")
        );
    }
}
