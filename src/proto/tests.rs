//! Core → wire → core is the identity for every value that travels both
//! ways, and the inbound direction rejects what it cannot represent.

use crate::provider::Format;
use std::collections::BTreeMap;

use proptest::collection::{btree_map, vec};
use proptest::option;
use proptest::prelude::*;
use serde_json::Value;

use super::*;
// The conversions into commands and responses live with the server; these
// tests share this file's strategies.
use crate::model::{
    ActionKind, ArtifactReference, AuditRecord, ClearReason, ClearRecord, CompactionPlan, Content,
    ContentPart, Decision, DeterminismMetadata, DropRecord, DroppedSpanIndex, Durability, Eviction,
    EvictionCounts, ExternalizationRecord, JsonText, Message, MessageMetadata, OpenItem, Outcome,
    Priority, Role, Sensitivity, SpanReference, StructuredSummary, SummarizationRecord, Thread,
    ToolCall, ToolContent, ToolOutcome, ToolResultEnvelope, ToolSchema,
};
use crate::reduce::{BudgetReport, ReducerReport};
use crate::render::{
    Origin, RehydrationBlocked, RehydrationReport, RenderedMessage, RequestTokens,
};
use crate::server::convert::reuse;
use crate::server::convert::*;

// ───────────────────────────── strategies ─────────────────────────────

fn text() -> impl Strategy<Value = String> {
    // Any Unicode, including quotes, backslashes, newlines and control characters.
    prop_oneof!["(?s).{0,12}", "[a-z0-9_]{1,8}"]
}

fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(Value::Array),
            btree_map(text(), inner, 0..4).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn json_map() -> impl Strategy<Value = BTreeMap<String, Value>> {
    btree_map(text(), json(), 0..3)
}

fn role() -> impl Strategy<Value = Role> {
    prop_oneof![
        Just(Role::System),
        Just(Role::Developer),
        Just(Role::User),
        Just(Role::Assistant),
        Just(Role::Tool),
    ]
}

fn outcome() -> impl Strategy<Value = Outcome> {
    prop_oneof![
        Just(Outcome::Success),
        Just(Outcome::Failure),
        Just(Outcome::Partial)
    ]
}

fn sensitivity() -> impl Strategy<Value = Sensitivity> {
    prop_oneof![
        Just(Sensitivity::Public),
        Just(Sensitivity::Internal),
        Just(Sensitivity::Confidential),
        Just(Sensitivity::Restricted),
    ]
}

fn durability() -> impl Strategy<Value = Durability> {
    prop_oneof![
        Just(Durability::Ephemeral),
        Just(Durability::Anchoring),
        Just(Durability::Replayable),
        Just(Durability::NonReplayable),
    ]
}

fn content() -> impl Strategy<Value = Content> {
    let part = prop_oneof![
        text().prop_map(|text| ContentPart::Text { text }),
        text().prop_map(|url| ContentPart::Image { url }),
    ];
    prop_oneof![
        text().prop_map(Content::Text),
        // An empty parts list is the empty text on the wire.
        vec(part, 1..4).prop_map(Content::Parts),
    ]
}

fn tool_call() -> impl Strategy<Value = ToolCall> {
    (text(), text(), json()).prop_map(|(id, name, arguments)| ToolCall {
        wire: None,
        id,
        name,
        arguments,
    })
}

fn determinism() -> impl Strategy<Value = DeterminismMetadata> {
    (
        option::of(text()),
        option::of(text()),
        option::of(any::<f64>().prop_filter("finite", |f| f.is_finite())),
        option::of(text()),
    )
        .prop_map(|(content_hash, etag, mtime, version)| DeterminismMetadata {
            content_hash,
            etag,
            mtime,
            version,
        })
}

fn envelope() -> impl Strategy<Value = ToolResultEnvelope> {
    let content = prop_oneof![
        text().prop_map(ToolContent::Text),
        json().prop_map(|v| ToolContent::Json(JsonText::from_value(&v))),
    ];
    (
        (text(), text(), outcome(), content),
        (
            json_map(),
            option::of(durability()),
            option::of(determinism()),
            option::of(text()),
            option::of(text()),
        ),
    )
        .prop_map(
            |(
                (tool_name, tool_call_id, outcome, content),
                (key_fields, durability, determinism, started_at, completed_at),
            )| ToolResultEnvelope {
                wire: None,
                tool_name,
                tool_call_id,
                outcome,
                content,
                key_fields,
                durability,
                determinism,
                started_at,
                completed_at,
            },
        )
}

fn metadata() -> impl Strategy<Value = MessageMetadata> {
    (
        any::<bool>(),
        option::of(text()),
        sensitivity(),
        option::of(text()),
        option::of(Just("2026-01-05T10:00:00.25+01:00".to_string())),
    )
        .prop_map(
            |(protected, label, sensitivity, source, created_at)| MessageMetadata {
                protected,
                label,
                sensitivity,
                source,
                created_at,
            },
        )
}

fn message() -> impl Strategy<Value = Message> {
    (
        text(),
        role(),
        content(),
        vec(tool_call(), 0..3),
        option::of(envelope()),
        any::<u32>(),
        metadata(),
    )
        .prop_map(
            |(id, role, content, tool_calls, tool_result, turn, metadata)| Message {
                id,
                role,
                content,
                tool_calls,
                tool_result,
                turn,
                metadata,
            },
        )
}

fn thread() -> impl Strategy<Value = Thread> {
    (text(), vec(message(), 0..6)).prop_map(|(id, messages)| Thread::new(id, messages))
}

fn span() -> impl Strategy<Value = SpanReference> {
    (vec(text(), 1..4), any::<u32>(), any::<u32>()).prop_map(
        |(message_ids, first_turn, last_turn)| SpanReference {
            message_ids,
            first_turn,
            last_turn,
        },
    )
}

fn summary() -> impl Strategy<Value = StructuredSummary> {
    let priority = prop_oneof![
        Just(Priority::High),
        Just(Priority::Medium),
        Just(Priority::Low)
    ];
    let decision = (
        text(),
        text(),
        any::<u32>(),
        option::of(Just("2026-01-05T10:00:00Z".to_string())),
    )
        .prop_map(|(decision, rationale, turn, timestamp)| Decision {
            decision,
            rationale,
            turn,
            timestamp,
        });
    let open = (text(), text(), priority).prop_map(|(description, context, priority)| OpenItem {
        description,
        context,
        priority,
    });
    let artifact =
        (text(), text(), text()).prop_map(|(artifact_id, description, rehydrate_hint)| {
            ArtifactReference {
                artifact_id,
                description,
                rehydrate_hint,
            }
        });
    let tool = (text(), outcome(), json_map(), option::of(text())).prop_map(
        |(tool_name, outcome, key_fields, error_message)| ToolOutcome {
            tool_name,
            outcome,
            key_fields,
            error_message,
        },
    );
    (
        span(),
        vec(text(), 0..3),
        vec(decision, 0..2),
        vec(open, 0..2),
        vec(artifact, 0..2),
        vec(tool, 0..2),
        option::of(text()),
        vec(text(), 0..3),
        (vec(text(), 0..3), any::<u32>(), vec(text(), 0..3)),
    )
        .prop_map(
            |(
                span,
                facts,
                decisions,
                open_items,
                artifacts,
                tool_outcomes,
                current_task,
                current_plan,
                (references, omitted, requests),
            )| StructuredSummary {
                span,
                requests,
                facts,
                decisions,
                open_items,
                artifacts,
                tool_outcomes,
                current_task,
                current_plan,
                references,
                omitted,
                omitted_bytes: 0,
            },
        )
}

fn plan() -> impl Strategy<Value = CompactionPlan> {
    let ext = (
        span(),
        text(),
        summary(),
        text(),
        sensitivity(),
        text(),
        any::<u32>(),
    )
        .prop_map(
            |(span, artifact_id, summary, rehydrate_hint, sensitivity, content_hash, tokens)| {
                ExternalizationRecord {
                    span,
                    artifact_id,
                    summary,
                    rehydrate_hint,
                    sensitivity,
                    content_hash: content_hash.clone(),
                    content_tokens: tokens,
                    // Exercised both ways: a plugin's and the built-in step's.
                    strategy: if tokens % 2 == 0 {
                        String::new()
                    } else {
                        content_hash
                    },
                }
            },
        );
    let archive = || proptest::option::of("art_[0-9a-f]{32}");
    let sum = (
        span(),
        summary(),
        any::<u32>(),
        archive(),
        "(llm:[a-z0-9-]{1,8}:brief@[0-9a-f]{12})?",
    )
        .prop_map(|(span, summary, n, a, by)| SummarizationRecord {
            span,
            summary: summary.into(),
            summary_token_count: n,
            archive_artifact_id: a,
            summarizer_id: by,
        });
    let reason = prop_oneof![
        Just(ClearReason::Expired),
        Just(ClearReason::Durability),
        Just(ClearReason::Compressed),
        Just(ClearReason::Plugin),
        Just(ClearReason::Excerpt),
    ];
    let clear = (
        span(),
        json_map(),
        reason,
        text(),
        archive(),
        proptest::option::of(text()),
        "([a-z-]{1,10}@0\\.[0-9])?",
    )
        .prop_map(
            |(span, preserved_fields, reason, replacement, a, note, strategy)| ClearRecord {
                span,
                preserved_fields,
                reason,
                replacement,
                archive_artifact_id: a,
                archive_note: note,
                strategy,
            },
        );
    let drop = (span(), text(), vec(text(), 0..3), text(), archive()).prop_map(
        |(span, reason, keywords, summary, a)| DropRecord {
            span,
            reason,
            index: DroppedSpanIndex {
                keywords,
                summary,
                timestamp: None,
            },
            archive_artifact_id: a,
        },
    );
    (
        (text(), any::<u64>(), text()),
        (
            vec(ext, 0..2),
            vec(sum, 0..2),
            vec(clear, 0..3),
            vec(drop, 0..2),
        ),
        (any::<u32>(), any::<u32>()),
    )
        .prop_map(
            |(
                (thread_id, version, fingerprint),
                (externalizations, summarizations, clearings, drops),
                (original_token_count, compacted_token_count),
            )| CompactionPlan {
                thread_id,
                version,
                fingerprint,
                externalizations: externalizations.into(),
                summarizations: summarizations.into(),
                clearings: clearings.into(),
                drops: drops.into(),
                original_token_count,
                compacted_token_count,
                // Round-trips both ways: set from the compacted count.
                compacted_at_turn: (compacted_token_count % 2 == 1)
                    .then_some(compacted_token_count / 2),
            },
        )
}

fn rendered() -> impl Strategy<Value = RenderedMessage> {
    let origin = prop_oneof![
        Just(Origin::Verbatim),
        Just(Origin::Cleared),
        Just(Origin::Summary),
        Just(Origin::Externalized),
        Just(Origin::Rehydrated),
    ];
    (
        role(),
        content(),
        vec(tool_call(), 0..3),
        option::of(text()),
        option::of(text()),
        any::<bool>(),
        text(),
        origin,
    )
        .prop_map(
            |(role, content, tool_calls, tool_call_id, tool_name, is_error, source_id, origin)| {
                RenderedMessage {
                    wire: None,
                    role,
                    content,
                    tool_calls,
                    tool_call_id,
                    tool_name,
                    is_error,
                    source_id,
                    origin,
                }
            },
        )
}

fn tokens() -> impl Strategy<Value = RequestTokens> {
    vec(0u32..1_000_000, 6).prop_map(|n| RequestTokens {
        system: n[0],
        tools: n[1],
        messages: n[2],
        rehydrated: n[3],
        recalled: n[5],
        framing: n[4],
        total: n.iter().sum(),
    })
}

fn audit() -> impl Strategy<Value = AuditRecord> {
    (
        (any::<u64>(), text(), text(), text(), text(), text()),
        (text(), text(), vec(any::<u32>(), 4)),
        (
            vec(text(), 0..3),
            vec(text(), 0..3),
            vec(text(), 0..2),
            vec(text(), 0..2),
        ),
        (text(), vec(eviction(), 0..3)),
    )
        .prop_map(
            |(
                (plan_version, fp, pf, ss, sr, rf),
                (summarizer_id, tokenizer, e),
                (a, r, w, st),
                (requester, evicted),
            )| {
                AuditRecord {
                    plan_version,
                    plan_fingerprint: fp,
                    plan_format_version: pf,
                    summary_schema_version: ss,
                    summary_render_version: sr,
                    render_format_version: rf,
                    summarizer_id,
                    tokenizer,
                    evictions: EvictionCounts {
                        externalized: e[0],
                        summarized: e[1],
                        cleared: e[2],
                        dropped: e[3],
                    },
                    artifact_ids: a,
                    rehydrated_artifact_ids: r,
                    warnings: w,
                    strategies: st,
                    requester,
                    turns_since_compaction: (plan_version % 3 == 0)
                        .then_some(plan_version as u32 % 50),
                    evicted,
                }
            },
        )
}

fn eviction() -> impl Strategy<Value = Eviction> {
    (
        prop_oneof![
            Just(ActionKind::Externalize),
            Just(ActionKind::Summarize),
            Just(ActionKind::Clear),
            Just(ActionKind::Drop),
        ],
        (text(), text(), any::<u32>()),
        (text(), text(), text()),
    )
        .prop_map(
            |(action, (first, last, n), (reason, strategy, artifact))| Eviction {
                action,
                first_message_id: first,
                last_message_id: last,
                message_count: n,
                reason,
                strategy,
                artifact_id: artifact,
            },
        )
}

/// Core → wire → bytes → wire → core, through the real protobuf encoding.
fn through_the_wire<C, P>(value: &C) -> std::result::Result<C, ConvertError>
where
    for<'a> P: From<&'a C> + prost::Message + Default,
    C: TryFrom<P, Error = ConvertError>,
{
    let bytes = prost::Message::encode_to_vec(&P::from(value));
    let decoded = P::decode(bytes.as_slice()).expect("decodes");
    C::try_from(decoded)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(crate::testing::cases(200)))]

    #[test]
    fn threads_round_trip(t in thread()) {
        prop_assert_eq!(through_the_wire::<Thread, pb::Thread>(&t)?, t);
    }

    #[test]
    fn plans_round_trip(p in plan()) {
        prop_assert_eq!(through_the_wire::<CompactionPlan, pb::CompactionPlan>(&p)?, p);
    }

    #[test]
    fn rendered_messages_round_trip(m in rendered()) {
        prop_assert_eq!(through_the_wire::<RenderedMessage, pb::RenderedMessage>(&m)?, m);
    }

    #[test]
    fn reports_round_trip(
        t in tokens(),
        a in audit(),
        b in vec(any::<u32>(), 7),
        r in (text(), any::<u32>()),
        h in (text(), any::<bool>(), any::<bool>()),
        s in (text(), text(), json()),
    ) {
        prop_assert_eq!(through_the_wire::<RequestTokens, pb::TokenBreakdown>(&t)?, t);
        prop_assert_eq!(through_the_wire::<AuditRecord, pb::AuditRecord>(&a)?, a);
        let budget = BudgetReport {
            max_input_tokens: b[0],
            hard_limit: b[1],
            trigger: b[2],
            target: b[3],
            fixed_tokens: b[4],
            system_tokens: b[5],
            tool_tokens: b[6],
            workspace_tokens: b[6] / 2,
            counting: crate::tokens::calibration::Counting {
                basis: [
                    crate::tokens::calibration::CountBasis::Unstated,
                    crate::tokens::calibration::CountBasis::Exact,
                    crate::tokens::calibration::CountBasis::Estimate,
                    crate::tokens::calibration::CountBasis::Calibrated,
                ][(b[3] % 4) as usize],
                scale_ppm: b[5] % 4_000_000,
                reports: b[6],
            },
            tool_results: (b[0] % 2 == 1).then_some(crate::reduce::TierReport {
                cap: b[1],
                target: b[2],
                tokens_before: b[3],
                tokens_after: b[4],
            }),
        };
        prop_assert_eq!(through_the_wire::<BudgetReport, pb::BudgetReport>(&budget)?, budget);
        let reducer = ReducerReport { name: r.0, tokens_freed: r.1 };
        prop_assert_eq!(through_the_wire::<ReducerReport, pb::ReducerReport>(&reducer)?, reducer);
        let blocked = [
            None,
            Some(RehydrationBlocked::Sensitivity),
            Some(RehydrationBlocked::Permission),
            Some(RehydrationBlocked::Cooldown),
            Some(RehydrationBlocked::TurnLimit),
            Some(RehydrationBlocked::NotFound),
            Some(RehydrationBlocked::Unavailable),
        ][(b[0] % 7) as usize];
        let rehydrated = RehydrationReport {
            artifact_id: h.0,
            truncated: h.1,
            omitted: h.2,
            auto: h.1 ^ h.2,
            blocked,
        };
        prop_assert_eq!(
            through_the_wire::<RehydrationReport, pb::RehydratedArtifact>(&rehydrated)?,
            rehydrated
        );
        // Tool schemas need a name; everything else round-trips.
        let tool = ToolSchema { name: format!("t{}", s.0), description: s.1, parameters: s.2 };
        prop_assert_eq!(through_the_wire::<ToolSchema, pb::ToolSchema>(&tool)?, tool);
    }

    #[test]
    fn observations_round_trip(o in btree_map(text(), determinism(), 0..4)) {
        let request = pb::CompactRequest {
            observations: observations_to_pb(&o),
            ..Default::default()
        };
        let bytes = prost::Message::encode_to_vec(&request);
        let decoded = <pb::CompactRequest as prost::Message>::decode(bytes.as_slice()).expect("decodes");
        prop_assert_eq!(observations_from_pb(decoded.observations), o);
    }

    /// A thread sent in a Compact request arrives in the command unchanged.
    #[test]
    fn requests_carry_their_thread_into_the_command(t in thread()) {
        let base = crate::reduce::Policy::default();
        let cmd = compact_command(pb::CompactRequest {
            thread: Some(pb::Thread::from(&t)),
            ..Default::default()
        }, &base)?;
        prop_assert_eq!(cmd.thread.as_ref(), &t);
        prop_assert_eq!(cmd.policy.as_ref(), &base);
    }
}

#[test]
fn output_formats_round_trip() {
    for f in [
        Format::Neutral,
        Format::OpenAiChat,
        Format::AnthropicMessages,
    ] {
        assert_eq!(
            render::output_format(pb::OutputFormat::from(f) as i32, "format"),
            Ok(f)
        );
    }
    assert_eq!(
        render::output_format(9, "format").unwrap_err().field,
        "format"
    );
}

// ───────────────────────────── strictness ─────────────────────────────

fn msg(id: &str, role: pb::Role) -> pb::Message {
    pb::Message {
        id: id.into(),
        role: role as i32,
        text: "hi".into(),
        ..Default::default()
    }
}

fn thread_error(t: pb::Thread) -> ConvertError {
    required::<pb::Thread, Thread>(Some(t), "thread").unwrap_err()
}

#[test]
fn inbound_errors_name_the_field_path() {
    let mut m = msg("b", pb::Role::User);
    m.role = 42;
    let e = thread_error(pb::Thread {
        id: "t".into(),
        messages: vec![msg("a", pb::Role::User), m],
    });
    assert_eq!(e.field, "thread.messages[1].role");
    assert!(e.message.contains("42"), "{e}");

    let mut m = msg("a", pb::Role::Unspecified);
    m.role = 0;
    assert_eq!(
        thread_error(pb::Thread {
            id: "t".into(),
            messages: vec![m],
        })
        .field,
        "thread.messages[0].role"
    );

    let mut m = msg("a", pb::Role::Tool);
    m.tool_result = Some(pb::ToolResultEnvelope {
        key_fields: [("total".to_string(), "not json".to_string())].into(),
        ..Default::default()
    });
    assert_eq!(
        thread_error(pb::Thread {
            id: "t".into(),
            messages: vec![m],
        })
        .field,
        "thread.messages[0].tool_result.key_fields[\"total\"]"
    );

    let mut m = msg("a", pb::Role::User);
    m.parts = vec![pb::ContentPart { kind: None }];
    m.text = String::new();
    assert_eq!(
        thread_error(pb::Thread {
            id: "t".into(),
            messages: vec![m],
        })
        .field,
        "thread.messages[0].parts[0]"
    );

    let mut m = msg("a", pb::Role::User);
    m.metadata = Some(pb::MessageMetadata {
        sensitivity: 17,
        ..Default::default()
    });
    assert_eq!(
        thread_error(pb::Thread {
            id: "t".into(),
            messages: vec![m],
        })
        .field,
        "thread.messages[0].metadata.sensitivity"
    );

    let e = each::<pb::ToolSchema, ToolSchema>(
        vec![pb::ToolSchema {
            name: "x".into(),
            parameters_json: "{".into(),
            ..Default::default()
        }],
        "tools",
    )
    .unwrap_err();
    assert_eq!(e.field, "tools[0].parameters_json");
}

#[test]
fn responses_are_as_strict_as_requests() {
    // A plan record the server never sends: an unspecified clear reason.
    let mut p = pb::CompactionPlan::from(&CompactionPlan::default());
    p.clearings.push(pb::ClearRecord {
        span: Some(pb::SpanReference::default()),
        reason: 0,
        ..Default::default()
    });
    let e = CompactionPlan::try_from(p.clone()).unwrap_err();
    assert_eq!(e.field, "clearings[0].reason");
    p.clearings[0].reason = 99;
    assert!(CompactionPlan::try_from(p.clone())
        .unwrap_err()
        .message
        .contains("99"));
    p.clearings[0].reason = pb::ClearReason::Expired as i32;
    p.clearings[0].span = None;
    assert_eq!(
        CompactionPlan::try_from(p).unwrap_err().field,
        "clearings[0].span"
    );

    let mut m = pb::RenderedMessage::from(&RenderedMessage {
        wire: None,
        role: Role::Assistant,
        content: Content::Text("x".into()),
        tool_calls: vec![],
        tool_call_id: None,
        tool_name: None,
        is_error: false,
        source_id: "m1".into(),
        origin: Origin::Summary,
    });
    m.origin = 12;
    assert_eq!(RenderedMessage::try_from(m).unwrap_err().field, "origin");

    let t = pb::TokenBreakdown {
        system: 1,
        total: 5,
        ..Default::default()
    };
    assert_eq!(RequestTokens::try_from(t).unwrap_err().field, "total");
}

#[test]
fn overrides_apply_and_unset_fields_keep_the_base() {
    let base = crate::reduce::Policy::default();
    let p = policy_from_overrides(
        &base,
        Some(pb::PolicyOverrides {
            keep_recent_turns: Some(2),
            enable_drop: Some(false),
            ..Default::default()
        }),
    )
    .expect("valid");
    assert_eq!(p.keep_recent_turns, 2);
    assert!(!p.enable.drop);
    assert_eq!(p.trigger_ratio, base.trigger_ratio);
    let e = policy_from_overrides(
        &base,
        Some(pb::PolicyOverrides {
            durability: [("search".to_string(), 0)].into(),
            ..Default::default()
        }),
    )
    .unwrap_err();
    assert_eq!(e.field, "policy.durability[\"search\"]");
}

#[test]
fn per_tool_policies_arrive_and_bad_enums_name_the_tool() {
    let base = crate::reduce::Policy::default();
    let tool = pb::ToolPolicy {
        must_preserve_fields: vec!["order.id".into()],
        externalize_threshold_tokens: Some(200),
        replay_cost: pb::ReplayCost::Expensive as i32,
    };
    let p = policy_from_overrides(
        &base,
        Some(pb::PolicyOverrides {
            tools: [("place_order".to_string(), tool)].into(),
            ..Default::default()
        }),
    )
    .expect("valid");
    let t = &p.tools["place_order"];
    assert_eq!(t.must_preserve_fields, ["order.id"]);
    assert_eq!(t.externalize_threshold_tokens, Some(200));
    assert_eq!(t.replay_cost, Some(crate::reduce::ReplayCost::Expensive));
    let e = policy_from_overrides(
        &base,
        Some(pb::PolicyOverrides {
            tools: [(
                "x".to_string(),
                pb::ToolPolicy {
                    replay_cost: 9,
                    ..Default::default()
                },
            )]
            .into(),
            ..Default::default()
        }),
    )
    .unwrap_err();
    assert_eq!(e.field, "policy.tools[\"x\"].replay_cost");
}

#[test]
fn a_task_outcome_is_read_and_an_unknown_one_named() {
    let base = crate::reduce::Policy::default();
    let thread = pb::Thread {
        id: "t".into(),
        messages: vec![msg("a", pb::Role::User)],
    };
    let req = |v: i32| pb::CompactRequest {
        thread: Some(thread.clone()),
        task_outcome: v,
        ..Default::default()
    };
    let cmd = compact_command(req(pb::TaskOutcome::Failed as i32), &base).expect("valid");
    assert_eq!(cmd.task_outcome, Some(crate::app::TaskOutcome::Failed));
    let cmd = compact_command(req(0), &base).expect("valid");
    assert_eq!(cmd.task_outcome, None);
    let e = compact_command(req(7), &base).unwrap_err();
    assert_eq!(e.field, "task_outcome");
}

#[test]
fn requests_become_commands_and_name_the_field_at_fault() {
    let base = crate::reduce::Policy::default();
    let thread = pb::Thread {
        id: "t".into(),
        messages: vec![msg("a", pb::Role::User)],
    };
    // proto3 zero values mean "the server's default".
    let cmd = compact_command(
        pb::CompactRequest {
            thread: Some(thread.clone()),
            rehydrated_this_turn: true,
            ..Default::default()
        },
        &base,
    )
    .expect("valid");
    assert_eq!((cmd.model, cmd.max_input_tokens), (None, None));
    assert!(cmd.rehydrated_this_turn);
    let cmd = compact_command(
        pb::CompactRequest {
            thread: Some(thread.clone()),
            model: "gpt-4.1".into(),
            max_input_tokens: 9000,
            expected_version: Some(3),
            policy: Some(pb::PolicyOverrides {
                keep_recent_turns: Some(2),
                ..Default::default()
            }),
            ..Default::default()
        },
        &base,
    )
    .expect("valid");
    assert_eq!(cmd.model.as_deref(), Some("gpt-4.1"));
    assert_eq!(cmd.max_input_tokens, Some(9000));
    assert_eq!(cmd.expected_version, Some(3));
    assert_eq!(cmd.policy.keep_recent_turns, 2);

    let missing = compact_command(pb::CompactRequest::default(), &base).unwrap_err();
    assert_eq!(missing.field, "thread");
    let bad_tool = render_command(
        pb::RenderRequest {
            thread: Some(thread.clone()),
            tools: vec![pb::ToolSchema::default()],
            ..Default::default()
        },
        &base,
    )
    .unwrap_err();
    assert_eq!(bad_tool.field, "tools[0].name");
    let bad_format = render_command(
        pb::RenderRequest {
            thread: Some(thread.clone()),
            format: 7,
            ..Default::default()
        },
        &base,
    )
    .unwrap_err();
    assert_eq!(bad_format.field, "format");
    let bad_policy = compact_command(
        pb::CompactRequest {
            thread: Some(thread),
            policy: Some(pb::PolicyOverrides {
                default_durability: 12,
                ..Default::default()
            }),
            ..Default::default()
        },
        &base,
    )
    .unwrap_err();
    assert_eq!(bad_policy.field, "policy.default_durability");

    let r = rehydrate_command(pb::RehydrateRequest {
        thread_id: "t".into(),
        artifact_id: "art_x".into(),
        ..Default::default()
    });
    assert_eq!((r.max_tokens, r.model), (None, None));
}

#[test]
fn an_unspecified_outcome_is_read_from_the_output() {
    let result = |outcome: i32, text: &str| pb::Message {
        id: "r".into(),
        role: pb::Role::Tool as i32,
        tool_result: Some(pb::ToolResultEnvelope {
            tool_name: "deploy".into(),
            tool_call_id: "c1".into(),
            outcome,
            content: Some(pb::tool_result_envelope::Content::ContentText(text.into())),
            ..Default::default()
        }),
        ..Default::default()
    };
    let outcome = |m: pb::Message| {
        Message::try_from(m)
            .expect("converts")
            .tool_result
            .expect("envelope")
            .outcome
    };
    let failed = r#"{"status":"error","error":"quota exceeded (code Q9)"}"#;
    assert_eq!(outcome(result(0, failed)), Outcome::Failure);
    assert_eq!(outcome(result(0, "deployed r-12")), Outcome::Success);
    // A stated outcome is never second-guessed.
    assert_eq!(
        outcome(result(pb::Outcome::Success as i32, failed)),
        Outcome::Success
    );
}

#[test]
fn the_output_format_zero_value_and_its_explicit_name_are_both_neutral() {
    for v in [pb::OutputFormat::Unspecified, pb::OutputFormat::Neutral] {
        assert_eq!(
            super::output_format(v as i32, "format").expect("known"),
            Format::Neutral
        );
    }
    // Sent as zero, which servers from before the rename read as neutral.
    assert_eq!(pb::OutputFormat::from(Format::Neutral) as i32, 0);
    let err = super::output_format(99, "format").expect_err("unknown");
    assert_eq!(err.field, "format");
}

// ───────────────────────────── threads sent again ─────────────────────────────

proptest! {
    #![proptest_config(ProptestConfig::with_cases(crate::testing::cases(200)))]

    /// A thread sent again converts to what it converts to alone; the
    /// messages it sends as the last thread did, at the same positions up
    /// to the first that differs, are that thread's (shared), and only a
    /// thread that sends all of them first is said to extend it.
    #[test]
    fn a_thread_sent_again_converts_as_it_would_alone(
        a in thread(),
        keep in any::<proptest::sample::Index>(),
        edit in option::of((any::<proptest::sample::Index>(), message())),
        more in vec(message(), 0..3),
    ) {
        let mut reuse = ThreadReuse::new(None);
        reuse::thread_reusing(pb::Thread::from(&a), &mut reuse).expect("converts");
        prop_assert!(reuse.extends.is_none());
        let last = reuse.sent.take().expect("kept");
        let keep = keep.index(a.messages.len() + 1);
        let mut b = Thread { id: a.id.clone(), messages: a.messages[..keep].to_vec() };
        if let (Some((at, m)), true) = (edit, keep > 0) {
            b.messages[at.index(keep)] = std::sync::Arc::new(m);
        }
        b.messages.extend(more.into_iter().map(std::sync::Arc::new));
        let alone = Thread::try_from(pb::Thread::from(&b)).expect("converts");
        let mut reuse = ThreadReuse::new(Some(std::sync::Arc::clone(&last)));
        let again = reuse::thread_reusing(pb::Thread::from(&b), &mut reuse).expect("converts");
        prop_assert_eq!(&*again, &alone);
        let same = a
            .messages
            .iter()
            .zip(&b.messages)
            .take_while(|(x, y)| pb::Message::from(&***x) == pb::Message::from(&***y))
            .count();
        for (i, m) in again.messages.iter().enumerate() {
            let shared = last.thread.messages.get(i).is_some_and(|l| std::sync::Arc::ptr_eq(l, m));
            prop_assert_eq!(shared, i < same, "message {}", i);
        }
        prop_assert_eq!(reuse.extends.is_some(), same == a.messages.len());
        let sent = reuse.sent.expect("kept");
        prop_assert!(std::sync::Arc::ptr_eq(&sent.thread, &again));
        prop_assert_eq!(sent.messages_weight, crate::model::memory_weight(&again.messages));
        // The very same messages: the very same thread.
        prop_assert_eq!(
            std::sync::Arc::ptr_eq(&again, &last.thread),
            same == a.messages.len() && b.messages.len() == a.messages.len()
        );
        // Under another id nothing is shared.
        let mut other = pb::Thread::from(&b);
        other.id.push('\u{2028}');
        let mut reuse = ThreadReuse::new(Some(std::sync::Arc::clone(&last)));
        let converted = reuse::thread_reusing(other, &mut reuse).expect("converts");
        prop_assert!(reuse.extends.is_none());
        for (m, l) in converted.messages.iter().zip(&last.thread.messages) {
            prop_assert!(!std::sync::Arc::ptr_eq(m, l));
        }
    }
}

/// A message that does not convert after a shared prefix fails the
/// request as it would alone, naming the same field, and keeps nothing.
#[test]
fn an_error_after_a_shared_prefix_is_the_error_alone() {
    let thread = |args: &str| pb::Thread {
        id: "t".into(),
        messages: vec![
            pb::Message {
                id: "m1".into(),
                role: pb::Role::User as i32,
                text: "hi".into(),
                ..Default::default()
            },
            pb::Message {
                id: "m2".into(),
                role: pb::Role::Assistant as i32,
                tool_calls: vec![pb::ToolCall {
                    wire: None,
                    id: "c1".into(),
                    name: "f".into(),
                    arguments_json: args.into(),
                }],
                ..Default::default()
            },
        ],
    };
    let mut reuse = ThreadReuse::new(None);
    reuse::thread_reusing(thread("{}"), &mut reuse).expect("converts");
    let last = reuse.sent.take().expect("kept");
    let mut reuse = ThreadReuse::new(Some(last));
    let shared = reuse::thread_reusing(thread("{"), &mut reuse).expect_err("invalid");
    let alone = Thread::try_from(thread("{")).expect_err("invalid");
    assert_eq!(shared, alone);
    assert_eq!(shared.field, "messages[1].tool_calls[0].arguments_json");
    assert!(reuse.sent.is_none() && reuse.extends.is_none());
}

/// Every field a message sends is in its digest: changing any one of them
/// makes the message convert anew. A map's order is not.
#[test]
fn every_field_of_a_message_is_digested() {
    use pb::content_part::Kind;
    use pb::tool_result_envelope::Content;
    let full = pb::Message {
        id: "m1".into(),
        role: pb::Role::Tool as i32,
        text: "t".into(),
        parts: vec![
            pb::ContentPart {
                kind: Some(Kind::Text("p".into())),
            },
            pb::ContentPart {
                kind: Some(Kind::ImageUrl("u".into())),
            },
            pb::ContentPart {
                kind: Some(Kind::Thinking(pb::ThinkingBlock {
                    thinking: "th".into(),
                    signature: "sig".into(),
                })),
            },
            pb::ContentPart {
                kind: Some(Kind::RedactedThinking(pb::RedactedThinkingBlock {
                    data: "d".into(),
                })),
            },
            pb::ContentPart {
                kind: Some(Kind::Reasoning(pb::ReasoningItem {
                    id: "r".into(),
                    summary: vec!["s".into()],
                    encrypted_content: Some("e".into()),
                    rest_json: None,
                })),
            },
        ],
        tool_calls: vec![pb::ToolCall {
            wire: None,
            id: "c".into(),
            name: "n".into(),
            arguments_json: "{}".into(),
        }],
        tool_result: Some(pb::ToolResultEnvelope {
            wire: None,
            tool_name: "tool".into(),
            tool_call_id: "c0".into(),
            outcome: pb::Outcome::Success as i32,
            key_fields: [
                ("k".to_string(), "1".to_string()),
                ("j".to_string(), "2".to_string()),
            ]
            .into_iter()
            .collect(),
            durability: 1,
            determinism: Some(pb::DeterminismMetadata {
                content_hash: Some("h".into()),
                etag: Some("e".into()),
                mtime: Some(1.5),
                version: Some("v".into()),
            }),
            started_at: Some("a".into()),
            completed_at: Some("b".into()),
            content: Some(Content::ContentText("out".into())),
        }),
        turn: 3,
        metadata: Some(pb::MessageMetadata {
            protected: false,
            label: Some("l".into()),
            sensitivity: 1,
            source: Some("s".into()),
            created_at: Some("c".into()),
        }),
    };
    let seed = 7;
    let base = reuse::digest(&full, seed);
    // The same entries inserted in the other order.
    let mut reordered = full.clone();
    let r = reordered.tool_result.as_mut().expect("result");
    r.key_fields = [
        ("j".to_string(), "2".to_string()),
        ("k".to_string(), "1".to_string()),
    ]
    .into_iter()
    .collect();
    assert_eq!(reuse::digest(&reordered, seed), base);
    type Edit = fn(&mut pb::Message);
    fn result(m: &mut pb::Message) -> &mut pb::ToolResultEnvelope {
        m.tool_result.as_mut().expect("result")
    }
    fn part(m: &mut pb::Message, i: usize) -> &mut Kind {
        m.parts[i].kind.as_mut().expect("kind")
    }
    fn determinism(m: &mut pb::Message) -> &mut pb::DeterminismMetadata {
        result(m).determinism.as_mut().expect("determinism")
    }
    fn metadata(m: &mut pb::Message) -> &mut pb::MessageMetadata {
        m.metadata.as_mut().expect("metadata")
    }
    let edits: Vec<(&str, Edit)> = vec![
        ("id", |m| m.id.push('x')),
        ("role", |m| m.role = pb::Role::User as i32),
        ("text", |m| m.text.push('x')),
        ("turn", |m| m.turn += 1),
        ("a part removed", |m| drop(m.parts.pop())),
        ("part kind unset", |m| m.parts[0].kind = None),
        ("text part", |m| *part(m, 0) = Kind::Text("q".into())),
        ("text part as image", |m| {
            *part(m, 0) = Kind::ImageUrl("p".into())
        }),
        ("image", |m| *part(m, 1) = Kind::ImageUrl("v".into())),
        ("thinking", |m| {
            if let Kind::Thinking(t) = part(m, 2) {
                t.thinking.push('x')
            }
        }),
        ("signature", |m| {
            if let Kind::Thinking(t) = part(m, 2) {
                t.signature.push('x')
            }
        }),
        ("redacted", |m| {
            if let Kind::RedactedThinking(t) = part(m, 3) {
                t.data.push('x')
            }
        }),
        ("reasoning id", |m| {
            if let Kind::Reasoning(r) = part(m, 4) {
                r.id.push('x')
            }
        }),
        ("reasoning summary", |m| {
            if let Kind::Reasoning(r) = part(m, 4) {
                r.summary.push(String::new())
            }
        }),
        ("encrypted absent", |m| {
            if let Kind::Reasoning(r) = part(m, 4) {
                r.encrypted_content = None
            }
        }),
        ("encrypted", |m| {
            if let Kind::Reasoning(r) = part(m, 4) {
                r.encrypted_content = Some("f".into())
            }
        }),
        ("call id", |m| m.tool_calls[0].id.push('x')),
        ("call name", |m| m.tool_calls[0].name.push('x')),
        ("call arguments", |m| {
            m.tool_calls[0].arguments_json = "{ }".into()
        }),
        ("a call added", |m| {
            m.tool_calls.push(pb::ToolCall::default())
        }),
        ("no result", |m| m.tool_result = None),
        ("tool name", |m| result(m).tool_name.push('x')),
        ("tool call id", |m| result(m).tool_call_id.push('x')),
        ("outcome", |m| {
            result(m).outcome = pb::Outcome::Failure as i32
        }),
        ("key field value", |m| {
            drop(result(m).key_fields.insert("k".into(), "2".into()))
        }),
        ("key field added", |m| {
            drop(result(m).key_fields.insert("i".into(), "1".into()))
        }),
        ("durability", |m| result(m).durability = 2),
        ("no determinism", |m| result(m).determinism = None),
        ("content hash", |m| determinism(m).content_hash = None),
        ("etag", |m| determinism(m).etag = Some("f".into())),
        ("mtime", |m| determinism(m).mtime = Some(2.5)),
        ("version", |m| determinism(m).version = Some(String::new())),
        ("started", |m| result(m).started_at = None),
        ("completed", |m| result(m).completed_at = Some("c".into())),
        ("no content", |m| result(m).content = None),
        ("content text", |m| {
            result(m).content = Some(Content::ContentText("ou".into()))
        }),
        ("content as json", |m| {
            result(m).content = Some(Content::ContentJson("out".into()))
        }),
        ("no metadata", |m| m.metadata = None),
        ("protected", |m| metadata(m).protected = true),
        ("label", |m| metadata(m).label = None),
        ("sensitivity", |m| metadata(m).sensitivity = 2),
        ("source", |m| metadata(m).source = Some(String::new())),
        ("created", |m| metadata(m).created_at = Some("d".into())),
    ];
    for (what, edit) in edits {
        let mut m = full.clone();
        edit(&mut m);
        assert_ne!(m, full, "{what}: the edit changes nothing");
        assert_ne!(reuse::digest(&m, seed), base, "{what}");
    }
    // Absent and empty differ.
    let mut empty = full.clone();
    metadata(&mut empty).label = Some(String::new());
    let mut absent = full.clone();
    metadata(&mut absent).label = None;
    assert_ne!(reuse::digest(&empty, seed), reuse::digest(&absent, seed));
    // A long field is digested too (it goes in as its own hash).
    let mut long = full.clone();
    long.text = "y".repeat(1000);
    let mut longer = long.clone();
    longer.text.replace_range(500..501, "z");
    assert_ne!(reuse::digest(&long, seed), reuse::digest(&longer, seed));
}
