//! Starting an agent: `PROGRAM wal-agent ROLE --pg-wal DIR` detached from the process that
//! starts it (PostgreSQL's archiver or startup process, through `wal-push` / `wal-fetch`).

use std::path::Path;
use std::process::{Command, Stdio};

use ferry_transfer::{Error, Result};

use crate::spool::Spool;

/// How to start one agent.
pub struct Agent<'a> {
    /// The ferry binary (the caller's own, `std::env::current_exe()`).
    pub program: &'a Path,
    /// `push` or `fetch`.
    pub role: &'a str,
    /// The directory PostgreSQL hands WAL files from.
    pub pg_wal: &'a Path,
    /// Its spool: its lock, its queue, its log (`agent.log`).
    pub spool: &'a Spool,
    /// The settings it runs with, as `FERRY_*` variables (`Settings::to_env()` in the CLI).
    pub env: Vec<(&'static str, String)>,
    /// The repository password when it was prompted for: reaches the agent as
    /// `FERRY_PASSWORD` in its environment, never on its command line, which every user can
    /// read.
    pub password: Option<&'a [u8]>,
}

impl Agent<'_> {
    /// Starts the agent in a session of its own (PostgreSQL's signals to its process group
    /// leave it alone), stdout discarded, stderr appended to the spool's log.
    pub fn start(&self) -> Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.spool.path("agent.log"))
            .map_err(|e| Error::io(self.spool.dir().display(), e))?;
        let mut cmd = Command::new(self.program);
        cmd.arg("wal-agent")
            .arg(self.role)
            .arg("--pg-wal")
            .arg(self.pg_wal)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env("FERRY_WAL_SPOOL", self.spool.dir())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        if let Some(pw) = self.password {
            use std::os::unix::ffi::OsStrExt;
            cmd.env("FERRY_PASSWORD", std::ffi::OsStr::from_bytes(pw));
        }
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        cmd.spawn()
            .map_err(|e| Error::Permanent(format!("starting the WAL agent: {e}")))?;
        Ok(())
    }
}
