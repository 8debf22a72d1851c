//! Audit of an archive's objects: what `wal-status` and `check` report about them.
//!
//! In a repository the archive is encrypted, so an object whose header says plaintext was
//! put there by whoever can write the store (a downgrade `wal-fetch` refuses). Reading the
//! 52-byte headers finds such objects without the password; with the key and `read_data`,
//! every object is read, decrypted and checked against its keyed checksum.

use futures::StreamExt;

use crate::archive::Archive;
use crate::envelope::Cipher;
use crate::name::WalName;

/// Objects read at once: each is a small ranged read (or one WAL file).
const READ_AHEAD: usize = 32;

/// One object the audit found wrong.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Finding {
    /// The WAL file's name.
    pub name: String,
    /// What is wrong, in one line.
    pub problem: String,
}

/// Audits `names` in `archive`. `encrypted`: the archive lies in a repository, so every
/// object must be encrypted. `read_data`: read whole objects and authenticate them (needs
/// the archive's key when `encrypted`); otherwise only headers are read.
pub async fn audit(
    archive: &Archive, names: &[WalName], encrypted: bool, read_data: bool,
) -> Vec<Finding> {
    let mut found: Vec<Finding> = futures::stream::iter(names)
        .map(|name| async move {
            let problem = if read_data {
                archive.fetch(name).await.err().map(|e| e.to_string())
            } else {
                match archive.peek(name).await {
                    Ok(h) if encrypted && h.cipher == Cipher::None => Some(format!(
                        "{}/wal/{}: plaintext in an encrypted repository's archive \
                         (planted; wal-fetch refuses it)",
                        archive.url(),
                        name.key()
                    )),
                    Ok(_) => None,
                    Err(e) => Some(e.to_string()),
                }
            };
            problem.map(|problem| Finding {
                name: name.to_string(),
                problem,
            })
        })
        .buffer_unordered(READ_AHEAD)
        .filter_map(|f| async move { f })
        .collect()
        .await;
    found.sort_by(|a, b| a.name.cmp(&b.name));
    found
}
