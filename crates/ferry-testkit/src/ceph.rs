//! The one-node Ceph cluster `scripts/services up ceph` starts: its config (`CEPH_CONF`), its
//! pool (`FERRY_TEST_CEPH_POOL`), the `rados` CLI to compare with, and its OSD (`CEPH_OSD_PID`) to freeze.

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

    /// Freezes the OSD (SIGSTOP): its operations hang until [`Ceph::resume_osd`]. A memstore
    /// OSD loses every object when restarted, so a frozen one stands in for a dead one.
    pub fn freeze_osd(&self) {
        signal_osd("-STOP");
    }

    /// Lets a frozen OSD run again (SIGCONT).
    pub fn resume_osd(&self) {
        signal_osd("-CONT");
    }
}

/// Sends `sig` to the OSD `scripts/services up ceph` started (`CEPH_OSD_PID`).
fn signal_osd(sig: &str) {
    let pid = require("CEPH_OSD_PID").expect("CEPH_OSD_PID (scripts/services up ceph)");
    let st = Command::new("kill")
        .args([sig, &pid])
        .status()
        .expect("run kill");
    assert!(st.success(), "kill {sig} {pid} failed");
}
