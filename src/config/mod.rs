//! Configuration: embedded defaults → YAML file → environment overrides
//! (`COMPACTD__SECTION__KEY=value`, e.g. `COMPACTD__POLICY__TRIGGER_RATIO=0.9`
//! or `COMPACTD__LISTEN=127.0.0.1:6000`), validated once at start-up with
//! errors that give the field path and where the value came from.
//!
//! The layering is figment's; YAML is parsed with `serde_norway` (a
//! maintained fork of the deprecated `serde_yaml`). The file has the shape of
//! [`Settings`]: top-level server keys (`listen`, `data_dir`, limits,
//! `default_model`, …) plus the `policy` and `auth` sections. The offline
//! `compact` command reads the same file.

use std::path::Path;

use figment::value::{Dict, Map, Value};
use figment::{Figment, Metadata, Profile, Provider};
use thiserror::Error;

use crate::settings::Settings;

pub mod migrate;

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
    /// YAML syntax, or an unknown or mistyped field.
    #[error("{origin}: {message}")]
    Parse {
        /// The file, or the environment variable.
        origin: String,
        /// What is wrong, starting with the field path when one is at fault.
        message: String,
    },
    /// A value out of range.
    #[error("{0}")]
    Invalid(String),
}

/// `COMPACTD__…` variables as a figment provider. The variables are passed
/// in (not read from the process) so callers and tests choose them; errors
/// name the variable itself.
struct EnvOverrides {
    vars: Vec<(String, String)>,
}

impl Provider for EnvOverrides {
    fn metadata(&self) -> Metadata {
        Metadata::named("environment").interpolater(|_: &Profile, keys: &[&str]| {
            format!("{ENV_PREFIX}{}", keys.join("__").to_ascii_uppercase())
        })
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        let mut dict = Dict::new();
        for (key, raw) in &self.vars {
            let path: Vec<String> = key[ENV_PREFIX.len()..]
                .split("__")
                .map(str::to_ascii_lowercase)
                .collect();
            if path.iter().any(String::is_empty) {
                return Err(figment::Error::from(format!("{key}: empty path segment")));
            }
            // Values are YAML, like the file: numbers, booleans and flow
            // collections (`[system, developer]`, `{keep_last: 2}`) parse as
            // such; anything that is not valid YAML is taken as a string.
            let value: Value =
                serde_norway::from_str(raw).unwrap_or_else(|_| Value::from(raw.as_str()));
            insert(&mut dict, &path, value)
                .map_err(|m| figment::Error::from(format!("{key}: {m}")))?;
        }
        Ok(Profile::Default.collect(dict))
    }
}

/// Sets `path` in `dict`, creating sections on the way.
fn insert(dict: &mut Dict, path: &[String], value: Value) -> Result<(), String> {
    let Some((last, sections)) = path.split_last() else {
        return Ok(());
    };
    let mut cur = dict;
    for (i, seg) in sections.iter().enumerate() {
        let entry = cur
            .entry(seg.clone())
            .or_insert_with(|| Value::from(Dict::new()));
        cur = match entry {
            Value::Dict(_, d) => d,
            _ => return Err(format!("{} is not a section", path[..=i].join("."))),
        };
    }
    cur.insert(last.clone(), value);
    Ok(())
}

/// Loads defaults, then `path` (if any), then overrides from `env` (only
/// `COMPACTD__` variables are looked at).
pub fn load(
    path: Option<&Path>,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<Settings, ConfigError> {
    load_files(path.as_slice(), env)
}

/// [`load`] with several files merged in order: a later file's values win and
/// sections are merged key by key, so non-secret settings can live in one file
/// (a ConfigMap) and credentials' material in another (a mounted Secret).
pub fn load_files(
    paths: &[impl AsRef<Path>],
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<Settings, ConfigError> {
    let mut figment = Figment::new();
    let mut deprecations = Vec::new();
    for p in paths {
        let p = p.as_ref();
        let file = VersionedFile::read(p)?;
        let origin = p.display();
        deprecations.extend(file.deprecations.iter().map(|d| format!("{origin}: {d}")));
        figment = figment.merge(file);
    }
    let mut vars: Vec<(String, String)> = env
        .into_iter()
        .filter(|(k, _)| k.starts_with(ENV_PREFIX))
        .collect();
    vars.sort();
    let mut settings = figment
        .merge(EnvOverrides { vars })
        .extract::<Settings>()
        .map_err(parse_error)?;
    settings.deprecations = deprecations;
    Ok(settings)
}

/// A config file read and brought to the current layout (see
/// [`migrate`]); figment sees it as the file it came from, so errors name
/// the file.
struct VersionedFile {
    path: std::path::PathBuf,
    dict: Dict,
    deprecations: Vec<String>,
}

impl VersionedFile {
    fn read(path: &Path) -> Result<Self, ConfigError> {
        let origin = || path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: origin(),
            source,
        })?;
        let parse = |message: String| ConfigError::Parse {
            origin: origin(),
            message,
        };
        // An empty file is an empty layout, as figment reads it.
        // An empty (or all-comment) file is an empty layout, as figment
        // reads it.
        let doc: serde_json::Value = if text.trim().is_empty() {
            serde_json::Value::Object(Default::default())
        } else {
            match serde_norway::from_str(&text).map_err(|e| parse(e.to_string()))? {
                serde_json::Value::Null => serde_json::Value::Object(Default::default()),
                doc => doc,
            }
        };
        let migrated = migrate::migrate(doc).map_err(parse)?;
        let dict = match Value::serialize(&migrated.doc).map_err(|e| parse(e.to_string()))? {
            Value::Dict(_, d) => d,
            other => {
                return Err(parse(format!(
                    "expected a map of settings, found {}",
                    other.to_actual()
                )))
            }
        };
        Ok(VersionedFile {
            path: path.to_path_buf(),
            dict,
            deprecations: migrated.deprecations,
        })
    }
}

impl Provider for VersionedFile {
    fn metadata(&self) -> Metadata {
        Metadata::from("YAML file", figment::Source::File(self.path.clone()))
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        Ok(Profile::Default.collect(self.dict.clone()))
    }
}

/// The first error, as `origin: field: what` (figment stops at the first
/// deserialization error; provider errors come first in its chain).
fn parse_error(e: figment::Error) -> ConfigError {
    let origin = match e.metadata.as_ref() {
        // The file's own path: figment's display of a source is relative to
        // the working directory, which would make messages depend on it.
        Some(md) => match &md.source {
            Some(source) => source
                .file_path()
                .map_or_else(|| source.to_string(), |p| p.display().to_string()),
            None => md.name.to_string(),
        },
        None => "defaults".to_string(),
    };
    let field = match (&e.metadata, &e.profile) {
        (Some(md), Some(profile)) if md.name == "environment" && !e.path.is_empty() => {
            md.interpolate(profile, &e.path)
        }
        _ => e.path.join("."),
    };
    let message = if field.is_empty() {
        e.kind.to_string()
    } else {
        format!("{field}: {}", e.kind)
    };
    ConfigError::Parse { origin, message }
}

/// Validates everything that can be checked without starting, as `serve`
/// checks it first ([`Settings::validate`]): the same refusals, the same
/// messages.
pub fn check(settings: &Settings) -> Result<(), ConfigError> {
    settings
        .validate()
        .map(drop)
        .map_err(|e| ConfigError::Invalid(e.to_string()))
}

/// The settings as YAML, as `config check` prints them: a file in the
/// current layout, `version` first.
pub fn to_yaml(settings: &Settings) -> Result<String, ConfigError> {
    let body =
        serde_norway::to_string(settings).map_err(|e| ConfigError::Invalid(e.to_string()))?;
    Ok(format!("version: {}\n{body}", migrate::CURRENT))
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

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn files_merge_in_order_section_by_section() {
        let base =
            file("listen: 0.0.0.0:6000\nauth:\n  dev: false\npolicy:\n  trigger_ratio: 0.8\n");
        let secret = file(
            "auth:\n  api_keys:\n    - sha256: fcf730b6d95236ecd3c9fc2d92d7b6b2bb061514961aec041d6c7a7192f592e4\n      tenant: acme\n      requester: bot\n      permissions: [compact]\npolicy:\n  target_ratio: 0.6\n",
        );
        let s = load_files(&[base.path(), secret.path()], Vec::new()).unwrap();
        assert_eq!(s.listen.to_string(), "0.0.0.0:6000");
        assert_eq!(s.auth.api_keys.len(), 1);
        assert_eq!(s.policy.trigger_ratio, 0.8);
        assert_eq!(s.policy.target_ratio, 0.6);
        // A later file wins over an earlier one, the environment over both.
        let later = file("listen: 0.0.0.0:7000\n");
        let s = load_files(
            &[base.path(), later.path()],
            env(&[("COMPACTD__POLICY__TRIGGER_RATIO", "0.9")]),
        )
        .unwrap();
        assert_eq!(s.listen.to_string(), "0.0.0.0:7000");
        assert_eq!(s.policy.trigger_ratio, 0.9);
        // A missing file among several is named.
        let e = load_files(
            &[base.path(), std::path::Path::new("/nonexistent/x.yaml")],
            Vec::new(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("/nonexistent/x.yaml"), "{e}");
    }

    #[test]
    fn defaults_load_and_need_auth_or_dev_mode() {
        let s = load(None, Vec::new()).unwrap();
        assert_eq!(s, Settings::default());
        assert_eq!(s.listen.to_string(), "127.0.0.1:50051");
        // Not even on loopback does the service start without being told how
        // callers authenticate; dev mode is asked for, never inferred.
        let e = check(&s).unwrap_err().to_string();
        assert!(e.contains("--dev") && e.contains("auth.jwt"), "{e}");
        let dev = load(None, env(&[("COMPACTD__AUTH__DEV", "true")])).unwrap();
        check(&dev).unwrap();
        // An empty file is the defaults too.
        assert_eq!(load(Some(file("").path()), Vec::new()).unwrap(), s);
    }

    #[test]
    fn file_then_environment() {
        let f =
            file("default_model: gpt-4.1\npolicy:\n  trigger_ratio: 0.8\n  keep_recent_turns: 4\n");
        let s = load(
            Some(f.path()),
            env(&[
                ("COMPACTD__POLICY__KEEP_RECENT_TURNS", "9"),
                ("COMPACTD__LISTEN", "127.0.0.1:6000"),
                ("COMPACTD__POLICY__ROLES_NEVER_PRUNE", "[system]"),
                ("COMPACTD__POLICY__TARGET_RATIO", "0.5"),
                ("COMPACTD__POLICY__ENABLE__DROP", "false"),
                ("COMPACTD__POLICY__RETENTION", "{search: {keep_last: 2}}"),
                ("COMPACTD__DATA_DIR", "'/var/lib/compactd'"),
                ("UNRELATED", "x"),
            ]),
        )
        .unwrap();
        assert_eq!(s.default_model, "gpt-4.1");
        assert_eq!(s.policy.trigger_ratio, 0.8);
        assert_eq!(s.policy.target_ratio, 0.5);
        assert_eq!(s.policy.keep_recent_turns, 9);
        assert_eq!(s.listen.port(), 6000);
        assert_eq!(s.policy.roles_never_prune.len(), 1);
        assert!(!s.policy.enable.drop);
        assert_eq!(s.policy.retention["search"].keep_last, Some(2));
        assert_eq!(s.data_dir, std::path::PathBuf::from("/var/lib/compactd"));
        // Integers are accepted where a ratio is expected.
        let s = load(None, env(&[("COMPACTD__POLICY__TRIGGER_RATIO", "1")])).unwrap();
        assert_eq!(s.policy.trigger_ratio, 1.0);
    }

    #[test]
    fn unknown_fields_are_named_with_their_origin() {
        let f = file("policy:\n  trigerr_ratio: 0.8\n");
        let e = load(Some(f.path()), Vec::new()).unwrap_err().to_string();
        assert!(e.contains("policy.trigerr_ratio"), "{e}");
        assert!(e.contains(&f.path().display().to_string()), "{e}");
        let e = load(None, env(&[("COMPACTD__POLICY__NOPE", "1")]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("COMPACTD__POLICY__NOPE") && e.contains("nope"),
            "{e}"
        );
        let e = load(None, env(&[("COMPACTD__POLICY____X", "1")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("empty path segment"), "{e}");
        let e = load(None, env(&[("COMPACTD__LISTEN__PORT", "1")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("COMPACTD__LISTEN"), "{e}");
    }

    #[test]
    fn out_of_range_values_give_the_field_path() {
        let f = file("auth:\n  dev: true\npolicy:\n  trigger_ratio: 1.5\n");
        let s = load(Some(f.path()), Vec::new()).unwrap();
        let e = check(&s).unwrap_err().to_string();
        assert!(e.contains("policy.trigger_ratio"), "{e}");
    }

    #[test]
    fn mistyped_values_are_named() {
        let f = file("policy:\n  keep_recent_turns: many\n");
        let e = load(Some(f.path()), Vec::new()).unwrap_err().to_string();
        assert!(e.contains("policy.keep_recent_turns"), "{e}");
        let e = load(None, env(&[("COMPACTD__MAX_MESSAGE_BYTES", "lots")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("COMPACTD__MAX_MESSAGE_BYTES"), "{e}");
    }

    #[test]
    fn files_that_are_not_config_are_refused() {
        let e = load(Some(Path::new("/nonexistent/compactd.yaml")), Vec::new()).unwrap_err();
        assert!(matches!(e, ConfigError::Read { .. }), "{e}");
        let e = load(Some(file("policy: [\n").path()), Vec::new())
            .unwrap_err()
            .to_string();
        assert!(!e.is_empty());
        let e = load(Some(file("just a string\n").path()), Vec::new())
            .unwrap_err()
            .to_string();
        assert!(!e.is_empty());
    }

    #[test]
    fn a_version_zero_file_loads_with_its_deprecations_named() {
        let f = file(
            "version: 0\nmodel: gpt-4\nmax_context_tokens: 128000\npolicy:\n  trigger_pct: 0.9\n  hard_cap_buffer: 1500\n  keep_recent_turns: 5\n  roles_never_prune: [system, developer]\n  protected_flag: protected\n  strategy: task_state\nrehydration_cooldown_turns: 3\n",
        );
        let s = load(Some(f.path()), Vec::new()).unwrap();
        assert_eq!(s.default_model, "gpt-4");
        assert_eq!(s.default_max_input_tokens, 128_000);
        assert_eq!(s.policy.trigger_ratio, 0.9);
        assert_eq!(s.policy.safety_buffer_tokens, 1500);
        assert_eq!(s.policy.keep_recent_turns, 5);
        assert_eq!(
            s.policy.summary_style,
            Some(crate::summarize::llm::Style::TaskState)
        );
        assert_eq!(s.auto_rehydrate.cooldown_turns, 3);
        let origin = f.path().display().to_string();
        assert!(s.deprecations.iter().all(|d| d.starts_with(&origin)));
        assert!(s.deprecations.iter().any(
            |d| d.ends_with("policy.trigger_pct is deprecated: it is now policy.trigger_ratio")
        ));
        // Printed in the current layout, it loads back the same, with no
        // deprecation left.
        let again = load(Some(file(&to_yaml(&s).unwrap()).path()), Vec::new()).unwrap();
        assert!(again.deprecations.is_empty());
        assert_eq!(again.policy, s.policy);
        // A version this build does not know is refused, naming the file.
        let f = file("version: 3\npolicy:\n  trigger_ratio: 0.8\n");
        let e = load(Some(f.path()), Vec::new()).unwrap_err().to_string();
        assert!(
            e.contains("version: 3 is not") && e.contains(&f.path().display().to_string()),
            "{e}"
        );
        // Current-layout keys under version 0 are still current keys.
        let f = file("version: 0\npolicy:\n  trigger_ratio: 0.8\n");
        assert_eq!(
            load(Some(f.path()), Vec::new())
                .unwrap()
                .policy
                .trigger_ratio,
            0.8
        );
    }

    #[test]
    fn a_file_of_comments_only_is_an_empty_layout() {
        let f = file("# every setting commented out\n# policy:\n#   trigger_ratio: 0.8\n");
        let s = load(Some(f.path()), Vec::new()).unwrap();
        assert_eq!(s.policy, crate::reduce::Policy::default());
    }

    #[test]
    fn the_printed_yaml_loads_back_to_the_same_settings() {
        let f = file(
            "default_model: gpt-4.1\npolicy:\n  retention:\n    search:\n      keep_last: 2\n",
        );
        let s = load(Some(f.path()), Vec::new()).unwrap();
        let again = load(Some(file(&to_yaml(&s).unwrap()).path()), Vec::new()).unwrap();
        assert_eq!(again, s);
    }

    #[test]
    fn exposure_without_auth_is_refused() {
        let s = load(None, env(&[("COMPACTD__LISTEN", "0.0.0.0:50051")])).unwrap();
        let e = check(&s).unwrap_err().to_string();
        assert!(e.contains("without authentication"), "{e}");
    }
}
