//! rados://pool/name on the one-node Ceph of `scripts/services up ceph` (the default `rados`
//! feature): `ferry cp` round trips checked byte for byte against `rados --striper`
//! in both directions, a stdin stream, 1 GiB, listing and deletion, a piece changed behind
//! ferry's back, an OSD killed mid-write,
//! and a backup repository and a WAL archive living in a pool.
#![cfg(feature = "rados")]

mod common;
mod repokit;
mod walkit;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{RwLock, RwLockReadGuard};

use common::{s, temp_dir};
use ferry_testkit::ceph::{ceph, Ceph};
use ferry_testkit::{random_file, same_file, unique};

const MIB: u64 = 1 << 20;

/// Tests share the cluster; the one that kills its OSD runs alone.
static OSD: RwLock<()> = RwLock::new(());

fn shared() -> RwLockReadGuard<'static, ()> {
    OSD.read().unwrap_or_else(|e| e.into_inner())
}

fn ferry(c: &Ceph, args: &[&str]) -> std::process::Output {
    common::ferry_env(args, &[("CEPH_CONF", &c.conf)], None)
}

fn ok(c: &Ceph, args: &[&str]) {
    let out = ferry(c, args);
    assert!(
        out.status.success(),
        "ferry {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn url(c: &Ceph, key: &str) -> String {
    format!("rados://{}/{key}", c.pool)
}

/// Up through ferry, down through `rados --striper get` and ferry, each compared with `src`.
fn both_ways(c: &Ceph, src: &Path, key: &str) {
    ok(c, &["-q", "cp", s(src), &url(c, key)]);
    let via_rados = src.with_extension("rados");
    c.rados(&["--striper", "get", key, s(&via_rados)]);
    assert!(
        same_file(src, &via_rados),
        "rados --striper get {key} differs"
    );
    let via_ferry = src.with_extension("ferry");
    ok(c, &["-q", "cp", &url(c, key), s(&via_ferry)]);
    assert!(same_file(src, &via_ferry), "ferry cp of {key} differs");
    for p in [via_rados, via_ferry] {
        std::fs::remove_file(p).unwrap();
    }
}

/// Every raw RADOS object whose name starts with `prefix`.
fn pieces(c: &Ceph, prefix: &str) -> Vec<String> {
    c.raw_names()
        .into_iter()
        .filter(|n| n.starts_with(prefix))
        .collect()
}

/// librados is opened by the first command that names a rados:// place, never at start:
/// linked, it cost every process 50 ms cold, 20 ms warm and 13 MiB (wal-push runs once a
/// segment). The dynamic loader's own log says what each process loaded.
#[test]
fn librados_is_opened_only_for_rados_places() {
    let Some(c) = ceph() else { return };
    let _osd = shared();
    let dir = temp_dir();
    let loaded = |args: &[&str]| {
        let out = common::ferry_env(args, &[("CEPH_CONF", &c.conf), ("LD_DEBUG", "libs")], None);
        assert!(
            out.status.success(),
            "ferry {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stderr).contains("librados.so")
    };
    assert!(!loaded(&["ls", s(&dir)]), "a local listing loaded librados");
    assert!(!loaded(&["--version"]), "--version loaded librados");
    assert!(
        loaded(&["ls", &url(&c, "")]),
        "the loader's log does not show librados"
    );
}

#[test]
fn sizes_around_stripe_and_object_boundaries_both_ways() {
    let Some(c) = ceph() else { return };
    let _osd = shared();
    let dir = temp_dir();
    let pre = unique("sizes");
    // Default layout: 4 MiB objects. Small objects take one piece, the rest several.
    for (i, size) in [
        0,
        1,
        MIB,
        4 * MIB - 1,
        4 * MIB,
        4 * MIB + 1,
        8 * MIB,
        13 * MIB + 7,
    ]
    .into_iter()
    .enumerate()
    {
        let src = dir.join(format!("f{size}"));
        random_file(&src, size, i as u64);
        both_ways(&c, &src, &format!("{pre}/f{size}"));
    }
    // Listing shows each striped object once, with its size; the pieces stay hidden.
    let out = ferry(&c, &["ls", &url(&c, &format!("{pre}/"))]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.lines().count(), 8, "{text}");
    assert!(text.contains("13631495"), "{text}");
    assert!(pieces(&c, &pre).len() > 8);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn reads_what_rados_striper_put_wrote() {
    let Some(c) = ceph() else { return };
    let _osd = shared();
    let dir = temp_dir();
    for (i, size) in [0, 1, 4 * MIB, 9 * MIB + 5].into_iter().enumerate() {
        let key = unique("striper-put");
        let src = dir.join(&key);
        random_file(&src, size, 40 + i as u64);
        c.rados(&["--striper", "put", &key, s(&src)]);
        let back = dir.join("back");
        ok(&c, &["-q", "cp", &url(&c, &key), s(&back)]);
        assert!(same_file(&src, &back), "{size} bytes differ");
        c.rados(&["--striper", "rm", &key]);
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn stdin_stream_of_unknown_length() {
    let Some(c) = ceph() else { return };
    let _osd = shared();
    let key = unique("stream");
    let data = ferry_testkit::random_bytes((21 * MIB + 3) as usize, 7);
    let out = common::ferry_env(
        &["-q", "cp", "-", &url(&c, &key)],
        &[("CEPH_CONF", &c.conf)],
        Some(&data),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = c.rados(&["--striper", "get", &key, "-"]).stdout;
    assert!(got == data, "rados --striper get of the stream differs");
    let out = ferry(&c, &["cp", &url(&c, &key), "-"]);
    assert!(out.stdout == data, "ferry cp to stdout differs");
    c.rados(&["--striper", "rm", &key]);
    assert!(
        pieces(&c, &key).is_empty(),
        "rados --striper rm left pieces of ferry's object"
    );
}

#[test]
fn one_gib_both_ways() {
    let Some(c) = ceph() else { return };
    let _osd = shared();
    let dir = temp_dir();
    let src = dir.join("big");
    random_file(&src, 1 << 30, 1);
    let key = unique("gib");
    both_ways(&c, &src, &key);
    assert_eq!(pieces(&c, &key).len(), 256);
    c.rados(&["--striper", "rm", &key]);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn osd_killed_mid_write_fails_clearly_shows_nothing_and_restarted_takes_the_write() {
    let Some(c) = ceph() else { return };
    let _alone = OSD.write().unwrap_or_else(|e| e.into_inner());
    let key = unique("killed");
    let data = ferry_testkit::random_bytes((40 * MIB) as usize, 5);
    // Short bounds, so that the failure comes in seconds rather than minutes.
    let env = [
        ("CEPH_CONF", c.conf.as_str()),
        ("FERRY_RADOS_OP_TIMEOUT", "3"),
        ("FERRY_TIMEOUT", "4s"),
        ("FERRY_RETRIES", "2"),
    ];
    let mut child = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(["-q", "cp", "-", &url(&c, &key)])
        .envs(env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = child.stdin.take().unwrap();
    pipe.write_all(&data[..(16 * MIB) as usize]).unwrap();
    // Kill the OSD once some pieces are stored: the write is under way.
    let mut seen = false;
    for _ in 0..600 {
        if !pieces(&c, &key).is_empty() {
            seen = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let down = c.kill_osd();
    let rest = data[(16 * MIB) as usize..].to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = pipe.write_all(&rest);
    });
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    drop(down);
    assert!(seen, "no piece of {key} appeared before the kill");
    common::fails_with(&out, "timed out");
    // Nothing under the final name, for ferry or for the striper.
    let ls = ferry(&c, &["ls", &url(&c, &key)]);
    assert!(
        ls.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&ls.stdout)
    );
    assert!(!c.try_rados(&["--striper", "stat", &key]).status.success());
    assert!(!c
        .try_rados(&["stat", &format!("{key}.0000000000000000")])
        .status
        .success());
    // The restarted OSD takes the same write, which reads back whole.
    let out = common::ferry_env(&["-q", "cp", "-", &url(&c, &key)], &env, Some(&data));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(c.rados(&["--striper", "get", &key, "-"]).stdout == data);
    c.rados(&["--striper", "rm", &key]);
}

#[test]
fn a_piece_changed_behind_its_digest_is_refused() {
    let Some(c) = ceph() else { return };
    let _osd = shared();
    let dir = temp_dir();
    let src = dir.join("src");
    random_file(&src, 12 * MIB, 7);
    let key = unique("rot");
    ok(&c, &["cp", s(&src), &url(&c, &key)]);
    // The digest recorded is BLAKE3 over the three 4 MiB blocks.
    let first = format!("{key}.0000000000000000");
    let digest = c.rados(&["getxattr", &first, "ferry_digest"]).stdout;
    let digest = String::from_utf8_lossy(&digest);
    assert!(
        digest.starts_with("b3:") && digest.ends_with("-3"),
        "{digest}"
    );
    // Another writer replaces the middle piece: what bit rot or a buggy tool would leave.
    let other = dir.join("other");
    random_file(&other, 4 * MIB, 8);
    c.rados(&["put", &format!("{key}.0000000000000001"), s(&other)]);
    let dst = dir.join("back");
    common::fails_with(
        &ferry(&c, &["cp", &url(&c, &key), s(&dst)]),
        "checksum mismatch",
    );
    assert!(!dst.exists(), "a corrupt download appeared under its name");
    c.rados(&["--striper", "rm", &key]);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn mkdir_creates_a_tagged_pool() {
    let Some(c) = ceph() else { return };
    let _osd = shared();
    let pool = unique("pool");
    ok(&c, &["mkdir", &format!("rados://{pool}")]);
    let ceph_cli = |args: &[&str]| {
        Command::new("ceph")
            .args(["-c", &c.conf])
            .args(args)
            .output()
            .expect("run the ceph CLI")
    };
    let app = ceph_cli(&["osd", "pool", "application", "get", &pool]);
    assert!(
        String::from_utf8_lossy(&app.stdout).contains("\"rados\""),
        "{app:?}"
    );
    let src = temp_dir().join("one");
    random_file(&src, 5 * MIB, 3);
    ok(&c, &["-q", "cp", s(&src), &format!("rados://{pool}/one")]);
    // Again: an existing pool is fine.
    ok(&c, &["mkdir", &format!("rados://{pool}")]);
    let rm = ceph_cli(&[
        "osd",
        "pool",
        "rm",
        &pool,
        &pool,
        "--yes-i-really-really-mean-it",
    ]);
    assert!(rm.status.success(), "{rm:?}");
    std::fs::remove_dir_all(src.parent().unwrap()).unwrap();
}

fn rados_repo(c: &Ceph, tag: &str) -> repokit::Repo {
    repokit::Repo {
        url: url(c, &unique(tag)),
        env: vec![
            ("FERRY_PASSWORD".into(), "correct horse".into()),
            ("CEPH_CONF".into(), c.conf.clone()),
            // Its own metadata cache, removed with the test process: never the user's.
            ("FERRY_CACHE_DIR".into(), s(&temp_dir()).into()),
        ],
    }
}

#[test]
fn backup_repository_round_trip() {
    let Some(c) = ceph() else { return };
    let _osd = shared();
    let repo = rados_repo(&c, "bk");
    let dir = repokit::scratch("bk-rados");
    let src = dir.join("src");
    repokit::corpus(&src, 12 << 20);
    repo.ok(&["init"]);
    repo.ok(&["backup", s(&src)]);
    let out = dir.join("out");
    repo.ok(&["restore", "latest", "--target", s(&out)]);
    repokit::assert_same_tree(&src, &out.join(src.strip_prefix("/").unwrap()));
    // A second backup of the same tree, then a full check of every byte stored.
    repo.ok(&["backup", s(&src)]);
    repo.ok(&["check", "--read-data"]);
    let listed = ferry(&c, &["ls", &format!("{}/", repo.url)]);
    assert!(listed.status.success() && !listed.stdout.is_empty());
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn wal_archive_sync_round_trip() {
    let Some(c) = ceph() else { return };
    let _osd = shared();
    let repo_url = url(&c, &unique("wal"));
    // The local repository walkit makes is overridden: the archive lives in the pool.
    let extra = [
        ("FERRY_REPO", repo_url.as_str()),
        ("CEPH_CONF", c.conf.as_str()),
    ];
    let Some(rig) = walkit::Rig::new(&walkit::Repo::Local, false, &extra) else {
        return;
    };
    rig.load(8);
    let copy = rig.recovery_copy(&[]);
    rig.load(40);
    rig.pg.sql("insert into t values (-1, 'last row')");
    rig.settle();
    let n = rig.verify_archive();
    assert!(n >= 3, "only {n} segments archived");
    let listed = ferry(&c, &["ls", &format!("{repo_url}/")]);
    assert!(!listed.stdout.is_empty(), "nothing in {repo_url}");
    let expect = rig.pg.sql("select count(*), sum(i) from t");
    copy.start();
    copy.wait_recovery_done(walkit::T)
        .unwrap_or_else(|e| panic!("recovery: {e}\n{}", walkit::tail(&copy.log())));
    assert_eq!(copy.sql("select count(*), sum(i) from t"), expect);
}
