//! The WAL agent's start. wal-push starts an agent every 100 ms until one holds the spool's
//! lock: an agent that finds the lock held leaves before it sends a single request (it used to
//! read the repository's marker and open connections first, then find the lock held).

mod common;

use std::process::{Child, Command, Stdio};

use common::{ferry_env, s, temp_dir};

/// Holds `lock` with flock(1), as a running agent does, until [`release`].
fn hold(lock: &std::path::Path) -> Child {
    let child = Command::new("flock")
        .arg(lock)
        .arg("cat")
        .stdin(Stdio::piped())
        .spawn()
        .expect("flock(1)");
    // Held once a non-blocking attempt fails.
    while Command::new("flock")
        .args(["-n", s(lock), "true"])
        .status()
        .unwrap()
        .success()
    {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    child
}

/// Ends what [`hold`] started: `cat` reads the end of its input, and the lock goes with it.
fn release(mut holder: Child) {
    drop(holder.stdin.take());
    assert!(holder.wait().unwrap().success());
}

#[test]
fn an_agent_finding_the_lock_held_leaves_without_a_request() {
    let dir = temp_dir();
    let (pg_wal, spool) = (dir.join("pg_wal"), dir.join("spool"));
    std::fs::create_dir_all(pg_wal.join("archive_status")).unwrap();
    std::fs::create_dir_all(&spool).unwrap();
    // A store nobody answers for (port 9, closed): a request would be refused, retried and
    // failed, and the agent would exit non-zero with the error in its output.
    let env = [
        ("FERRY_REPO", "s3://nowhere/wal"),
        ("AWS_ENDPOINT_URL", "http://127.0.0.1:9"),
        ("AWS_ACCESS_KEY_ID", "k"),
        ("AWS_SECRET_ACCESS_KEY", "s"),
        ("AWS_REGION", "us-east-1"),
        ("FERRY_RETRIES", "1"),
        ("FERRY_WAL_SPOOL", s(&spool)),
    ];
    for role in ["push", "fetch"] {
        let holder = hold(&spool.join(format!("{role}.lock")));
        let out = ferry_env(&["wal-agent", role, "--pg-wal", s(&pg_wal)], &env, None);
        release(holder);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{role}: {err}");
        assert_eq!(err, "", "{role}");

        // The same agent with the lock free does reach the store, and fails: the test above
        // would have seen a request.
        let out = ferry_env(&["wal-agent", role, "--pg-wal", s(&pg_wal)], &env, None);
        assert!(!out.status.success(), "{role}: the store answered?");
    }
}
