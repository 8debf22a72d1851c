//! The WAL archive of an encrypted repository, with a real PostgreSQL 15: after `ferry init`,
//! no stored byte reveals the WAL (rows, a raw page), recovery through `wal-fetch` still gets
//! every row, a wrong password fails the push and PostgreSQL keeps the segment, and a
//! tampered, moved or foreign encrypted segment is refused at fetch.

mod walkit;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use walkit::{agents, ferry_script, s3_repo, stderr, tail, Repo, Rig, T};

/// In every row the test writes; never in the store.
const MARKER: &str = "ferry-crypt-marker-5f3a91";

fn fails_with(out: &Output, needle: &str) {
    let err = stderr(out);
    assert!(!out.status.success(), "succeeded; stderr: {err}");
    assert!(err.contains(needle), "stderr lacks '{needle}': {err}");
    assert_eq!(err.trim().lines().count(), 1, "not one line: {err}");
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        if e.path().is_dir() {
            files_under(&e.path(), out);
        } else {
            out.push(e.path());
        }
    }
}

/// Every object stored under the rig's repository, by name, read back whole.
fn stored_objects(rig: &Rig) -> Vec<(String, Vec<u8>)> {
    if !rig.repo_url.starts_with("s3://") {
        let mut files = Vec::new();
        files_under(Path::new(&rig.repo_url), &mut files);
        return files
            .into_iter()
            .map(|p| (p.display().to_string(), std::fs::read(&p).unwrap()))
            .collect();
    }
    let out = rig.ferry(&["ls", "--json", &format!("{}/", rig.repo_url)], &[]);
    assert!(out.status.success(), "ls: {}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|o| {
            let url = o["key"].as_str().unwrap().to_string();
            let got = rig.ferry(&["cp", &url, "-"], &[]);
            assert!(got.status.success(), "cp {url}: {}", stderr(&got));
            (url, got.stdout)
        })
        .collect()
}

/// Inserts `rows` rows holding [`MARKER`] and a row-specific md5 (text that compresses badly).
fn marker_load(rig: &Rig, rows: u64) {
    rig.pg.sql(&format!(
        "insert into t select g, '{MARKER} ' || md5(g::text) from generate_series(1, {rows}) g"
    ));
}

/// What must not be found in the store: the marker, one row's md5, and the 8 KiB WAL page
/// holding the marker's first occurrence, with the name of the segment it came from.
fn needles(rig: &Rig) -> (Vec<Vec<u8>>, String) {
    let md5 = rig.pg.sql("select md5('4242')");
    assert_eq!(md5.len(), 32, "{md5}");
    for seg in rig.archived() {
        let data = std::fs::read(rig.pg.pg_wal().join(&seg)).unwrap();
        if let Some(at) = data
            .windows(MARKER.len())
            .position(|w| w == MARKER.as_bytes())
        {
            let page = at / 8192 * 8192;
            let page = data[page..page + 8192].to_vec();
            return (vec![MARKER.into(), md5.into_bytes(), page], seg);
        }
    }
    panic!("no archived segment holds the marker: the load did not reach the WAL");
}

/// With the repository initialized first, the whole archive is ciphertext, and a base backup
/// still recovers every row through it.
fn no_plaintext_and_recovery(repo: Repo, async_: bool, level: &str) {
    let Some(rig) = Rig::encrypted(&repo, async_, &[("FERRY_WAL_COMPRESS_LEVEL", level)]) else {
        return;
    };
    rig.load(4);
    let copy = rig.recovery_copy(&[]);
    // After the base backup: these rows reach the copy only through the archive.
    marker_load(&rig, 300_000);
    rig.pg.sql("insert into t values (-1, 'last row')");
    rig.settle();
    let n = rig.verify_archive();
    assert!(n >= 3, "only {n} segments archived");
    let (needles, seg) = needles(&rig);

    let objects = stored_objects(&rig);
    let mut wal_objects = 0;
    for (name, body) in &objects {
        for (i, needle) in needles.iter().enumerate() {
            assert!(
                !contains(body, needle),
                "needle {i} ({} bytes) found in {name}",
                needle.len()
            );
        }
        let file = name.rsplit('/').next().unwrap();
        if name.contains("/wal/") && file != "cluster.json" {
            wal_objects += 1;
            assert_eq!(&body[..8], b"FERRYWAL", "{name}");
            assert_eq!(body[10], 1, "{name} is not encrypted");
        }
    }
    assert!(
        wal_objects >= n,
        "{wal_objects} WAL objects for {n} segments"
    );
    eprintln!(
        "{} objects ({wal_objects} WAL) searched for {} needles: none found",
        objects.len(),
        needles.len()
    );

    // The search can find them: the same segment pushed to a directory that is no
    // repository is stored in plaintext, and the needles show.
    let plain = rig.pg.make_dir("plain-repo");
    let path = rig.pg.pg_wal().join(&seg);
    let out = rig.ferry(
        &["wal-push", path.to_str().unwrap()],
        &[
            ("FERRY_REPO", plain.to_str().unwrap()),
            ("FERRY_WAL_ASYNC", "false"),
            // Given a password, ferry would refuse a place with no repository.
            ("FERRY_PASSWORD", ""),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let body = std::fs::read(plain.join("wal").join(&seg[..16]).join(&seg)).unwrap();
    assert_eq!(
        body[10], 0,
        "a directory without a repository is archived in plaintext"
    );
    // zstd Huffman-codes its literals: compressed, even plaintext hides the needles, and
    // the search proves something only uncompressed (the compressed runs still check that
    // every object is encrypted, and recover through decryption and decompression).
    if level == "0" {
        for (i, needle) in needles.iter().enumerate() {
            assert!(contains(&body, needle), "control: needle {i} not found");
        }
    }

    let expect = rig.pg.sql(&format!(
        "select count(*), sum(i), count(*) filter (where s like '{MARKER}%') from t"
    ));
    copy.start();
    copy.wait_recovery_done(T)
        .unwrap_or_else(|e| panic!("recovery: {e}\n{}", tail(&copy.log())));
    assert_eq!(
        copy.sql(&format!(
            "select count(*), sum(i), count(*) filter (where s like '{MARKER}%') from t"
        )),
        expect
    );
    assert!(
        copy.log().contains("restored log file"),
        "{}",
        tail(&copy.log())
    );
}

/// Uncompressed, so that without encryption the raw page would be found as it is.
#[test]
fn local_async_uncompressed_holds_no_plaintext() {
    no_plaintext_and_recovery(Repo::Local, true, "0");
}

#[test]
fn s3_sync_uncompressed_holds_no_plaintext() {
    let Some(repo) = s3_repo() else { return };
    no_plaintext_and_recovery(repo, false, "0");
}

/// The default: compressed, then encrypted.
#[test]
fn s3_async_compressed_holds_no_plaintext() {
    let Some(repo) = s3_repo() else { return };
    no_plaintext_and_recovery(repo, true, "1");
}

/// A `pg_wal` with one segment PostgreSQL has queued, owned by the cluster's user.
fn queued_copy(rig: &Rig, seg: &str) -> PathBuf {
    let pg_wal = rig.pg.make_dir("fake/pg_wal");
    std::fs::create_dir(pg_wal.join("archive_status")).unwrap();
    std::fs::copy(rig.pg.pg_wal().join(seg), pg_wal.join(seg)).unwrap();
    std::fs::write(pg_wal.join(format!("archive_status/{seg}.ready")), "").unwrap();
    rig.pg.chown_to_pg(&rig.pg.dir().join("fake"));
    pg_wal.join(seg)
}

fn failed_count(rig: &Rig) -> u64 {
    rig.pg
        .sql("select failed_count from pg_stat_archiver")
        .parse()
        .unwrap()
}

/// A wrong password fails the push with one line, in both modes; through PostgreSQL, the
/// segment stays `.ready` until the password is right again.
#[test]
fn wrong_password_fails_the_push_and_postgres_keeps_the_segment() {
    let Some(rig) = Rig::encrypted(&Repo::Local, true, &[]) else {
        return;
    };
    rig.load(2);
    let seg = rig.settle();
    let stored = Path::new(&rig.repo_url).join("wal");
    let in_archive = |s: &str| stored.join(&s[..16]).join(s).exists();
    assert!(in_archive(&seg));

    // Directly: sync, async (an agent must be started: the spool is fresh), no password.
    let path = queued_copy(&rig, &seg);
    let other = rig.pg.make_dir("other-repo");
    let out = rig.ferry(&["init"], &[("FERRY_REPO", other.to_str().unwrap())]);
    assert!(out.status.success(), "{}", stderr(&out));
    let fresh_spool = rig.pg.make_dir("fresh-spool");
    let wrong = [
        ("FERRY_REPO", other.to_str().unwrap()),
        ("FERRY_PASSWORD", "wrong"),
        ("FERRY_WAL_SPOOL", fresh_spool.to_str().unwrap()),
    ];
    for mode in ["false", "true"] {
        let mut env = wrong.to_vec();
        env.push(("FERRY_WAL_ASYNC", mode));
        let out = rig.ferry(&["wal-push", path.to_str().unwrap()], &env);
        fails_with(&out, "wrong password");
    }
    assert!(agents(&rig.pg.dir().join("fake"), "push").is_empty());
    let out = rig.ferry(
        &["wal-push", path.to_str().unwrap()],
        &[
            ("FERRY_REPO", other.to_str().unwrap()),
            ("FERRY_PASSWORD", ""),
            ("FERRY_WAL_ASYNC", "false"),
        ],
    );
    fails_with(&out, "password");
    assert!(
        !other.join("wal").exists(),
        "something was archived without the key"
    );

    // Through PostgreSQL: the agent that holds the right key goes, the password changes.
    for pid in agents(rig.pg.data_dir(), "push") {
        // SAFETY: kill(2) on a PID just read from /proc; at worst it is gone already.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
    let mut env = rig.env.clone();
    env.retain(|(k, _)| k != "FERRY_PASSWORD");
    env.push(("FERRY_PASSWORD".into(), "wrong".into()));
    ferry_script(&rig.pg, "ferry.sh", &env);
    let before = failed_count(&rig);
    rig.load(2);
    let kept = rig.pg.switch_wal();
    let started = Instant::now();
    while failed_count(&rig) < before + 2 {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "no push failed; server log:\n{}",
            tail(&rig.pg.log())
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let status = rig.pg.pg_wal().join("archive_status");
    let oldest_waiting = rig.pg.sql("select last_failed_wal from pg_stat_archiver");
    assert!(
        status.join(format!("{oldest_waiting}.ready")).exists(),
        "{oldest_waiting} not kept .ready"
    );
    assert!(
        !in_archive(&oldest_waiting),
        "archived with a wrong password"
    );
    assert!(!in_archive(&kept));
    let log = rig.pg.log();
    let errors: Vec<&str> = log.lines().filter(|l| l.contains("ferry: error")).collect();
    assert!(
        !errors.is_empty() && errors.iter().all(|l| l.contains("wrong password")),
        "{}",
        tail(&log)
    );

    // The right password again: everything kept is archived.
    ferry_script(&rig.pg, "ferry.sh", &rig.env);
    assert!(rig.pg.wait_archived(&kept, T), "{}", tail(&rig.pg.log()));
    assert!(in_archive(&oldest_waiting) && in_archive(&kept));
    rig.verify_archive();
}

fn fetch(rig: &Rig, seg: &str, dest: &Path, env: &[(&str, &str)]) -> Output {
    let mut env = env.to_vec();
    env.push(("FERRY_WAL_PREFETCH", "0"));
    rig.ferry(&["wal-fetch", seg, dest.to_str().unwrap()], &env)
}

/// Encrypted segments that were tampered with, moved to another name, fetched without the
/// repository, with a wrong password or under another repository's key: one line each,
/// nothing written. Pushing the same content again succeeds; other content is refused.
#[test]
fn tampered_moved_or_foreign_segments_are_refused() {
    let Some(rig) = Rig::encrypted(&Repo::Local, false, &[]) else {
        return;
    };
    rig.load(20);
    rig.settle();
    let segs = rig.archived();
    assert!(segs.len() >= 2, "{segs:?}");
    let (a, b) = (&segs[segs.len() - 2], &segs[segs.len() - 1]);
    let repo = Path::new(&rig.repo_url);
    let obj = |s: &str| repo.join("wal").join(&s[..16]).join(s);
    let scratch = rig.pg.make_dir("scratch");
    let dest = scratch.join("RECOVERYXLOG");
    let nothing_written = |dest: &Path| {
        assert!(!dest.exists(), "a refused segment was handed over");
        assert_eq!(std::fs::read_dir(&scratch).unwrap().count(), 0, "leftovers");
    };

    // Pushing an archived segment again: already archived (same keyed checksum).
    let out = rig.ferry(
        &[
            "--json",
            "wal-push",
            rig.pg.pg_wal().join(a).to_str().unwrap(),
        ],
        &[],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("already archived"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // A history file (no page check) under the same name with other content: refused.
    let hist = scratch.join("00000009.history");
    let push_hist = |body: &str| {
        std::fs::write(&hist, body).unwrap();
        rig.pg.chown_to_pg(&hist);
        rig.ferry(&["--json", "wal-push", hist.to_str().unwrap()], &[])
    };
    let out = push_hist("1\t0/3000000\tno recovery target specified\n");
    assert!(out.status.success(), "{}", stderr(&out));
    let out = push_hist("1\t0/3000000\tno recovery target specified\n");
    assert!(String::from_utf8_lossy(&out.stdout).contains("already archived"));
    fails_with(
        &push_hist("1\t0/4000000\tno recovery target specified\n"),
        "different content",
    );
    let stored = std::fs::read(repo.join("wal/history/00000009.history")).unwrap();
    assert!(
        !contains(&stored, b"no recovery target"),
        "history in plaintext"
    );
    std::fs::remove_file(&hist).unwrap();

    // Intact, it comes back.
    let out = fetch(&rig, a, &dest, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(ferry_testkit::same_file(&dest, &rig.pg.pg_wal().join(a)));
    std::fs::remove_file(&dest).unwrap();

    // Without the repository (a copy of the archive, no marker, no key): refused.
    let bare = rig.pg.make_dir("bare");
    let bare_obj = bare.join("wal").join(&a[..16]).join(a);
    std::fs::create_dir_all(bare_obj.parent().unwrap()).unwrap();
    std::fs::copy(obj(a), &bare_obj).unwrap();
    rig.pg.chown_to_pg(&bare);
    let out = fetch(&rig, a, &dest, &[("FERRY_REPO", bare.to_str().unwrap())]);
    // Given a password, a place with no repository is refused before its files are read.
    fails_with(&out, "its marker is missing");
    nothing_written(&dest);

    // A wrong password.
    fails_with(
        &fetch(&rig, a, &dest, &[("FERRY_PASSWORD", "wrong")]),
        "wrong password",
    );
    nothing_written(&dest);

    // Another repository's key: a repository of its own, holding this segment.
    let foreign = rig.pg.make_dir("foreign");
    let out = rig.ferry(&["init"], &[("FERRY_REPO", foreign.to_str().unwrap())]);
    assert!(out.status.success(), "{}", stderr(&out));
    let foreign_obj = foreign.join("wal").join(&a[..16]).join(a);
    std::fs::create_dir_all(foreign_obj.parent().unwrap()).unwrap();
    std::fs::copy(obj(a), &foreign_obj).unwrap();
    rig.pg.chown_to_pg(&foreign);
    let out = fetch(&rig, a, &dest, &[("FERRY_REPO", foreign.to_str().unwrap())]);
    fails_with(&out, "does not decrypt");
    nothing_written(&dest);

    // Moved: segment a's object under segment b's name.
    let b_orig = std::fs::read(obj(b)).unwrap();
    std::fs::copy(obj(a), obj(b)).unwrap();
    fails_with(&fetch(&rig, b, &dest, &[]), "does not decrypt");
    nothing_written(&dest);
    std::fs::write(obj(b), &b_orig).unwrap();

    // A downgrade: segment a pushed where there is no repository (plaintext, its checksum
    // valid) and planted over the encrypted object. Refused; and a push of segment a
    // replaces it with a sealed copy.
    let bare_plain = rig.pg.make_dir("bare-plain");
    let wal_a = rig.pg.pg_wal().join(a);
    let out = rig.ferry(
        &["wal-push", wal_a.to_str().unwrap()],
        &[
            ("FERRY_REPO", bare_plain.to_str().unwrap()),
            ("FERRY_WAL_ASYNC", "false"),
            ("FERRY_PASSWORD", ""),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let sealed_a = std::fs::read(obj(a)).unwrap();
    std::fs::copy(bare_plain.join("wal").join(&a[..16]).join(a), obj(a)).unwrap();
    assert_eq!(
        std::fs::read(obj(a)).unwrap()[10],
        0,
        "planted in plaintext"
    );
    fails_with(
        &fetch(&rig, a, &dest, &[]),
        "stored unencrypted in an encrypted archive",
    );
    nothing_written(&dest);
    // wal-status (no password: headers are plaintext) and check name it.
    let out = rig.ferry(&["wal-status"], &[("FERRY_PASSWORD", "")]);
    fails_with(&out, "1 archived objects are suspect");
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.lines().any(|l| l.starts_with("SUSPECT")
            && l.contains(a)
            && l.contains("plaintext in an encrypted repository")),
        "{shown}"
    );
    let out = rig.ferry(&["check"], &[]);
    assert!(!out.status.success());
    assert!(
        stderr(&out)
            .lines()
            .any(|l| l.contains(a) && l.contains("plaintext")),
        "{}",
        stderr(&out)
    );
    let out = rig.ferry(
        &["wal-push", wal_a.to_str().unwrap()],
        &[("FERRY_WAL_ASYNC", "false")],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(std::fs::read(obj(a)).unwrap()[10], 1, "sealed again");
    std::fs::write(obj(a), &sealed_a).unwrap();

    // One flipped bit in the ciphertext, in the header, or the cipher byte cleared.
    let a_orig = std::fs::read(obj(a)).unwrap();
    for (at, needle) in [
        (a_orig.len() / 2, "does not decrypt"),
        (30, "does not decrypt"),
        (10, "stored unencrypted"),
    ] {
        let mut bad = a_orig.clone();
        bad[at] ^= 0x01;
        std::fs::write(obj(a), &bad).unwrap();
        fails_with(&fetch(&rig, a, &dest, &[]), needle);
        nothing_written(&dest);
        // check reads every object with --read-data, and authenticates it.
        let out = rig.ferry(&["check", "--read-data"], &[]);
        let err = stderr(&out);
        assert!(!out.status.success(), "{err}");
        assert!(
            err.lines().any(|l| l.contains(a) && l.contains(needle)),
            "{err}"
        );
    }
    std::fs::write(obj(a), &a_orig).unwrap();
    let out = fetch(&rig, a, &dest, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
}
