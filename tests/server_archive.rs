//! Every eviction is retrievable: after compaction to a tight budget, every
//! message of the thread is either rendered verbatim or held by an artifact
//! whose id appears in the rendered prompt, and reading that artifact back
//! gives the original (redacted) content.

use crate::server_common;

use std::collections::{BTreeMap, BTreeSet};

use compactd::proto::pb;
use compactd::render::artifact_ids_in;
use compactd_testkit::hard::{self, HardParams};
use compactd_testkit::synth::{self, SynthParams};
use server_common::*;

/// Renders `thread` compacted to `budget` and checks the property; returns
/// (messages evicted, artifacts named in the prompt).
async fn check_every_eviction_is_retrievable(
    client: &mut pb::compaction_service_client::CompactionServiceClient<tonic::transport::Channel>,
    token: &str,
    thread: &compactd::model::Thread,
    budget: u32,
) -> (usize, usize) {
    let r = within(client.render(authed(
        pb::RenderRequest {
            thread: Some(pb::Thread::from(thread)),
            compact_first: true,
            max_input_tokens: budget,
            format: pb::OutputFormat::Neutral as i32,
            omit_pending_calls: true,
            ..Default::default()
        },
        token,
    )))
    .await
    .unwrap_or_else(|e| panic!("render at {budget}: {e:?}"))
    .into_inner();
    let total = r.tokens.as_ref().expect("tokens").total;
    assert!(total <= budget, "{total} > {budget}");

    let verbatim: BTreeSet<&str> = r
        .messages
        .iter()
        .filter(|m| m.origin == pb::Origin::Verbatim as i32)
        .map(|m| m.source_id.as_str())
        .collect();
    let named: BTreeSet<String> = r
        .messages
        .iter()
        .flat_map(|m| {
            artifact_ids_in(&m.text)
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .collect();
    // Read every named artifact back; which messages each holds.
    let mut holds: BTreeMap<String, String> = BTreeMap::new();
    for id in &named {
        let back = within(client.rehydrate(authed(
            pb::RehydrateRequest {
                thread_id: thread.id.clone(),
                artifact_id: id.clone(),
                max_tokens: 2_000_000,
                ..Default::default()
            },
            token,
        )))
        .await
        .unwrap_or_else(|e| panic!("{id} named in the prompt but unreadable: {e:?}"))
        .into_inner();
        assert!(!back.truncated, "{id}");
        for m in back.message_ids {
            holds.insert(m, back.content.clone());
        }
    }
    // Calls left out because their result is pending are not evictions.
    let pending: BTreeSet<&str> = {
        let pairing = thread.pairing();
        pairing
            .pending()
            .map(|(i, _)| thread.messages[i].id.as_str())
            .collect()
    };
    let mut evicted = 0;
    for m in &thread.messages {
        if verbatim.contains(m.id.as_str()) || pending.contains(m.id.as_str()) {
            continue;
        }
        evicted += 1;
        let content = holds.get(&m.id).unwrap_or_else(|| {
            panic!(
                "budget {budget}: message {} (turn {}) is neither rendered verbatim nor in an artifact the prompt names",
                m.id, m.turn
            )
        });
        // The original is in there: a stretch of its text (no secrets in
        // these threads, so redaction leaves it as is).
        let original = m.archived_text();
        let probe: String = original.chars().take(120).collect();
        assert!(
            content.contains(probe.trim()),
            "budget {budget}: artifact for {} does not hold its original text",
            m.id
        );
    }
    (evicted, named.len())
}

#[tokio::test]
async fn every_message_is_verbatim_or_reachable_through_a_named_artifact() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let acme = token("acme", ALL);
    let synthetic = synth::thread(&SynthParams {
        seed: 11,
        turns: 40,
        tool_density: 0.8,
        max_output_lines: 300,
        protected: 1,
    });
    let agentic = hard::thread(&HardParams::default());
    for (name, thread) in [("synth", synthetic), ("hard", agentic)] {
        for budget in [6_000, 16_000, 48_000] {
            // A thread of its own per budget: a committed plan is reused
            // for the same thread whatever the budget.
            let mut thread = thread.clone();
            thread.id = format!("{name}-{budget}");
            let (evicted, named) =
                check_every_eviction_is_retrievable(&mut client, &acme, &thread, budget).await;
            if budget < 10_000 {
                assert!(
                    evicted > 0,
                    "{name} at {budget}: nothing was evicted; the test proves nothing"
                );
            }
            if evicted > 0 {
                assert!(named > 0, "{name} at {budget}");
                // Batched: far fewer artifacts than evicted messages (what
                // the refill gives back as stubs is archived as a batch of
                // its own).
                assert!(
                    named * 3 <= evicted.max(3),
                    "{name} at {budget}: {named} artifacts for {evicted} messages"
                );
            }
        }
    }
}

/// With archiving off for a request, evictions are not archived (and the
/// prompt names no archive).
#[tokio::test]
async fn archiving_can_be_turned_off_per_request() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let acme = token("acme", ALL);
    let thread = synth::thread(&SynthParams {
        seed: 3,
        turns: 30,
        ..SynthParams::default()
    });
    let out = within(client.compact(authed(
        pb::CompactRequest {
            thread: Some(pb::Thread::from(&thread)),
            max_input_tokens: 8_000,
            policy: Some(pb::PolicyOverrides {
                enable_archive: Some(false),
                enable_externalize: Some(false),
                ..Default::default()
            }),
            ..Default::default()
        },
        &acme,
    )))
    .await
    .expect("compact")
    .into_inner();
    assert!(
        out.new_artifact_ids.is_empty(),
        "{:?}",
        out.new_artifact_ids
    );
}
