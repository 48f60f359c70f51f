//! Task continuation through gRPC: a scripted agent works through a
//! multi-step task whose last step needs values that only early tool
//! results held, with the prompt compacted at ever smaller budgets. The
//! agent reads what the rendered prompt shows, and when a value is not
//! there it uses the tools compactd gives it (SearchContext, then
//! Rehydrate of the artifacts the prompt names), as a tool-using model
//! would. The task must succeed at every budget where it succeeds with the
//! whole thread (seeds 000 and 002: task success after compaction).

use crate::server_common;

use compactd::proto::pb;
use server_common::*;

const STEPS: u32 = 16;
/// The invoices the last step asks about.
const ASKED: [u32; 3] = [3, 8, 13];

/// A stable order id per invoice, not derivable from the text around it.
fn order_id(k: u32) -> String {
    format!(
        "ORD-{:08x}",
        k.wrapping_mul(2_654_435_761).rotate_left(7) ^ 0x5bd1_e995
    )
}

/// One lookup's output: a header, the invoice's lines, and the record the
/// task needs on its last line (so no first-line gist carries it).
fn lookup_output(k: u32) -> String {
    let mut out = String::from("lookup_invoice: 60 invoice lines follow\n");
    for l in 0..60 {
        out.push_str(&format!(
            "line {l:02}: sku SKU-{:05} qty {} unit price {}.{:02} EUR, warehouse W{}\n",
            k * 100 + l,
            1 + l % 4,
            3 + l % 50,
            l * 7 % 100,
            l % 6
        ));
    }
    out.push_str(&format!(
        "{{\"invoice\":\"INV-{k}\",\"order_id\":\"{}\",\"amount_eur\":{}}}\n",
        order_id(k),
        120 + 17 * k
    ));
    out
}

fn thread(id: &str) -> pb::Thread {
    let mut messages = vec![text(
        "u0",
        pb::Role::User,
        0,
        "We are processing a refund batch. Look up each invoice I give you; I will ask for refunds at the end.",
    )];
    for k in 1..=STEPS {
        messages.push(text(
            &format!("u{k}"),
            pb::Role::User,
            k,
            &format!("Step {k}: look up invoice INV-{k}."),
        ));
        messages.push(pb::Message {
            id: format!("a{k}"),
            role: pb::Role::Assistant as i32,
            turn: k,
            tool_calls: vec![pb::ToolCall {
                wire: None,
                id: format!("c{k}"),
                name: "lookup_invoice".into(),
                arguments_json: format!("{{\"invoice\":\"INV-{k}\"}}"),
            }],
            ..Default::default()
        });
        messages.push(pb::Message {
            id: format!("t{k}"),
            role: pb::Role::Tool as i32,
            turn: k,
            tool_result: Some(pb::ToolResultEnvelope {
                tool_name: "lookup_invoice".into(),
                tool_call_id: format!("c{k}"),
                outcome: pb::Outcome::Success as i32,
                content: Some(pb::tool_result_envelope::Content::ContentText(
                    lookup_output(k),
                )),
                ..Default::default()
            }),
            ..Default::default()
        });
        messages.push(text(
            &format!("b{k}"),
            pb::Role::Assistant,
            k,
            "Looked it up; ready for the next one.",
        ));
    }
    let last = STEPS + 1;
    messages.push(text(
        &format!("u{last}"),
        pb::Role::User,
        last,
        &format!(
            "Now refund the orders of invoices {}. Quote each order id exactly.",
            ASKED.map(|k| format!("INV-{k}")).join(", ")
        ),
    ));
    pb::Thread {
        id: id.into(),
        messages,
    }
}

/// The order id and amount on a line that names `invoice` as a whole word
/// (a reference list that names the ids without the amount is not enough).
fn id_on_a_line_naming(text: &str, invoice: &str) -> Option<String> {
    for line in text.lines() {
        let named = line.match_indices(invoice).any(|(i, _)| {
            !line[i + invoice.len()..]
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_digit())
        });
        let (Some(at), Some(amount_at)) = (line.find("ORD-"), line.find("\"amount_eur\":")) else {
            continue;
        };
        if !named {
            continue;
        }
        let id: String = line[at..].chars().take(12).collect();
        let amount: String = line[amount_at + 13..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        if id.len() == 12 && id[4..].chars().all(|c| c.is_ascii_hexdigit()) && !amount.is_empty() {
            return Some(format!("{id} {amount}"));
        }
    }
    None
}

/// Where the agent found a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Found {
    InPrompt,
    BySearch,
    ByReadingBack,
}

#[tokio::test]
async fn a_scripted_agent_finishes_its_task_at_every_budget() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let tok = token("acme", ALL);
    let mut results = Vec::new();
    let runs = [200_000u32, 12_000, 8_000, 5_000, 3_500]
        .into_iter()
        .flat_map(|b| [(b, true), (b, false)]);
    for (budget, recall) in runs {
        let t = thread(&format!("task-{budget}-{recall}"));
        let out = within(client.render(authed(
            pb::RenderRequest {
                thread: Some(t.clone()),
                compact_first: true,
                model: "gpt-4o".into(),
                max_input_tokens: budget,
                system_prompt: Some("You are a billing agent.".into()),
                // Recall puts matching passages back; without it the agent
                // has the stubs' references and its tools.
                recall: Some(recall),
                ..Default::default()
            },
            &tok,
        )))
        .await
        .unwrap_or_else(|e| panic!("budget {budget}: {e}"))
        .into_inner();
        let prompt: Vec<&str> = out.messages.iter().map(|m| m.text.as_str()).collect();
        let mut how = Vec::new();
        for k in ASKED {
            let invoice = format!("INV-{k}");
            let mut found = prompt
                .iter()
                .find_map(|m| id_on_a_line_naming(m, &invoice))
                .map(|id| (id, Found::InPrompt));
            if found.is_none() {
                let r = within(client.search_context(authed(
                    pb::SearchContextRequest {
                        thread: Some(t.clone()),
                        query: invoice.clone(),
                        max_results: 5,
                        ..Default::default()
                    },
                    &tok,
                )))
                .await
                .expect("search")
                .into_inner();
                found = r
                    .passages
                    .iter()
                    .find_map(|p| id_on_a_line_naming(&p.text, &invoice))
                    .map(|id| (id, Found::BySearch));
            }
            if found.is_none() {
                // Every artifact the prompt names, read back.
                let mut ids: Vec<String> = Vec::new();
                for m in &prompt {
                    for (i, _) in m.match_indices("art_") {
                        let id: String = m[i..].chars().take(36).collect();
                        if compactd::model::is_artifact_id(&id) && !ids.contains(&id) {
                            ids.push(id);
                        }
                    }
                }
                for id in ids {
                    let r = within(client.rehydrate(authed(
                        pb::RehydrateRequest {
                            thread_id: t.id.clone(),
                            artifact_id: id,
                            max_tokens: 200_000,
                            ..Default::default()
                        },
                        &tok,
                    )))
                    .await
                    .expect("rehydrate")
                    .into_inner();
                    if let Some(v) = id_on_a_line_naming(&r.content, &invoice) {
                        found = Some((v, Found::ByReadingBack));
                        break;
                    }
                }
            }
            let (id, where_) =
                found.unwrap_or_else(|| panic!("budget {budget}: {invoice} not found"));
            assert_eq!(
                id,
                format!("{} {}", order_id(k), 120 + 17 * k),
                "budget {budget}: {invoice}"
            );
            how.push(where_);
        }
        let compaction = out.compaction.expect("compact_first reports");
        results.push((
            budget,
            recall,
            compaction.tokens_before,
            compaction.tokens_after,
            how,
        ));
    }
    for r in &results {
        eprintln!(
            "budget {} recall {}: {} -> {} tokens, found {:?}",
            r.0, r.1, r.2, r.3, r.4
        );
    }
    // The whole thread needed nothing; the small budgets really compacted
    // (about 11x at the smallest, where the short user messages kept are
    // mostly their delimiting blocks), and there the
    // agent had to reach for what compactd moved out.
    let whole = results.iter().filter(|r| r.0 == 200_000);
    assert!(whole
        .clone()
        .all(|r| r.4.iter().all(|f| *f == Found::InPrompt)));
    assert!(results.iter().filter(|r| r.0 < 200_000).all(|r| r.3 < r.2));
    assert!(results
        .iter()
        .filter(|r| r.0 == 3_500)
        .all(|r| r.3 * 11 < r.2));
    assert!(
        results
            .iter()
            .any(|r| r.4.iter().any(|f| *f != Found::InPrompt)),
        "the tools were never needed: {results:?}"
    );
}
