//! The per-tier cap on tool results through gRPC, turn after turn on one
//! tenant: a thread that grows under the total's trigger reuses its plan
//! while tool output stays under its cap, and is compacted again the turn
//! the appended results push it over (the per-turn reuse checks the cap,
//! not only the total).

use crate::server_common;

use compactd::proto::pb;
use server_common::*;

fn thread(turns: u32) -> pb::Thread {
    pb::Thread {
        id: "t-tier".into(),
        messages: (1..=turns)
            .flat_map(|n| agent_turn(n, 60, "batch ok"))
            .collect(),
    }
}

fn compact(turns: u32) -> pb::CompactRequest {
    let mut req = compact_req(thread(turns), 40_000);
    req.policy = Some(pb::PolicyOverrides {
        keep_recent_turns: Some(1),
        keep_tool_io_pairs: Some(1),
        // The results are non-replayable: they go to the artifact store.
        externalize_threshold_tokens: Some(200),
        tier_caps: Some(pb::TierCaps {
            tool_results_ratio: Some(0.1),
        }),
        ..Default::default()
    });
    req
}

#[tokio::test]
async fn appended_tool_output_over_its_cap_is_compacted_on_the_turn_it_crosses() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let tok = token("acme", ALL);
    let mut turns = 2;
    let mut last: Option<pb::CompactResponse> = None;
    // Grow a turn at a time until the cap is crossed; every turn before
    // that reuses the plan.
    let crossed = loop {
        let out = within(client.compact(authed(compact(turns), &tok)))
            .await
            .expect("compact")
            .into_inner();
        if out.triggered {
            break out;
        }
        if let Some(prev) = &last {
            assert!(out.reused, "turn {turns}: an unchanged plan is reused");
            assert_eq!(out.version, prev.version);
        }
        last = Some(out);
        turns += 1;
        assert!(turns < 20, "the cap was never crossed");
    };
    let out = crossed;
    assert!(last.is_some(), "at least one turn under the cap first");
    assert!(!out.reused, "turn {turns}: over the cap, not reused");
    let tier = out
        .budget
        .and_then(|b| b.tool_results)
        .expect("the cap is reported");
    assert!(tier.tokens_before > tier.cap, "{tier:?}");
    assert!(tier.tokens_after <= tier.target, "{tier:?}");
    let plan = out.plan.expect("plan");
    assert!(!plan.clearings.is_empty() || !plan.externalizations.is_empty());
    assert!(
        out.tokens_after < 40_000 * 85 / 100,
        "far below the total's trigger"
    );
}
