//! WAL commands refuse bad input with one clear line and a non-zero exit, and ack nothing:
//! a missing file, an unusable spool, another cluster's WAL, a file under the wrong name, a
//! corrupted archived segment; the queue limit keeps WAL by default and drops it only with a
//! recorded gap.

mod walkit;

use std::path::Path;
use std::time::{Duration, Instant};

use walkit::{stderr, Repo, Rig};

fn fails_with(out: &std::process::Output, needle: &str) {
    let err = stderr(out);
    assert!(!out.status.success(), "succeeded; stderr: {err}");
    assert!(err.contains(needle), "stderr lacks '{needle}': {err}");
    assert_eq!(err.trim().lines().count(), 1, "not one line: {err}");
}

fn files_under(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |d| {
        d.flatten()
            .map(|e| {
                if e.path().is_dir() {
                    files_under(&e.path())
                } else {
                    1
                }
            })
            .sum()
    })
}

#[test]
fn bad_wal_input_is_refused() {
    let Some(a) = Rig::new(&Repo::Local, false, &[]) else {
        return;
    };
    a.load(20);
    let seg = a.settle();
    let repo = Path::new(&a.repo_url);
    let before = files_under(repo);

    // A file that does not exist.
    let out = a.ferry(
        &["wal-push", "/nonexistent/pg_wal/000000010000000000000042"],
        &[],
    );
    fails_with(&out, "No such file");

    // Not a WAL file name.
    let out = a.ferry(
        &["wal-push", a.pg.dir().join("ferry.sh").to_str().unwrap()],
        &[],
    );
    fails_with(&out, "not a WAL file name");

    // A segment's content under another segment's name (a recycled file, say).
    let scratch = a.pg.make_dir("scratch");
    let wrong = scratch.join("0000000100000000000000A0");
    std::fs::copy(a.pg.pg_wal().join(&seg), &wrong).unwrap();
    a.pg.chown_to_pg(&wrong);
    fails_with(
        &a.ferry(&["wal-push", wrong.to_str().unwrap()], &[]),
        "not to this segment",
    );

    // A link or a FIFO under a segment's name (the cluster's owner writes pg_wal; ferry
    // may run as another user): nothing is read through it, nothing archived, nothing hangs.
    let secret = a.pg.dir().join("ferry-secret");
    std::fs::write(&secret, b"not WAL").unwrap();
    a.pg.chown_to_pg(&secret);
    let link = scratch.join("0000000100000000000000A1");
    std::os::unix::fs::symlink(&secret, &link).unwrap();
    fails_with(
        &a.ferry(&["wal-push", link.to_str().unwrap()], &[]),
        "symbolic links",
    );
    let fifo = scratch.join("0000000100000000000000A2");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0);
    fails_with(
        &a.ferry(&["wal-push", fifo.to_str().unwrap()], &[]),
        "not a regular file",
    );
    assert_eq!(files_under(repo), before, "the archive changed");
    for planted in [&link, &fifo, &secret] {
        std::fs::remove_file(planted).unwrap();
    }

    // A spool the cluster's user cannot write.
    let locked = a.pg.dir().join("root-only");
    std::fs::create_dir(&locked).unwrap();
    let seg_path = a.pg.pg_wal().join(&seg);
    let out = a.ferry(
        &["wal-push", seg_path.to_str().unwrap()],
        &[
            ("FERRY_WAL_ASYNC", "true"),
            ("FERRY_WAL_SPOOL", locked.to_str().unwrap()),
        ],
    );
    fails_with(&out, "spool");
    assert_eq!(files_under(&locked), 0);

    // Another cluster's WAL into this cluster's archive.
    let Some(b) = Rig::new(&Repo::Local, false, &[]) else {
        return;
    };
    b.load(2);
    let b_seg = b.settle();
    let b_path = b.pg.pg_wal().join(&b_seg);
    let out = b.ferry(
        &["wal-push", b_path.to_str().unwrap()],
        &[("FERRY_REPO", &a.repo_url)],
    );
    fails_with(&out, "belongs to PostgreSQL cluster");
    assert_eq!(files_under(repo), before, "the archive changed");

    // A corrupted archived segment is refused at fetch, and nothing is written.
    let key = format!("{}/wal/{}/{seg}", a.repo_url, &seg[..16]);
    let mut obj = std::fs::read(&key).unwrap();
    let mid = obj.len() / 2;
    obj[mid] ^= 0x01;
    std::fs::write(&key, &obj).unwrap();
    let dest = scratch.join("RECOVERYXLOG");
    let out = a.ferry(
        &["wal-fetch", &seg, dest.to_str().unwrap()],
        &[("FERRY_WAL_PREFETCH", "0")],
    );
    fails_with(&out, "corrupt");
    // Fatal to a recovery (above 125), not "not in the archive", which would end it here.
    assert_eq!(out.status.code(), Some(255), "{}", stderr(&out));
    assert!(!dest.exists(), "a corrupted segment was handed over");
    // A standby asks again later, and never promotes on its own: there, status 1.
    let standby = a.pg.dir().join("standby.signal");
    std::fs::write(&standby, b"").unwrap();
    let out = a.ferry(
        &["wal-fetch", &seg, dest.to_str().unwrap()],
        &[("FERRY_WAL_PREFETCH", "0")],
    );
    std::fs::remove_file(&standby).unwrap();
    fails_with(&out, "corrupt");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(
        files_under(&scratch),
        1,
        "leftovers: only the wrong-name copy may remain"
    );

    // A truncated archived copy is replaced by the next push of the segment.
    std::fs::write(&key, b"short").unwrap();
    let out = a.ferry(&["wal-push", seg_path.to_str().unwrap()], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = a.ferry(
        &["wal-fetch", &seg, dest.to_str().unwrap()],
        &[("FERRY_WAL_PREFETCH", "0")],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(ferry_testkit::same_file(&dest, &seg_path));
    std::fs::remove_file(&dest).unwrap();

    // archive_command run under setpriv keeps root's HOME, which the user cannot read:
    // that is no config of theirs, not an error.
    let out = a.ferry(&["wal-status"], &[("HOME", "/root")]);
    assert!(out.status.success(), "{}", stderr(&out));

    // A segment the archive lacks: PostgreSQL's end-of-archive signal.
    let out = a.ferry(
        &[
            "wal-fetch",
            "0000000100000000000000FF",
            dest.to_str().unwrap(),
        ],
        &[("FERRY_WAL_PREFETCH", "0")],
    );
    fails_with(&out, "is not in archive");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
}

/// A `pg_wal` with one segment PostgreSQL has queued, owned by the cluster's user.
fn queued_copy(rig: &Rig, seg: &str) -> std::path::PathBuf {
    let pg_wal = rig.pg.make_dir("fake/pg_wal");
    std::fs::create_dir(pg_wal.join("archive_status")).unwrap();
    std::fs::copy(rig.pg.pg_wal().join(seg), pg_wal.join(seg)).unwrap();
    std::fs::write(pg_wal.join(format!("archive_status/{seg}.ready")), "").unwrap();
    rig.pg.chown_to_pg(&rig.pg.dir().join("fake"));
    pg_wal.join(seg)
}

#[test]
fn queue_limit_keeps_wal_unless_told_to_drop() {
    let Some(rig) = Rig::new(&Repo::Local, false, &[]) else {
        return;
    };
    rig.load(2);
    let seg = rig.settle();
    // A second archive, empty: the copy below must not count as archived.
    let other = rig.pg.make_dir("other-repo");
    let path = queued_copy(&rig, &seg);
    let env = [
        ("FERRY_REPO", other.to_str().unwrap()),
        ("FERRY_WAL_ASYNC", "true"),
        ("FERRY_WAL_QUEUE_MAX", "1MiB"),
    ];
    let out = rig.ferry(&["wal-push", path.to_str().unwrap()], &env);
    fails_with(&out, "over queue-max");
    assert!(stderr(&out).contains("keeping"), "{}", stderr(&out));

    let mut drop = env.to_vec();
    drop.push(("FERRY_WAL_QUEUE_POLICY", "drop"));
    let out = rig.ferry(&["wal-push", path.to_str().unwrap()], &drop);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("WARNING"),
        "a drop must be loud: {}",
        stderr(&out)
    );

    // The gap reaches the archive, and wal-status reports it.
    let started = Instant::now();
    loop {
        let st = rig.ferry(&["wal-status", "--json"], &drop);
        assert!(st.status.success(), "{}", stderr(&st));
        let v: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
        if v["gaps"]
            .as_array()
            .is_some_and(|g| g.iter().any(|g| g["name"] == seg.as_str()))
        {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no gap recorded: {v}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let human = rig.ferry(&["wal-status"], &drop);
    assert!(String::from_utf8_lossy(&human.stdout).contains("GAP"));
}

/// An ack left in the spool for another file of the same name (a re-created cluster, say)
/// is not taken for this file's: the file is pushed, and only then acknowledged.
#[test]
fn a_stale_ack_is_not_trusted() {
    let Some(rig) = Rig::new(&Repo::Local, false, &[]) else {
        return;
    };
    rig.load(2);
    let seg = rig.settle();
    let other = rig.pg.make_dir("fresh-repo");
    let spool = rig.pg.make_dir("fresh-spool");
    let path = queued_copy(&rig, &seg);
    std::fs::create_dir_all(spool.join("out")).unwrap();
    std::fs::write(spool.join(format!("out/{seg}.ok")), "0000 1 2 3").unwrap();
    rig.pg.chown_to_pg(&spool);
    let env = [
        ("FERRY_REPO", other.to_str().unwrap()),
        ("FERRY_WAL_ASYNC", "true"),
        ("FERRY_WAL_SPOOL", spool.to_str().unwrap()),
    ];
    let out = rig.ferry(&["wal-push", path.to_str().unwrap()], &env);
    assert!(out.status.success(), "{}", stderr(&out));
    let stored = other.join("wal").join(&seg[..16]).join(&seg);
    assert!(stored.exists(), "acknowledged without being archived");
}
