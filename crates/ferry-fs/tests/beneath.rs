//! The file layer's promises, each against an entry planted where it writes.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use ferry_fs::{Dir, Meta};

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "ferry-fs-{tag}-{}-{:x}",
        std::process::id(),
        rand_u64()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(0u8)
}

fn victim(dir: &Path) -> PathBuf {
    let v = dir.join("victim");
    std::fs::write(&v, b"keep").unwrap();
    std::fs::set_permissions(&v, std::fs::Permissions::from_mode(0o600)).unwrap();
    v
}

fn kept(v: &Path) {
    assert_eq!(std::fs::read(v).unwrap(), b"keep");
    assert_eq!(std::fs::metadata(v).unwrap().mode() & 0o7777, 0o600);
}

#[test]
fn a_symlink_where_a_file_goes_is_replaced() {
    let d = scratch("file");
    let v = victim(&d);
    let t = d.join("t");
    std::fs::create_dir(&t).unwrap();
    std::os::unix::fs::symlink(&v, t.join("f")).unwrap();
    let dir = Dir::open_root(&t).unwrap();
    dir.write_file(b"f", b"new", 0o644, None).unwrap();
    kept(&v);
    let m = std::fs::symlink_metadata(t.join("f")).unwrap();
    assert!(m.is_file() && m.mode() & 0o7777 == 0o644);
    // Append-style: reading through a planted link is refused.
    std::fs::remove_file(t.join("f")).unwrap();
    std::os::unix::fs::symlink(&v, t.join("f")).unwrap();
    assert!(dir.read_file(b"f", 1 << 20).is_err());
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn a_symlink_where_a_directory_goes_is_replaced_and_never_entered() {
    let d = scratch("dir");
    let v = victim(&d);
    let elsewhere = d.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let t = d.join("t");
    std::fs::create_dir(&t).unwrap();
    std::os::unix::fs::symlink(&elsewhere, t.join("sub")).unwrap();
    let root = Dir::open_root(&t).unwrap();
    assert!(root.open_dir(b"sub").is_err(), "opened through a link");
    assert!(root.open_path(Path::new("sub")).is_err());
    let (sub, made) = root.make_dir(b"sub", true, false).unwrap();
    assert!(made);
    let m = std::fs::symlink_metadata(t.join("sub")).unwrap();
    assert!(m.is_dir() && m.mode() & 0o7777 == 0o700, "{:o}", m.mode());
    sub.write_file(b"x", b"in sub", 0o600, None).unwrap();
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    kept(&v);
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn temp_files_are_private_and_bad_names_refused() {
    let d = scratch("temp");
    let root = Dir::open_root(&d).unwrap();
    let t = root.create_temp().unwrap();
    let m = t.file.metadata().unwrap();
    assert_eq!(m.mode() & 0o7777, 0o600);
    // Replaced under its name: not opened again.
    let name = std::ffi::OsStr::from_bytes(t.name.to_bytes());
    std::fs::remove_file(d.join(name)).unwrap();
    std::fs::write(d.join(name), b"planted").unwrap();
    assert!(root.open_temp(&t.name, t.id).is_err());
    for bad in [&b".."[..], b"a/b", b"", b"."] {
        assert!(root.write_file(bad, b"x", 0o600, None).is_err(), "{bad:?}");
        assert!(root.make_dir(bad, true, false).is_err(), "{bad:?}");
    }
    let m = Meta {
        mode: 0o640,
        mtime_ns: 1_000_000_123,
        ..Meta::default()
    };
    let t = root.create_temp().unwrap();
    root.finish(&t.file, &t.name, b"done", &m, false)
        .unwrap()
        .unwrap();
    let md = std::fs::metadata(d.join("done")).unwrap();
    assert_eq!(
        (md.mode() & 0o7777, md.mtime(), md.mtime_nsec()),
        (0o640, 1, 123)
    );
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn a_directory_others_may_write_is_not_private() {
    let d = scratch("private");
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
    assert!(Dir::open_root(&d).unwrap().check_private(&d).is_err());
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
    Dir::open_root(&d).unwrap().check_private(&d).unwrap();
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn remove_tree_removes_links_never_what_they_point_to() {
    let d = scratch("rmtree");
    let outside = d.join("outside");
    std::fs::create_dir(&outside).unwrap();
    let v = victim(&outside);
    let t = d.join("target");
    std::fs::create_dir_all(t.join("x/y")).unwrap();
    std::fs::write(t.join("x/y/f"), b"gone").unwrap();
    std::os::unix::fs::symlink(&outside, t.join("x/dirlink")).unwrap();
    std::os::unix::fs::symlink(&v, t.join("x/y/filelink")).unwrap();
    std::os::unix::fs::symlink(&outside, t.join("toplink")).unwrap();
    let root = Dir::open_root(&t).unwrap();
    assert_eq!(root.entries().unwrap().len(), 2);
    root.remove_tree(b"x").unwrap();
    root.remove_tree(b"toplink").unwrap();
    root.remove_tree(b"absent").unwrap();
    assert!(root.entries().unwrap().is_empty());
    kept(&v);
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 1);
    assert!(root.lstat(b"x").unwrap().is_none());
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn a_tree_planted_deeper_than_the_bound_is_refused_not_walked_to_the_end() {
    use ferry_fs::MAX_DEPTH;
    let d = scratch("deep");
    let t = d.join("target");
    let deep: std::path::PathBuf = std::iter::repeat_n("d", MAX_DEPTH + 100).collect();
    std::fs::create_dir_all(t.join(&deep)).unwrap();
    std::fs::write(t.join(&deep).join("f"), b"x").unwrap();
    let root = Dir::open_root(&t).unwrap();
    let e = root.remove_tree(b"d").unwrap_err();
    assert!(e.to_string().contains("directories deep"), "{e}");
    assert!(root.lstat(b"d").unwrap().is_some());
    // Within the bound it goes, from the middle and then from the top.
    let half: std::path::PathBuf = std::iter::repeat_n("d", MAX_DEPTH / 2).collect();
    root.open_path(&half).unwrap().remove_tree(b"d").unwrap();
    root.remove_tree(b"d").unwrap();
    assert!(root.entries().unwrap().is_empty());
    std::fs::remove_dir_all(d).unwrap();
}

/// A directory a restore made is removed through its parent only while the name there is
/// still that directory: a directory or file swapped in under the name stays.
#[test]
fn a_made_directory_is_removed_only_while_its_name_is_still_it() {
    let d = scratch("rmdir");
    let parent = Dir::open_root(&d).unwrap();
    let (made, fresh) = parent.make_dir(b"place", false, false).unwrap();
    assert!(fresh);
    // Swapped: the made directory moved away, another empty one planted under its name.
    std::fs::rename(d.join("place"), d.join("moved")).unwrap();
    std::fs::create_dir(d.join("place")).unwrap();
    assert!(!parent.remove_dir_if_same(b"place", &made).unwrap());
    assert!(d.join("place").is_dir());
    // A file under the name stays too.
    std::fs::remove_dir(d.join("place")).unwrap();
    std::fs::write(d.join("place"), b"keep").unwrap();
    assert!(!parent.remove_dir_if_same(b"place", &made).unwrap());
    assert_eq!(std::fs::read(d.join("place")).unwrap(), b"keep");
    // A link to it under the name stays, and so does the directory.
    std::fs::remove_file(d.join("place")).unwrap();
    std::os::unix::fs::symlink(d.join("moved"), d.join("place")).unwrap();
    assert!(!parent.remove_dir_if_same(b"place", &made).unwrap());
    assert!(d.join("place").is_symlink() && d.join("moved").is_dir());
    // Not empty: an error, nothing removed.
    std::fs::remove_file(d.join("place")).unwrap();
    std::fs::rename(d.join("moved"), d.join("place")).unwrap();
    std::fs::write(d.join("place/f"), b"x").unwrap();
    assert!(parent.remove_dir_if_same(b"place", &made).is_err());
    std::fs::remove_file(d.join("place/f")).unwrap();
    std::fs::rename(d.join("place"), d.join("moved")).unwrap();
    std::fs::write(d.join("place"), b"keep").unwrap();
    // Back under its name, it goes.
    std::fs::remove_file(d.join("place")).unwrap();
    std::fs::rename(d.join("moved"), d.join("place")).unwrap();
    assert!(parent.remove_dir_if_same(b"place", &made).unwrap());
    assert!(!d.join("place").exists());
    std::fs::remove_dir_all(&d).unwrap();
}
