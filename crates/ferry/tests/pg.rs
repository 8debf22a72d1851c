//! `ferry pg backup / restore / backups / expire / verify` against a real PostgreSQL (15, and
//! the point-in-time test on 13, 14, 16, 17 and 18) that archives its WAL with ferry into the
//! same encrypted repository.

mod common;
mod servekit;
mod walkit;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use ferry_testkit::pg::PgCluster;
use serde_json::Value;
use walkit::{ferry_script, stderr, tail, Repo, Rig, PASSWORD, T};

fn ok_json(o: &Output, what: &str) -> Value {
    assert!(o.status.success(), "{what}: {}", stderr(o));
    // Status lines (one a second of a long run) may come before the summary, the last line.
    let text = String::from_utf8_lossy(&o.stdout);
    let last = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    serde_json::from_slice(&o.stdout)
        .or_else(|_| serde_json::from_str(last))
        .unwrap_or_else(|e| panic!("{what}: {e}: {}", stderr(o)))
}

/// The rig's cluster with a table `k` whose rows carry a marker no stored byte may show.
fn rig() -> Option<Rig> {
    rig_with(true)
}

/// [`rig`], archiving through the agent (`async_`) or one push per segment.
fn rig_with(async_: bool) -> Option<Rig> {
    let rig = Rig::encrypted(&Repo::Local, async_, &[])?;
    rig.pg.sql(
        "create table k (id int primary key, note text, at timestamptz default clock_timestamp())",
    );
    Some(rig)
}

const MARKER: &str = "ferry-plaintext-marker";

fn insert(rig: &Rig, id: i32) {
    rig.pg.sql(&format!(
        "insert into k (id, note) values ({id}, '{MARKER}-{id}-' || md5({id}::text))"
    ));
}

fn backup(rig: &Rig, extra: &[&str]) -> Value {
    let conn = rig.pg.conninfo();
    let mut args = vec!["--json", "pg", "backup", "--conninfo", conn.as_str()];
    args.extend_from_slice(extra);
    ok_json(&rig.ferry(&args, &[]), "pg backup")
}

/// A password file the restored servers' restore_command reads.
fn password_file(rig: &Rig) -> PathBuf {
    let p = rig.pg.dir().join("password");
    std::fs::write(&p, PASSWORD).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    rig.pg.chown_to_pg(&p);
    p
}

/// `ferry pg restore --to DIR ARGS...` into a new empty directory.
fn restore(rig: &Rig, name: &str, args: &[&str]) -> (Output, PathBuf) {
    let to = rig.pg.make_dir(name);
    let pw = password_file(rig);
    let to_s = to.display().to_string();
    let pw_s = pw.display().to_string();
    let mut a = vec![
        "--password-file",
        pw_s.as_str(),
        "pg",
        "restore",
        "--to",
        to_s.as_str(),
    ];
    a.extend_from_slice(args);
    (rig.ferry(&a, &[]), to)
}

/// `ferry pg restore --to DIR ARGS...` into `to` as it is.
fn restore_into(rig: &Rig, to: &Path, args: &[&str]) -> (Output, PathBuf) {
    let pw = password_file(rig).display().to_string();
    let to_s = to.display().to_string();
    let mut a = vec!["--password-file", pw.as_str()];
    if args.contains(&"--json") {
        a.push("--json");
    }
    a.extend(["pg", "restore", "--to", to_s.as_str()]);
    a.extend(args.iter().filter(|x| **x != "--json"));
    (rig.ferry(&a, &[]), to.to_path_buf())
}

/// A server on a restored directory, archiving (once promoted) through a spool of its own.
fn start_restored(rig: &Rig, data: &Path) -> PgCluster {
    let pg = PgCluster::from_data_dir(data, &[]).expect("PostgreSQL is there: the rig runs");
    let spool = pg.make_dir("spool");
    let mut env = rig.env.clone();
    env.retain(|(k, _)| k != "FERRY_WAL_SPOOL");
    env.push(("FERRY_WAL_SPOOL".into(), spool.display().to_string()));
    let script = ferry_script(&pg, "ferry.sh", &env);
    pg.append_conf(&[&format!(
        "archive_command = '{} wal-push %p'",
        script.display()
    )]);
    pg.start_no_wait();
    pg
}

/// Waits until a server recovering with target action pause has paused at its target.
fn wait_paused(pg: &PgCluster) {
    let start = Instant::now();
    loop {
        // PostgreSQL 13 has no pause state, only whether a pause was asked for (recovery
        // asks for it at its target, where replay stops anyway).
        let paused = match pg.try_sql("select pg_get_wal_replay_pause_state()") {
            Err(e) if e.contains("does not exist") => pg
                .try_sql("select pg_is_wal_replay_paused()")
                .is_ok_and(|s| s == "t"),
            r => r.is_ok_and(|s| s == "paused"),
        };
        if paused {
            return;
        }
        assert!(
            start.elapsed() < T,
            "recovery did not pause at its target:\n{}",
            tail(&pg.log())
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn ids(pg: &PgCluster) -> String {
    pg.sql("select coalesce(string_agg(id::text, ',' order by id), '') from k")
}

fn now(rig: &Rig) -> String {
    rig.pg.sql("select clock_timestamp()::text")
}

/// Every file under `dir` whose bytes contain `needle`.
fn files_containing(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
    let mut hits = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(b) = std::fs::read(&p) {
                if b.windows(needle.len()).any(|w| w == needle) {
                    hits.push(p);
                }
            }
        }
    }
    hits
}

#[test]
fn point_in_time_by_time_lsn_and_name_and_across_a_timeline_switch() {
    let Some(rig) = rig() else { return };
    point_in_time(rig);
}

/// The point-in-time test on PostgreSQL `major` (the others run on 15).
fn point_in_time_on(major: u32) {
    if !ferry_testkit::pg::use_major(major) {
        return;
    }
    let Some(rig) = rig() else { return };
    let version = rig.pg.sql("show server_version_num");
    assert_eq!(version[..2], major.to_string(), "{version}");
    point_in_time(rig);
}

#[test]
fn point_in_time_on_postgresql_13() {
    point_in_time_on(13);
}

#[test]
fn point_in_time_on_postgresql_14() {
    point_in_time_on(14);
}

#[test]
fn point_in_time_on_postgresql_16() {
    point_in_time_on(16);
}

#[test]
fn point_in_time_on_postgresql_17() {
    point_in_time_on(17);
}

#[test]
fn point_in_time_on_postgresql_18() {
    point_in_time_on(18);
}

fn point_in_time(rig: Rig) {
    for id in 1..=3 {
        insert(&rig, id);
    }
    let before_backup = now(&rig);
    let b = backup(&rig, &[]);
    assert_eq!(b["record"]["timeline"], 1, "{b}");
    for id in 4..=7 {
        insert(&rig, id);
    }
    let t7 = now(&rig);
    insert(&rig, 8);
    let lsn8 = rig.pg.sql("select pg_current_wal_insert_lsn()::text");
    insert(&rig, 9);
    rig.pg.sql("select pg_create_restore_point('after-nine')");
    insert(&rig, 10);
    rig.settle();

    let listed = ok_json(&rig.ferry(&["--json", "pg", "backups"], &[]), "pg backups");
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");

    // A target before the only backup ended: refused, and the directory stays empty.
    let (out, to) = restore(&rig, "early", &["--target-time", &before_backup]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("no backup ends before"),
        "{}",
        stderr(&out)
    );
    assert_eq!(std::fs::read_dir(&to).unwrap().count(), 0);

    // By LSN and by name, pausing at the target (no new timeline).
    for (name, args, want) in [
        (
            "lsn",
            vec!["--target-lsn", lsn8.as_str()],
            "1,2,3,4,5,6,7,8",
        ),
        (
            "name",
            vec!["--target-name", "after-nine"],
            "1,2,3,4,5,6,7,8,9",
        ),
    ] {
        let mut a = args.clone();
        a.extend(["--target-action", "pause"]);
        let (out, to) = restore(&rig, name, &a);
        assert!(out.status.success(), "restore {name}: {}", stderr(&out));
        let pg = start_restored(&rig, &to);
        wait_paused(&pg);
        assert_eq!(ids(&pg), want, "restore to {name}");
    }

    // By time, promoted: the copy continues on timeline 2 and archives it.
    let (out, to) = restore(&rig, "time", &["--target-time", &t7]);
    assert!(out.status.success(), "restore time: {}", stderr(&out));
    let copy = start_restored(&rig, &to);
    copy.wait_recovery_done(T).unwrap();
    assert_eq!(ids(&copy), "1,2,3,4,5,6,7");
    copy.sql(&format!(
        "insert into k (id, note) values (100, '{MARKER}-100')"
    ));
    let t100 = copy.sql("select clock_timestamp()::text");
    copy.sql("insert into k (id, note) values (101, 'later')");
    let last = copy.switch_wal();
    assert!(copy.wait_archived(&last, T), "{}", tail(&copy.log()));
    assert_eq!(
        copy.sql("select timeline_id from pg_control_checkpoint()"),
        "2"
    );

    // A time on timeline 2 is reached from the backup made on timeline 1.
    let (out, to) = restore(
        &rig,
        "tl2",
        &["--target-time", &t100, "--target-action", "pause"],
    );
    assert!(out.status.success(), "restore tl2: {}", stderr(&out));
    let pg = start_restored(&rig, &to);
    wait_paused(&pg);
    assert_eq!(ids(&pg), "1,2,3,4,5,6,7,100");

    // Nothing in the repository shows a row: not the backup, not the WAL.
    let hits = files_containing(Path::new(&rig.repo_url), MARKER.as_bytes());
    assert!(hits.is_empty(), "plaintext rows found in {hits:?}");
    let v = rig.ferry(&["pg", "verify"], &[]);
    assert!(v.status.success(), "verify: {}", stderr(&v));
}

#[test]
fn incremental_backup_stores_about_the_change() {
    let Some(rig) = rig() else { return };
    let pgbench = rig.pg.bin("pgbench");
    let init = rig.pg.run_as_pg(
        &pgbench,
        [
            "-i",
            "-s",
            "10",
            "-q",
            "-h",
            &rig.pg.dir().display().to_string(),
            "-p",
            &rig.pg.port().to_string(),
            "-U",
            "postgres",
            "postgres",
        ],
    );
    assert!(
        init.status.success(),
        "pgbench -i: {}",
        String::from_utf8_lossy(&init.stderr)
    );
    rig.pg.sql("checkpoint");
    // A file changed within 2 s of a backup's start is read again by the next one (the
    // change could share the read's clock tick): let the checkpoint's writes age past that,
    // as data does between real backups, so that the next backup can prove files unchanged.
    std::thread::sleep(Duration::from_secs(3));
    let full = backup(&rig, &[]);
    // 1% of the accounts, then a checkpoint so that the pages are in the files.
    rig.pg
        .sql("update pgbench_accounts set abalance = abalance + 1 where aid <= 10000");
    rig.pg.sql("checkpoint");
    let incr = backup(&rig, &[]);
    let size = incr["summary"]["total_bytes"].as_f64().unwrap();
    let stored_full = full["summary"]["bytes_stored"].as_f64().unwrap();
    let stored_incr = incr["summary"]["bytes_stored"].as_f64().unwrap();
    let unchanged = incr["summary"]["files_unchanged"].as_u64().unwrap();
    eprintln!(
        "pgbench scale 10, {:.1} MB: full backup stored {:.2} MB; after 1% of rows changed the \
         next stored {:.3} MB = {:.2}% of the database, {:.2}% of the full backup; {unchanged} files unread",
        size / 1e6,
        stored_full / 1e6,
        stored_incr / 1e6,
        100.0 * stored_incr / size,
        100.0 * stored_incr / stored_full
    );
    assert!(stored_incr > 0.0, "the change was not stored: {incr}");
    assert!(
        stored_incr < 0.05 * stored_full,
        "an incremental after a 1% change stored {stored_incr} of {stored_full} bytes"
    );
    assert!(unchanged > 0, "no file was proven unchanged: {incr}");

    // The incremental restores to the same rows.
    rig.settle();
    let (out, to) = restore(&rig, "r", &[]);
    assert!(out.status.success(), "restore: {}", stderr(&out));
    let pg = start_restored(&rig, &to);
    pg.wait_recovery_done(T).unwrap();
    assert_eq!(
        pg.sql("select count(*), sum(abalance) from pgbench_accounts"),
        "1000000|10000"
    );
}

#[test]
fn expire_keeps_the_wal_kept_backups_need() {
    let Some(rig) = rig() else { return };
    let mut starts = Vec::new();
    for round in 0..3 {
        for i in 0..3 {
            insert(&rig, round * 10 + i);
        }
        rig.load(20);
        let b = backup(&rig, &[]);
        starts.push(b["record"]["start_wal"].as_str().unwrap().to_string());
    }
    insert(&rig, 99);
    rig.settle();
    let wal_dir = Path::new(&rig.repo_url).join("wal/0000000100000000");
    let segs = |dir: &Path| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.len() == 24)
            .collect();
        v.sort();
        v
    };
    let before = segs(&wal_dir);
    assert!(before.iter().any(|s| *s < starts[1]), "{before:?}");

    let e = ok_json(
        &rig.ferry(&["--json", "pg", "expire", "--keep", "2"], &[]),
        "expire",
    );
    assert_eq!(e["expired"].as_array().unwrap().len(), 1, "{e}");
    let after = segs(&wal_dir);
    assert!(
        after.iter().all(|s| *s >= starts[1]),
        "WAL older than the kept backups left: {after:?}"
    );
    let kept: Vec<&String> = before.iter().filter(|s| **s >= starts[1]).collect();
    assert_eq!(
        after.iter().collect::<Vec<_>>(),
        kept,
        "expire removed WAL a kept backup needs"
    );
    let listed = ok_json(&rig.ferry(&["--json", "pg", "backups"], &[]), "pg backups");
    assert_eq!(listed.as_array().unwrap().len(), 2);
    let v = rig.ferry(&["pg", "verify"], &[]);
    assert!(v.status.success(), "verify after expire: {}", stderr(&v));

    // The oldest kept backup still replays to the newest point.
    let oldest = listed[0]["id"].as_str().unwrap().to_string();
    let (out, to) = restore(&rig, "oldest", &["--backup", &oldest[..12]]);
    assert!(out.status.success(), "restore oldest: {}", stderr(&out));
    let pg = start_restored(&rig, &to);
    pg.wait_recovery_done(T).unwrap();
    assert_eq!(ids(&pg), "0,1,2,10,11,12,20,21,22,99");
}

#[test]
fn refuses_bad_input_and_leaves_the_directory_alone() {
    let Some(rig) = rig() else { return };
    insert(&rig, 1);

    // A role without the right to start a backup.
    rig.pg.sql("create role weak login");
    let weak = rig.pg.conninfo().replace("user=postgres", "user=weak");
    let out = rig.ferry(&["pg", "backup", "--conninfo", &weak], &[]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("permission denied"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");

    // A repository the cluster does not archive into: the backup's WAL never reaches it.
    let other = rig.pg.make_dir("other-repo");
    let other_s = other.display().to_string();
    let o = rig.ferry(&["--repo", &other_s, "init"], &[]);
    assert!(o.status.success(), "init: {}", stderr(&o));
    let conn = rig.pg.conninfo();
    let o = rig.ferry(
        &["--repo", &other_s, "pg", "backup", "--conninfo", &conn],
        &[],
    );
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("archive_command must be"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");

    // No backup yet.
    let (out, _) = restore(&rig, "none", &[]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("no PostgreSQL backup"),
        "{}",
        stderr(&out)
    );

    let b = backup(&rig, &[]);
    rig.settle();

    // A directory that is not empty is left as it was.
    let busy = rig.pg.make_dir("busy");
    std::fs::write(busy.join("keep.txt"), "mine").unwrap();
    let pw = password_file(&rig);
    let out = rig.ferry(
        &[
            "--password-file",
            &pw.display().to_string(),
            "pg",
            "restore",
            "--to",
            &busy.display().to_string(),
        ],
        &[],
    );
    assert!(!out.status.success());
    assert!(stderr(&out).contains("not empty"), "{}", stderr(&out));
    assert_eq!(std::fs::read_dir(&busy).unwrap().count(), 1);
    assert_eq!(
        std::fs::read_to_string(busy.join("keep.txt")).unwrap(),
        "mine"
    );

    // A segment the backup needs is gone from the archive.
    let start = b["record"]["start_wal"].as_str().unwrap();
    let seg = Path::new(&rig.repo_url)
        .join("wal")
        .join(&start[..16])
        .join(start);
    std::fs::remove_file(&seg).unwrap_or_else(|e| panic!("{}: {e}", seg.display()));
    let (out, to) = restore(&rig, "gap", &[]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains(start) && err.contains("not in the archive"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_dir(&to).unwrap().count(),
        0,
        "restore wrote into {to:?}"
    );
    let v = rig.ferry(&["pg", "verify"], &[]);
    assert!(!v.status.success());
    assert!(stderr(&v).contains(start), "{}", stderr(&v));
}

#[test]
fn backup_and_restore_through_minio() {
    let Some(repo) = walkit::s3_repo() else {
        return;
    };
    let Some(rig) = Rig::encrypted(&repo, true, &[]) else {
        return;
    };
    back_up_and_restore_to_a_time(&rig);
}

/// A table, a base backup, rows 2 and 3 after it, then a restore to the time between them
/// recovered by a server fetching WAL from the rig's repository: rows 1 and 2 come back.
fn back_up_and_restore_to_a_time(rig: &Rig) {
    rig.pg.sql(
        "create table k (id int primary key, note text, at timestamptz default clock_timestamp())",
    );
    insert(rig, 1);
    rig.load(20);
    backup(rig, &[]);
    insert(rig, 2);
    let t2 = now(rig);
    insert(rig, 3);
    rig.settle();
    let (out, to) = restore(rig, "r", &["--target-time", &t2]);
    assert!(out.status.success(), "restore: {}", stderr(&out));
    let pg = start_restored(rig, &to);
    pg.wait_recovery_done(T).unwrap();
    assert_eq!(ids(&pg), "1,2");
    assert_eq!(pg.sql("select count(*) > 0 from t"), "t");
}

/// A base backup, the WAL archive and a point-in-time restore, all through `ferry serve`
/// (issue 20): the server stores what it cannot read, the restored server fetches WAL back
/// through it.
#[test]
fn backup_and_point_in_time_restore_through_ferry_serve() {
    let served = servekit::Served::start("");
    // The token from a file, as restore_command needs it (the restored server's environment
    // has no FERRY_SERVE_TOKEN); readable by the clusters' OS user.
    let token = served.dir.join("token");
    std::fs::write(&token, &served.tenant("alice").token).unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
    let env = vec![
        (
            "FERRY_SERVE_TOKEN_FILE".to_string(),
            token.display().to_string(),
        ),
        ("FERRY_CA_CERT".to_string(), served.ca.display().to_string()),
    ];
    let url = format!("ferry+https://127.0.0.1:{}/alice/pg", served.port);
    let Some(rig) = Rig::encrypted(&Repo::Served { url, env }, true, &[]) else {
        return;
    };
    back_up_and_restore_to_a_time(&rig);
    // Everything went to alice's prefix, and nothing there shows a row in plaintext.
    let files = served.snapshot();
    assert!(files.len() > 10, "only {} objects stored", files.len());
    assert!(files
        .iter()
        .all(|(p, _)| p.starts_with(served.store.join("alice/pg"))));
    assert!(
        !files
            .iter()
            .any(|(_, b)| b.windows(MARKER.len()).any(|w| w == MARKER.as_bytes())),
        "a row in plaintext on the server"
    );
}

/// The cluster's owner controls PGDATA: a postgresql.auto.conf turned into a link to a
/// root-only file outside it is backed up as a link. A root `pg restore` replaces that link
/// with the file it writes, and never appends to or chowns what it pointed at; the data
/// directory is never readable by others while the restore runs (made 0700 first).
#[test]
fn pg_restore_replaces_links_planted_in_pgdata() {
    let Some(rig) = rig() else { return };
    insert(&rig, 1);
    let victim = rig.pg.dir().join("victim");
    std::fs::write(&victim, b"root only\n").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
    let auto = rig.pg.data_dir().join("postgresql.auto.conf");
    std::fs::remove_file(&auto).unwrap();
    std::os::unix::fs::symlink(&victim, &auto).unwrap();
    let planted = rig.pg.data_dir().join("recovery.signal");
    std::os::unix::fs::symlink(&victim, &planted).unwrap();
    backup(&rig, &[]);
    std::fs::remove_file(&planted).unwrap();
    let (out, to) = restore(&rig, "restored-links", &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(std::fs::read(&victim).unwrap(), b"root only\n");
    let m = std::fs::symlink_metadata(&victim).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        (m.uid(), m.mode() & 0o7777),
        (0, 0o600),
        "victim chowned or chmodded"
    );
    for f in ["postgresql.auto.conf", "recovery.signal"] {
        let m = std::fs::symlink_metadata(to.join(f)).unwrap();
        assert!(m.is_file(), "{f} is still a link");
        assert_eq!(m.mode() & 0o077, 0, "{f} readable by others");
    }
    let conf = std::fs::read_to_string(to.join("postgresql.auto.conf")).unwrap();
    assert!(conf.contains("restore_command"), "{conf}");
    // And the restored cluster recovers.
    let pg = start_restored(&rig, &to);
    pg.wait_recovery_done(T).unwrap();
    assert_eq!(ids(&pg), "1");
}

/// `openssl` with `args` in `dir`, insisting on success.
fn openssl(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl");
    assert!(out.status.success(), "openssl {args:?}: {}", stderr(&out));
}

/// A CA, a server certificate it signed for IP 127.0.0.1 only, a client certificate for
/// user postgres, and an unrelated CA.
fn certificates(dir: &Path) {
    for ca in ["ca", "other"] {
        openssl(
            dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-days",
                "2",
                "-subj",
                &format!("/CN={ca}"),
                "-keyout",
                &format!("{ca}.key"),
                "-out",
                &format!("{ca}.crt"),
            ],
        );
    }
    signed(dir, "server", "pg", "subjectAltName=IP:127.0.0.1");
    // The client's, for user postgres (cert authentication maps the CN to the user).
    signed(dir, "client", "postgres", "extendedKeyUsage=clientAuth");
}

/// `NAME.key` and `NAME.crt` for common name `cn`, signed by `ca` with the X.509 v3
/// extension `ext` (rustls takes no v1 certificate); the key private (0600).
fn signed(dir: &Path, name: &str, cn: &str, ext: &str) {
    let (key, csr, crt, extfile) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.crt"),
        format!("{name}.ext"),
    );
    let subj = format!("/CN={cn}");
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-subj",
            &subj,
            "-keyout",
            &key,
            "-out",
            &csr,
        ],
    );
    std::fs::write(dir.join(&extfile), format!("{ext}\n")).unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            &extfile,
            "-out",
            &crt,
        ],
    );
    std::fs::set_permissions(dir.join(&key), std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// `pg backup` speaks TLS as libpq does: `require` refuses a server without TLS; with TLS
/// the only way in (hostssl), `verify-full` takes the right CA and refuses another CA and
/// a host name the certificate does not hold, which `verify-ca` forgives; a server that
/// admits by client certificate takes `sslcert`/`sslkey`, and a key others can read is
/// refused.
#[test]
fn pg_backup_over_tls_checks_the_server_as_libpq_does() {
    let Some(rig) = rig() else { return };
    let tcp = format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres",
        rig.pg.port()
    );
    let run = |conninfo: &str| rig.ferry(&["--json", "pg", "backup", "--conninfo", conninfo], &[]);
    let refused = |conninfo: &str, needle: &str| {
        let out = run(conninfo);
        let err = stderr(&out);
        assert!(!out.status.success(), "{conninfo}: succeeded");
        assert!(
            err.contains(needle),
            "{conninfo}: stderr lacks '{needle}': {err}"
        );
        assert_eq!(err.trim().lines().count(), 1, "not one line: {err}");
    };
    refused(&format!("{tcp} sslmode=require"), "TLS");

    let dir = rig.pg.make_dir("tls");
    certificates(&dir);
    ferry_testkit::pg::chown_to_pg(&dir);
    let at = |f: &str| dir.join(f).display().to_string();
    rig.pg.append_conf(&[
        "ssl = on",
        &format!("ssl_cert_file = '{}'", at("server.crt")),
        &format!("ssl_key_file = '{}'", at("server.key")),
    ]);
    // TCP only with TLS: a backup that gets in was encrypted.
    std::fs::write(
        rig.pg.data_dir().join("pg_hba.conf"),
        "local all all trust\nhostssl all all 127.0.0.1/32 trust\n",
    )
    .unwrap();
    rig.pg.reload();
    std::thread::sleep(Duration::from_millis(500));
    refused(&format!("{tcp} sslmode=disable"), "PostgreSQL");

    let ok = |conninfo: &str| {
        let out = run(conninfo);
        assert!(out.status.success(), "{conninfo}: {}", stderr(&out));
    };
    ok(&format!(
        "{tcp} sslmode=verify-full sslrootcert={}",
        at("ca.crt")
    ));
    refused(
        &format!("{tcp} sslmode=verify-full sslrootcert={}", at("other.crt")),
        "certificate",
    );
    let by_name = tcp.replace("127.0.0.1", "localhost");
    refused(
        &format!("{by_name} sslmode=verify-full sslrootcert={}", at("ca.crt")),
        "certificate",
    );
    ok(&format!(
        "postgresql://postgres@localhost:{}/postgres?sslmode=verify-ca&sslrootcert={}",
        rig.pg.port(),
        at("ca.crt")
    ));
    refused(&format!("{tcp} sslmode=verify-ca"), "root certificate");

    // A server that admits by client certificate: without one refused, with one in.
    rig.pg
        .append_conf(&[&format!("ssl_ca_file = '{}'", at("ca.crt"))]);
    std::fs::write(
        rig.pg.data_dir().join("pg_hba.conf"),
        "local all all trust\nhostssl all all 127.0.0.1/32 cert\n",
    )
    .unwrap();
    rig.pg.reload();
    std::thread::sleep(Duration::from_millis(500));
    let verified = format!("{tcp} sslmode=verify-full sslrootcert={}", at("ca.crt"));
    refused(&verified, "certificate");
    let with_cert = format!(
        "{verified} sslcert={} sslkey={}",
        at("client.crt"),
        at("client.key")
    );
    ok(&with_cert);
    refused(
        &format!("{verified} sslcert={}", at("missing.crt")),
        "no such file",
    );
    std::fs::set_permissions(
        dir.join("client.key"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    refused(&with_cert, "group or world access");
}

/// With no password given, `pg backup` takes it from the password file as libpq does
/// (`passfile=`, else `PGPASSFILE`; lines of host:port:db:user:password), and ignores a file
/// others can read.
#[test]
fn pg_backup_takes_its_password_from_the_password_file() {
    let Some(rig) = rig() else { return };
    rig.pg
        .sql("create role archie superuser login password 'from-the-file'");
    std::fs::write(
        rig.pg.data_dir().join("pg_hba.conf"),
        "local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\n",
    )
    .unwrap();
    rig.pg.reload();
    std::thread::sleep(Duration::from_millis(500));
    let port = rig.pg.port();
    let conninfo = format!("host=127.0.0.1 port={port} user=archie dbname=postgres");
    let file = rig.pg.dir().join("pgpass");
    std::fs::write(
        &file,
        format!("# ferry's test\nelsewhere:*:*:*:wrong\n127.0.0.1:{port}:postgres:archie:from-the-file\n"),
    )
    .unwrap();
    rig.pg.chown_to_pg(&file);
    let run = |passfile: &Path| {
        let passfile = passfile.display().to_string();
        rig.ferry(
            &["--json", "pg", "backup", "--conninfo", &conninfo],
            &[("PGPASSFILE", passfile.as_str())],
        )
    };
    let refused = |o: &std::process::Output| {
        assert!(!o.status.success());
        let err = stderr(o);
        assert!(err.contains("password"), "{err}");
        assert!(
            !err.contains("from-the-file"),
            "the password was printed: {err}"
        );
    };
    refused(&run(&rig.pg.dir().join("no-such-file")));
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let o = run(&file);
    refused(&o);
    assert!(
        stderr(&o).contains("group or world access"),
        "{}",
        stderr(&o)
    );
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let o = run(&file);
    assert!(o.status.success(), "{}", stderr(&o));
    // The connection string's `passfile` comes before PGPASSFILE, as in libpq.
    let with_key = |named: &Path, env: &Path| {
        let (named, env) = (named.display().to_string(), env.display().to_string());
        let conninfo = format!("{conninfo} passfile='{named}'");
        rig.ferry(
            &["--json", "pg", "backup", "--conninfo", &conninfo],
            &[("PGPASSFILE", env.as_str())],
        )
    };
    let o = with_key(&file, &rig.pg.dir().join("no-such-file"));
    assert!(o.status.success(), "{}", stderr(&o));
    refused(&with_key(&rig.pg.dir().join("no-such-file"), &file));
}

#[test]
fn pg_check_proves_archiving_works_and_says_what_does_not() {
    // Synchronous: an agent would go on archiving ahead of a broken archive_command.
    let Some(rig) = rig_with(false) else { return };
    insert(&rig, 1);

    // No backup yet: archiving works, but nothing can be restored.
    let o = rig.ferry(&["pg", "check"], &[]);
    assert!(!o.status.success());
    let problems: Vec<_> = stderr(&o)
        .lines()
        .filter(|l| l.starts_with("problem: "))
        .map(str::to_owned)
        .collect();
    assert_eq!(problems.len(), 1, "{}", stderr(&o));
    assert!(
        problems[0].contains("no backup of this cluster"),
        "{problems:?}"
    );

    let b = backup(&rig, &[]);
    insert(&rig, 2);
    let c = ok_json(&rig.ferry(&["--json", "pg", "check"], &[]), "pg check");
    assert_eq!(c["ok"], true, "{c}");
    assert_eq!(c["backup"], b["backup"], "{c}");
    let segment = c["segment"].as_str().unwrap().to_owned();
    assert!(
        rig.archived().contains(&segment),
        "{segment} is not marked archived"
    );

    // Monitoring: the backup, the archive's range, no lag and no failures.
    rig.settle();
    let i = ok_json(
        &rig.ferry(&["--json", "pg", "info", "--conninfo", ""], &[]),
        "pg info",
    );
    assert_eq!(i["backups"].as_array().unwrap().len(), 1, "{i}");
    assert_eq!(i["backups"][0]["id"], b["backup"], "{i}");
    assert_eq!(i["wal"][0]["timeline"], 1, "{i}");
    assert!(
        i["wal"][0]["last"].as_str().unwrap() >= segment.as_str(),
        "{i}"
    );
    assert_eq!(i["archiving"]["lag_segments"], 0, "{i}");
    assert_eq!(i["archiving"]["failed_count"], 0, "{i}");

    // archive_command broken: check names it and fails within its timeout.
    rig.pg
        .sql("alter system set archive_command = 'false'; select pg_reload_conf()");
    let o = rig.ferry(&["pg", "check", "--archive-timeout", "5s"], &[]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("archive_command does not run 'ferry wal-push' (it runs false)"),
        "{err}"
    );
    assert!(err.contains("not archived within 5s"), "{err}");
    let i = ok_json(
        &rig.ferry(&["--json", "pg", "info", "--conninfo", ""], &[]),
        "pg info",
    );
    assert!(i["archiving"]["lag_segments"].as_u64().unwrap() >= 1, "{i}");
    assert!(i["archiving"]["failed_count"].as_i64().unwrap() >= 1, "{i}");
    rig.pg
        .sql("alter system reset archive_command; select pg_reload_conf()");
}

/// An unlogged table's data is not backed up (recovery empties it anyway); its init fork is,
/// and the restored cluster has the table, empty.
#[test]
fn unlogged_tables_come_back_empty_without_their_data_stored() {
    let Some(rig) = rig() else { return };
    insert(&rig, 1);
    rig.pg
        .sql("create unlogged table u as select g from generate_series(1, 100000) g");
    let node = rig.pg.sql("select pg_relation_filepath('u')");
    backup(&rig, &[]);
    rig.settle();
    let (out, to) = restore(&rig, "unlogged", &[]);
    assert!(out.status.success(), "restore: {}", stderr(&out));
    assert!(!to.join(&node).exists(), "{node} was restored");
    assert!(
        to.join(format!("{node}_init")).exists(),
        "{node}_init missing"
    );
    let pg = start_restored(&rig, &to);
    pg.wait_recovery_done(T).unwrap();
    assert_eq!(pg.sql("select count(*) from u"), "0");
    assert_eq!(ids(&pg), "1");
}

/// With page checksums on, a page damaged on disk (dd) is named by file and block; the
/// backup still completes, and says so in its exit code. A clean cluster's pages all pass,
/// which is what proves ferry computes PostgreSQL's checksum.
#[test]
fn a_page_damaged_on_disk_is_named_and_the_backup_completes() {
    let Some(rig) = rig() else { return };
    let data = rig.pg.data_dir().display().to_string();
    rig.pg.stop();
    let out = rig.pg.run_as_pg("pg_checksums", ["--enable", "-D", &data]);
    assert!(out.status.success(), "pg_checksums: {}", stderr(&out));
    rig.pg.start();
    rig.pg.sql(
        "create table c as select g, md5(g::text) note from generate_series(1, 20000) g; \
         checkpoint",
    );
    let clean = backup(&rig, &[]);
    assert_eq!(clean["bad_pages"], 0, "{clean}");
    let node = rig.pg.sql("select pg_relation_filepath('c')");

    rig.pg.stop();
    let file = format!("of={data}/{node}");
    let dd = std::process::Command::new("dd")
        .args(["if=/dev/urandom", &file, "bs=1", "count=16"])
        .arg(format!("seek={}", 3 * 8192 + 4000))
        .args(["conv=notrunc", "status=none"])
        .status()
        .unwrap();
    assert!(dd.success());
    rig.pg.start();
    let o = rig.ferry(&["--json", "pg", "backup", "--full"], &[]);
    assert!(!o.status.success(), "a damaged page went unnoticed");
    let err = stderr(&o);
    assert!(err.contains("1 pages failed their checksum"), "{err}");
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {err}"));
    assert_eq!(v["bad_pages"], 1, "{v}");
    assert_eq!(
        v["bad_page_list"],
        serde_json::json!([{"file": node, "block": 3}]),
        "{v}"
    );
    let listed = ok_json(&rig.ferry(&["--json", "pg", "backups"], &[]), "pg backups");
    assert_eq!(listed.as_array().unwrap().len(), 2, "{listed}");
}

/// Every file under `dir`, by path below it, with its bytes (symlinks as their target).
fn tree_of(dir: &Path) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let rel = p.strip_prefix(dir).unwrap().to_path_buf();
            let t = e.file_type().unwrap();
            if t.is_dir() {
                out.insert(rel, b"<dir>".to_vec());
                stack.push(p);
            } else if t.is_symlink() {
                let target = std::fs::read_link(&p).unwrap();
                out.insert(rel, target.into_os_string().into_encoded_bytes());
            } else {
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

/// `--delta` over a data directory with a file deleted, one truncated, one modified (its
/// mtime put back) and one extra: it comes back exactly as a fresh restore, keeping what was
/// right, and recovers. A directory that is not a stopped data directory is refused.
#[test]
fn delta_restore_rewrites_only_what_differs_and_recovers() {
    let Some(rig) = rig() else { return };
    for id in 1..=3 {
        insert(&rig, id);
    }
    let files: Vec<String> = ["k", "pg_class", "k_pkey"]
        .iter()
        .map(|r| rig.pg.sql(&format!("select pg_relation_filepath('{r}')")))
        .collect();
    backup(&rig, &[]);
    insert(&rig, 4);
    rig.settle();
    let (out, fresh) = restore(&rig, "fresh", &[]);
    assert!(out.status.success(), "restore: {}", stderr(&out));
    let (out, to) = restore(&rig, "delta", &[]);
    assert!(out.status.success(), "restore: {}", stderr(&out));

    let modified = to.join(&files[0]);
    let mtime = std::fs::metadata(&modified).unwrap().modified().unwrap();
    let mut bytes = std::fs::read(&modified).unwrap();
    bytes[100] ^= 0xff;
    std::fs::write(&modified, &bytes).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&modified)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    std::fs::File::options()
        .write(true)
        .open(to.join(&files[1]))
        .unwrap()
        .set_len(8192)
        .unwrap();
    std::fs::remove_file(to.join(&files[2])).unwrap();
    let extra = to.join(&files[0]).with_file_name("999999");
    std::fs::write(&extra, b"not in the backup").unwrap();
    assert_ne!(tree_of(&to), tree_of(&fresh));

    // Not a data directory, or one a server runs on: refused, left alone.
    let stray = rig.pg.make_dir("stray");
    std::fs::write(stray.join("keep"), b"mine").unwrap();
    let s = stray.display().to_string();
    let o = rig.ferry(
        &[
            "--password-file",
            &password_file(&rig).display().to_string(),
            "pg",
            "restore",
            "--delta",
            "--to",
            &s,
        ],
        &[],
    );
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("not a PostgreSQL data directory"),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read(stray.join("keep")).unwrap(), b"mine");
    std::fs::write(to.join("postmaster.pid"), b"12345\n").unwrap();
    let (o, _) = restore_into(&rig, &to, &["--delta"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("postmaster.pid"), "{}", stderr(&o));
    std::fs::remove_file(to.join("postmaster.pid")).unwrap();

    let (o, _) = restore_into(&rig, &to, &["--delta", "--json"]);
    let v = ok_json(&o, "delta restore");
    assert!(v["kept"].as_u64().unwrap() > 100, "{v}");
    assert!(v["removed"].as_u64().unwrap() >= 1, "{v}");
    assert!(!extra.exists());
    let (got, want) = (tree_of(&to), tree_of(&fresh));
    let differ: Vec<_> = want
        .iter()
        .filter(|(p, b)| got.get(*p) != Some(*b))
        .map(|(p, _)| p)
        .chain(got.keys().filter(|p| !want.contains_key(*p)))
        .collect();
    assert!(
        differ.is_empty(),
        "differs from a fresh restore: {differ:?}"
    );
    let pg = start_restored(&rig, &to);
    pg.wait_recovery_done(T).unwrap();
    assert_eq!(ids(&pg), "1,2,3,4");
}

/// A backup read from a streaming standby (the primary only switches WAL) restores to a
/// point in time; without the primary's connection it is refused in one line.
#[test]
fn backup_from_a_standby_restores_to_a_point_in_time() {
    let Some(rig) = rig() else { return };
    for id in 1..=3 {
        insert(&rig, id);
    }
    let primary = rig.pg.conninfo();
    let standby = PgCluster::from_base_backup(
        &rig.pg,
        &[
            &format!("primary_conninfo = '{primary}'"),
            "hot_standby = on",
        ],
    );
    standby.standby_signal();
    standby.start();
    let start = Instant::now();
    while standby.try_sql("select count(*) from k").as_deref() != Ok("3") {
        assert!(
            start.elapsed() < T,
            "the standby did not catch up:\n{}",
            tail(&standby.log())
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let conn = standby.conninfo();
    let o = rig.ferry(&["pg", "backup", "--conninfo", &conn], &[]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--primary-conninfo"), "{}", stderr(&o));

    // PGDATA (the rig's) still names the primary: the standby's files are asked for.
    let args = ["--json", "pg", "backup", "--conninfo", &conn];
    let o = rig.ferry(
        &[&args[..], &["--primary-conninfo", &primary]].concat(),
        &[],
    );
    assert!(!o.status.success());
    assert!(stderr(&o).contains("another server's"), "{}", stderr(&o));
    let d = standby.data_dir().display().to_string();
    let args = ["--json", "pg", "backup", "--conninfo", &conn, "-D", &d];
    let b = ok_json(
        &rig.ferry(
            &[&args[..], &["--primary-conninfo", &primary]].concat(),
            &[],
        ),
        "pg backup from the standby",
    );
    assert_eq!(
        b["record"]["data_dir"],
        standby.data_dir().display().to_string(),
        "{b}"
    );
    let label = b["record"]["label"].as_str().unwrap();
    assert!(label.contains("BACKUP FROM: standby"), "{label}");
    insert(&rig, 4);
    let t4 = now(&rig);
    insert(&rig, 5);
    rig.settle();
    let (out, to) = restore(&rig, "from-standby", &["--target-time", &t4]);
    assert!(out.status.success(), "restore: {}", stderr(&out));
    let pg = start_restored(&rig, &to);
    pg.wait_recovery_done(T)
        .unwrap_or_else(|e| panic!("{e}\n{}", tail(&pg.log())));
    assert_eq!(ids(&pg), "1,2,3,4");
}

/// A cluster with two tablespaces: restored with both moved (`--tablespace-map`), and in
/// place once the original directories are empty; refused while they are not.
#[test]
fn tablespaces_are_restored_in_place_and_remapped() {
    let Some(rig) = rig() else { return };
    let (s1, s2) = (rig.pg.make_dir("space1"), rig.pg.make_dir("space2"));
    rig.pg.sql(&format!(
        "create tablespace one location '{}'; create tablespace two location '{}'",
        s1.display(),
        s2.display()
    ));
    rig.pg.sql(
        "create table a tablespace one as select generate_series(1, 1000) i; \
         create table b tablespace two as select generate_series(1, 2000) i",
    );
    let b = backup(&rig, &[]);
    let spaces = b["record"]["tablespaces"].as_array().unwrap().clone();
    assert_eq!(spaces.len(), 2, "{b}");
    let oid = |loc: &Path| {
        spaces
            .iter()
            .find(|t| t["location"] == loc.display().to_string())
            .unwrap_or_else(|| panic!("{loc:?} not in {spaces:?}"))["oid"]
            .to_string()
    };
    let (o1, o2) = (oid(&s1), oid(&s2));
    // After the backup: reaches the copies through the WAL.
    rig.pg.sql("insert into a values (1001)");
    rig.settle();
    let check = |pg: &PgCluster, one: &Path| {
        assert_eq!(pg.sql("select count(*) from a"), "1001");
        assert_eq!(pg.sql("select count(*) from b"), "2000");
        assert_eq!(
            pg.sql("select pg_tablespace_location(oid) from pg_tablespace where spcname = 'one'"),
            one.display().to_string()
        );
    };

    let (out, to) = restore(&rig, "refused", &[]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("--tablespace-map"),
        "{}",
        stderr(&out)
    );
    assert_eq!(std::fs::read_dir(&to).unwrap().count(), 0);

    let (m1, m2) = (rig.pg.make_dir("moved1"), rig.pg.make_dir("moved2"));
    let map1 = format!("{o1}={}", m1.display());
    let map2 = format!("{o2}={}", m2.display());
    let (out, to) = restore(
        &rig,
        "remapped",
        &["--tablespace-map", &map1, "--tablespace-map", &map2],
    );
    assert!(out.status.success(), "restore: {}", stderr(&out));
    let pg = start_restored(&rig, &to);
    pg.wait_recovery_done(T)
        .unwrap_or_else(|e| panic!("{e}\n{}", tail(&pg.log())));
    check(&pg, &m1);
    drop(pg);

    // In place: the primary stopped, its tablespace directories emptied.
    rig.pg.stop();
    for s in [&s1, &s2] {
        let old = s.with_extension("old");
        std::fs::rename(s, &old).unwrap();
        std::fs::create_dir(s).unwrap();
        rig.pg.chown_to_pg(s);
    }
    let (out, to) = restore(&rig, "in-place", &[]);
    assert!(out.status.success(), "restore: {}", stderr(&out));
    let pg = start_restored(&rig, &to);
    pg.wait_recovery_done(T)
        .unwrap_or_else(|e| panic!("{e}\n{}", tail(&pg.log())));
    check(&pg, &s1);
    let a = pg.sql("select pg_relation_filepath('a')");
    drop(pg);

    // --delta over it: a table file in a tablespace damaged, an extra file there; both
    // tablespaces rewritten where they differ, and the cluster recovers again.
    let in_space = std::fs::canonicalize(to.join(&a)).unwrap();
    assert!(in_space.starts_with(&s1), "{in_space:?}");
    let mut bytes = std::fs::read(&in_space).unwrap();
    bytes[100] ^= 0xff;
    std::fs::write(&in_space, &bytes).unwrap();
    let extra = in_space.with_file_name("999999");
    std::fs::write(&extra, b"not in the backup").unwrap();
    let (o, _) = restore_into(&rig, &to, &["--delta", "--json"]);
    let v = ok_json(&o, "delta restore with tablespaces");
    assert!(v["kept"].as_u64().unwrap() > 100, "{v}");
    assert!(!extra.exists(), "{v}");
    let pg = start_restored(&rig, &to);
    pg.wait_recovery_done(T)
        .unwrap_or_else(|e| panic!("{e}\n{}", tail(&pg.log())));
    check(&pg, &s1);
}

/// `--target-xid` and `--target-name` start from the newest backup that ends before them
/// (from a later one, PostgreSQL would replay to the end and never reach the target); a
/// restore point that is nowhere, and a transaction that ended before every backup, are
/// refused before anything is written.
#[test]
fn target_xid_and_name_start_from_the_backup_before_them() {
    let Some(rig) = rig() else { return };
    let in_tx = |id: i32| {
        rig.pg.sql(&format!(
            "begin; insert into k (id, note) values ({id}, 'row {id}'); \
             select txid_current(); commit;"
        ))
    };
    let xid1 = in_tx(1);
    let first = backup(&rig, &[]);
    let xid2 = in_tx(2);
    insert(&rig, 3);
    rig.pg.sql("select pg_create_restore_point('after-three')");
    let second = backup(&rig, &[]);
    insert(&rig, 4);
    rig.pg.sql("select pg_create_restore_point('after-four')");
    insert(&rig, 5);
    rig.settle();
    let id_of = |b: &Value| b["backup"].as_str().unwrap().to_string();
    let (first, second) = (id_of(&first), id_of(&second));

    for (name, args, from, want) in [
        ("xid", ["--target-xid", &xid2], &first, "1,2"),
        ("three", ["--target-name", "after-three"], &first, "1,2,3"),
        ("four", ["--target-name", "after-four"], &second, "1,2,3,4"),
    ] {
        let to = rig.pg.make_dir(name);
        let a = [&args[..], &["--json", "--target-action", "pause"]].concat();
        let (out, _) = restore_into(&rig, &to, &a);
        let r = ok_json(&out, name);
        assert_eq!(r["backup"].as_str(), Some(from.as_str()), "{name}: {r}");
        let pg = start_restored(&rig, &to);
        wait_paused(&pg);
        assert_eq!(ids(&pg), want, "restore to {name}");
    }

    for (name, args, why) in [
        (
            "nowhere",
            ["--target-name", "nowhere"],
            "restore point 'nowhere' is not in the archived WAL",
        ),
        (
            "xid1",
            ["--target-xid", &xid1],
            "no backup ends before transaction",
        ),
    ] {
        let (out, to) = restore(&rig, name, &args);
        assert!(!out.status.success(), "{name}");
        let err = stderr(&out);
        assert!(err.contains(why), "{name}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{name}: {err}");
        assert_eq!(std::fs::read_dir(&to).unwrap().count(), 0, "{name}");
    }
}
