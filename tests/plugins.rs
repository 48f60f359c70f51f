//! Strategy plugins, built from the repository and loaded as the service
//! loads them: the examples' proposals end up in the plan and the prompt;
//! a plugin that panics, stalls, fails, answers garbage or proposes what
//! would break an invariant is taken out of rotation while compaction goes
//! on exactly as without it; a plugin that does not match its hash, speaks
//! another ABI or sits in a writable directory stops start-up.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use compactd::app::{App, CompactCommand, CompactOutcome, Extensions};
use compactd::model::{ClearReason, Thread};
use compactd::plugin::{load_all, LoadedPlugin, PluginError, PluginSettings, PluginsSettings};
use compactd::provider::thread_from_json;
use compactd::reduce::Policy;
use compactd::security::SecurityContext;
use compactd_testkit::plugins::{build_c_plugin, build_rust_plugin, PluginDir};
use serde_json::{json, Value};

/// Every plugin library, built once for the whole test binary.
struct Built {
    _c: tempfile::TempDir,
    sql: std::path::PathBuf,
    code: std::path::PathBuf,
    misbehave: std::path::PathBuf,
    c_noop: std::path::PathBuf,
    c_wrong_major: std::path::PathBuf,
}

fn built() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        let c = tempfile::tempdir().expect("tempdir");
        Built {
            sql: build_rust_plugin("compactd-plugin-sql-results"),
            code: build_rust_plugin("compactd-plugin-code-delta"),
            misbehave: build_rust_plugin("compactd-plugin-misbehave"),
            c_noop: build_c_plugin(c.path(), "c_noop", &[]),
            c_wrong_major: build_c_plugin(c.path(), "c_major2", &["COMPACTD_NOOP_ABI_MAJOR=2"]),
            _c: c,
        }
    })
}

fn entry(dir: &PluginDir, name: &str, file: &str, config: Value) -> PluginSettings {
    PluginSettings {
        name: name.into(),
        path: file.into(),
        sha256: dir.sha256(file),
        after: "compress".into(),
        aggressiveness: 50,
        config,
        timeout_ms: 500,
        required: false,
    }
}

fn load(dir: &PluginDir, load: Vec<PluginSettings>) -> Result<Vec<Arc<LoadedPlugin>>, PluginError> {
    load_all(&PluginsSettings {
        dir: Some(dir.path().to_path_buf()),
        load,
    })
}

fn app(plugins: Vec<Arc<LoadedPlugin>>) -> App {
    compactd_testkit::memory_app(Extensions {
        plugins,
        ..Default::default()
    })
}

/// A data-and-code agent: query results as psql tables, files read, read
/// again and edited, with plain talk between.
fn thread() -> Thread {
    let mut msgs =
        vec![json!({"role": "user", "content": "Help me clean up the billing reports."})];
    let table = |n: usize| -> String {
        let rows: String = (0..n)
            .map(|i| {
                format!(
                    " {i:4} | acct-{i:05} | {:8}.{:02} | EUR\n",
                    i * 37 % 9000,
                    i % 100
                )
            })
            .collect();
        format!("  id  | account    | amount      | cur\n------+------------+-------------+----\n{rows}({n} rows)\n")
    };
    let source = |v: usize| -> String {
        (0..120)
            .map(|i| format!("    let total_{i} = compute(rows, {v}, {i}); // step {i}\n"))
            .collect()
    };
    let turns: Vec<(&str, Value, String)> = vec![
        (
            "sql_query",
            json!({"sql": "select * from invoices where month = '2026-10'"}),
            table(400),
        ),
        ("read_file", json!({"path": "src/report.rs"}), source(1)),
        ("read_file", json!({"path": "src/main.rs"}), source(4)),
        (
            "sql_query",
            json!({"sql": "select * from refunds"}),
            table(250),
        ),
        ("read_file", json!({"path": "src/report.rs"}), source(2)),
        (
            "edit_file",
            json!({"path": "src/report.rs", "patch": "..."}),
            "ok".to_string(),
        ),
        (
            "sql_query",
            json!({"sql": "select count(*) from accounts"}),
            table(3),
        ),
        ("read_file", json!({"path": "src/main.rs"}), source(3)),
    ];
    for (k, (tool, args, out)) in turns.into_iter().enumerate() {
        let id = format!("call{k}");
        msgs.push(json!({"role": "user", "content": format!("Step {k}, please.")}));
        msgs.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": id, "type": "function", "function": {"name": tool, "arguments": args.to_string()}}
        ]}));
        msgs.push(json!({"role": "tool", "tool_call_id": id, "content": out}));
        msgs.push(json!({"role": "assistant", "content": format!("Done with step {k}.")}));
    }
    thread_from_json(&Value::Array(msgs), "billing")
        .expect("thread")
        .thread
}

/// Only the plugins (and the last-resort window) may act.
fn policy() -> Policy {
    let mut p = Policy::default();
    p.enable.retention = false;
    p.enable.compress = false;
    p.enable.clear = false;
    p.enable.externalize = false;
    p.enable.summarize = false;
    p.keep_recent_turns = 1;
    p.keep_tool_io_pairs = 1;
    p
}

async fn compact(app: &App, t: &Thread, limit: u32) -> CompactOutcome {
    let mut cmd = CompactCommand::new(t.clone(), policy());
    cmd.max_input_tokens = Some(limit);
    app.compact(&SecurityContext::dev(), cmd)
        .await
        .expect("compacts")
}

fn warnings(out: &CompactOutcome) -> Vec<String> {
    out.report
        .as_ref()
        .map(|r| r.warnings.clone())
        .unwrap_or_default()
}

#[tokio::test]
async fn the_examples_proposals_are_in_the_plan_with_their_names() {
    let b = built();
    let dir = PluginDir::install(&[
        ("libsql.so", &b.sql),
        ("libcode.so", &b.code),
        ("libnoop.so", &b.c_noop),
    ]);
    let plugins = load(
        &dir,
        vec![
            entry(&dir, "sql-results", "libsql.so", json!({})),
            // First in the pipeline: stale reads are worth nothing whatever
            // the budget, and a step after the target is met does not run.
            PluginSettings {
                after: "start".into(),
                ..entry(&dir, "code-delta", "libcode.so", json!({}))
            },
            entry(&dir, "c-noop", "libnoop.so", json!({})),
        ],
    )
    .expect("loads");
    let t = thread();
    let out = compact(&app(plugins), &t, 12_000).await;
    let by = |strategy: &str| -> Vec<&str> {
        out.plan
            .clearings
            .iter()
            .filter(|c| c.reason == ClearReason::Plugin && c.strategy.starts_with(strategy))
            .map(|c| c.replacement.as_str())
            .collect()
    };
    let sql = by("sql-results@");
    let code = by("code-delta@");
    assert_eq!(sql.len(), 2, "the two large query results: {sql:?}");
    assert!(sql
        .iter()
        .any(|r| r.contains("400 rows") && r.contains("columns: id, account, amount, cur")));
    // Both older reads of src/report.rs point at its edit, the older read
    // of src/main.rs at the newer read.
    assert_eq!(code.len(), 3, "{code:?}");
    assert_eq!(
        code.iter().filter(|r| r.contains("edited in turn")).count(),
        2
    );
    assert!(code.iter().any(|r| r.contains("read again")));
    assert!(warnings(&out).is_empty(), "{:?}", warnings(&out));
    assert!(
        out.plan.drops.is_empty(),
        "the plugins freed enough: nothing dropped"
    );
}

/// The same thread compacted with no plugin: what a faulty plugin must
/// leave behind.
async fn without_plugins(limit: u32) -> CompactOutcome {
    compact(&app(Vec::new()), &thread(), limit).await
}

#[tokio::test]
async fn a_faulty_plugin_is_taken_out_of_rotation_and_changes_nothing() {
    let b = built();
    let dir = PluginDir::install(&[("libmis.so", &b.misbehave), ("libnoop.so", &b.c_noop)]);
    let baseline = without_plugins(12_000).await;
    let cases: Vec<(PluginSettings, &str)> = vec![
        (
            entry(&dir, "misbehave", "libmis.so", json!({"mode": "panic"})),
            "panicked: misbehave was told to panic",
        ),
        (
            entry(&dir, "misbehave", "libmis.so", json!({"mode": "sleep"})),
            "timed out",
        ),
        (
            entry(&dir, "misbehave", "libmis.so", json!({"mode": "fail"})),
            "failed with status 2",
        ),
        (
            entry(
                &dir,
                "misbehave",
                "libmis.so",
                json!({"mode": "unknown_id"}),
            ),
            "no message",
        ),
        (
            entry(
                &dir,
                "misbehave",
                "libmis.so",
                json!({"mode": "touch_tail"}),
            ),
            "is not free",
        ),
        (
            entry(
                &dir,
                "misbehave",
                "libmis.so",
                json!({"mode": "split_pair"}),
            ),
            "splits a tool call",
        ),
        (
            entry(
                &dir,
                "misbehave",
                "libmis.so",
                json!({"mode": "externalize_tail"}),
            ),
            "is not free",
        ),
        (
            entry(
                &dir,
                "misbehave",
                "libmis.so",
                json!({"mode": "externalize_call"}),
            ),
            "carries tool calls",
        ),
        (
            entry(&dir, "c-noop", "libnoop.so", json!({"garbage": true})),
            "returned garbage",
        ),
    ];
    for (settings, expected) in cases {
        let mode = settings.config.clone();
        let plugins = load(&dir, vec![settings]).expect("loads");
        let plugin = Arc::clone(&plugins[0]);
        let app = app(plugins);
        let out = compact(&app, &thread(), 12_000).await;
        let w = warnings(&out).join("\n");
        assert!(
            w.contains("taken out of rotation") && w.contains(expected),
            "{mode}: {w}"
        );
        assert!(plugin.poisoned().is_some(), "{mode}: not poisoned");
        // Nothing of what it proposed was applied.
        assert_eq!(out.plan.clearings, baseline.plan.clearings, "{mode}");
        assert_eq!(out.plan.drops, baseline.plan.drops, "{mode}");
        assert_eq!(
            out.plan.externalizations, baseline.plan.externalizations,
            "{mode}"
        );
        assert_eq!(
            out.plan.compacted_token_count, baseline.plan.compacted_token_count,
            "{mode}"
        );
        // The next call skips it and says so.
        let mut t = thread();
        t.id = "another".into();
        let next = compact(&app, &t, 12_000).await;
        assert!(
            warnings(&next).join("\n").contains("out of rotation"),
            "{mode}"
        );
    }
}

#[tokio::test]
async fn a_well_behaved_misbehave_plugin_is_applied() {
    // The control for the test above: the same library in `ok` mode works.
    let b = built();
    let dir = PluginDir::install(&[("libmis.so", &b.misbehave)]);
    let plugins = load(
        &dir,
        vec![entry(&dir, "misbehave", "libmis.so", json!({"mode": "ok"}))],
    )
    .expect("loads");
    // Room enough that the one clear meets the target (a drop after it
    // would take the cleared message along).
    let out = compact(&app(plugins), &thread(), 24_000).await;
    assert!(out
        .plan
        .clearings
        .iter()
        .any(|c| c.replacement == "[cleared by misbehave]" && c.strategy == "misbehave@0.0.1"));
    assert!(warnings(&out).is_empty(), "{:?}", warnings(&out));
}

fn refused(dir: &PluginDir, settings: PluginSettings) -> String {
    match load(dir, vec![settings]) {
        Ok(_) => panic!("loaded"),
        Err(e) => e.to_string(),
    }
}

#[tokio::test]
async fn start_up_refuses_a_plugin_it_cannot_trust_or_speak_to() {
    let b = built();
    let dir = PluginDir::install(&[
        ("libnoop.so", &b.c_noop),
        ("libmajor2.so", &b.c_wrong_major),
        ("libsql.so", &b.sql),
    ]);
    let e = refused(&dir, entry(&dir, "c-noop", "libmajor2.so", json!({})));
    assert!(
        e.contains("speaks plugin ABI 2.0; this compactd speaks 1.0"),
        "{e}"
    );
    let mut wrong_hash = entry(&dir, "c-noop", "libnoop.so", json!({}));
    wrong_hash.sha256 = "0".repeat(64);
    let e = refused(&dir, wrong_hash);
    assert!(e.contains("SHA-256 mismatch"), "{e}");
    let e = refused(&dir, entry(&dir, "sql", "libsql.so", json!({})));
    assert!(e.contains("declares itself \"sql-results\""), "{e}");
    let e = refused(
        &dir,
        entry(&dir, "c-noop", "libnoop.so", json!({"reject": true})),
    );
    assert!(
        e.contains("create failed") && e.contains("configured to reject"),
        "{e}"
    );
    let mut outside = entry(&dir, "c-noop", "libnoop.so", json!({}));
    outside.path = "../libnoop.so".into();
    let e = refused(&dir, outside);
    assert!(e.contains("libnoop.so"), "{e}");
    let e = refused(&dir, entry(&dir, "window", "libnoop.so", json!({})));
    assert!(e.contains("plugins.load[0].name"), "{e}");
    let mut late = entry(&dir, "c-noop", "libnoop.so", json!({}));
    late.after = "window".into();
    let e = refused(&dir, late);
    assert!(e.contains("plugins.load[0].after"), "{e}");

    // A directory anyone can write to is refused whatever its content.
    let writable = tempfile::tempdir().expect("tempdir");
    std::fs::copy(&b.c_noop, writable.path().join("libnoop.so")).expect("copy");
    let e = load_all(&PluginsSettings {
        dir: Some(writable.path().to_path_buf()),
        load: vec![PluginSettings {
            sha256: compactd_testkit::plugins::sha256_of(&writable.path().join("libnoop.so")),
            ..entry(&dir, "c-noop", "libnoop.so", json!({}))
        }],
    })
    .expect_err("writable dir");
    assert!(e.to_string().contains("plugins.dir is writable"), "{e}");
}

#[test]
fn the_header_compiles_strictly_and_matches_the_rust_layout() {
    // Compiled with -Wall -Wextra -Werror -std=c11 (build_c_plugin), and a
    // probe of its layout against the SDK's #[repr(C)] mirror.
    let dir = tempfile::tempdir().expect("tempdir");
    let probe = dir.path().join("probe.c");
    std::fs::write(
        &probe,
        "#include <stdio.h>\n#include <stddef.h>\n#include \"compactd_plugin.h\"\nint main(void) {\n  printf(\"%zu %zu %zu %zu %u %u\\n\", sizeof(compactd_plugin), offsetof(compactd_plugin, name), offsetof(compactd_plugin, create), offsetof(compactd_plugin, analyze), COMPACTD_PLUGIN_ABI_MAJOR, COMPACTD_PLUGIN_ABI_MINOR);\n  return 0;\n}\n",
    )
    .expect("probe");
    let exe = dir.path().join("probe");
    let root = compactd_testkit::plugins::workspace_root();
    let cc = std::process::Command::new("cc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror"])
        .arg("-I")
        .arg(root.join("plugins/abi/include"))
        .arg(&probe)
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("run cc");
    assert!(
        cc.status.success(),
        "{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let out = std::process::Command::new(&exe)
        .output()
        .expect("probe runs");
    let got = String::from_utf8_lossy(&out.stdout).trim().to_string();
    use compactd_plugin_sdk::abi;
    let want = format!(
        "{} {} {} {} {} {}",
        std::mem::size_of::<abi::Plugin>(),
        std::mem::offset_of!(abi::Plugin, name),
        std::mem::offset_of!(abi::Plugin, create),
        std::mem::offset_of!(abi::Plugin, analyze),
        abi::ABI_MAJOR,
        abi::ABI_MINOR,
    );
    assert_eq!(got, want);
    let _ = Path::new(&exe);
}
