//! `check --read-data-subset`: the groups n/t together read every pack exactly once, so the
//! one damaged pack is found by exactly one of them; a share reads at least one pack; a bad
//! subset is refused in one line. Local repository and MinIO.

mod repokit;

use std::path::{Path, PathBuf};

use repokit::{scratch, stderr, Repo};

/// A source of about 40 MB of incompressible data: several packs.
fn source(dir: &Path) -> PathBuf {
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    for i in 0..4 {
        let data = ferry_testkit::random_bytes(10 << 20, i);
        std::fs::write(src.join(format!("f{i}")), data).unwrap();
    }
    src
}

/// `check` with `flags`: (packs read, errors).
fn check(repo: &Repo, flags: &[&str]) -> (u64, usize) {
    let mut args = vec!["--json", "check"];
    args.extend(flags);
    let out = repo.run(&args, &[]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let errors = v["errors"].as_array().unwrap().len();
    assert_eq!(out.status.success(), errors == 0, "{v}");
    (v["packs_read"].as_u64().unwrap(), errors)
}

fn groups_cover_every_pack(repo: &Repo, dir: &Path) -> u64 {
    let src = source(dir);
    repo.ok(&["init"]);
    repo.ok(&["backup", src.to_str().unwrap()]);
    let (all, errors) = check(repo, &["--read-data"]);
    assert_eq!(errors, 0);
    assert!(all >= 3, "only {all} packs: the test needs several");
    let parts: u64 = (1..=3)
        .map(|n| check(repo, &["--read-data-subset", &format!("{n}/3")]).0)
        .sum();
    assert_eq!(
        parts, all,
        "the groups 1/3..3/3 did not read every pack once"
    );
    let (some, _) = check(repo, &["--read-data-subset", "1%"]);
    assert_eq!(some, 1, "1% of a few packs reads one");
    for bad in ["0/3", "4/3", "x/3", "0%", "101%", "half"] {
        let out = repo.run(&["check", "--read-data-subset", bad], &[]);
        let err = stderr(&out);
        assert!(!out.status.success(), "{bad} accepted");
        assert!(
            err.contains(&format!("--read-data-subset '{bad}'")),
            "{bad}: {err}"
        );
        assert_eq!(err.trim().lines().count(), 1, "{bad}: {err}");
    }
    all
}

#[test]
fn subsets_local_and_the_damaged_pack_is_found_once() {
    let dir = scratch("subset-local");
    let repo = Repo::local(&dir);
    groups_cover_every_pack(&repo, &dir);
    // Damage one data pack in place, size unchanged: only reading it finds it. The largest
    // pack is a data pack; a tree pack (read by every check to walk the snapshots) would be
    // found without --read-data, and read_dir's order is the packs' random ids.
    let data = dir.join("repo/data");
    let pack = std::fs::read_dir(&data)
        .unwrap()
        .flat_map(|sub| std::fs::read_dir(sub.unwrap().path()).unwrap())
        .map(|e| e.unwrap().path())
        .max_by_key(|p| std::fs::metadata(p).unwrap().len())
        .unwrap();
    let mut body = std::fs::read(&pack).unwrap();
    let mid = body.len() / 2;
    body[mid] ^= 0xff;
    std::fs::write(&pack, body).unwrap();
    assert_eq!(
        check(&repo, &[]).1,
        0,
        "without reading data the damage is unseen"
    );
    let found: Vec<usize> = (1..=3)
        .map(|n| check(&repo, &["--read-data-subset", &format!("{n}/3")]).1)
        .collect();
    assert_eq!(found.iter().filter(|&&e| e > 0).count(), 1, "{found:?}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn subsets_minio() {
    let Some(repo) = Repo::s3() else { return };
    let dir = scratch("subset-s3");
    groups_cover_every_pack(&repo, &dir);
    std::fs::remove_dir_all(dir).unwrap();
}
