//! `compactd keys …`: the embedded keyring that encrypts artifacts.

use std::path::PathBuf;

use compactd::store::envelope::LocalKeyring;
use compactd::store::KEYRING_FILE;

use super::Failure;

/// `compactd keys …`.
#[derive(clap::Subcommand)]
pub enum KeysCommand {
    /// Adds a master key (a shared one and one per tenant) and makes each
    /// current; older keys stay to decrypt what they encrypted. A running
    /// server uses the new keys from its next request.
    Rotate {
        /// The data directory whose keyring (`keys/keyring.json`) to rotate.
        #[arg(long, default_value = "compactd-data")]
        data_dir: PathBuf,
        /// The keyring file, when `keyring_file` is set (overrides --data-dir).
        #[arg(long)]
        keyring_file: Option<PathBuf>,
        /// Then re-wrap the data key of every plan and artifact under
        /// --data-dir with the new keys (content is not re-encrypted), so
        /// the old keys wrap nothing any more. Run it with the service
        /// stopped.
        #[arg(long)]
        rewrap: bool,
    },
    /// Deletes a tenant's master keys (crypto-shredding): its plans and
    /// artifacts can never be decrypted again, by anyone. A running server
    /// answers NOT_FOUND (reason KEY_DELETED) for them from its next
    /// request. There is no undo.
    Shred {
        /// The tenant whose keys to delete.
        #[arg(long)]
        tenant: String,
        /// The data directory.
        #[arg(long, default_value = "compactd-data")]
        data_dir: PathBuf,
        /// The keyring file, when `keyring_file` is set (overrides --data-dir).
        #[arg(long)]
        keyring_file: Option<PathBuf>,
    },
    /// Prints the id of the current master key.
    Current {
        /// The data directory.
        #[arg(long, default_value = "compactd-data")]
        data_dir: PathBuf,
        /// The keyring file, when `keyring_file` is set (overrides --data-dir).
        #[arg(long)]
        keyring_file: Option<PathBuf>,
    },
}

/// Runs the subcommand.
pub fn run(cmd: &KeysCommand) -> Result<String, Failure> {
    match cmd {
        KeysCommand::Rotate {
            data_dir,
            keyring_file,
            rewrap,
        } => {
            let ring = open(data_dir, keyring_file.as_deref())?;
            let id = ring.rotate().map_err(Failure::other)?;
            if !rewrap {
                return Ok(id);
            }
            let done = compactd::store::rewrap::rewrap_data_dir(data_dir, &ring)
                .map_err(Failure::other)?;
            Ok(format!(
                "{id}\nre-wrapped {} object(s); {} already current; {} left as they were (plaintext, changed meanwhile or shredded)",
                done.rewrapped, done.current, done.skipped
            ))
        }
        KeysCommand::Shred {
            tenant,
            data_dir,
            keyring_file,
        } => {
            let deleted = open(data_dir, keyring_file.as_deref())?
                .shred(tenant)
                .map_err(Failure::other)?;
            Ok(if deleted == 0 {
                format!("tenant {tenant:?} has no keys in this keyring; nothing deleted")
            } else {
                format!("deleted {deleted} key(s) of tenant {tenant:?}: its stored data can no longer be decrypted")
            })
        }
        KeysCommand::Current {
            data_dir,
            keyring_file,
        } => Ok(open(data_dir, keyring_file.as_deref())?.current_key_id()),
    }
}

/// Opens an existing keyring; never creates one in the wrong directory.
fn open(
    data_dir: &std::path::Path,
    keyring_file: Option<&std::path::Path>,
) -> Result<LocalKeyring, Failure> {
    let path =
        keyring_file.map_or_else(|| data_dir.join(KEYRING_FILE), std::path::Path::to_path_buf);
    if !path.is_file() {
        return Err(Failure::bad_input(format!(
            "no keyring at {} (it is created when the service first starts there)",
            path.display()
        )));
    }
    LocalKeyring::open_or_create(&path).map_err(Failure::other)
}
