//! `compactd config check`: validates a config file as the service would.

use std::path::PathBuf;

use compactd::config;

use super::Failure;

/// `compactd config …`.
#[derive(clap::Subcommand)]
pub enum ConfigCommand {
    /// Loads FILE… merged in order (plus COMPACTD__* environment overrides),
    /// as `serve --config FILE…` would, validates it and prints the result.
    Check {
        /// YAML config files (a later file's values win).
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
}

/// Runs the subcommand.
pub fn run(cmd: &ConfigCommand) -> Result<String, Failure> {
    match cmd {
        ConfigCommand::Check { files } => check(files),
    }
}

fn check(files: &[PathBuf]) -> Result<String, Failure> {
    let settings = config::load_files(files, std::env::vars()).map_err(Failure::bad_input)?;
    config::check(&settings).map_err(Failure::bad_input)?;
    let yaml = config::to_yaml(&settings).map_err(Failure::other)?;
    let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    let mut warnings = String::new();
    for d in &settings.deprecations {
        eprintln!("deprecated: {d}");
        warnings.push_str(&format!("# DEPRECATED: {d}\n"));
    }
    for w in settings.protection_warnings() {
        eprintln!("warning: {w}");
        warnings.push_str(&format!("# WARNING: {w}\n"));
    }
    Ok(format!(
        "# {} {} valid; effective configuration:\n{warnings}{yaml}",
        names.join(" + "),
        if files.len() == 1 { "is" } else { "are" }
    ))
}
