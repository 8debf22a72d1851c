//! WAL archiving with a real PostgreSQL 15: every segment archived comes back byte-identical,
//! and a cluster recovers from a base backup through `ferry wal-fetch`, in both modes, to a
//! local repository, to MinIO and to Azurite.

mod walkit;

use walkit::{azure_repo, s3_repo, tail, Repo, Rig, T};

fn archive_and_recover(repo: Repo, async_: bool) {
    let Some(rig) = Rig::new(&repo, async_, &[]) else {
        return;
    };
    rig.load(8);
    let copy = rig.recovery_copy(&[]);
    // After the base backup: these rows reach the copy only through the archive.
    rig.load(60);
    rig.pg.sql("insert into t values (-1, 'last row')");
    rig.settle();
    let n = rig.verify_archive();
    assert!(n >= 4, "only {n} segments archived");
    let expect = rig.pg.sql("select count(*), sum(i) from t");

    copy.start();
    copy.wait_recovery_done(T)
        .unwrap_or_else(|e| panic!("recovery: {e}\n{}", tail(&copy.log())));
    assert_eq!(copy.sql("select count(*), sum(i) from t"), expect);
    let log = copy.log();
    assert!(
        log.contains("restored log file"),
        "nothing restored:\n{}",
        tail(&log)
    );
}

#[test]
fn local_async() {
    archive_and_recover(Repo::Local, true);
}

/// The agent's memory budget bounds the WAL it holds, never whether it archives: with less
/// than one segment's worth, each file takes the whole budget in turn.
#[test]
fn an_agent_with_less_memory_than_a_segment_still_archives_everything() {
    let Some(rig) = Rig::new(&Repo::Local, true, &[("FERRY_MAX_MEMORY", "4MiB")]) else {
        return;
    };
    rig.load(40);
    rig.settle();
    let n = rig.verify_archive();
    assert!(n >= 3, "only {n} segments archived");
}

/// A promoted copy archives a new timeline beside the old one: its history file and its own
/// segments, listed by wal-status with the backup label. (A .partial appears only after
/// promoting a streaming standby.)
#[test]
fn new_timeline_is_archived_beside_the_old() {
    let Some(rig) = Rig::new(&Repo::Local, true, &[]) else {
        return;
    };
    let copy = rig.archiving_copy();
    rig.load(20);
    rig.settle();
    copy.start();
    copy.wait_recovery_done(T).unwrap();
    copy.sql("insert into t values (2, 'timeline 2')");
    let last = copy.switch_wal();
    assert!(last.starts_with("00000002"), "{last}");
    assert!(copy.wait_archived(&last, T), "{}", tail(&copy.log()));
    let st = rig.ferry(&["wal-status", "--json"], &[]);
    let v: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
    assert_eq!(
        v["histories"],
        serde_json::json!(["00000002.history"]),
        "{v}"
    );
    // pg_basebackup's label, archived by PostgreSQL as a .backup file.
    assert_eq!(v["backups"].as_array().map(Vec::len), Some(1), "{v}");
    let tlis: Vec<u64> = v["timelines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["timeline"].as_u64().unwrap())
        .collect();
    assert_eq!(tlis, [1, 2], "{v}");
    // The history file comes back as PostgreSQL wrote it.
    let dest = copy.dir().join("history.check");
    let out = rig.ferry(
        &["wal-fetch", "00000002.history", dest.to_str().unwrap()],
        &[],
    );
    assert!(out.status.success(), "{}", walkit::stderr(&out));
    assert!(ferry_testkit::same_file(
        &dest,
        &copy.pg_wal().join("00000002.history")
    ));
}

#[test]
fn local_sync() {
    archive_and_recover(Repo::Local, false);
}

#[test]
fn s3_async() {
    let Some(repo) = s3_repo() else { return };
    archive_and_recover(repo, true);
}

#[test]
fn s3_sync() {
    let Some(repo) = s3_repo() else { return };
    archive_and_recover(repo, false);
}

#[test]
fn azure_async() {
    let Some(repo) = azure_repo() else { return };
    archive_and_recover(repo, true);
}

#[test]
fn azure_sync() {
    let Some(repo) = azure_repo() else { return };
    archive_and_recover(repo, false);
}

/// The prefetch agent fetches ahead: most files PostgreSQL asks for come from the spool.
#[test]
fn recovery_is_served_by_prefetch() {
    let Some(rig) = Rig::new(&Repo::Local, true, &[]) else {
        return;
    };
    let copy = rig.recovery_copy(&[("FERRY_WAL_PREFETCH", "4")]);
    rig.load(100);
    rig.settle();
    copy.start();
    copy.wait_recovery_done(T).unwrap();
    let restored = copy.log().matches("restored log file").count();
    assert!(restored >= 6, "{restored} restored");
    let agent_log = std::fs::read_to_string(copy.dir().join("spool/agent.log")).unwrap();
    let prefetched = agent_log.matches("prefetched ").count();
    // Each segment is fetched once: the look-ahead moves on hits too.
    let mut names: Vec<&str> = agent_log
        .lines()
        .filter_map(|l| l.split("prefetched ").nth(1))
        .collect();
    names.sort_unstable();
    let before = names.len();
    names.dedup();
    assert_eq!(
        before,
        names.len(),
        "segments prefetched twice:\n{agent_log}"
    );
    // The first file and those after a request for a missing one are fetched directly.
    assert!(
        prefetched + 3 >= restored,
        "{prefetched} of {restored} prefetched:\n{agent_log}"
    );
    // And wal-fetch took them from the spool (its --json line in the server log), rather
    // than fetching each again while the agent's copies were thrown away.
    let handed = copy.log().matches(r#""result":"prefetched""#).count();
    assert!(
        handed + 3 >= restored,
        "{handed} of {restored} handed over from the spool:\n{agent_log}"
    );
    // Handed over, not left behind: the spool holds none of them.
    let left: Vec<_> = std::fs::read_dir(copy.dir().join("spool/in"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|f| f.len() == 24)
        .collect();
    assert!(left.is_empty(), "left in the spool: {left:?}");
}

/// WAL settings come from `ferry.toml` (`repo`, `[wal]`) and yield to `FERRY_WAL_*`.
#[test]
fn wal_settings_from_ferry_toml() {
    let Some(rig) = Rig::new(&Repo::Local, false, &[]) else {
        return;
    };
    rig.load(30);
    rig.settle();
    let segs = rig.archived();
    let other = rig.pg.make_dir("toml-repo");
    let toml = rig.pg.dir().join("ferry.toml");
    std::fs::write(
        &toml,
        format!(
            "repo = \"{}\"\n[wal]\nasync = false\ncompress_level = 0\n",
            other.display()
        ),
    )
    .unwrap();
    let push = |seg: &str, env: &[(&str, &str)]| {
        let path = rig.pg.pg_wal().join(seg);
        let out = rig
            .pg
            .command_as_pg(env!("CARGO_BIN_EXE_ferry"))
            .args(["--config", toml.to_str().unwrap(), "wal-push"])
            .arg(&path)
            .envs(env.iter().copied())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", walkit::stderr(&out));
        let obj = other.join("wal").join(&seg[..16]).join(seg);
        std::fs::metadata(obj)
            .expect("pushed to the repo ferry.toml names")
            .len()
    };
    assert_eq!(
        push(&segs[1], &[]),
        (16 << 20) + 52,
        "compress_level = 0 ignored"
    );
    let packed = push(&segs[2], &[("FERRY_WAL_COMPRESS_LEVEL", "3")]);
    assert!(
        packed < 8 << 20,
        "FERRY_WAL_COMPRESS_LEVEL lost to ferry.toml: {packed}"
    );
}
