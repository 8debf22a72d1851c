//! The PostgreSQL helper against a real PostgreSQL 15: WAL archiving to a directory, then an
//! archive recovery from a base backup (what ferry's WAL tests will do with ferry instead of cp).

use std::time::Duration;

use ferry_testkit::pg::PgCluster;

const T: Duration = Duration::from_secs(60);

#[test]
fn archive_then_recover_from_base_backup() {
    let Some(pg) = PgCluster::new() else { return };
    let archive = pg.make_dir("archive");
    let a = archive.display();
    pg.append_conf(&[
        "archive_mode = on",
        &format!("archive_command = 'cp %p {a}/%f'"),
    ]);
    pg.start();
    assert_eq!(pg.sql("show wal_segment_size"), "16MB");
    assert_eq!(pg.sql("show fsync"), "on");

    pg.sql("create table t (i int primary key, s text)");
    pg.sql("insert into t select i, md5(i::text) from generate_series(1, 10000) i");
    let seg = pg.switch_wal();
    assert!(pg.wait_archived(&seg, T), "{seg} not archived");
    let archived = archive.join(&seg);
    assert_eq!(
        std::fs::metadata(&archived)
            .expect("archived segment")
            .len(),
        16 << 20
    );

    // A backup without WAL: the recovery must take every segment from the archive.
    let restored = PgCluster::from_base_backup(
        &pg,
        &[
            "archive_mode = off",
            &format!("restore_command = 'cp {a}/%f %p'"),
        ],
    );
    assert!(!restored.pg_wal().read_dir().unwrap().any(|e| e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .starts_with("0000")));
    // Rows written after the backup, in the archive only once their segment is switched out.
    pg.sql("insert into t select i, 'late' from generate_series(10001, 10100) i");
    let last = pg.switch_wal();
    assert!(pg.wait_archived(&last, T), "{last} not archived");

    restored.recovery_signal();
    restored.start();
    restored.wait_recovery_done(T).unwrap();
    assert_eq!(restored.sql("select count(*) from t"), "10100");
    assert_eq!(
        restored.sql("select count(*) from t where s = 'late'"),
        "100"
    );
    // Promoted onto a new timeline: the archive's segments were replayed, not pg_wal's.
    assert!(
        restored.log().contains("restored log file"),
        "{}",
        restored.log()
    );
    assert_eq!(
        restored.sql("select timeline_id from pg_control_checkpoint()"),
        "2"
    );
}

#[test]
fn crash_restart_and_helpers() {
    let Some(pg) = PgCluster::init(&["synchronous_commit = off"]) else {
        return;
    };
    assert_eq!(pg.sql("show synchronous_commit"), "off");
    assert_eq!(pg.sql("show listen_addresses"), "127.0.0.1");
    assert_eq!(pg.sql("show port"), pg.port().to_string());
    assert!(pg
        .try_sql("select * from missing")
        .unwrap_err()
        .contains("missing"));
    // Several statements, each on its own: the switch sees the committed insert.
    pg.sql("create table t (i int); insert into t values (1)");

    let out = pg.run_as_pg("pgbench", ["-i", "-q", "-s", "1"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(pg.sql("select count(*) from pgbench_accounts"), "100000");

    pg.crash();
    assert!(!pg.is_running());
    pg.start();
    assert!(pg.log().contains("database system was interrupted"));
    assert_eq!(pg.sql("select count(*) from t"), "1");
    pg.restart();
    assert!(pg.is_running());
    let conn = pg.conninfo();
    let out = pg.run_as_pg("psql", ["-XAtc", "select 7", &conn]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "7");
}

#[test]
fn recovery_that_fails_is_reported() {
    let Some(pg) = PgCluster::new() else { return };
    let archive = pg.make_dir("archive");
    let a = archive.display();
    pg.append_conf(&[
        "archive_mode = on",
        &format!("archive_command = 'cp %p {a}/%f'"),
    ]);
    pg.start();
    let restored = PgCluster::from_base_backup(
        &pg,
        &[
            &format!("restore_command = 'cp {a}/%f %p'"),
            "recovery_target_name = 'never_created'",
        ],
    );
    restored.recovery_signal();
    restored.start_no_wait();
    // The server exits at once; the error says so with the log's end, well before T.
    let err = restored.wait_recovery_done(T).unwrap_err();
    assert!(
        err.contains("recovery target was not reached")
            || err.contains("before configured recovery target"),
        "{err}"
    );
    assert!(!restored.is_running());
}
