//! The one-node Ceph cluster `scripts/services up ceph` starts: its config (`CEPH_CONF`), its
//! pool (`FERRY_TEST_CEPH_POOL`), the `rados` CLI to compare with, and its OSD to crash and restart.

use std::process::{Command, Output};

use crate::require;

/// The cluster under test: `ceph.conf` and a pool to write to.
#[derive(Debug, Clone)]
pub struct Ceph {
    /// Path of the cluster's `ceph.conf`.
    pub conf: String,
    /// A pool the tests may write to.
    pub pool: String,
}

/// The cluster, if up (see [`require`]: under CI a missing cluster fails the test).
pub fn ceph() -> Option<Ceph> {
    let conf = require("CEPH_CONF")?;
    let pool = require("FERRY_TEST_CEPH_POOL")?;
    Some(Ceph { conf, pool })
}

impl Ceph {
    /// Runs `rados -c CONF -p POOL ARGS...`, panicking with its stderr when it fails.
    pub fn rados(&self, args: &[&str]) -> Output {
        let out = self.try_rados(args);
        assert!(
            out.status.success(),
            "rados {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// Runs `rados -c CONF -p POOL ARGS...` and returns whatever it did.
    ///
    /// Debian's `rados` (Ceph 16.2) now and then aborts on an uncaught `boost::bad_get`
    /// whatever it was asked to do; a run killed by a signal is retried, so that the tests
    /// judge ferry and not that crash. A run that exits with an error is returned as is.
    pub fn try_rados(&self, args: &[&str]) -> Output {
        let mut tries = 0;
        loop {
            let out = Command::new("rados")
                .args(["-c", &self.conf, "-p", &self.pool])
                .args(args)
                .output()
                .expect("run the rados CLI (scripts/install-tools ceph)");
            tries += 1;
            if out.status.code().is_some() || tries == 5 {
                return out;
            }
            eprintln!(
                "rados {args:?} crashed ({}), trying again: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
    }

    /// Names of the raw RADOS objects in the pool (pieces, not striped objects).
    pub fn raw_names(&self) -> Vec<String> {
        let out = self.rados(&["ls"]);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(String::from)
            .collect()
    }

    /// Kills the OSD as a crash would (SIGKILL); its data stays on disk. It is started again
    /// when the returned guard drops, also when the test panics, so later tests find it up.
    #[must_use = "the OSD starts again when the guard drops"]
    pub fn kill_osd(&self) -> OsdDown {
        services(&["osd-kill"]);
        OsdDown(())
    }
}

/// A killed OSD; dropping this starts it again and waits until it takes writes.
#[derive(Debug)]
pub struct OsdDown(());

impl Drop for OsdDown {
    fn drop(&mut self) {
        services(&["osd-start"]);
    }
}

/// Runs `scripts/services ARGS...`, which started the cluster and knows its OSD.
fn services(args: &[&str]) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/services");
    let out = Command::new(script)
        .args(args)
        .output()
        .expect("run scripts/services");
    assert!(
        out.status.success(),
        "scripts/services {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
