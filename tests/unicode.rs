//! Property tests of issue 21 ("any Unicode is ordinary input; no input
//! makes compactd panic"): threads with arbitrary Unicode in every text
//! field (user and assistant text, tool output as text and as JSON with
//! Unicode keys and values, tool names, call arguments, the system prompt),
//! written in each import format, go through import → compact → render in
//! every output format at budgets small enough for every reducer to run.
//! Each comes back as a body its provider accepts, under budget, or as a
//! documented refusal; never a panic or an internal error (the oracle of
//! `compactd_testkit::fuzz`). The wire and CLI edges refuse what serde_json
//! cannot read (lone surrogate escapes, nesting past its limit) as bad
//! input.

mod common;

use std::cell::RefCell;

use common::{run_counted, run_counted_split};
use compactd::app::RenderedOutput;
use compactd::proto::pb;
use compactd::provider::anthropic;
use compactd::reduce::Policy;
use compactd::security::SecurityContext;
use compactd::server::convert::render_command;
use compactd_testkit::fuzz::{
    document, Call, Conversation, Item, Knobs, Oracle, Out, Part, MARKERS, PIECES, TOOLS,
};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use serde_json::{json, Value};

/// A character as any text may hold it; the generator's markers (plane
/// 16's last private-use characters) become U+FFFD so that only the
/// surrogate property writes surrogate escapes.
fn plain(c: char) -> char {
    if ('\u{10FFF0}'..='\u{10FFF5}').contains(&c) {
        '\u{FFFD}'
    } else {
        c
    }
}

fn from_code_points(v: Vec<u32>) -> String {
    v.into_iter()
        .filter_map(char::from_u32)
        .map(plain)
        .collect()
}

/// One run of text of a kind real logs hold and byte-index slicing gets
/// wrong: any characters, multi-byte and combining sequences, CJK, emoji
/// with ZWJ and modifiers, RTL and bidi controls, NUL and other controls,
/// and very long single tokens.
fn run_of_text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::collection::vec(any::<char>(), 0..24)
            .prop_map(|v| v.into_iter().map(plain).collect::<String>()),
        4 => prop::sample::select(PIECES).prop_map(str::to_string),
        1 => (prop::sample::select(PIECES), 50usize..800)
            .prop_map(|(p, n)| p.repeat(n)),
        1 => ("[a-zA-Z]{1,3}", prop::collection::vec(0x300u32..0x370, 1..12))
            .prop_map(|(base, marks)| base + &from_code_points(marks)),
        1 => prop::collection::vec(0x4E00u32..0x9FFF, 1..30).prop_map(from_code_points),
        1 => prop::collection::vec(
            prop_oneof![0x1F300u32..0x1FAFF, Just(0x200D), Just(0xFE0F), 0x1F3FBu32..0x1F400],
            1..12
        )
        .prop_map(from_code_points),
        1 => prop::collection::vec(
            prop_oneof![0x590u32..0x700, 0x200Eu32..0x2010, 0x202Au32..0x202F, 0x2066u32..0x206A],
            1..20
        )
        .prop_map(from_code_points),
        1 => prop::collection::vec(prop_oneof![0u32..0x20, 0x7Fu32..0xA0, Just(0x2028)], 1..10)
            .prop_map(from_code_points),
    ]
}

/// Text made of a few runs.
fn text() -> impl Strategy<Value = String> {
    prop::collection::vec(
        (
            run_of_text(),
            prop::sample::select(&[" ", "\n", "", ": ", " │ ", "→", "=", "\t"][..]),
        ),
        0..6,
    )
    .prop_map(|runs| runs.into_iter().map(|(r, sep)| r + sep).collect())
}

/// JSON with Unicode keys and values.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|f| json!(f)),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(text(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Tool names: the usual ones, or any text (never empty: an empty name
/// is refused before anything else runs).
fn tool_name() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(TOOLS).prop_map(str::to_string),
        1 => text().prop_map(|t| format!("t{t}")),
    ]
}

/// A call (tool, arguments) and, unless it is still pending, its result
/// and whether it failed.
type CallSpec = (String, Value, Option<(Out, bool)>);

/// A user turn: the request, its calls, the reply.
type TurnSpec = (String, Vec<CallSpec>, Option<String>);

fn call() -> impl Strategy<Value = CallSpec> {
    let out = prop_oneof![
        text().prop_map(Out::Text),
        prop::collection::vec(text(), 1..20).prop_map(|lines| Out::Text(lines.join("\n"))),
        json_value().prop_map(Out::Json),
    ];
    (
        tool_name(),
        json_value(),
        prop::option::weighted(0.95, (out, prop::bool::weighted(0.1))),
    )
}

fn turn() -> impl Strategy<Value = TurnSpec> {
    (
        text(),
        prop::collection::vec(call(), 0..4),
        prop::option::of(text()),
    )
}

fn conversation() -> impl Strategy<Value = Conversation> {
    (
        prop::option::of(text()),
        prop::collection::vec((tool_name(), text(), json_value()), 0..3),
        prop::collection::vec(turn(), 1..5),
        any::<bool>(),
    )
        .prop_map(|(system, tools, turns, unicode_ids)| {
            let mut items = Vec::new();
            let mut n = 0;
            for (user, calls, reply) in turns {
                items.push(Item::User(vec![Part::Text(user)]));
                if !calls.is_empty() {
                    let mut results = Vec::new();
                    let calls: Vec<Call> = calls
                        .into_iter()
                        .map(|(name, args, result)| {
                            n += 1;
                            let id = if unicode_ids {
                                format!("呼び出し_{n}_🔧")
                            } else {
                                format!("call_{n}")
                            };
                            if let Some((out, error)) = result {
                                results.push(Item::Result {
                                    call_id: id.clone(),
                                    name: name.clone(),
                                    out,
                                    error,
                                });
                            }
                            Call { id, name, args }
                        })
                        .collect();
                    items.push(Item::Assistant(Vec::new(), calls));
                    items.extend(results);
                }
                if let Some(r) = reply {
                    items.push(Item::Assistant(vec![Part::Text(r)], Vec::new()));
                }
            }
            Conversation {
                id: "unicode".into(),
                system,
                tools,
                items,
            }
        })
}

/// Budgets from "fits" down to a tenth of the thread, and absolute ones.
fn knobs() -> impl Strategy<Value = Knobs> {
    (
        prop_oneof![
            prop::sample::select(&[100u32, 250, 500, 2_000][..]).prop_map(|m| (m, 0)),
            prop::sample::select(&[300u32, 1_000, 3_000, 8_000][..]).prop_map(|n| (0, n)),
        ],
        any::<bool>(),
        prop::option::weighted(0.3, text()),
        text(),
    )
        .prop_map(
            |((budget_per_mille, max_input_tokens), omit, next_turn, explain)| Knobs {
                budget_per_mille,
                max_input_tokens,
                omit_pending_calls: omit,
                next_turn,
                explain,
                ..Knobs::default()
            },
        )
}

thread_local! {
    static ORACLE: RefCell<Oracle> = RefCell::new(Oracle::new());
}

/// Ok(true) when at least one body was rendered and checked.
fn holds(doc: &[u8], knobs: &Knobs) -> Result<bool, TestCaseError> {
    ORACLE.with(|o| match o.borrow_mut().check(doc, knobs) {
        Ok(t) => Ok(t.rendered > 0),
        Err(f) => Err(TestCaseError::fail(format!(
            "{f}\nknobs: {}\ninput: {}",
            knobs.to_json(),
            String::from_utf8_lossy(doc)
        ))),
    })
}

#[test]
fn any_unicode_in_any_field_in_any_format_renders_or_is_refused_as_documented() {
    run_counted_split(
        "unicode threads",
        || {
            (
                conversation(),
                0usize..4,
                prop::collection::vec(any::<u8>(), 0..32),
                knobs(),
            )
        },
        24,
        0.25,
        |(conv, format, style, knobs)| holds(&document(&conv.write(format, &style)), &knobs),
    );
}

#[test]
fn lone_surrogate_escapes_are_not_json_anywhere() {
    // The first three markers are lone or reversed surrogate escapes.
    let lone: Vec<char> = MARKERS[..3].iter().map(|(c, _)| *c).collect();
    run_counted(
        "lone surrogates",
        (
            conversation(),
            0usize..4,
            prop::sample::select(lone),
            any::<prop::sample::Index>(),
        ),
        32,
        1.0,
        |(mut conv, format, marker, at)| {
            // Into the text of one message, whichever kind it is.
            let n = conv.items.len();
            let at = at.index(n);
            match &mut conv.items[at] {
                Item::User(parts) | Item::Assistant(parts, _) => {
                    parts.push(Part::Text(format!("before {marker} after")))
                }
                Item::Result { out, .. } => *out = Out::Text(format!("{marker}")),
                Item::System(t) | Item::Developer(t) => t.push(marker),
            }
            let doc = document(&conv.write(format, &[]));
            let text = String::from_utf8_lossy(&doc);
            prop_assert!(
                serde_json::from_slice::<Value>(&doc).is_err(),
                "serde_json read a lone surrogate: {text}"
            );
            // The oracle reads it as the CLI does: not JSON, no panic.
            ORACLE.with(|o| match o.borrow_mut().check(&doc, &Knobs::default()) {
                Ok(t) => {
                    prop_assert_eq!(t.not_json, 1, "{}", text);
                    Ok(true)
                }
                Err(f) => Err(TestCaseError::fail(f.to_string())),
            })
        },
    );
}

/// On the wire, JSON fields are text: a lone surrogate in a call's
/// arguments is INVALID_ARGUMENT naming the field; tool output JSON is kept
/// byte for byte as it arrived (so a lone surrogate escape passes through
/// as text) and renders a valid body.
#[test]
fn the_wire_names_unreadable_json_and_keeps_raw_output_as_it_arrived() {
    let thread = |arguments: &str, content: &str| pb::Thread {
        id: "t".into(),
        messages: vec![
            pb::Message {
                id: "u".into(),
                role: pb::Role::User as i32,
                text: "注文ID: 4f1c2a9e7b を確認して".into(),
                turn: 1,
                ..pb::Message::default()
            },
            pb::Message {
                id: "a".into(),
                role: pb::Role::Assistant as i32,
                tool_calls: vec![pb::ToolCall {
                    wire: None,
                    id: "c1".into(),
                    name: "get_order".into(),
                    arguments_json: arguments.into(),
                }],
                turn: 1,
                ..pb::Message::default()
            },
            pb::Message {
                id: "r".into(),
                role: pb::Role::Tool as i32,
                tool_result: Some(pb::ToolResultEnvelope {
                    tool_name: "get_order".into(),
                    tool_call_id: "c1".into(),
                    content: Some(pb::tool_result_envelope::Content::ContentJson(
                        content.into(),
                    )),
                    ..pb::ToolResultEnvelope::default()
                }),
                turn: 1,
                ..pb::Message::default()
            },
        ],
    };
    let request = |t: pb::Thread| pb::RenderRequest {
        thread: Some(t),
        compact_first: true,
        format: pb::OutputFormat::AnthropicMessages as i32,
        ..pb::RenderRequest::default()
    };
    let bad = render_command(
        request(thread(r#"{"id":"\ud800"}"#, "{}")),
        &Policy::default(),
    )
    .expect_err("a lone surrogate is not JSON");
    assert_eq!(bad.field, "thread.messages[1].tool_calls[0].arguments_json");
    assert!(bad.message.starts_with("invalid JSON"), "{bad}");

    let app = compactd_testkit::memory_app(Default::default());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let deep = format!("{}0{}", "[".repeat(10_000), "]".repeat(10_000));
    for content in [r#"{"note":"\ud800 │ 9f86d081 │"}"#, deep.as_str()] {
        let cmd = render_command(request(thread("{}", content)), &Policy::default())
            .expect("tool output JSON is kept as it arrived");
        let out = runtime
            .block_on(app.render(&SecurityContext::dev(), cmd))
            .expect("renders");
        let RenderedOutput::Payload(body) = out.output else {
            panic!("an Anthropic body was asked for");
        };
        let body: Value = serde_json::from_str(&body).expect("the body is JSON");
        anthropic::check_structure(&body).expect("a valid body");
        let result = match &body["messages"][2]["content"][0]["content"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        // Inside its data block, byte for byte.
        assert!(
            result.starts_with("<tool_output id=") && result.contains(content),
            "the output as it arrived: {result}"
        );
    }
}
