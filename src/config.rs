//! Configuration file (YAML). Validated once, with errors that give the field path.

use std::path::Path;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::reduce::Policy;

/// The configuration shared by the offline CLI and the service.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Model whose tokenizer and limit apply when a request does not say.
    pub model: String,
    /// Input limit when a request does not say.
    pub max_input_tokens: u32,
    /// Compaction policy.
    pub policy: Policy,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            model: "gpt-4o".into(),
            max_input_tokens: 128_000,
            policy: Policy::default(),
        }
    }
}

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
    /// YAML syntax or an unknown/mistyped field.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// serde_yaml's message (names the field and line).
        message: String,
    },
    /// A value out of range.
    #[error("{0}")]
    Invalid(String),
}

impl Config {
    /// Reads and validates a YAML file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let cfg: Config = serde_yaml::from_str(&text).map_err(|e| ConfigError::Parse {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks every value.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.model.is_empty() {
            return Err(ConfigError::Invalid("model must not be empty".into()));
        }
        if self.max_input_tokens == 0 {
            return Err(ConfigError::Invalid(
                "max_input_tokens must be at least 1".into(),
            ));
        }
        self.policy
            .validate()
            .map_err(|e| ConfigError::Invalid(e.to_string()))
    }
}
