//! `compactd config check`: validates a config file as the service would.

use std::path::{Path, PathBuf};

use compactd::config;

use super::Failure;

/// `compactd config …`.
#[derive(clap::Subcommand)]
pub enum ConfigCommand {
    /// Loads FILE (plus COMPACTD__* environment overrides), validates it and prints the result.
    Check {
        /// YAML config file.
        file: PathBuf,
    },
}

/// Runs the subcommand.
pub fn run(cmd: &ConfigCommand) -> Result<String, Failure> {
    match cmd {
        ConfigCommand::Check { file } => check(file),
    }
}

fn check(file: &Path) -> Result<String, Failure> {
    let settings = config::load(Some(file), std::env::vars()).map_err(Failure::bad_input)?;
    config::check(&settings).map_err(Failure::bad_input)?;
    let yaml = config::to_yaml(&settings).map_err(Failure::other)?;
    Ok(format!(
        "# {} is valid; effective configuration:\n{yaml}",
        file.display()
    ))
}
