//! The one-node Ceph cluster `scripts/services up ceph` starts: its config (`CEPH_CONF`), its
//! pool (`FERRY_TEST_CEPH_POOL`), the `rados` CLI to compare with, and its OSD to stop.

use std::path::Path;
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
    pub fn try_rados(&self, args: &[&str]) -> Output {
        Command::new("rados")
            .args(["-c", &self.conf, "-p", &self.pool])
            .args(args)
            .output()
            .expect("run the rados CLI (scripts/install-tools ceph)")
    }

    /// Names of the raw RADOS objects in the pool (pieces, not striped objects).
    pub fn raw_names(&self) -> Vec<String> {
        let out = self.rados(&["ls"]);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(String::from)
            .collect()
    }

    /// Stops the OSD (`scripts/services down ceph-osd`, waiting until it has exited).
    pub fn stop_osd(&self) {
        services(&["down", "ceph-osd"]);
    }

    /// Starts the OSD again and waits until the cluster sees it up.
    pub fn start_osd(&self) {
        services(&["up", "ceph-osd"]);
    }
}

/// Runs the repository's `scripts/services` with the state directory the tests were given.
fn services(args: &[&str]) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/services");
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
