//! What `ferry backup` leaves out, as restic users select it: patterns ([`crate::pattern`]),
//! case-insensitive ones, pattern files, directories marked by a file (`CACHEDIR.TAG`, a
//! `.nobackup`), files above a size, and other filesystems.
//!
//! Everything here reads only what the walk already read (the entry's metadata), except
//! the marker files: one `lstat` per directory and name, and for a header one read of a
//! regular file opened without following links. A marker that is a link marks nothing.

use std::io::Read;
use std::path::{Path, PathBuf};

use ferry_transfer::{Error, Result};

use crate::pattern::{Patterns, Source};
use crate::policy::{Pick, Policy};
use crate::tree::{Node, NodeKind};

/// The signature a `CACHEDIR.TAG` starts with (bford.info/cachedir).
pub const CACHEDIR_SIGNATURE: &str = "Signature: 8a477f597d28d172789f06886806bc55";

/// The choices, as given on the command line or in `ferry.toml`.
#[derive(Debug, Clone, Default)]
pub struct ExcludeOptions {
    /// `--exclude`: patterns.
    pub exclude: Vec<String>,
    /// `--iexclude`: patterns matched regardless of case.
    pub iexclude: Vec<String>,
    /// `--exclude-file`: files of patterns, one a line; `#` starts a comment.
    pub exclude_files: Vec<PathBuf>,
    /// `--iexclude-file`: the same, case-insensitive.
    pub iexclude_files: Vec<PathBuf>,
    /// `--exclude-if-present NAME[:HEADER]`: leave out a directory holding NAME (that
    /// starts with HEADER, when given).
    pub if_present: Vec<String>,
    /// `--exclude-caches`: directories holding a valid `CACHEDIR.TAG`.
    pub caches: bool,
    /// `--exclude-larger-than`: files above this many bytes.
    pub larger_than: Option<u64>,
    /// `--one-file-system`: do not cross into other filesystems; their mount points are kept
    /// as empty directories.
    pub one_file_system: bool,
}

/// A marker file that leaves its directory out.
#[derive(Debug, Clone)]
struct Marker {
    name: String,
    header: Option<Vec<u8>>,
}

/// The compiled choices for one backup, as its [`Policy`].
#[derive(Debug, Clone, Default)]
pub struct Exclude {
    patterns: Patterns,
    markers: Vec<Marker>,
    larger_than: Option<u64>,
    /// With `--one-file-system`: each source and its device.
    roots: Option<Vec<(PathBuf, u64)>>,
}

/// The patterns of a pattern file: one a line, blank lines and `#` comments left out,
/// surrounding blanks trimmed. An unreadable file is refused, named.
fn read_patterns(path: &Path, flag: &str) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::Invalid(format!("{flag} {}: {e}", path.display())))?;
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect())
}

impl Exclude {
    /// Compiles `o`; a bad pattern, an unreadable pattern file or an empty marker name is
    /// refused with one line naming it.
    pub fn new(o: &ExcludeOptions) -> Result<Exclude> {
        let mut patterns = Patterns::default();
        let plain = |flag| Source {
            flag,
            case_insensitive: false,
        };
        let icase = |flag| Source {
            flag,
            case_insensitive: true,
        };
        patterns.add(&o.exclude, plain("--exclude"))?;
        patterns.add(&o.iexclude, icase("--iexclude"))?;
        for f in &o.exclude_files {
            patterns.add(
                &read_patterns(f, "--exclude-file")?,
                plain("--exclude-file"),
            )?;
        }
        for f in &o.iexclude_files {
            patterns.add(
                &read_patterns(f, "--iexclude-file")?,
                icase("--iexclude-file"),
            )?;
        }
        let mut markers = Vec::new();
        for m in &o.if_present {
            let (name, header) = match m.split_once(':') {
                Some((n, h)) => (n, Some(h.as_bytes().to_vec())),
                None => (m.as_str(), None),
            };
            if name.is_empty() || name.contains('/') || name == "." || name == ".." {
                return Err(Error::Invalid(format!(
                    "--exclude-if-present '{m}': a file name is needed (NAME or NAME:HEADER)"
                )));
            }
            let name = name.to_string();
            markers.push(Marker { name, header });
        }
        if o.caches {
            markers.push(Marker {
                name: "CACHEDIR.TAG".into(),
                header: Some(CACHEDIR_SIGNATURE.as_bytes().to_vec()),
            });
        }
        let roots = o.one_file_system.then(Vec::new);
        let larger_than = o.larger_than;
        Ok(Exclude {
            patterns,
            markers,
            larger_than,
            roots,
        })
    }

    /// Records the backup's sources (absolute): `--one-file-system` stays on each one's
    /// device. A source that cannot be read is left to the walk to report.
    pub fn set_sources(&mut self, sources: &[PathBuf]) {
        use std::os::unix::fs::MetadataExt;
        if let Some(roots) = &mut self.roots {
            *roots = sources
                .iter()
                .filter_map(|p| Some((p.clone(), std::fs::symlink_metadata(p).ok()?.dev())))
                .collect();
        }
    }

    /// True when a marker in `dir` leaves it out.
    fn marked(&self, dir: &Path) -> bool {
        self.markers.iter().any(|m| {
            let path = dir.join(&m.name);
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                return false;
            };
            if meta.file_type().is_symlink() {
                return false;
            }
            let Some(want) = &m.header else {
                return true;
            };
            if !meta.is_file() {
                return false;
            }
            let mut got = vec![0; want.len()];
            let read = ferry_fs::open_regular(&path).and_then(|(mut f, _)| f.read_exact(&mut got));
            read.is_ok() && &got == want
        })
    }

    /// The device `path` must be on, when `--one-file-system` is set: its source's.
    fn device_of_source(&self, path: &Path) -> Option<u64> {
        let roots = self.roots.as_ref()?;
        roots
            .iter()
            .filter(|(root, _)| path.starts_with(root))
            .max_by_key(|(root, _)| root.as_os_str().len())
            .map(|(_, dev)| *dev)
    }
}

impl Policy for Exclude {
    fn pick(&self, path: &Path, node: &Node) -> Pick {
        let dir = node.kind == NodeKind::Dir;
        if self.patterns.matches(path, dir) {
            return Pick::Skip;
        }
        if node.kind == NodeKind::File && self.larger_than.is_some_and(|max| node.size > max) {
            return Pick::Skip;
        }
        if dir && self.marked(path) {
            return Pick::Skip;
        }
        if dir && self.device_of_source(path).is_some_and(|d| d != node.dev) {
            return Pick::Empty;
        }
        Pick::Take
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir_node() -> Node {
        let m = std::fs::symlink_metadata("/").unwrap();
        crate::walk::node_of(&m, Path::new("/"), std::ffi::OsStr::new("x")).unwrap()
    }

    #[test]
    fn a_marker_must_be_a_file_with_its_header_not_a_link_to_one() {
        let d = std::env::temp_dir().join(ferry_testkit::unique("excl"));
        let (real, linked, wrong) = (d.join("real"), d.join("linked"), d.join("wrong"));
        for p in [&real, &linked, &wrong] {
            std::fs::create_dir_all(p).unwrap();
        }
        let tag = format!("{CACHEDIR_SIGNATURE}\n");
        std::fs::write(real.join("CACHEDIR.TAG"), &tag).unwrap();
        std::fs::write(wrong.join("CACHEDIR.TAG"), "Signature: nope").unwrap();
        std::os::unix::fs::symlink(real.join("CACHEDIR.TAG"), linked.join("CACHEDIR.TAG")).unwrap();
        let x = Exclude::new(&ExcludeOptions {
            caches: true,
            ..Default::default()
        })
        .unwrap();
        let n = dir_node();
        assert_eq!(x.pick(&real, &n), Pick::Skip);
        assert_eq!(x.pick(&linked, &n), Pick::Take);
        assert_eq!(x.pick(&wrong, &n), Pick::Take);
        std::fs::remove_dir_all(d).unwrap();
    }
}
