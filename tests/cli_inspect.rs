//! `compactd inspect`, run as a user would, on the real logs in tests/data:
//! every span of the plan `compactd compact` makes of the same input is a
//! row of the table and an element of the page.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

const BUDGET: &str = "8000";
const LOGS: [&str; 3] = [
    "tests/data/swe_agent_marshmallow.json",
    "tests/data/tau_bench_airline.json",
    "tests/data/claude_code_rust_port.anthropic.json",
];

/// The binary, with no `COMPACTD*` settings leaking in from the environment.
fn compactd() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_compactd"));
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("COMPACTD")) {
        cmd.env_remove(k);
    }
    cmd.env_remove("NO_COLOR");
    cmd
}

fn run(args: &[&str]) -> (i32, String, String) {
    let out = compactd()
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run compactd");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `compactd compact`'s whole output for `input` at [`BUDGET`].
fn compact(input: &str) -> Value {
    let (code, out, err) = run(&["compact", "--input", input, "--max-input-tokens", BUDGET]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).expect("compact prints JSON")
}

/// `first..last` of every record of a plan.
fn plan_spans(plan: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for list in ["clearings", "summarizations", "externalizations", "drops"] {
        for r in plan[list].as_array().map(Vec::as_slice).unwrap_or_default() {
            let ids = r["span"]["message_ids"].as_array().expect("message_ids");
            let id = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or("").to_string();
            out.push(format!("{}..{}", id(ids.first()), id(ids.last())));
        }
    }
    out
}

/// Every `data-<name>="…"` value in `html`, in order.
fn attrs(html: &str, name: &str) -> Vec<String> {
    let key = format!("data-{name}=\"");
    html.match_indices(&key)
        .map(|(at, _)| {
            let rest = &html[at + key.len()..];
            rest[..rest.find('"').expect("a closing quote")].to_string()
        })
        .collect()
}

/// The numbers of the table's `total` row.
fn total_row(table: &str) -> (u64, u64) {
    let line = table
        .lines()
        .find(|l| l.starts_with("total "))
        .expect("a total row");
    let n: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|s| s.parse().expect("a count"))
        .collect();
    (n[0], n[1])
}

#[test]
fn every_plan_span_is_in_the_table_and_the_page() {
    let dir = tempfile::tempdir().expect("tempdir");
    for input in LOGS {
        let doc = compact(input);
        let spans = plan_spans(&doc["plan"]);
        assert!(!spans.is_empty(), "{input}: nothing compacted at {BUDGET}");
        let html_path = dir.path().join("page.html");
        let json_path = dir.path().join("view.json");
        let (code, table, err) = run(&[
            "inspect",
            "--input",
            input,
            "--max-input-tokens",
            BUDGET,
            "--html",
            html_path.to_str().expect("utf-8 path"),
            "--json",
            json_path.to_str().expect("utf-8 path"),
        ]);
        assert_eq!(code, 0, "{input}: {err}");
        // Piped: no colour.
        assert!(!table.contains('\x1b'), "{input}");
        let html = std::fs::read_to_string(&html_path).expect("the page");
        let page_spans = attrs(&html, "span");
        for span in &spans {
            assert!(
                table.lines().any(|l| l.starts_with(&format!("{span} "))),
                "{input}: span {span} is not a row of\n{table}"
            );
            assert!(
                page_spans.contains(span),
                "{input}: span {span} is not on the page"
            );
        }
        // Every message once, in thread order; every span's fate named.
        let view: Value =
            serde_json::from_str(&std::fs::read_to_string(&json_path).expect("the JSON"))
                .expect("JSON");
        let ids: Vec<String> = view["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .map(|m| m["id"].as_str().expect("id").to_string())
            .collect();
        assert_eq!(attrs(&html, "message-id"), ids, "{input}");
        let fates = attrs(&html, "fate");
        assert_eq!(fates.len(), page_spans.len(), "{input}");
        for f in &fates {
            assert!(
                [
                    "kept",
                    "cleared",
                    "summarized",
                    "externalized",
                    "dropped",
                    "recalled"
                ]
                .contains(&f.as_str()),
                "{f}"
            );
        }
        // The same plan, and the totals are the request's as compact counts it.
        assert_eq!(view["plan"], doc["plan"], "{input}");
        let report = &doc["report"];
        let (before, after) = total_row(&table);
        assert_eq!(before, report["tokens_before"].as_u64().expect("before"));
        assert_eq!(after, report["tokens_after"].as_u64().expect("after"));
        assert!(
            table.contains(&format!(
                "budget: max input {BUDGET} · hard limit {}",
                report["budget"]["hard_limit"]
            )),
            "{table}"
        );
        assert!(
            !table.contains("differs from the render's count"),
            "{table}"
        );
        // Nothing on the page loads from anywhere.
        assert!(!html.contains("<link"), "{input}");
        assert!(!html.contains(" src="), "{input}");
        assert_eq!(html.matches("<script").count(), 1, "{input}");
    }
}

#[test]
fn a_given_plan_renders_as_compact_made_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = LOGS[1];
    let doc = compact(input);
    let whole = dir.path().join("compact.json");
    let plan_only = dir.path().join("plan.json");
    std::fs::write(&whole, doc.to_string()).expect("write");
    std::fs::write(&plan_only, doc["plan"].to_string()).expect("write");
    let (code, compacted, err) = run(&["inspect", "--input", input, "--max-input-tokens", BUDGET]);
    assert_eq!(code, 0, "{err}");
    let rows = |t: &str| -> Vec<String> {
        t.lines()
            .skip_while(|l| !l.starts_with("SPAN"))
            .take_while(|l| !l.starts_with("---"))
            .map(str::to_string)
            .collect()
    };
    for plan in [&whole, &plan_only] {
        let (code, given, err) = run(&[
            "inspect",
            "--input",
            input,
            "--max-input-tokens",
            BUDGET,
            "--plan",
            plan.to_str().expect("utf-8 path"),
        ]);
        assert_eq!(code, 0, "{err}");
        assert!(given.lines().next().is_some_and(|l| l.contains("--plan")));
        assert_eq!(rows(&given), rows(&compacted));
        assert_eq!(total_row(&given), total_row(&compacted));
    }
}

#[test]
fn hostile_text_is_escaped_on_the_page() {
    let dir = tempfile::tempdir().expect("tempdir");
    let thread = serde_json::json!([
        {"role": "user", "content": "Quote this: <script>alert(1)</script> and </details><b onmouseover=\"x()\">"},
        {"role": "assistant", "content": "Quoted: </details></li></ol><img src=https://example.invalid/x.png>"},
        {"role": "user", "content": "Thanks & goodbye 'friend'"}
    ]);
    let input = dir.path().join("hostile.json");
    std::fs::write(&input, thread.to_string()).expect("write");
    let page = dir.path().join("page.html");
    let (code, _, err) = run(&[
        "inspect",
        "--input",
        input.to_str().expect("utf-8 path"),
        "--html",
        page.to_str().expect("utf-8 path"),
    ]);
    assert_eq!(code, 0, "{err}");
    let html = std::fs::read_to_string(&page).expect("the page");
    assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt; and &lt;/details&gt;&lt;b onmouseover=&quot;x()&quot;&gt;"));
    assert!(html.contains("&lt;img src=https://example.invalid/x.png&gt;"));
    assert!(html.contains("Thanks &amp; goodbye &#39;friend&#39;"));
    assert!(!html.contains("<script>alert"));
    assert!(!html.contains("<img"));
    assert!(!html.contains("<b onmouseover"));
    assert_eq!(html.matches("<script").count(), 1);
    assert_eq!(
        html.matches("<details").count(),
        html.matches("</details>").count()
    );
    assert_eq!(attrs(&html, "message-id"), ["m0", "m1", "m2"]);
}

#[test]
fn bad_input_fails_with_exit_code_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("missing.json");
    let missing = missing.to_str().expect("utf-8 path");
    let (code, _, err) = run(&["inspect", "--input", missing]);
    assert_eq!(code, 2, "{err}");
    assert!(err.starts_with("error: "), "{err}");

    let (code, _, err) = run(&["inspect", "--input", LOGS[0], "--plan", missing]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--plan"), "{err}");

    let not_a_plan = dir.path().join("not_a_plan.json");
    std::fs::write(&not_a_plan, "[1, 2]").expect("write");
    let (code, _, err) = run(&[
        "inspect",
        "--input",
        LOGS[0],
        "--plan",
        not_a_plan.to_str().expect("utf-8 path"),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not a plan"), "{err}");

    // Another thread's plan does not fit this thread.
    let other = dir.path().join("other.json");
    std::fs::write(&other, compact(LOGS[1])["plan"].to_string()).expect("write");
    let (code, _, err) = run(&[
        "inspect",
        "--input",
        LOGS[0],
        "--plan",
        other.to_str().expect("utf-8 path"),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("thread_id"), "{err}");

    // An unwritable page is an error, not a panic.
    let (code, _, err) = run(&[
        "inspect",
        "--input",
        LOGS[0],
        "--html",
        Path::new(missing)
            .join("page.html")
            .to_str()
            .expect("utf-8"),
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("--html"), "{err}");
}
