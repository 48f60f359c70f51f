//! Configuration: embedded defaults → YAML file → environment overrides
//! (`COMPACTD__SECTION__KEY=value`, e.g. `COMPACTD__POLICY__TRIGGER_RATIO=0.9`
//! or `COMPACTD__LISTEN=127.0.0.1:6000`), validated once at start-up with
//! errors that give the field path.
//!
//! The file has the shape of [`ServerSettings`]: top-level server keys
//! (`listen`, `data_dir`, limits, `default_model`, …) plus the `policy` and
//! `auth` sections. The offline `compact` command reads the same file.

use std::path::Path;

use serde_yaml::{Mapping, Value};
use thiserror::Error;

use crate::server::{check_startup, ServerSettings};

/// Environment variables with this prefix override the file.
pub const ENV_PREFIX: &str = "COMPACTD__";

/// A config that could not be used.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// YAML syntax, or an unknown or mistyped field (the message names it).
    #[error("{origin}: {message}")]
    Parse {
        /// The file, or "environment".
        origin: String,
        /// The parser's message, with the field path.
        message: String,
    },
    /// A value out of range.
    #[error("{0}")]
    Invalid(String),
}

/// Loads defaults, then `path` (if any), then overrides from `env`.
pub fn load(
    path: Option<&Path>,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<ServerSettings, ConfigError> {
    let mut doc = match path {
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|source| ConfigError::Read {
                path: p.display().to_string(),
                source,
            })?;
            let v: Value = serde_yaml::from_str(&text).map_err(|e| ConfigError::Parse {
                origin: p.display().to_string(),
                message: e.to_string(),
            })?;
            match v {
                Value::Null => Value::Mapping(Mapping::new()),
                Value::Mapping(m) => Value::Mapping(m),
                _ => {
                    return Err(ConfigError::Parse {
                        origin: p.display().to_string(),
                        message: "the top level must be a mapping".into(),
                    })
                }
            }
        }
        None => Value::Mapping(Mapping::new()),
    };
    let mut overridden = Vec::new();
    let mut env: Vec<(String, String)> = env
        .into_iter()
        .filter(|(k, _)| k.starts_with(ENV_PREFIX))
        .collect();
    env.sort();
    for (key, value) in env {
        let path: Vec<String> = key[ENV_PREFIX.len()..]
            .split("__")
            .map(str::to_ascii_lowercase)
            .collect();
        if path.iter().any(String::is_empty) {
            return Err(ConfigError::Parse {
                origin: "environment".into(),
                message: format!("{key}: empty path segment"),
            });
        }
        // Values are YAML scalars or flow collections: numbers, booleans and
        // lists like `[system, developer]` parse as such, anything else is a string.
        let parsed: Value =
            serde_yaml::from_str(&value).unwrap_or_else(|_| Value::String(value.clone()));
        set_path(&mut doc, &path, parsed).map_err(|m| ConfigError::Parse {
            origin: "environment".into(),
            message: format!("{key}: {m}"),
        })?;
        overridden.push(key);
    }
    // Through text, because serde_yaml names the field path only when parsing text.
    let merged = serde_yaml::to_string(&doc).map_err(|e| ConfigError::Invalid(e.to_string()))?;
    let settings: ServerSettings =
        serde_yaml::from_str(&merged).map_err(|e| ConfigError::Parse {
            origin: match (path, overridden.is_empty()) {
                (Some(p), true) => p.display().to_string(),
                (Some(p), false) => format!("{} + {}", p.display(), overridden.join(", ")),
                (None, false) => overridden.join(", "),
                (None, true) => "defaults".into(),
            },
            message: e.to_string(),
        })?;
    Ok(settings)
}

/// Validates everything that can be checked without starting: ranges, the
/// auth section (key files are read), and the exposure rules.
pub fn check(settings: &ServerSettings) -> Result<(), ConfigError> {
    check_startup(settings).map_err(|e| ConfigError::Invalid(e.to_string()))
}

/// The settings as YAML, as `config check` prints them.
pub fn to_yaml(settings: &ServerSettings) -> Result<String, ConfigError> {
    serde_yaml::to_string(settings).map_err(|e| ConfigError::Invalid(e.to_string()))
}

fn set_path(doc: &mut Value, path: &[String], value: Value) -> Result<(), String> {
    let mut cur = doc;
    for (i, seg) in path.iter().enumerate() {
        let map = match cur {
            Value::Mapping(m) => m,
            _ => return Err(format!("{} is not a section", path[..i].join("."))),
        };
        let key = Value::String(seg.clone());
        if i + 1 == path.len() {
            map.insert(key, value);
            return Ok(());
        }
        cur = map
            .entry(key)
            .or_insert_with(|| Value::Mapping(Mapping::new()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn file(text: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(text.as_bytes()).unwrap();
        f
    }

    #[test]
    fn defaults_load_and_pass_the_checks() {
        let s = load(None, Vec::new()).unwrap();
        assert_eq!(s.listen.to_string(), "127.0.0.1:50051");
        check(&s).unwrap();
    }

    #[test]
    fn file_then_environment() {
        let f =
            file("default_model: gpt-4.1\npolicy:\n  trigger_ratio: 0.8\n  keep_recent_turns: 4\n");
        let env = vec![
            (
                "COMPACTD__POLICY__KEEP_RECENT_TURNS".to_string(),
                "9".to_string(),
            ),
            ("COMPACTD__LISTEN".to_string(), "127.0.0.1:6000".to_string()),
            ("UNRELATED".to_string(), "x".to_string()),
        ];
        let s = load(Some(f.path()), env).unwrap();
        assert_eq!(s.default_model, "gpt-4.1");
        assert_eq!(s.policy.trigger_ratio, 0.8);
        assert_eq!(s.policy.keep_recent_turns, 9);
        assert_eq!(s.listen.port(), 6000);
    }

    #[test]
    fn unknown_fields_are_named() {
        let f = file("policy:\n  trigerr_ratio: 0.8\n");
        let e = load(Some(f.path()), Vec::new()).unwrap_err().to_string();
        assert!(e.contains("trigerr_ratio"), "{e}");
        let env = vec![("COMPACTD__POLICY__NOPE".to_string(), "1".to_string())];
        let e = load(None, env).unwrap_err().to_string();
        assert!(
            e.contains("COMPACTD__POLICY__NOPE") && e.contains("nope"),
            "{e}"
        );
    }

    #[test]
    fn out_of_range_values_give_the_field_path() {
        let f = file("policy:\n  trigger_ratio: 1.5\n");
        let s = load(Some(f.path()), Vec::new()).unwrap();
        let e = check(&s).unwrap_err().to_string();
        assert!(e.contains("policy.trigger_ratio"), "{e}");
    }

    #[test]
    fn mistyped_values_are_named() {
        let f = file("policy:\n  keep_recent_turns: many\n");
        let e = load(Some(f.path()), Vec::new()).unwrap_err().to_string();
        assert!(e.contains("keep_recent_turns"), "{e}");
    }

    #[test]
    fn exposure_without_auth_is_refused() {
        let env = vec![("COMPACTD__LISTEN".to_string(), "0.0.0.0:50051".to_string())];
        let s = load(None, env).unwrap();
        let e = check(&s).unwrap_err().to_string();
        assert!(e.contains("without authentication"), "{e}");
    }
}
