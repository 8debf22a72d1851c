//! The crate graph as a rule that fails the build's tests when broken: no library above the
//! engine reaches a raw store, and the binary opens stores in one place only.
//!
//! A raw store skips the engine's scheduling, retries and the tuner's accounting: a
//! `store.delete(..)` that fails once on a flaky link then fails the whole prune. Above
//! `ferry-transfer` the store is a `ferry_transfer::Remote`, whose every call goes through
//! the engine.

use std::path::{Path, PathBuf};

/// Libraries that sit above the engine.
const ABOVE_ENGINE: &[&str] = &[
    "ferry-repo",
    "ferry-wal",
    "ferry-pg",
    "ferry-fs",
    "ferry-mount",
];
/// Crates that hold raw stores.
const STORE_CRATES: &[&str] = &["ferry-store", "ferry-rados"];
/// Names that only code holding a raw store uses.
const RAW: &[&str] = &[
    "SharedStore",
    "dyn Store",
    "ferry_store::Store",
    "LocalStore",
    "CloudStore",
    "ferry_rados::",
];

fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The names in a manifest's `[dependencies]` (not dev- or build-dependencies).
fn dependencies(manifest: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            inside = line == "[dependencies]";
            continue;
        }
        if inside {
            if let Some((name, _)) = line.split_once(['=', '.']) {
                out.push(name.trim().to_string());
            }
        }
    }
    out
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `file:line: text` for each line of the sources under `dir` that names a raw store,
/// outside comments.
fn raw_uses(dir: &Path, allowed: &[&str]) -> Vec<String> {
    let mut files = Vec::new();
    sources(dir, &mut files);
    let mut found = Vec::new();
    for f in files {
        if allowed.iter().any(|a| f.ends_with(a)) {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if RAW.iter().any(|r| code.contains(r)) {
                found.push(format!("{}:{}: {}", f.display(), n + 1, line.trim()));
            }
        }
    }
    found
}

#[test]
fn libraries_above_the_engine_do_not_depend_on_a_store_crate() {
    let mut bad = Vec::new();
    for c in ABOVE_ENGINE {
        let manifest = std::fs::read_to_string(crates_dir().join(c).join("Cargo.toml")).unwrap();
        let deps = dependencies(&manifest);
        assert!(
            !deps.is_empty() || *c == "ferry-fs",
            "{c}: no dependencies read"
        );
        for s in STORE_CRATES {
            if deps.iter().any(|d| d == s) {
                bad.push(format!("{c} depends on {s}"));
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn libraries_above_the_engine_name_no_raw_store() {
    let mut bad = Vec::new();
    for c in ABOVE_ENGINE {
        bad.extend(raw_uses(&crates_dir().join(c).join("src"), &[]));
    }
    assert!(
        bad.is_empty(),
        "raw store above the engine:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_binary_opens_stores_in_one_place() {
    let src = crates_dir().join("ferry").join("src");
    let bad = raw_uses(&src, &["places.rs"]);
    assert!(
        bad.is_empty(),
        "raw store outside places.rs:\n{}",
        bad.join("\n")
    );
    // And places.rs does hold them: the check looks at the right files.
    assert!(!raw_uses(&src, &[]).is_empty());
}

#[test]
fn the_check_sees_a_raw_store() {
    let dir = std::env::temp_dir().join(format!("ferry-layering-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("bad.rs"),
        "// SharedStore in a comment is fine\nfn f(s: &ferry_transfer::SharedStore) {}\n",
    )
    .unwrap();
    let found = raw_uses(&dir, &[]);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].ends_with("bad.rs:2: fn f(s: &ferry_transfer::SharedStore) {}"));
    let deps = dependencies("[package]\nname = \"x\"\n[dependencies]\nferry-store.workspace = true\nfoo = \"1\"\n[dev-dependencies]\nbar = \"1\"\n");
    assert_eq!(deps, ["ferry-store", "foo"]);
}
