//! Config file versions. A file says which layout it is written in with a
//! top-level `version`; older layouts are rewritten into the current one,
//! each rewrite reported as a deprecation, and unknown versions are refused.
//!
//! - `1` (the default when `version` is absent): the current layout.
//! - `0`: the layout of the design documents compactd started from (their
//!   `CompactionConfig` and YAML example): `trigger_pct`, `hard_cap_buffer`,
//!   `rehydration_*`, `tool_durability_overrides`, … Keys with a counterpart
//!   move to it; keys whose behaviour compactd has built in are dropped with
//!   the reason; keys that would ask for something compactd does not do are
//!   refused, naming the key.

use serde_json::{Map, Value};

/// The layout this compactd writes and reads natively.
pub const CURRENT: u64 = 1;

/// A file's settings in the current layout and what was rewritten.
#[derive(Debug, Clone, PartialEq)]
pub struct Migrated {
    /// The settings, `version` removed.
    pub doc: Value,
    /// One line per key that moved or was dropped, naming both.
    pub deprecations: Vec<String>,
}

/// Rewrites `doc` (a parsed config file) into the current layout; errors
/// name the key at fault.
pub fn migrate(mut doc: Value) -> Result<Migrated, String> {
    let Some(root) = doc.as_object_mut() else {
        return Ok(Migrated {
            doc,
            deprecations: Vec::new(),
        });
    };
    let version = match root.remove("version") {
        None => CURRENT,
        Some(Value::Number(n)) if n.as_u64().is_some() => n.as_u64().unwrap_or(CURRENT),
        Some(other) => return Err(format!("version: expected a whole number, found {other}")),
    };
    let mut deprecations = Vec::new();
    match version {
        CURRENT => {}
        0 => from_v0(root, &mut deprecations)?,
        v => {
            return Err(format!(
                "version: {v} is not a config version this compactd reads (0 or {CURRENT}); \
                 a newer compactd wrote it, or it is a typo"
            ))
        }
    }
    Ok(Migrated { doc, deprecations })
}

/// Where a version-0 key went: a path in the current layout, or dropped
/// because the behaviour is built in (with why).
enum Fate {
    Moved(&'static str),
    BuiltIn(&'static str),
}

/// Version-0 keys with a counterpart or a reason, by their dotted path.
const V0: &[(&str, Fate)] = &[
    ("model", Fate::Moved("default_model")),
    ("max_context_tokens", Fate::Moved("default_max_input_tokens")),
    ("max_input_tokens", Fate::Moved("default_max_input_tokens")),
    ("soft_threshold_percent", Fate::Moved("policy.trigger_ratio")),
    ("policy.trigger_pct", Fate::Moved("policy.trigger_ratio")),
    ("policy.hard_cap_buffer", Fate::Moved("policy.safety_buffer_tokens")),
    ("policy.strategy", Fate::Moved("policy.summary_style")),
    ("preserve_recent_turns", Fate::Moved("policy.keep_recent_turns")),
    ("enable_externalization", Fate::Moved("policy.enable.externalize")),
    ("enable_summarization", Fate::Moved("policy.enable.summarize")),
    ("enable_clearing", Fate::Moved("policy.enable.clear")),
    ("enable_dropping", Fate::Moved("policy.enable.drop")),
    ("enable_retrieval", Fate::Moved("recall.enabled")),
    ("externalize_threshold_tokens", Fate::Moved("policy.externalize_threshold_tokens")),
    ("summarization_model", Fate::Moved("summarizer.model")),
    ("rehydration_enabled", Fate::Moved("auto_rehydrate.enabled")),
    ("rehydration_max_artifacts_per_turn", Fate::Moved("auto_rehydrate.max_per_turn")),
    ("rehydration_max_tokens_per_artifact", Fate::Moved("auto_rehydrate.max_tokens_per_artifact")),
    ("rehydration_total_budget_tokens", Fate::Moved("policy.rehydration_reserve_tokens")),
    ("rehydration_cooldown_turns", Fate::Moved("auto_rehydrate.cooldown_turns")),
    ("default_tool_durability", Fate::Moved("policy.default_durability")),
    ("storage.path", Fate::Moved("data_dir")),
    (
        "summarize_target_ratio",
        Fate::BuiltIn(
            "a summary's size follows the room the budget leaves, capped by policy.summary_max_tokens",
        ),
    ),
    (
        "summarization_cache_enabled",
        Fate::BuiltIn(
            "summaries are always cached, keyed by their content and every version that shapes them, so a cached one is never stale",
        ),
    ),
];

fn from_v0(root: &mut Map<String, Value>, notes: &mut Vec<String>) -> Result<(), String> {
    for (old, fate) in V0 {
        let Some(value) = take(root, old) else {
            continue;
        };
        match fate {
            Fate::Moved(new) => {
                let value = match *new {
                    // The design documents spelled styles as the current names.
                    "policy.summary_style" | "policy.default_durability" => lowercase(value),
                    _ => value,
                };
                if get(root, new).is_some() {
                    return Err(format!(
                        "{old}: set together with its new name {new}; keep one"
                    ));
                }
                put(root, new, value)?;
                notes.push(format!("{old} is deprecated: it is now {new}"));
            }
            Fate::BuiltIn(why) => notes.push(format!("{old} is deprecated and ignored: {why}")),
        }
    }
    if let Some(flag) = take(root, "policy.protected_flag") {
        let Some(name) = flag.as_str() else {
            return Err(format!(
                "policy.protected_flag: must be a string, found {flag}"
            ));
        };
        if name != "protected" {
            put(
                root,
                "policy.protected_flag",
                serde_json::Value::String(name.into()),
            )?;
        }
        notes.push(format!(
            "policy.protected_flag is kept as it is (`{name}`): provider JSON marks a message protected with it; typed messages use metadata.protected"
        ));
    }
    if let Some(overrides) = take(root, "tool_durability_overrides") {
        tool_overrides(root, overrides, notes)?;
    }
    if let Some(adapter) = take(root, "storage.adapter") {
        if adapter.as_str() != Some("fs") {
            return Err(format!(
                "storage.adapter: {adapter} has no version-0 mapping; configure artifacts.backend and artifacts.s3 instead"
            ));
        }
        notes.push(
            "storage.adapter is deprecated and ignored: the filesystem store is the default".into(),
        );
    }
    drop_empty(root, "storage");
    if let Some(exporter) = take(root, "telemetry.exporter") {
        match exporter.as_str() {
            Some("otlp") | Some("console") => notes.push(format!(
                "telemetry.exporter is deprecated and ignored: logs go to stderr and traces over OTLP when telemetry.otlp_endpoint is set (was {exporter})"
            )),
            _ => {
                return Err(format!(
                    "telemetry.exporter: {exporter} is not supported; compactd exports OTLP (telemetry.otlp_endpoint)"
                ))
            }
        }
    }
    if take(root, "telemetry.ariadne_url").is_some() {
        return Err(
            "telemetry.ariadne_url: compactd exports OTLP only; send it to a collector with telemetry.otlp_endpoint"
                .into(),
        );
    }
    if let Some(enabled) = take(root, "redaction.enabled") {
        if enabled == Value::Bool(false) {
            return Err(
                "redaction.enabled: redaction cannot be switched off; set redaction.defaults: false to drop only the built-in rules".into(),
            );
        }
        notes.push("redaction.enabled is deprecated and ignored: redaction is always on".into());
    }
    if let Some(Value::Array(patterns)) = get(root, "redaction.patterns").cloned() {
        if patterns.iter().all(Value::is_string) {
            let named: Vec<Value> = patterns
                .into_iter()
                .enumerate()
                .map(|(i, p)| serde_json::json!({"name": format!("pattern_{}", i + 1), "regex": p}))
                .collect();
            put(root, "redaction.patterns", Value::Array(named))?;
            notes.push(
                "redaction.patterns as plain strings is deprecated: each is now {name, regex} (named pattern_1, …)"
                    .into(),
            );
        }
    }
    Ok(())
}

/// `tool_durability_overrides: {tool: {durability, must_preserve_fields,
/// externalize_threshold_tokens, replay_cost}}` → `policy.durability` and
/// `policy.tools`.
fn tool_overrides(
    root: &mut Map<String, Value>,
    overrides: Value,
    notes: &mut Vec<String>,
) -> Result<(), String> {
    let Value::Object(tools) = overrides else {
        return Err("tool_durability_overrides: expected a map of tool names".into());
    };
    for (tool, policy) in tools {
        let Value::Object(mut p) = policy else {
            return Err(format!("tool_durability_overrides.{tool}: expected a map"));
        };
        if let Some(d) = p.remove("durability") {
            if get(root, &format!("policy.durability.{tool}")).is_some() {
                return Err(format!(
                    "tool_durability_overrides.{tool}.durability: set together with policy.durability.{tool}; keep one"
                ));
            }
            put_in(root, &["policy", "durability"], &tool, lowercase(d))?;
        }
        // What replays it is the caller's business (it reports current
        // determinism metadata in CompactRequest.observations).
        if p.remove("capture_determinism").is_some() {
            notes.push(format!(
                "tool_durability_overrides.{tool}.capture_determinism is ignored: report current metadata in CompactRequest.observations"
            ));
        }
        if let Some(cost) = p.get_mut("replay_cost") {
            *cost = lowercase(cost.take());
        }
        if !p.is_empty() {
            if get(root, &format!("policy.tools.{tool}")).is_some() {
                return Err(format!(
                    "tool_durability_overrides.{tool}: set together with policy.tools.{tool}; keep one"
                ));
            }
            put_in(root, &["policy", "tools"], &tool, Value::Object(p))?;
        }
    }
    notes.push(
        "tool_durability_overrides is deprecated: it is now policy.durability.<tool> and policy.tools.<tool>".into(),
    );
    Ok(())
}

/// Enum values were written in capitals in the design documents (`ANCHORING`).
fn lowercase(v: Value) -> Value {
    match v {
        Value::String(s) => Value::String(s.to_lowercase()),
        other => other,
    }
}

fn take(root: &mut Map<String, Value>, path: &str) -> Option<Value> {
    match path.split_once('.') {
        None => root.remove(path),
        Some((head, rest)) => match root.get_mut(head) {
            Some(Value::Object(m)) => take(m, rest),
            _ => None,
        },
    }
}

fn get<'a>(root: &'a Map<String, Value>, path: &str) -> Option<&'a Value> {
    match path.split_once('.') {
        None => root.get(path),
        Some((head, rest)) => match root.get(head) {
            Some(Value::Object(m)) => get(m, rest),
            _ => None,
        },
    }
}

fn put(root: &mut Map<String, Value>, path: &str, value: Value) -> Result<(), String> {
    let parts: Vec<&str> = path.split('.').collect();
    let (last, sections) = parts.split_last().ok_or("empty path")?;
    put_in(root, sections, last, value)
}

fn put_in(
    root: &mut Map<String, Value>,
    sections: &[&str],
    key: &str,
    value: Value,
) -> Result<(), String> {
    let mut at = root;
    for (i, s) in sections.iter().enumerate() {
        let entry = at
            .entry(s.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
        at = entry
            .as_object_mut()
            .ok_or_else(|| format!("{} is not a section", sections[..=i].join(".")))?;
    }
    at.insert(key.to_string(), value);
    Ok(())
}

fn drop_empty(root: &mut Map<String, Value>, section: &str) {
    if matches!(root.get(section), Some(Value::Object(m)) if m.is_empty()) {
        root.remove(section);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_current_version_is_the_default_and_passes_unchanged() {
        let doc = json!({"policy": {"trigger_ratio": 0.8}});
        let m = migrate(doc.clone()).unwrap();
        assert_eq!(m.doc, doc);
        assert!(m.deprecations.is_empty());
        let m = migrate(json!({"version": 1, "policy": {"trigger_ratio": 0.8}})).unwrap();
        assert_eq!(m.doc, doc);
    }

    #[test]
    fn unknown_versions_are_refused() {
        let e = migrate(json!({"version": 2})).unwrap_err();
        assert!(e.starts_with("version: 2 is not"), "{e}");
        let e = migrate(json!({"version": "one"})).unwrap_err();
        assert!(e.starts_with("version: expected"), "{e}");
    }

    #[test]
    fn a_version_zero_protected_flag_is_kept() {
        let m = migrate(json!({"version": 0, "policy": {"protected_flag": "pinned"}})).unwrap();
        assert_eq!(m.doc["policy"]["protected_flag"], "pinned");
        let m = migrate(json!({"version": 0, "policy": {"protected_flag": "protected"}})).unwrap();
        assert!(m.doc["policy"].get("protected_flag").is_none());
        assert!(migrate(json!({"version": 0, "policy": {"protected_flag": 3}})).is_err());
    }

    #[test]
    fn version_zero_keys_move_with_a_deprecation_each() {
        let m = migrate(json!({
            "version": 0,
            "model": "gpt-4",
            "max_context_tokens": 128000,
            "policy": {"trigger_pct": 0.9, "hard_cap_buffer": 1500, "keep_recent_turns": 6,
                       "protected_flag": "protected", "strategy": "TASK_STATE"},
            "rehydration_max_artifacts_per_turn": 2,
            "summarization_cache_enabled": true,
            "tool_durability_overrides": {
                "place_order": {"durability": "ANCHORING", "must_preserve_fields": ["order_id"],
                                 "externalize_threshold_tokens": 500, "replay_cost": "EXPENSIVE"}
            },
            "redaction": {"enabled": true, "patterns": ["(?i)api[_-]?key\\s*[:=]\\s*\\S+"]},
            "storage": {"adapter": "fs", "path": "./.compact/archive"},
            "telemetry": {"exporter": "otlp"}
        }))
        .unwrap();
        assert_eq!(
            m.doc,
            json!({
                "default_model": "gpt-4",
                "default_max_input_tokens": 128000,
                "data_dir": "./.compact/archive",
                "policy": {"trigger_ratio": 0.9, "safety_buffer_tokens": 1500, "keep_recent_turns": 6,
                           "summary_style": "task_state",
                           "durability": {"place_order": "anchoring"},
                           "tools": {"place_order": {"must_preserve_fields": ["order_id"],
                                                     "externalize_threshold_tokens": 500,
                                                     "replay_cost": "expensive"}}},
                "auto_rehydrate": {"max_per_turn": 2},
                "redaction": {"patterns": [{"name": "pattern_1", "regex": "(?i)api[_-]?key\\s*[:=]\\s*\\S+"}]},
                "telemetry": {}
            })
        );
        let text = m.deprecations.join("\n");
        for key in [
            "model is deprecated: it is now default_model",
            "policy.trigger_pct is deprecated: it is now policy.trigger_ratio",
            "summarization_cache_enabled is deprecated and ignored",
            "tool_durability_overrides is deprecated",
            "policy.protected_flag",
            "redaction.patterns as plain strings",
        ] {
            assert!(text.contains(key), "{key} missing from:\n{text}");
        }
    }

    #[test]
    fn version_zero_keys_without_a_counterpart_are_refused_by_name() {
        for (doc, key) in [
            (
                json!({"version": 0, "telemetry": {"ariadne_url": "http://x"}}),
                "telemetry.ariadne_url",
            ),
            (
                json!({"version": 0, "storage": {"adapter": "custom"}}),
                "storage.adapter",
            ),
            (
                json!({"version": 0, "redaction": {"enabled": false}}),
                "redaction.enabled",
            ),
            (
                json!({"version": 0, "model": "a", "default_model": "b"}),
                "model",
            ),
        ] {
            let e = migrate(doc).unwrap_err();
            assert!(e.starts_with(&format!("{key}:")), "{e}");
        }
    }
}
