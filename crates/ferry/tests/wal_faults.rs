//! WAL archiving under faults, with a real PostgreSQL 15: the agent killed again and again,
//! and the store unreachable for 30 s. Nothing PostgreSQL was told is archived may be missing
//! from the store, ever; everything is archived once the fault is over.

mod walkit;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ferry_testkit::toxiproxy::Toxiproxy;
use rand::Rng;
use walkit::{agents, ferry, s3_repo, stderr, Repo, Rig};

/// Names of the WAL files in the archive, read with `env` (which may bypass a proxy).
fn stored(repo_url: &str, env: &[(&str, &str)]) -> BTreeSet<String> {
    let out = ferry(&["ls", "--json", &format!("{repo_url}/wal/")], env);
    assert!(out.status.success(), "ls: {}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .filter_map(|o| o["key"].as_str()?.rsplit('/').next().map(String::from))
        .collect()
}

/// Every segment PostgreSQL was told is archived, and every ack in the spool, is stored.
fn nothing_acked_unstored(rig: &Rig, stored: &BTreeSet<String>) {
    for s in rig.archived() {
        assert!(
            stored.contains(&s),
            "{s} marked archived but not in the store"
        );
    }
    let out = rig.pg.dir().join("spool/out");
    for e in std::fs::read_dir(out).unwrap().flatten() {
        let f = e.file_name().to_string_lossy().into_owned();
        if let Some(n) = f.strip_suffix(".ok") {
            assert!(stored.contains(n), "{n} acked but not in the store");
        }
    }
}

#[test]
fn agent_killed_at_random_moments() {
    let Some(repo) = s3_repo() else { return };
    let Some(rig) = Rig::new(&repo, true, &[]) else {
        return;
    };
    let stop = AtomicBool::new(false);
    let mut kills = 0;
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                rig.load(4);
            }
        });
        let mut rng = rand::rng();
        let deadline = Instant::now() + Duration::from_secs(240);
        while kills < 24 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(rng.random_range(20..400)));
            for pid in agents(rig.pg.data_dir(), "push") {
                // SAFETY: kill(2) on a PID just read from /proc; at worst it is gone already.
                if unsafe { libc::kill(pid as i32, libc::SIGKILL) } == 0 {
                    kills += 1;
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    assert!(kills >= 20, "only {kills} kills");
    rig.settle();
    let n = rig.verify_archive();
    nothing_acked_unstored(&rig, &stored(&rig.repo_url, &[]));
    eprintln!("{kills} kills, {n} segments archived intact");
}

#[test]
fn store_unreachable_for_30s() {
    let Some(Repo::S3 { bucket, endpoint }) = s3_repo() else {
        return;
    };
    let Some(toxi) = Toxiproxy::from_env() else {
        return;
    };
    let proxy = toxi.proxy(endpoint.trim_start_matches("http://"));
    let via = Repo::S3 {
        bucket,
        endpoint: proxy.endpoint(),
    };
    // Short request deadlines and few attempts: failures surface within the outage.
    let Some(rig) = Rig::new(
        &via,
        true,
        &[("FERRY_TIMEOUT", "5s"), ("FERRY_RETRIES", "3")],
    ) else {
        return;
    };
    rig.load(20);
    rig.settle();
    let failed_before: u64 = rig
        .pg
        .sql("select failed_count from pg_stat_archiver")
        .parse()
        .unwrap();

    proxy.enable(false);
    let outage = Instant::now();
    rig.load(40);
    rig.pg.switch_wal();
    while outage.elapsed() < Duration::from_secs(30) {
        // Read the store directly, not through the dead proxy.
        nothing_acked_unstored(&rig, &stored(&rig.repo_url, &[]));
        std::thread::sleep(Duration::from_secs(3));
    }
    let failed: u64 = rig
        .pg
        .sql("select failed_count from pg_stat_archiver")
        .parse()
        .unwrap();
    assert!(failed > failed_before, "no push failed during the outage");
    let waiting = std::fs::read_dir(rig.pg.pg_wal().join("archive_status"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".ready")
        })
        .count();
    assert!(
        waiting > 0,
        "PostgreSQL was told everything was archived during the outage"
    );
    proxy.enable(true);

    rig.settle();
    let n = rig.verify_archive();
    nothing_acked_unstored(&rig, &stored(&rig.repo_url, &[]));
    eprintln!(
        "{failed} failed pushes, {waiting} waiting during the outage; {n} archived intact after"
    );
}

/// A prefetch agent whose store goes away during recovery stops when PostgreSQL stops asking,
/// whatever its fetches in flight are doing (they would retry for as long as the outage lasts).
#[test]
fn prefetch_agent_exits_when_nobody_asks_though_its_store_is_gone() {
    let Some(Repo::S3 { bucket, endpoint }) = s3_repo() else {
        return;
    };
    let Some(toxi) = Toxiproxy::from_env() else {
        return;
    };
    let proxy = toxi.proxy(endpoint.trim_start_matches("http://"));
    let via = Repo::S3 {
        bucket,
        endpoint: proxy.endpoint(),
    };
    let Some(rig) = Rig::new(&via, true, &[]) else {
        return;
    };
    // The copy is taken first: it recovers all that follows from the archive.
    let copy = rig.recovery_copy(&[("FERRY_WAL_PREFETCH", "8")]);
    rig.load(100);
    rig.settle();
    // Not waited for: the store goes away in the middle of the recovery.
    copy.start_no_wait();
    let log = copy.dir().join("spool/agent.log");
    let up = Instant::now();
    while !std::fs::read_to_string(&log).is_ok_and(|l| l.contains("prefetched ")) {
        assert!(
            up.elapsed() < Duration::from_secs(120),
            "no prefetch: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    proxy.enable(false);
    // Recovery ends at the first segment it cannot get; then nobody asks. The agent lingers
    // for its idle time (30 s) and must be gone well before the outage ends.
    let outage = Instant::now();
    while !agents(copy.data_dir(), "fetch").is_empty()
        && outage.elapsed() < Duration::from_secs(150)
    {
        std::thread::sleep(Duration::from_millis(500));
    }
    let still = agents(copy.data_dir(), "fetch");
    proxy.enable(true);
    let agent_log = std::fs::read_to_string(&log).unwrap();
    assert!(
        still.is_empty(),
        "the agent kept running:\n{}",
        walkit::tail(&agent_log)
    );
    let exit = agent_log
        .lines()
        .find(|l| l.contains("no requests; prefetch agent exits"))
        .unwrap_or_else(|| panic!("no idle exit:\n{}", walkit::tail(&agent_log)));
    // The outage struck fetches in flight: the exit abandoned them.
    assert!(
        !exit.contains("abandoned=0"),
        "no fetch was in flight at the exit: {exit}"
    );
    let left: Vec<_> = std::fs::read_dir(copy.dir().join("spool/in"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|f| f.ends_with(".part"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}
