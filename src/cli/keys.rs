//! `compactd keys …`: the embedded keyring that encrypts artifacts.

use std::path::PathBuf;

use compactd::store::envelope::LocalKeyring;
use compactd::store::KEYRING_FILE;

use super::Failure;

/// `compactd keys …`.
#[derive(clap::Subcommand)]
pub enum KeysCommand {
    /// Adds a master key and makes it current; older keys stay to decrypt
    /// what they encrypted. A running server picks the new key up on restart.
    Rotate {
        /// The data directory whose keyring (`keys/keyring.json`) to rotate.
        #[arg(long, default_value = "compactd-data")]
        data_dir: PathBuf,
    },
    /// Prints the id of the current master key.
    Current {
        /// The data directory.
        #[arg(long, default_value = "compactd-data")]
        data_dir: PathBuf,
    },
}

/// Runs the subcommand.
pub fn run(cmd: &KeysCommand) -> Result<String, Failure> {
    match cmd {
        KeysCommand::Rotate { data_dir } => open(data_dir)?.rotate().map_err(Failure::other),
        KeysCommand::Current { data_dir } => Ok(open(data_dir)?.current_key_id()),
    }
}

/// Opens an existing keyring; never creates one in the wrong directory.
fn open(data_dir: &std::path::Path) -> Result<LocalKeyring, Failure> {
    let path = data_dir.join(KEYRING_FILE);
    if !path.is_file() {
        return Err(Failure::bad_input(format!(
            "no keyring at {} (it is created when the service first starts there)",
            path.display()
        )));
    }
    LocalKeyring::open_or_create(&path).map_err(Failure::other)
}
