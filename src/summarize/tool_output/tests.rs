use serde_json::json;

use super::*;

fn env(name: &str, outcome: Outcome, content: ToolContent) -> ToolResultEnvelope {
    ToolResultEnvelope {
        wire: None,
        tool_name: name.to_string(),
        tool_call_id: "call_1".to_string(),
        outcome,
        content,
        key_fields: BTreeMap::new(),
        durability: None,
        determinism: None,
        started_at: None,
        completed_at: None,
    }
}

fn ok_json(name: &str, v: Value) -> ToolResultEnvelope {
    env(name, Outcome::Success, ToolContent::json(v))
}

fn ok_text(name: &str, s: &str) -> ToolResultEnvelope {
    env(name, Outcome::Success, ToolContent::Text(s.to_string()))
}

fn rules() -> CompressRules {
    CompressRules::default()
}

fn search_payload(n: usize) -> Value {
    Value::Array(
        (0..n)
            .map(|i| {
                json!({
                    "title": format!("<b>Result</b> {i}"),
                    "url": format!("https://example.com/{i}"),
                    "snippet": format!("Snippet {i} {}", "lorem ipsum ".repeat(40)),
                    "html": "<html>".repeat(200),
                    "rank": i,
                })
            })
            .collect(),
    )
}

#[test]
fn defaults_match_the_documented_thresholds() {
    let r = CompressRules::default();
    assert_eq!(
        (
            r.min_tokens,
            r.file_max_lines,
            r.query_max_rows,
            r.sample_rows,
            r.search_max_results,
            r.snippet_chars
        ),
        (200, 500, 100, 5, 10, 300)
    );
}

#[test]
fn search_results_keep_title_snippet_url() {
    let e = ok_json("web_search", search_payload(37));
    let c = compress_tool_output(&e, None, 20_000, &rules()).expect("compressed");
    assert_eq!(c.kind, OutputKind::SearchResults);
    assert!(
        c.text
            .starts_with("[compressed search results: 10 of 37 results kept]\n"),
        "{}",
        c.text
    );
    assert!(c
        .text
        .contains("1. Result 0\n   https://example.com/0\n   Snippet 0 lorem"));
    assert!(c.text.contains("10. Result 9\n"));
    assert!(!c.text.contains("Result 10"));
    assert!(!c.text.contains("<html>") && !c.text.contains("<b>"));
    for line in c.text.lines().filter(|l| l.starts_with("   Snippet")) {
        assert!(line.trim().chars().count() <= 300);
    }
    assert_eq!(c.preserved["kind"], json!("search_results"));
    assert_eq!(c.preserved["result_count"], json!(37));
    assert_eq!(c.preserved["kept"], json!(10));
    assert_eq!(c.preserved["urls"].as_array().map(Vec::len), Some(10));
    assert_eq!(c.preserved["tool_name"], json!("web_search"));
}

#[test]
fn search_results_in_wrapper_object_as_text() {
    let items: Vec<Value> = (0..4)
        .map(|i| json!({"link": format!("https://x.org/{i}"), "title": format!("T{i}"), "description": "d".repeat(500)}))
        .collect();
    let body = json!({"organic": items, "total": 1234, "meta": "x".repeat(3000)}).to_string();
    let c =
        compress_tool_output(&ok_text("serp", &body), None, 2000, &rules()).expect("compressed");
    assert!(c.text.starts_with(
        "[compressed search results: 4 of 4 results kept]\n(source reports 1234 total matches)\n"
    ));
    assert_eq!(c.preserved["reported_total"], json!(1234));
    // Nested (Bing-style) lists are found one level down.
    let bing = json!({"webPages": {"value": [{"name": "N", "url": "https://b.com", "snippet": "s".repeat(900)}]}});
    let c = compress_tool_output(&ok_json("bing", bing), None, 2000, &rules()).expect("compressed");
    assert!(c
        .text
        .starts_with("[compressed search results: 1 of 1 results kept]\n1. N\n   https://b.com\n"));
}

fn rust_file(lines: usize) -> String {
    (1..=lines)
        .map(|i| match i % 50 {
            1 => format!("pub fn f{i}() {{"),
            2 => format!("    fn inner{i}() {{}}"),
            3 => "        let deeply_nested = 1;".to_string(),
            _ => format!("    // line {i}"),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn file_read_keeps_head_tail_and_outline() {
    let text = rust_file(800);
    let args = json!({"path": "src/lib.rs"});
    let c = compress_tool_output(&ok_text("read_file", &text), Some(&args), 8000, &rules())
        .expect("compressed");
    assert_eq!(c.kind, OutputKind::FileRead);
    let header = c.text.lines().next().unwrap_or_default();
    assert_eq!(
        header,
        "[compressed file read: src/lib.rs, 800 lines, 20+10 lines and 32 outline entries kept]"
    );
    assert!(c
        .text
        .contains("lines 1-20:\n  1 | pub fn f1() {\n  2 |     fn inner2() {}\n"));
    assert!(c.text.contains(
        "outline (line: text):\n  1: pub fn f1() {\n  2: fn inner2() {}\n 51: pub fn f51() {\n"
    ));
    assert!(
        !c.text.contains("deeply_nested: "),
        "deep lines are not outline entries"
    );
    assert!(c.text.contains("lines 791-800:\n791 |     // line 791\n"));
    assert!(c.text.ends_with(
        "800 |     // line 800\n(re-read any line range with the file tool to see the rest)"
    ));
    assert_eq!(c.preserved["path"], json!("src/lib.rs"));
    assert_eq!(c.preserved["total_lines"], json!(800));
    assert_eq!(c.preserved["head_lines"], json!([1, 20]));
    assert_eq!(c.preserved["tail_lines"], json!([791, 800]));
}

#[test]
fn file_read_markdown_headings_and_json_wrapper() {
    let md: String = (1..=600)
        .map(|i| {
            if i % 100 == 1 {
                format!("## Section {i}")
            } else {
                format!("text {i} # not a heading")
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let wrapped = json!({"path": "docs/guide.md", "content": md});
    let c = compress_tool_output(&ok_json("open_file", wrapped), None, 6000, &rules())
        .expect("compressed");
    assert_eq!(c.kind, OutputKind::FileRead);
    assert!(c.text.starts_with(
        "[compressed file read: docs/guide.md, 600 lines, 20+10 lines and 6 outline entries kept]"
    ));
    assert!(c.text.contains("\n101: ## Section 101\n"));
    // Any long text is a file read; without a path the header says so.
    let c =
        compress_tool_output(&ok_text("run_tests", &md), None, 6000, &rules()).expect("compressed");
    assert!(c
        .text
        .starts_with("[compressed file read: unknown path, 600 lines"));
    assert!(!c.preserved.contains_key("path"));
}

#[test]
fn short_file_is_kept() {
    let text = rust_file(400);
    assert_eq!(
        compress_tool_output(&ok_text("read_file", &text), None, 5000, &rules()),
        None
    );
}

fn rows(n: usize) -> Value {
    Value::Array(
        (0..n)
            .map(|i| json!({"id": i + 1, "name": format!("user{i}"), "amount": (i as f64) * 1.5, "note": null}))
            .collect(),
    )
}

#[test]
fn query_rows_keep_count_columns_samples() {
    let args = json!({"sql": "SELECT * FROM users"});
    let c = compress_tool_output(
        &ok_json("database_query", rows(1000)),
        Some(&args),
        30_000,
        &rules(),
    )
    .expect("compressed");
    assert_eq!(c.kind, OutputKind::QueryRows);
    let lines: Vec<&str> = c.text.lines().collect();
    assert_eq!(
        lines[0],
        "[compressed query rows: 5 of 1000 rows kept, 4 columns]"
    );
    assert_eq!(lines[1], "query: SELECT * FROM users");
    assert_eq!(lines[2], "columns: amount, id, name, note");
    assert_eq!(lines[3], "ranges: amount 0.0..1498.5, id 1..1000");
    assert_eq!(lines[4], "sample rows:");
    assert_eq!(lines.len(), 10);
    assert!(lines[5].contains("\"user0\""));
    assert_eq!(c.preserved["row_count"], json!(1000));
    assert_eq!(c.preserved["sample_rows"], json!(5));
    assert_eq!(
        c.preserved["columns"],
        json!(["amount", "id", "name", "note"])
    );
}

#[test]
fn query_rows_as_arrays_with_column_header() {
    let data: Vec<Value> = (0..150).map(|i| json!([i, format!("r{i}")])).collect();
    let v = json!({"columns": [{"name": "n"}, {"name": "label"}], "rows": data, "rowCount": 150});
    let c = compress_tool_output(&ok_json("run_sql", v), None, 3000, &rules()).expect("compressed");
    assert!(c.text.starts_with("[compressed query rows: 5 of 150 rows kept, 2 columns]\nreported total: 150\ncolumns: n, label\nranges: n 0..149\n"));
}

#[test]
fn small_row_sets_are_kept() {
    assert_eq!(
        compress_tool_output(&ok_json("database_query", rows(100)), None, 5000, &rules()),
        None
    );
    // Even inside an API envelope: the rows are the payload.
    let v = json!({"status": 200, "data": rows(50)});
    assert_eq!(
        compress_tool_output(&ok_json("http_get", v), None, 5000, &rules()),
        None
    );
}

#[test]
fn query_tool_name_breaks_search_tie() {
    let v = search_payload(150);
    let c = compress_tool_output(&ok_json("sql_query", v.clone()), None, 90_000, &rules())
        .expect("compressed");
    assert_eq!(c.kind, OutputKind::QueryRows);
    let c =
        compress_tool_output(&ok_json("search", v), None, 90_000, &rules()).expect("compressed");
    assert_eq!(c.kind, OutputKind::SearchResults);
}

fn api_payload() -> Value {
    json!({
        "status": 201,
        "data": {
            "order_id": "ord_123",
            "customer": {"id": 7, "email": "a@b.c", "profile": {"bio": "x".repeat(2000)}},
            "lineItems": [1, 2, 3],
            "trackingURL": "ignored-not-a-key-name",
            "paymentId": "pay_9",
            "paid": true
        },
        "meta": {"request-id": "req-1", "debug": "y".repeat(3000)},
        "message": "created"
    })
}

#[test]
fn api_response_keeps_status_ids_and_key_fields() {
    let mut e = ok_json("create_order_api", api_payload());
    e.key_fields.insert("order_id".into(), json!("ord_123"));
    let c = compress_tool_output(&e, None, 2500, &rules()).expect("compressed");
    assert_eq!(c.kind, OutputKind::ApiResponse);
    let lines: Vec<&str> = c.text.lines().collect();
    assert_eq!(
        lines[0],
        "[compressed api response: status 201, 7 fields kept]"
    );
    for want in [
        "data.order_id: \"ord_123\"",
        "data.customer.id: 7",
        "data.lineItems.length: 3",
        "data.paymentId: \"pay_9\"",
        "meta.request-id: \"req-1\"",
        "message: \"created\"",
        "status: 201",
        "key_fields: {\"order_id\":\"ord_123\"}",
    ] {
        assert!(lines.contains(&want), "missing {want} in\n{}", c.text);
    }
    assert!(!c.text.contains("paid") && !c.text.contains("xxxx") && !c.text.contains("email"));
    assert_eq!(c.preserved["status"], json!(201));
    assert_eq!(c.preserved["fields"]["data.order_id"], json!("ord_123"));
    assert_eq!(c.preserved["key_fields"], json!({"order_id": "ord_123"}));
}

#[test]
fn small_structured_data_is_kept() {
    // Structured data under 500 tokens is kept whole: the agent may validate it.
    assert_eq!(
        compress_tool_output(&ok_json("api", api_payload()), None, 499, &rules()),
        None
    );
}

#[test]
fn none_on_failure_small_error_or_unrecognized() {
    let big = search_payload(37);
    for outcome in [Outcome::Failure, Outcome::Partial] {
        let e = env("web_search", outcome, ToolContent::json(big.clone()));
        assert_eq!(compress_tool_output(&e, None, 50_000, &rules()), None);
    }
    assert_eq!(
        compress_tool_output(&ok_json("web_search", big), None, 199, &rules()),
        None
    );
    let errors = [
        json!({"status": 503, "message": "unavailable", "detail": "z".repeat(5000)}),
        json!({"error": {"message": "rate limited"}, "results": search_payload(20)}),
        json!({"ok": false, "data": rows(500)}),
        json!({"status": "error", "items": search_payload(3)}),
    ];
    for v in errors {
        assert_eq!(
            compress_tool_output(&ok_json("api", v), None, 50_000, &rules()),
            None
        );
    }
    let trace = format!(
        "Traceback (most recent call last):\n{}",
        "  File x\n".repeat(900)
    );
    assert_eq!(
        compress_tool_output(&ok_text("read_file", &trace), None, 9000, &rules()),
        None
    );
    // Shapes no rule knows.
    let scalars = Value::Array((0..5000).map(Value::from).collect());
    assert_eq!(
        compress_tool_output(&ok_json("list_ids", scalars), None, 9000, &rules()),
        None
    );
    let prose = "word ".repeat(3000);
    assert_eq!(
        compress_tool_output(&ok_text("summarize", &prose), None, 3000, &rules()),
        None
    );
    let plain_obj = json!({"a": "b".repeat(4000)});
    assert_eq!(
        compress_tool_output(&ok_json("compute", plain_obj), None, 3000, &rules()),
        None
    );
}

#[test]
fn deterministic_and_text_equals_json() {
    let args = json!({"path": "a.rs"});
    let cases = vec![
        ok_json("web_search", search_payload(37)),
        ok_text("web_search", &search_payload(37).to_string()),
        ok_json("db_query", rows(300)),
        ok_text("read_file", &rust_file(900)),
        ok_json("http_post", api_payload()),
    ];
    for e in &cases {
        let a = compress_tool_output(e, Some(&args), 60_000, &rules());
        let b = compress_tool_output(&e.clone(), Some(&args.clone()), 60_000, &rules());
        assert!(a.is_some());
        assert_eq!(a, b);
    }
    let a = compress_tool_output(&cases[0], None, 60_000, &rules()).map(|c| c.text);
    let b = compress_tool_output(&cases[1], None, 60_000, &rules()).map(|c| c.text);
    assert_eq!(a, b);
}

#[test]
fn compressed_is_always_smaller() {
    let tiny = json!([{"title": "t", "url": "u"}]);
    // Recognized, but compression would not shrink it: kept as is.
    assert_eq!(
        compress_tool_output(&ok_json("search", tiny), None, 500, &rules()),
        None
    );
}
