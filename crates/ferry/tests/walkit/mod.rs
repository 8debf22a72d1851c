//! A real PostgreSQL 15 cluster archiving with `ferry wal-push`, and the checks the WAL tests
//! share: every archived segment fetched back byte-identical, recovery from a base backup.
#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use ferry_testkit::pg::PgCluster;

pub const T: Duration = Duration::from_secs(180);

/// Where the archive goes.
#[derive(Debug, Clone)]
pub enum Repo {
    /// A directory inside the cluster's scratch dir.
    Local,
    /// A fresh bucket on the S3 server under test, reached at `endpoint`.
    S3 { bucket: String, endpoint: String },
    /// A fresh container on the Azure server under test (Azurite).
    Azure { container: String },
    /// A `ferry serve` server: its URL and what a client needs to reach it (token, CA).
    Served {
        url: String,
        env: Vec<(String, String)>,
    },
}

/// The Azure server under test, with a fresh container; `None` (a loud skip) without one.
pub fn azure_repo() -> Option<Repo> {
    ferry_testkit::require("AZURE_STORAGE_CONNECTION_STRING")?;
    let container = ferry_testkit::unique("wal");
    let out = ferry(&["mkdir", &format!("az://{container}")], &[]);
    assert!(out.status.success(), "mkdir: {}", stderr(&out));
    Some(Repo::Azure { container })
}

/// The S3 server under test, with a fresh bucket; `None` (a loud skip) without one.
pub fn s3_repo() -> Option<Repo> {
    let endpoint = ferry_testkit::require("AWS_ENDPOINT_URL")?;
    let bucket = ferry_testkit::unique("wal");
    let out = ferry(&["mkdir", &format!("s3://{bucket}")], &[]);
    assert!(out.status.success(), "mkdir: {}", stderr(&out));
    Some(Repo::S3 { bucket, endpoint })
}

pub fn ferry(args: &[&str], env: &[(&str, &str)]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("run ferry")
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A cluster whose `archive_command` is `ferry wal-push`, and what it archives to.
pub struct Rig {
    pub pg: PgCluster,
    pub repo_url: String,
    /// `FERRY_*` and `AWS_*` settings the cluster's ferry runs with.
    pub env: Vec<(String, String)>,
}

/// A shell script that runs ferry with `env`: archive_command cannot carry per-test variables.
pub fn ferry_script(pg: &PgCluster, name: &str, env: &[(String, String)]) -> PathBuf {
    let mut s = String::from("#!/bin/sh\n");
    for (k, v) in env {
        s.push_str(&format!("export {k}='{v}'\n"));
    }
    s.push_str(&format!("exec {} \"$@\"\n", env!("CARGO_BIN_EXE_ferry")));
    let path = pg.dir().join(name);
    std::fs::write(&path, s).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    pg.chown_to_pg(&path);
    path
}

/// The password of the repositories [`Rig::encrypted`] creates.
pub const PASSWORD: &str = "correct horse battery staple";

impl Rig {
    /// A started cluster archiving to `repo`, through the agent when `async_`.
    pub fn new(repo: &Repo, async_: bool, extra: &[(&str, &str)]) -> Option<Rig> {
        Self::build(repo, async_, extra, false)
    }

    /// Like [`Rig::new`], into a repository `ferry init` created (password [`PASSWORD`],
    /// in the cluster's ferry settings) before PostgreSQL started: all its WAL is encrypted.
    pub fn encrypted(repo: &Repo, async_: bool, extra: &[(&str, &str)]) -> Option<Rig> {
        Self::build(repo, async_, extra, true)
    }

    fn build(repo: &Repo, async_: bool, extra: &[(&str, &str)], init: bool) -> Option<Rig> {
        let pg = PgCluster::new()?;
        let spool = pg.make_dir("spool");
        let mut env: Vec<(String, String)> = vec![
            ("FERRY_WAL_SPOOL".into(), spool.display().to_string()),
            ("FERRY_WAL_ASYNC".into(), async_.to_string()),
        ];
        let repo_url = match repo {
            Repo::Local => pg.make_dir("repo").display().to_string(),
            Repo::S3 { bucket, endpoint } => {
                for var in ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"] {
                    if let Ok(v) = std::env::var(var) {
                        env.push((var.into(), v));
                    }
                }
                env.push(("AWS_ENDPOINT_URL".into(), endpoint.clone()));
                // A remote repository's metadata cache: the cluster's, never the user's.
                let cache = pg.make_dir("cache").display().to_string();
                env.push(("FERRY_CACHE_DIR".into(), cache));
                format!("s3://{bucket}/{}", pg.port())
            }
            Repo::Azure { container } => {
                let var = "AZURE_STORAGE_CONNECTION_STRING";
                env.push((
                    var.into(),
                    std::env::var(var).expect("checked by azure_repo"),
                ));
                let cache = pg.make_dir("cache").display().to_string();
                env.push(("FERRY_CACHE_DIR".into(), cache));
                format!("az://{container}/{}", pg.port())
            }
            Repo::Served { url, env: more } => {
                env.extend(more.iter().cloned());
                let cache = pg.make_dir("cache").display().to_string();
                env.push(("FERRY_CACHE_DIR".into(), cache));
                url.clone()
            }
        };
        env.push(("FERRY_REPO".into(), repo_url.clone()));
        if init {
            env.push(("FERRY_PASSWORD".into(), PASSWORD.into()));
        }
        for (k, v) in extra {
            env.push((k.to_string(), v.to_string()));
        }
        if init {
            let out = pg
                .command_as_pg(env!("CARGO_BIN_EXE_ferry"))
                .arg("init")
                .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                .output()
                .expect("run ferry init");
            assert!(out.status.success(), "ferry init: {}", stderr(&out));
        }
        let script = ferry_script(&pg, "ferry.sh", &env);
        pg.append_conf(&[
            "archive_mode = on",
            &format!("archive_command = '{} wal-push %p'", script.display()),
            // Keep every segment in pg_wal, to compare with what was archived.
            "wal_keep_size = '8GB'",
            "max_wal_size = '8GB'",
        ]);
        pg.start();
        pg.sql("create table t (i bigint, s text)");
        Some(Rig { pg, repo_url, env })
    }

    /// Runs ferry as the cluster's user with the cluster's settings plus `extra`.
    pub fn ferry(&self, args: &[&str], extra: &[(&str, &str)]) -> Output {
        let mut cmd = self.pg.command_as_pg(env!("CARGO_BIN_EXE_ferry"));
        cmd.args(args)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .envs(extra.iter().copied());
        cmd.output().expect("run ferry")
    }

    /// Writes about `mib` MiB of WAL: rows half random, half repetitive, as real tables are.
    pub fn load(&self, mib: u64) {
        let rows = mib * 5000;
        self.pg.sql(&format!(
            "insert into t select g, md5(random()::text) || repeat('ferry', 20) \
             from generate_series(1, {rows}) g"
        ));
    }

    /// Switches to a new segment and waits until PostgreSQL reports the old one archived.
    pub fn settle(&self) -> String {
        let last = self.pg.switch_wal();
        assert!(
            self.pg.wait_archived(&last, T),
            "{last} not archived; server log:\n{}",
            tail(&self.pg.log())
        );
        last
    }

    /// Segments PostgreSQL marked archived (`.done`).
    pub fn archived(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.pg.pg_wal().join("archive_status"))
            .unwrap()
            .filter_map(|e| {
                let f = e.unwrap().file_name().to_string_lossy().into_owned();
                let n = f.strip_suffix(".done")?.to_string();
                (n.len() == 24).then_some(n)
            })
            .collect();
        v.sort();
        v
    }

    /// Every segment PostgreSQL marked archived comes back from the archive byte-identical.
    pub fn verify_archive(&self) -> usize {
        let segs = self.archived();
        assert!(!segs.is_empty(), "nothing archived");
        let check = self.pg.make_dir("check");
        for s in &segs {
            let dest = check.join(s);
            let out = self.ferry(
                &["wal-fetch", s, &dest.display().to_string()],
                &[("FERRY_WAL_PREFETCH", "0")],
            );
            assert!(out.status.success(), "wal-fetch {s}: {}", stderr(&out));
            assert!(
                ferry_testkit::same_file(&dest, &self.pg.pg_wal().join(s)),
                "{s} differs from the original"
            );
            std::fs::remove_file(&dest).unwrap();
        }
        segs.len()
    }

    /// A base backup of this cluster, not started, that recovers through `ferry wal-fetch`.
    pub fn recovery_copy(&self, extra: &[(&str, &str)]) -> PgCluster {
        self.copy(extra, false)
    }

    /// Like [`Rig::recovery_copy`], and once promoted the copy archives its new timeline
    /// (history file, partial segment, segments) to the same archive.
    pub fn archiving_copy(&self) -> PgCluster {
        self.copy(&[], true)
    }

    fn copy(&self, extra: &[(&str, &str)], archive: bool) -> PgCluster {
        let mode = if archive {
            "archive_mode = on"
        } else {
            "archive_mode = off"
        };
        let copy = PgCluster::from_base_backup(&self.pg, &[mode]);
        let spool = copy.make_dir("spool");
        let mut env = self.env.clone();
        env.retain(|(k, _)| k != "FERRY_WAL_SPOOL");
        env.push(("FERRY_WAL_SPOOL".into(), spool.display().to_string()));
        for (k, v) in extra {
            env.push((k.to_string(), v.to_string()));
        }
        let script = ferry_script(&copy, "ferry.sh", &env);
        copy.append_conf(&[
            // --json: each call says in the server log whether the spool served it.
            &format!(
                "restore_command = '{} wal-fetch --json %f %p'",
                script.display()
            ),
            &format!("archive_command = '{} wal-push %p'", script.display()),
        ]);
        copy.recovery_signal();
        copy
    }
}

/// The last lines of a log, for assertion messages.
pub fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// PIDs of this cluster's agents (`role`: push or fetch).
pub fn agents(data_dir: &Path, role: &str) -> Vec<u32> {
    let want = format!(
        "wal-agent\0{role}\0--pg-wal\0{}",
        data_dir.join("pg_wal").display()
    );
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            if String::from_utf8_lossy(&cmd).contains(&want) {
                v.push(pid);
            }
        }
    }
    v
}
