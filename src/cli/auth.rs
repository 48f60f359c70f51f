//! `compactd auth hash-api-key`: the hash to configure for an API key.

use std::io::Read as _;

use super::Failure;

/// `compactd auth …`.
#[derive(clap::Subcommand)]
pub enum AuthCommand {
    /// Prints the SHA-256 of an API key, for `auth.api_keys[].sha256` (the key itself is never stored).
    HashApiKey {
        /// The key; read from stdin when omitted.
        key: Option<String>,
    },
}

/// Runs the subcommand.
pub fn run(cmd: &AuthCommand) -> Result<String, Failure> {
    match cmd {
        AuthCommand::HashApiKey { key } => hash_api_key(key.clone()),
    }
}

fn hash_api_key(key: Option<String>) -> Result<String, Failure> {
    let key = match key {
        Some(k) => k,
        None => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .map_err(|e| Failure::bad_input(format!("stdin: {e}")))?;
            s.trim_end_matches(['\r', '\n']).to_string()
        }
    };
    if key.is_empty() {
        return Err(Failure::bad_input("the key must not be empty"));
    }
    Ok(compactd::security::hash_api_key(&key))
}
