//! Trees: one directory's entries with their metadata, stored as a blob. A snapshot points at
//! the root tree; a directory's node points at its subtree.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use serde::{Deserialize, Serialize};

use crate::id::Id;

/// What kind of file a node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// A named pipe.
    Fifo,
    /// A character device.
    Chardev,
    /// A block device.
    Blockdev,
    /// A socket (recorded, not restored).
    Socket,
}

/// One directory entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    /// File name, hex-encoded when it is not UTF-8 (see [`Node::name_bytes`]).
    pub name: String,
    /// True when `name` is hex.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub name_hex: bool,
    /// Kind.
    pub kind: NodeKind,
    /// Permission bits (and setuid/setgid/sticky).
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Modification time, ns since the epoch.
    pub mtime: i64,
    /// Status change time, ns: with size, mtime and inode, proves a file unchanged.
    pub ctime: i64,
    /// Inode: change detection, and hard links within one snapshot.
    pub inode: u64,
    /// Device of the inode.
    pub dev: u64,
    /// Link count (>1: a hard link).
    pub nlink: u64,
    /// Size in bytes (files).
    #[serde(default)]
    pub size: u64,
    /// Content blobs, in order (files).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub content: Vec<Id>,
    /// The directory's tree (dirs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subtree: Option<Id>,
    /// Link target, hex (symlinks): targets need not be UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Device number (devices).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rdev: Option<u64>,
    /// Extended attributes: name and value, hex.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub xattrs: Vec<(String, String)>,
}

impl Node {
    /// Encodes a file name.
    pub fn set_name(&mut self, name: &OsStr) {
        match name.to_str() {
            Some(s) => {
                self.name = s.to_string();
                self.name_hex = false;
            }
            None => {
                self.name = hex::encode(name.as_bytes());
                self.name_hex = true;
            }
        }
    }

    /// The file name's bytes.
    pub fn name_bytes(&self) -> Vec<u8> {
        if self.name_hex {
            hex::decode(&self.name).unwrap_or_default()
        } else {
            self.name.as_bytes().to_vec()
        }
    }

    /// The file name's bytes, refused unless it is one directory entry's name (not empty,
    /// `.`, `..`, nor holding `/` or NUL): whoever wrote the snapshot chose it.
    pub fn checked_name(&self) -> Result<Vec<u8>, String> {
        let name = if self.name_hex {
            hex::decode(&self.name).map_err(|_| "name is not hex".to_string())?
        } else {
            self.name.as_bytes().to_vec()
        };
        ferry_fs::check_name(&name).map_err(|e| e.to_string())?;
        Ok(name)
    }

    /// True when a file with this node's metadata may keep `older`'s content unread:
    /// same size, mtime, ctime and inode. ctime moves on every write and on every metadata
    /// change, and cannot be set back by tools that restore mtime.
    pub fn unchanged_since(&self, older: &Node) -> bool {
        self.kind == NodeKind::File
            && older.kind == NodeKind::File
            && self.size == older.size
            && self.mtime == older.mtime
            && self.ctime == older.ctime
            && self.inode == older.inode
            && self.dev == older.dev
    }
}

/// A directory's entries, sorted by name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tree {
    /// The entries.
    pub nodes: Vec<Node>,
}

impl Tree {
    /// Parses a tree blob's plaintext; `what` names it in the error.
    pub fn decode(b: &[u8], what: &str) -> ferry_transfer::Result<Tree> {
        let mut t: Tree = serde_json::from_slice(b)
            .map_err(|e| ferry_transfer::Error::Checksum(format!("{what}: {e}")))?;
        // Decoded vectors grow by doubling: a file's one-chunk list keeps room for four ids
        // and a directory's node list up to twice its length. A restore holds every node of
        // a snapshot: 100k files carried 10 MB of such slack.
        t.nodes.shrink_to_fit();
        for n in &mut t.nodes {
            n.content.shrink_to_fit();
        }
        // One name, one entry: a listing naming `x` twice (or `x` and its hex, `78`), a link
        // then a directory, would have a tar of it write the directory's files through the
        // link wherever it points, and a restore decide between them by chance.
        let mut names: Vec<Vec<u8>> = t.nodes.iter().map(Node::name_bytes).collect();
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(ferry_transfer::Error::Checksum(format!(
                "{what}: two entries named {:?}",
                String::from_utf8_lossy(&w[0])
            )));
        }
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_that_names_one_entry_twice_is_refused() {
        let one = |name: &str, hex: bool| {
            serde_json::json!({"name": name, "name_hex": hex, "kind": "file", "mode": 0o644,
                "uid": 0, "gid": 0, "mtime": 0, "ctime": 0, "inode": 0, "dev": 0, "nlink": 1})
        };
        let tree = |nodes: Vec<serde_json::Value>| {
            serde_json::to_vec(&serde_json::json!({ "nodes": nodes })).unwrap()
        };
        assert!(Tree::decode(&tree(vec![one("x", false), one("y", false)]), "t").is_ok());
        for twice in [
            vec![one("x", false), one("x", false)],
            vec![one("x", false), one("78", true)],
        ] {
            let e = Tree::decode(&tree(twice), "t").unwrap_err();
            assert!(e.to_string().contains("two entries named \"x\""), "{e}");
        }
    }
}
