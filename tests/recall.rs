//! Recall on public agent logs nobody here wrote (`tests/data/`): every
//! path, id and error code of what compaction takes out of the prompt is
//! either still in the prompt or in the top 5 passages of a query naming it.

use crate::common;

use common::Harness;
use compactd::app::RenderedOutput;
use compactd::model::Action;
use compactd::provider::{thread_from_json, Format};
use compactd::recall::RecallIndex;
use compactd::redact::Redactor;
use serde_json::Value;

/// Paths, ids and error codes as a reader would pick them: a word with a
/// slash and a letter, a word mixing letters and digits, or an upper-case
/// code with an underscore or digit; surrounding punctuation trimmed.
fn named_things(text: &str) -> Vec<String> {
    let trim: &[char] = &[
        '"', '\'', '`', '(', ')', '[', ']', '{', '}', '<', '>', ',', ';', ':', '.', '!', '?',
    ];
    text.split_whitespace()
        .map(|w| w.trim_matches(trim))
        .filter(|w| (4..=80).contains(&w.chars().count()))
        .filter(|w| {
            let letters = w.chars().any(char::is_alphabetic);
            let digits = w.chars().any(|c| c.is_ascii_digit());
            let path = w.contains('/') && letters;
            let id = letters && digits;
            let code = w
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
                && (w.contains('_') || digits)
                && letters;
            path || id || code
        })
        .map(str::to_string)
        .collect()
}

/// What a reader sees of a message: its text, and the string values of its
/// calls' arguments (not their JSON escapes).
fn readable_text(m: &compactd::model::Message) -> String {
    fn strings(v: &Value, out: &mut String) {
        match v {
            Value::String(s) => {
                out.push('\n');
                out.push_str(s);
            }
            Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
            Value::Object(o) => o.values().for_each(|x| strings(x, out)),
            _ => {}
        }
    }
    let mut out = m.archived_text().into_owned();
    for c in &m.tool_calls {
        strings(&c.arguments, &mut out);
    }
    out
}

/// The named things of the messages the plan evicts that the (lowercased)
/// prompt no longer shows, sorted, each once.
fn lost_things(
    thread: &compactd::model::Thread,
    actions: &compactd::model::ActionMap<'_>,
    prompt: &str,
) -> Vec<String> {
    let mut lost: Vec<String> = thread
        .messages
        .iter()
        .filter(|m| !matches!(actions.get(m.id.as_str()), None | Some(Action::Include)))
        .flat_map(|m| named_things(&readable_text(m)))
        .filter(|t| !prompt.contains(&t.to_lowercase()))
        .collect();
    lost.sort();
    lost.dedup();
    lost
}

#[test]
fn what_leaves_the_prompt_is_found_by_naming_it() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data");
    let mut asked = 0usize;
    let mut found = 0usize;
    let mut missed = Vec::new();
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .expect("tests/data")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .filter(|p| !p.ends_with("sources.json"))
        .collect();
    names.sort();
    for path in names {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let value: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let thread = thread_from_json(&value, &name).expect("imports").thread;
        let whole = Harness::default()
            .render_as(&thread, 10_000_000, None, Format::OpenAiChat, None)
            .expect("renders")
            .1
            .tokens
            .total;
        for divisor in [10, 30] {
            let budget = (whole / divisor).max(8_000);
            let out = Harness::default()
                .render_as(&thread, budget, None, Format::OpenAiChat, None)
                .expect("renders")
                .1;
            let RenderedOutput::Payload(body) = &out.output else {
                panic!("a payload was asked for")
            };
            let prompt = body.to_lowercase();
            let index = RecallIndex::build(
                &std::sync::Arc::new(thread.clone()),
                &out.plan,
                Redactor::standard(),
            );
            let actions = out.plan.actions();
            let lost = lost_things(&thread, &actions, &prompt);
            // At most 40 per cell, spread over the sorted list.
            let step = lost.len().div_ceil(40).max(1);
            for term in lost.iter().step_by(step) {
                asked += 1;
                let needle = term.to_lowercase();
                let hits = index.search(&format!("what was {term} again?"), 5);
                if hits
                    .iter()
                    .any(|h| h.passage.text.to_lowercase().contains(&needle))
                {
                    found += 1;
                } else {
                    missed.push(format!("{name} at {budget}: {term}"));
                }
            }
        }
    }
    let rate = found as f64 / asked.max(1) as f64;
    eprintln!("recall: {found} of {asked} named things found in the top 5 ({rate:.3})");
    assert!(
        asked >= 100,
        "only {asked} things asked about: the test proves little"
    );
    assert!(
        rate >= 0.95,
        "{found} of {asked} found ({rate:.3}); missed, first 20: {:#?}",
        &missed[..missed.len().min(20)]
    );
}

/// Passages come from evicted messages only, carry the artifact that holds
/// their message, and are redacted like everything else compactd writes.
#[test]
fn passages_are_the_evicted_originals_redacted_with_their_artifact() {
    use common::ThreadBuilder;
    use compactd::model::{Outcome, ToolContent};
    let mut log = common::log_lines(400);
    log.push_str("deploy of build 7781 failed: ERR_QUOTA_EXCEEDED on node pool-b3\n");
    log.push_str("credentials used: AKIAIOSFODNN7EXAMPLE\n");
    log.push_str(&common::log_lines(400));
    let mut b = ThreadBuilder::default();
    b.user("Deploy build 7781 to staging.");
    b.tool(
        "deploy",
        serde_json::json!({"build": 7781}),
        ToolContent::Text(log),
        Outcome::Failure,
        None,
    );
    b.tool(
        "vault_read",
        serde_json::json!({"path": "ops/escrow"}),
        ToolContent::Text(format!(
            "escrow code ZEPHYR-771 for build 7781\n{}",
            common::log_lines(200)
        )),
        Outcome::Success,
        None,
    );
    b.last().metadata.sensitivity = compactd::model::Sensitivity::Confidential;
    let confidential = b.last().id.clone();
    b.assistant("The deploy failed; I will retry on another pool.");
    for i in 0..6 {
        b.user(&format!("Status check {i}?"));
        b.assistant("Still working on it.");
    }
    b.user("Which error stopped build 7781 the first time?");
    let thread = b.build("recall");
    let out = Harness::default()
        .render_as(&thread, 3_000, None, Format::OpenAiChat, None)
        .expect("renders")
        .1;
    let index = RecallIndex::build(
        &std::sync::Arc::new(thread.clone()),
        &out.plan,
        Redactor::standard(),
    );
    assert!(!index.is_empty(), "the log left the prompt");
    let actions = out.plan.actions();
    let hits = index.search_all(&compactd::recall::queries_of(&thread, &thread.pairing()), 3);
    let top = hits.first().expect("a passage matches");
    assert!(top.passage.text.contains("ERR_QUOTA_EXCEEDED"), "{hits:#?}");
    assert!(!matches!(
        actions.get(top.passage.message_id.as_str()),
        None | Some(Action::Include)
    ));
    // Confidential content is never recalled, though it left the prompt.
    assert!(!matches!(
        actions.get(confidential.as_str()),
        None | Some(Action::Include)
    ));
    assert!(index
        .search("escrow code ZEPHYR-771", 50)
        .iter()
        .all(|h| !h.passage.text.contains("ZEPHYR-771")));
    for h in index.search("credentials used AKIAIOSFODNN7EXAMPLE", 50) {
        assert!(!h.passage.text.contains("AKIAIOSFODNN7EXAMPLE"), "{h:?}");
    }
    // The log was written out whole: the passage names where it is.
    let id = top
        .passage
        .artifact_id
        .as_deref()
        .expect("an artifact holds it");
    assert!(compactd::model::is_artifact_id(id), "{id}");
}

/// Asked about something that left the prompt, the next render has the
/// answer in its prompt (kept, or brought back in the recall block), within
/// the budget; with recall off there is no block; the same input gives the
/// same block.
#[test]
fn a_question_about_lost_content_brings_it_back_at_render() {
    use compactd::render::Origin;
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data");
    // (asked, answered, answered without recall) at 1/10 and 1/30 of each log.
    let mut tally = [(0usize, 0usize, 0usize); 2];
    let mut missed = Vec::new();
    let mut first = true;
    for (name, divisor) in [
        "claude_code_rust_port.json",
        "openhands_vue_todo.json",
        "swe_agent_marshmallow.json",
        "tau_bench_airline.json",
    ]
    .into_iter()
    .flat_map(|n| [(n, 10), (n, 30)])
    {
        let path = format!("{dir}/{name}");
        let value: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let thread = thread_from_json(&value, name).expect("imports").thread;
        let harness = Harness::default();
        let whole = harness
            .render_as(&thread, 10_000_000, None, Format::Neutral, None)
            .expect("renders")
            .1
            .tokens
            .total;
        let budget = (whole / divisor).max(8_000);
        let cell_tally = &mut tally[usize::from(divisor == 30)];
        let out = harness
            .render_recall(&thread, budget, None, (Format::Neutral, None), Some(false))
            .expect("renders")
            .1;
        let RenderedOutput::Neutral(request) = &out.output else {
            panic!("neutral output")
        };
        let prompt: String = request
            .messages
            .iter()
            .map(|m| m.content.flat_text().to_lowercase())
            .collect::<Vec<_>>()
            .join("\n");
        let actions = out.plan.actions();
        let lost = lost_things(&thread, &actions, &prompt);
        let step = lost.len().div_ceil(4).max(1);
        for term in lost.iter().step_by(step) {
            let mut asking = thread.clone();
            let mut question = (**asking.messages.last().expect("messages")).clone();
            question.id = "question".into();
            question.role = compactd::model::Role::User;
            question.turn += 1;
            question.tool_calls.clear();
            question.tool_result = None;
            question.content =
                compactd::model::Content::Text(format!("Remind me: what was {term} about?"));
            asking.messages.push(question.into());
            let cell = format!("{name} at {budget}: {term}");
            let render = |recall| {
                harness
                    .render_recall(&asking, budget, None, (Format::Neutral, None), recall)
                    .unwrap_or_else(|e| panic!("{cell}: {e}"))
                    .1
            };
            let on = render(None);
            assert!(on.tokens.total <= budget, "{cell}: {}", on.tokens.total);
            let RenderedOutput::Neutral(request) = &on.output else {
                panic!("neutral output")
            };
            let blocks = request
                .messages
                .iter()
                .filter(|m| m.origin == Origin::Recalled)
                .count();
            assert!(blocks <= 1, "{cell}: one block at most");
            // The prompt but the question itself: the answer is in it when
            // it stayed, or came back in the recall block.
            let answer_space: Vec<String> = request
                .messages
                .iter()
                .filter(|m| m.source_id != "question")
                .map(|m| m.content.flat_text())
                .collect();
            cell_tally.0 += 1;
            // Letters and digits only: `cov-fail-under = 100` states what
            // `--cov-fail-under=100` does.
            let bare = |s: &str| -> String {
                s.chars()
                    .filter(|c| c.is_alphanumeric())
                    .flat_map(char::to_lowercase)
                    .collect()
            };
            if answer_space.iter().any(|b| bare(b).contains(&bare(term))) {
                cell_tally.1 += 1;
            } else {
                missed.push(cell.clone());
            }
            // The same question without recall, for comparison.
            let RenderedOutput::Neutral(plain) = render(Some(false)).output else {
                panic!("neutral output")
            };
            if plain
                .messages
                .iter()
                .filter(|m| m.source_id != "question")
                .any(|m| bare(&m.content.flat_text()).contains(&bare(term)))
            {
                cell_tally.2 += 1;
            }
            if first {
                first = false;
                assert_eq!(render(None).output, on.output, "{cell}: not deterministic");
                let off = render(Some(false));
                let RenderedOutput::Neutral(request) = &off.output else {
                    panic!("neutral output")
                };
                assert!(request
                    .messages
                    .iter()
                    .all(|m| m.origin != Origin::Recalled));
                assert!(off.recalled.is_empty());
            }
        }
    }
    for ((asked, recalled, without), (ratio, floor)) in
        tally.into_iter().zip([(10, 0.9), (30, 0.75)])
    {
        let rate = recalled as f64 / asked.max(1) as f64;
        eprintln!("without recall, 1/{ratio}: {without} of {asked}");
        eprintln!("recall at render, 1/{ratio}: {recalled} of {asked} questions brought the answer back ({rate:.3})");
        assert!(
            asked >= 10,
            "only {asked} questions at 1/{ratio}: the test proves little"
        );
        assert!(
            rate >= floor,
            "1/{ratio}: {recalled} of {asked} ({rate:.3}); missed: {missed:#?}"
        );
    }
}

/// An index that follows a growing thread (the per-turn path, which skips
/// what it saw) answers as one built afresh, and still sees an edit.
#[test]
fn an_index_following_a_growing_thread_answers_as_a_fresh_one() {
    use common::ThreadBuilder;
    use compactd::model::{Outcome, ToolContent};
    use std::sync::Arc;
    let mut log = common::log_lines(300);
    log.push_str("migration 0042 failed: ERR_LOCK_TIMEOUT on table invoices\n");
    log.push_str(&common::log_lines(300));
    let mut b = ThreadBuilder::default();
    b.user("Run the migrations.");
    b.tool(
        "migrate",
        serde_json::json!({"all": true}),
        ToolContent::Text(log),
        Outcome::Failure,
        None,
    );
    b.assistant("Migration 0042 failed; retrying.");
    for i in 0..6 {
        b.user(&format!("Any news {i}?"));
        b.assistant("Not yet.");
    }
    let thread = b.build("follow");
    let out = Harness::default()
        .render_as(&thread, 2_000, None, Format::OpenAiChat, None)
        .expect("renders")
        .1;
    let plan = &out.plan;
    let base = Arc::new(thread.clone());
    let mut index = RecallIndex::build(&base, plan, Redactor::standard());
    let mut grown = thread.clone();
    let mut more = ThreadBuilder::default();
    more.user("Which table timed out?");
    more.assistant("Checking.");
    for (k, mut m) in more.build("follow").messages.into_iter().enumerate() {
        std::sync::Arc::make_mut(&mut m).id = format!("late-{k}");
        grown.messages.push(m);
    }
    let grown = Arc::new(grown);
    index.update(&grown, Some(&base), plan, Redactor::standard());
    let fresh = RecallIndex::build(&grown, plan, Redactor::standard());
    let top = |i: &RecallIndex, q: &str| -> Vec<(String, Option<String>, String)> {
        i.search(q, 5)
            .iter()
            .map(|h| {
                let p = h.passage;
                (p.message_id.clone(), p.artifact_id.clone(), p.text.clone())
            })
            .collect()
    };
    for q in [
        "ERR_LOCK_TIMEOUT invoices",
        "migration 0042",
        "worker batch",
    ] {
        assert_eq!(top(&index, q), top(&fresh, q), "{q}");
    }
    assert!(!top(&index, "ERR_LOCK_TIMEOUT").is_empty());
    // The same ids, an evicted message edited: found as it is now.
    let mut edited = (*grown).clone();
    let at = edited
        .messages
        .iter()
        .position(|m| m.tool_result.is_some())
        .expect("the log");
    let result = std::sync::Arc::make_mut(&mut edited.messages[at])
        .tool_result
        .as_mut()
        .expect("result");
    result.content = ToolContent::Text("migration 0042 passed after ERR_DEADLOCK_RETRY".into());
    let edited = Arc::new(edited);
    index.update(&edited, None, plan, Redactor::standard());
    assert!(top(&index, "ERR_LOCK_TIMEOUT")
        .iter()
        .all(|(_, _, t)| !t.contains("ERR_LOCK_TIMEOUT")));
    assert!(top(&index, "ERR_DEADLOCK_RETRY")
        .iter()
        .any(|(_, _, t)| t.contains("ERR_DEADLOCK_RETRY")));
    // The same thread sent in full again (equal messages, none shared):
    // found as before, and as an index built from it finds it.
    let before = top(&index, "ERR_DEADLOCK_RETRY");
    let again = Arc::new(compactd::model::Thread::new(
        edited.id.clone(),
        edited.messages.iter().map(|m| (**m).clone()).collect(),
    ));
    index.update(&again, None, plan, Redactor::standard());
    assert_eq!(top(&index, "ERR_DEADLOCK_RETRY"), before);
    let rebuilt = RecallIndex::build(&again, plan, Redactor::standard());
    for q in ["ERR_DEADLOCK_RETRY", "migration 0042", "worker batch"] {
        assert_eq!(top(&index, q), top(&rebuilt, q), "{q}");
    }
}

/// An index's generation changes with an update that changes what it
/// evicts, and only then: results kept for a query (the per-turn recall
/// block keeps them) stay right while it holds. Merging each query's
/// ranked passages is `search_all`.
#[test]
fn the_generation_changes_exactly_when_searches_may() {
    use std::sync::Arc;
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/swe_agent_marshmallow.json"
    );
    let value: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let thread = Arc::new(thread_from_json(&value, "gen").expect("imports").thread);
    let plan = |budget| {
        Harness::default()
            .render_as(&thread, budget, None, Format::OpenAiChat, None)
            .expect("renders")
            .1
            .plan
    };
    let (loose, tight) = (plan(16_000), plan(6_000));
    assert_ne!(loose.actions().len(), tight.actions().len());
    let queries = vec![
        "marshmallow field serialization error".to_string(),
        "TimeDelta rounding test".to_string(),
    ];
    let ranked = |index: &RecallIndex| -> Vec<Vec<(usize, f32)>> {
        queries.iter().map(|q| index.ranked(q, 10)).collect()
    };

    let mut index = RecallIndex::build(&thread, &loose, Redactor::standard());
    let first = index.generation();
    let before = ranked(&index);
    index.update(&thread, None, &loose, Redactor::standard());
    assert_eq!(index.generation(), first, "the same evictions");
    index.update(
        &Arc::new((*thread).clone()),
        None,
        &loose,
        Redactor::standard(),
    );
    assert_eq!(index.generation(), first, "the same thread sent again");
    assert_eq!(ranked(&index), before);

    index.update(&thread, None, &tight, Redactor::standard());
    assert_ne!(index.generation(), first, "more evicted");
    let fresh = RecallIndex::build(&thread, &tight, Redactor::standard());
    let after = ranked(&index);
    assert_ne!(after, before, "the tighter plan's passages are found");
    for (q, (a, f)) in queries.iter().zip(after.iter().zip(ranked(&fresh))) {
        let text = |index: &RecallIndex, r: &[(usize, f32)]| -> Vec<String> {
            index
                .merged([r.to_vec()], r.len())
                .iter()
                .map(|h| h.passage.text.clone())
                .collect()
        };
        assert_eq!(text(&index, a), text(&fresh, &f), "{q}");
    }
    // Merging ranked lists is what searching query after query gives: the
    // first query's best, then the next one's not in yet, up to k.
    for k in [1, 3, 10, 25] {
        let mut expected: Vec<compactd::recall::Hit<'_>> = Vec::new();
        for q in &queries {
            for h in index.search(q, k) {
                if expected.len() < k
                    && !expected.iter().any(|e| std::ptr::eq(e.passage, h.passage))
                {
                    expected.push(h);
                }
            }
        }
        let merged = index.merged(queries.iter().map(|q| index.ranked(q, k)), k);
        assert_eq!(merged, expected, "k = {k}");
        assert_eq!(index.search_all(&queries, k), expected, "k = {k}");
    }
}
