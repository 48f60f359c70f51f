//! The offline `compactd compact` command, run as a user would.

use std::process::Command;

/// The binary, with no `COMPACTD*` settings leaking in from the environment.
fn compactd() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_compactd"));
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("COMPACTD")) {
        cmd.env_remove(k);
    }
    cmd
}

fn run(args: &[&str], stdin: Option<&str>) -> (i32, String, String) {
    use std::io::Write;
    let mut cmd = compactd();
    cmd.args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    if let Some(s) = stdin {
        child.stdin.take().unwrap().write_all(s.as_bytes()).unwrap();
    } else {
        drop(child.stdin.take());
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn compacts_the_example_and_prints_plan_request_report() {
    for format in ["neutral", "openai", "anthropic"] {
        let (code, out, err) = run(
            &[
                "compact",
                "--input",
                "examples/threads/incident.json",
                "--max-input-tokens",
                "6000",
                "--format",
                format,
            ],
            None,
        );
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let report = &v["report"];
        assert!(
            report["tokens_after"].as_u64().unwrap()
                <= report["budget"]["hard_limit"].as_u64().unwrap()
        );
        assert!(
            report["tokens_before"].as_u64().unwrap() > report["tokens_after"].as_u64().unwrap()
        );
        assert!(v["plan"]["clearings"].is_array());
        assert!(report["per_reducer"].as_array().unwrap().len() >= 5);
    }
}

/// The whole offline document, pinned: plan, OpenAI body and report.
#[test]
fn golden_offline_document() {
    let (code, out, err) = run(
        &[
            "compact",
            "--input",
            "examples/threads/incident.json",
            "--max-input-tokens",
            "6000",
            "--format",
            "openai",
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    let mut doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    // An opaque hash: its stability is tested elsewhere, not pinned here.
    doc["plan"]["fingerprint"] = "[fingerprint]".into();
    insta::assert_json_snapshot!("offline_incident_openai", doc);
}

#[test]
fn output_is_deterministic() {
    let args = [
        "compact",
        "--input",
        "examples/threads/incident.json",
        "--max-input-tokens",
        "5000",
    ];
    assert_eq!(run(&args, None).1, run(&args, None).1);
}

#[test]
fn reads_an_openai_messages_array_from_stdin() {
    let text = std::fs::read_to_string("examples/threads/openai_messages.json").unwrap();
    let (code, out, err) = run(
        &["compact", "--input", "-", "--format", "openai"],
        Some(&text),
    );
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["request"]["messages"][0]["role"], "system");
    assert_eq!(v["report"]["triggered"], false);
}

/// Calls a user interrupt left without a result 600 messages back are not
/// bad input: they are left out, and stderr says so.
#[test]
fn abandoned_calls_are_a_warning_on_stderr() {
    let input = r#"[
        {"role":"user","content":"Check both hosts."},
        {"role":"assistant","content":null,"tool_calls":[
            {"id":"h1","type":"function","function":{"name":"ping","arguments":"{}"}},
            {"id":"h2","type":"function","function":{"name":"ping","arguments":"{}"}}]},
        {"role":"tool","tool_call_id":"h1","content":"a: up"},
        {"role":"user","content":"never mind"},
        {"role":"assistant","content":"OK."}
    ]"#;
    let (code, out, err) = run(
        &["compact", "--input", "-", "--format", "openai"],
        Some(input),
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        err.lines()
            .any(|l| l.starts_with("warning: ") && l.contains("h2 (ping)")),
        "{err}"
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(!v["request"].to_string().contains("\"h2\""));
    assert!(v["report"]["warnings"].to_string().contains("abandoned"));
}

#[test]
fn bad_input_names_the_field_and_exits_2() {
    let cases = [
        (
            r#"[{"role":"user","content":"a"},{"role":"wizard","content":"b"}]"#,
            "messages[1].role",
        ),
        (
            r#"[{"role":"tool","tool_call_id":"x","content":"b"}]"#,
            "messages[0].tool_call_id",
        ),
        (
            r#"{"id":"t","messages":[{"id":"a","role":"user","content":"x"},{"id":"a","role":"assistant","content":"y"}]}"#,
            "messages[1].id",
        ),
        (
            r#"{"id":"t","messages":[{"id":"a","role":"user","content":"x","turn":2},{"id":"b","role":"user","content":"y","turn":1}]}"#,
            "messages[1].turn",
        ),
        ("not json", "input is not JSON"),
    ];
    for (input, needle) in cases {
        let (code, _, err) = run(&["compact", "--input", "-"], Some(input));
        assert_eq!(code, 2, "{input}: {err}");
        assert!(
            err.contains(needle),
            "{input}: {err:?} does not name {needle}"
        );
    }
}

/// What serde_json cannot read (lone or reversed surrogate escapes,
/// nesting past its limit) and bytes that are not UTF-8 are bad input,
/// named as such: exit 2, never a crash. A valid escaped pair is text.
#[test]
fn undecodable_input_is_bad_input() {
    let deep = format!(
        r#"[{{"role":"user","content":{}"x"{}}}]"#,
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    for input in [
        r#"[{"role":"user","content":"résumé_id: \ud800"}]"#,
        r#"[{"role":"user","content":"\ude00\ud83d 注文ID"}]"#,
        r#"[{"role":"tool","tool_call_id":"\udfff","content":"x"}]"#,
        deep.as_str(),
    ] {
        let (code, _, err) = run(&["compact", "--input", "-"], Some(input));
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("input is not JSON"), "{err}");
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("latin1.json");
    std::fs::write(&path, b"[{\"role\":\"user\",\"content\":\"r\xe9sum\xe9\"}]").unwrap();
    let (code, _, err) = run(&["compact", "--input", path.to_str().unwrap()], None);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("UTF-8"), "{err}");

    let (code, out, err) = run(
        &["compact", "--input", "-"],
        Some(r#"[{"role":"user","content":"\ud83d\ude00 │ 9f86d081 │ 70→-"}]"#),
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("😀 │ 9f86d081 │ 70→-"), "{out}");
}

#[test]
fn an_impossible_budget_exits_3() {
    let (code, _, err) = run(
        &[
            "compact",
            "--input",
            "examples/threads/incident.json",
            "--max-input-tokens",
            "100",
        ],
        None,
    );
    // Below the smallest valid body: the system prompt, the pinned
    // developer message, the last user message and one notice standing for
    // everything else.
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("insufficient budget"), "{err}");
    assert!(err.contains("the smallest valid request needs"), "{err}");
}

#[test]
fn the_example_config_is_valid() {
    let (code, out, err) = run(&["config", "check", "examples/config.yaml"], None);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("is valid"));
}

/// Turning redaction off is valid, and never silent.
#[test]
fn config_check_warns_when_redaction_is_off() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("open.yaml");
    std::fs::write(&path, "auth:\n  dev: true\nredaction:\n  defaults: false\n").unwrap();
    let (code, out, err) = run(&["config", "check", path.to_str().unwrap()], None);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("# WARNING: redaction.defaults is off"),
        "{out}"
    );
    assert!(err.contains("warning: redaction.defaults is off"), "{err}");
    let (_, out, err) = run(&["config", "check", "examples/config.yaml"], None);
    assert!(
        !out.contains("WARNING") && !err.contains("warning"),
        "{out}{err}"
    );
}

#[test]
fn a_bad_config_names_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.yaml");
    std::fs::write(&path, "policy:\n  trigger_ratio: 2.0\n").unwrap();
    let (code, _, err) = run(&["config", "check", path.to_str().unwrap()], None);
    assert_eq!(code, 2);
    assert!(err.contains("policy.trigger_ratio"), "{err}");
    // What `serve` would refuse when it builds the exporter, `config check`
    // refuses by name too.
    std::fs::write(&path, "telemetry:\n  otlp_endpoint: not a url\n").unwrap();
    let (code, _, err) = run(&["config", "check", path.to_str().unwrap()], None);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("telemetry.otlp_endpoint"), "{err}");
}

#[cfg(unix)]
#[test]
fn serve_prints_its_address_and_stops_cleanly_on_sigterm() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let mut child = compactd()
        .args(["serve", "--dev", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("compactd listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"));
    // The port really accepts connections.
    std::net::TcpStream::connect(addr).expect("connect to the served address");
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "exit {:?}", out.status);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("DEV MODE"), "{err}");
    assert!(err.contains("draining in-flight calls"), "{err}");
    // The default keyring sits inside the data directory: said at start-up.
    assert!(err.contains("keyring is inside data_dir"), "{err}");
}

/// Without credentials configured and without `--dev`, `serve` does not
/// start, not even on loopback, and says how to fix it.
#[test]
fn serve_without_auth_or_dev_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    for listen in ["127.0.0.1:0", "0.0.0.0:0"] {
        let out = compactd()
            .args(["serve", "--listen", listen, "--data-dir"])
            .arg(dir.path())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{listen}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("without authentication") && err.contains("--dev"),
            "{err}"
        );
        assert!(out.stdout.is_empty(), "nothing was served");
    }
    // --dev is loopback only.
    let out = compactd()
        .args(["serve", "--dev", "--listen", "0.0.0.0:0", "--data-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("loopback"), "{err}");
}

/// API keys on a non-loopback plaintext listener: `serve` exits before
/// binding, naming both ways out.
#[test]
fn serve_refuses_api_keys_on_a_plaintext_public_listener() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("c.yaml");
    std::fs::write(
        &config,
        "auth:\n  api_keys:\n    - sha256: fcf730b6d95236ecd3c9fc2d92d7b6b2bb061514961aec041d6c7a7192f592e4\n      tenant: acme\n      requester: ci\n",
    )
    .unwrap();
    let out = compactd()
        .args(["serve", "--listen", "0.0.0.0:0", "--config"])
        .arg(&config)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("without TLS") && err.contains("allow_plaintext_behind_tls_terminator"),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "nothing was served");
}

/// `keys rotate` adds a current key to an existing keyring; it never
/// creates one where the service has not run.
#[test]
fn keys_rotate_and_current() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let (code, _, err) = run(&["keys", "current", "--data-dir", data], None);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no keyring"), "{err}");
    compactd::store::FsArtifactStore::open(dir.path()).expect("first start creates the keyring");
    let (code, first, _) = run(&["keys", "current", "--data-dir", data], None);
    assert_eq!(code, 0);
    let (code, rotated, _) = run(&["keys", "rotate", "--data-dir", data], None);
    assert_eq!(code, 0);
    assert_ne!(first.trim(), rotated.trim());
    let (_, now, _) = run(&["keys", "current", "--data-dir", data], None);
    assert_eq!(now.trim(), rotated.trim());

    // With data written, --rewrap moves every data key to the new keys and
    // says what it did; `keys shred` deletes a tenant's keys.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let store = compactd::store::FsArtifactStore::open(dir.path()).unwrap();
    let meta = compactd::store::ArtifactMeta {
        tenant: "acme".into(),
        thread_id: "t".into(),
        created_at_unix_ms: 1,
        ttl_seconds: None,
        sensitivity: compactd::model::Sensitivity::Internal,
        key_id: None,
        content_hash: String::new(),
        size_bytes: 0,
        message_ids: vec![],
    };
    use compactd::store::ArtifactStore as _;
    let id = rt.block_on(store.put(&meta, b"content")).unwrap();
    let (code, out, err) = run(&["keys", "rotate", "--rewrap", "--data-dir", data], None);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("re-wrapped 1 object(s)"), "{out}");
    assert_eq!(
        rt.block_on(store.get("acme", "t", &id)).unwrap().1,
        b"content"
    );
    let (code, out, _) = run(
        &["keys", "shred", "--tenant", "acme", "--data-dir", data],
        None,
    );
    assert_eq!(code, 0);
    assert!(out.contains("deleted 2 key(s)"), "{out}");
    assert!(matches!(
        rt.block_on(store.get("acme", "t", &id)),
        Err(compactd::store::StoreError::KeyDeleted(_))
    ));
}
