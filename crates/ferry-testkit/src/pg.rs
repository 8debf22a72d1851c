//! Throwaway PostgreSQL clusters (15, or another major: [`use_major`]) for tests that need their own settings (WAL archiving,
//! crashes, recovery from a base backup).
//!
//! The binaries come from `FERRY_TEST_PG_BIN` (exported by `scripts/services up postgres`; without
//! it a test skips loudly, or fails under CI, see [`crate::require`]). initdb refuses root, so
//! everything runs as the OS user `FERRY_TEST_PG_USER` (default `postgres`) when we are root, or
//! as ourselves when we already are that user.
//!
//! Each cluster lives in a fresh `/tmp/ferry-pg-*` directory owned by that user: the data
//! directory `data/`, the unix socket and `server.log`. Dropping the cluster stops it
//! (immediate mode) and removes the directory, unless `FERRY_TEST_KEEP` is set.
//!
//! The server, and so `archive_command`/`restore_command`, inherits the test's environment
//! except `PG*` variables (`PGBACKREST_*` are kept), plus `PGHOST`, `PGPORT`, `PGUSER`,
//! `PGDATABASE` and `PGDATA` for this cluster and `HOME` set to the cluster's directory.
//!
//! ```no_run
//! use ferry_testkit::pg::PgCluster;
//! use std::time::Duration;
//!
//! let Some(pg) = PgCluster::new() else { return };
//! let archive = pg.make_dir("archive");
//! pg.append_conf(&[
//!     "archive_mode = on",
//!     &format!("archive_command = 'cp %p {}/%f'", archive.display()),
//! ]);
//! pg.start();
//! pg.sql("create table t as select generate_series(1, 1000) i");
//! let seg = pg.switch_wal();
//! assert!(pg.wait_archived(&seg, Duration::from_secs(30)));
//! ```

use std::ffi::OsStr;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Where throwaway clusters live: reachable by the PostgreSQL user (unlike a root `TMPDIR`).
const PARENT: &str = "/tmp";
/// How long `pg_ctl start -w` may wait (archive recovery before consistency included).
const START_TIMEOUT_S: &str = "300";

thread_local! {
    /// The major version this thread's clusters run, when not the default's (see [`use_major`]).
    static MAJOR: std::cell::Cell<Option<u32>> = const { std::cell::Cell::new(None) };
}

/// Clusters this thread makes from now on run PostgreSQL `major` (13, 14, 16, 17 or 18) from
/// `FERRY_TEST_PG_VERSIONS/<major>/bin` (`scripts/services up postgres` installs them with
/// `scripts/install-tools pg-versions`). Those packages hold initdb, pg_ctl and postgres only:
/// psql comes from `PATH` (15's, which speaks to every one of them). False (a loud skip) when
/// the variable is not set outside CI; under CI a missing version fails.
pub fn use_major(major: u32) -> bool {
    let Some(dir) = crate::require("FERRY_TEST_PG_VERSIONS") else {
        return false;
    };
    let bin = Path::new(&dir).join(major.to_string()).join("bin");
    assert!(
        bin.join("postgres").is_file(),
        "{} has no postgres (scripts/install-tools pg-versions)",
        bin.display()
    );
    MAJOR.set(Some(major));
    true
}

/// The OS user clusters run as.
#[derive(Debug, Clone)]
struct PgUser {
    name: String,
    uid: u32,
    gid: u32,
    /// True when we are not that user (so we are root and switch to it).
    switch: bool,
}

impl PgUser {
    /// `FERRY_TEST_PG_USER` (default `postgres`), looked up with `id`.
    fn from_env() -> PgUser {
        let name = std::env::var("FERRY_TEST_PG_USER")
            .ok()
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| "postgres".into());
        let id = |flag: &str| -> u32 {
            let out = Command::new("id")
                .args([flag, &name])
                .output()
                .expect("run id");
            assert!(
                out.status.success(),
                "no OS user {name} (FERRY_TEST_PG_USER)"
            );
            String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse()
                .expect("numeric id")
        };
        let (uid, gid) = (id("-u"), id("-g"));
        // /proc/self belongs to our effective uid.
        let me = fs::metadata("/proc/self").map(|m| m.uid()).ok();
        PgUser {
            switch: me != Some(uid),
            name,
            uid,
            gid,
        }
    }

    /// `path` (and all below it) owned by this user.
    fn chown(&self, path: &Path) {
        if !self.switch {
            return;
        }
        std::os::unix::fs::lchown(path, Some(self.uid), Some(self.gid))
            .unwrap_or_else(|e| panic!("chown {} to {}: {e}", path.display(), self.name));
        let meta = fs::symlink_metadata(path).expect("stat");
        if meta.is_dir() {
            for entry in fs::read_dir(path).expect("read_dir") {
                self.chown(&entry.expect("dir entry").path());
            }
        }
    }

    /// A new directory (mode 0700, parents as needed) owned by this user.
    fn mkdir(&self, path: &Path) {
        fs::create_dir_all(path).unwrap_or_else(|e| panic!("mkdir {}: {e}", path.display()));
        fs::set_permissions(path, fs::Permissions::from_mode(0o700)).expect("chmod 0700");
        self.chown(path);
    }
}

/// Gives `path`, and everything below it, to the PostgreSQL user (`FERRY_TEST_PG_USER`, default
/// `postgres`), so that `archive_command`/`restore_command` can write there. A no-op when we
/// are that user. The path's parents must be searchable by that user (so not under `/root`).
pub fn chown_to_pg(path: &Path) {
    PgUser::from_env().chown(path);
}

/// A free TCP port on 127.0.0.1 (free now; [`PgCluster::start`] retries on a lost race).
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local addr").port()
}

/// True while `pid` runs and is not a zombie (an orphan waits for PID 1 to reap it).
fn alive(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        // "pid (comm) S ...": the state follows the last ')'.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| state != 'Z' && state != 'X'),
        Err(_) => false,
    }
}

/// The last `n` lines of `text`.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// True for a WAL segment file name (24 hex digits).
fn is_segment(name: &str) -> bool {
    name.len() == 24 && name.bytes().all(|b| b.is_ascii_hexdigit())
}

/// One PostgreSQL cluster of its own, in a fresh directory under `/tmp`.
#[derive(Debug)]
pub struct PgCluster {
    bin: PathBuf,
    user: PgUser,
    /// The cluster's own directory: socket, server.log, usually `data/`.
    dir: PathBuf,
    data: PathBuf,
    port: AtomicU16,
    /// The log's length when the server was last started: what this run logged follows.
    log_mark: AtomicUsize,
}

impl PgCluster {
    /// A fresh directory, no data directory yet; `None` (a loud skip) without `FERRY_TEST_PG_BIN`.
    fn empty(data: Option<&Path>) -> Option<PgCluster> {
        let Some(bin) = crate::require("FERRY_TEST_PG_BIN") else {
            eprintln!("SKIPPED: PostgreSQL tests need: eval \"$(scripts/services up postgres)\"");
            return None;
        };
        let bin = match MAJOR.get() {
            Some(major) => {
                let dir = std::env::var("FERRY_TEST_PG_VERSIONS").expect("checked by use_major");
                Path::new(&dir).join(major.to_string()).join("bin")
            }
            None => PathBuf::from(bin),
        };
        assert!(
            bin.join("initdb").is_file(),
            "FERRY_TEST_PG_BIN={} has no initdb (scripts/install-tools postgres)",
            bin.display()
        );
        let user = PgUser::from_env();
        let dir = loop {
            let d = Path::new(PARENT).join(crate::unique("ferry-pg"));
            match fs::create_dir(&d) {
                Ok(()) => break d,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => panic!("mkdir {}: {e}", d.display()),
            }
        };
        user.mkdir(&dir);
        let data = data.map_or_else(|| dir.join("data"), Path::to_path_buf);
        Some(PgCluster {
            bin,
            user,
            dir,
            data,
            port: AtomicU16::new(free_port()),
            log_mark: AtomicUsize::new(0),
        })
    }

    /// A new cluster, initialized and configured but not started: for settings that
    /// need a directory of the cluster's first (see [`PgCluster::make_dir`]), then
    /// [`PgCluster::append_conf`] and [`PgCluster::start`]. `None` (a loud skip) when
    /// `FERRY_TEST_PG_BIN` is not set outside CI.
    ///
    /// `initdb -N -U postgres --auth=trust --wal-segsize=16`, then `postgresql.conf` gets:
    /// `listen_addresses='127.0.0.1'`, a free port, the socket in [`PgCluster::dir`],
    /// `wal_level=replica`, `max_wal_size=1GB`. fsync stays on.
    pub fn new() -> Option<PgCluster> {
        let pg = Self::empty(None)?;
        let data = pg.data.to_str().expect("UTF-8 path").to_owned();
        let out = pg.run_as_pg(
            "initdb",
            [
                "-N",
                "-U",
                "postgres",
                "--auth=trust",
                "--wal-segsize=16",
                "-E",
                "UTF8",
                "--no-locale",
                "-D",
                &data,
            ],
        );
        assert!(
            out.status.success(),
            "initdb failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        pg.base_conf(&["wal_level = replica", "max_wal_size = 1GB"]);
        Some(pg)
    }

    /// [`PgCluster::new`] plus the caller's `postgresql.conf` lines (such as `archive_mode = on`,
    /// `archive_command = '...'`), started. `None` (a loud skip) without `FERRY_TEST_PG_BIN`.
    pub fn init(conf: &[&str]) -> Option<PgCluster> {
        let pg = Self::new()?;
        pg.append_conf(conf);
        pg.start();
        Some(pg)
    }

    /// A cluster on an existing data directory (a base backup's copy, see
    /// [`PgCluster::base_backup`]), with a fresh directory of its own for the socket and log.
    /// Its port, socket and listen address, then `conf`, are appended to its `postgresql.conf`.
    /// Not started: add [`PgCluster::recovery_signal`] first for archive recovery. Dropping
    /// it leaves `data` in place (it is the caller's).
    pub fn from_data_dir(data: &Path, conf: &[&str]) -> Option<PgCluster> {
        let pg = Self::empty(Some(data))?;
        fs::set_permissions(data, fs::Permissions::from_mode(0o700)).expect("chmod data 0700");
        pg.user.chown(data);
        pg.base_conf(&[]);
        pg.append_conf(conf);
        Some(pg)
    }

    /// A new cluster from a base backup of `primary` ([`PgCluster::base_backup`], no WAL:
    /// it must come from the archive, so pass a `restore_command` in `conf`), in a directory of
    /// its own that dropping removes. Not started, no `recovery.signal` yet: add
    /// [`PgCluster::recovery_signal`] (or [`PgCluster::standby_signal`]), then start.
    pub fn from_base_backup(primary: &PgCluster, conf: &[&str]) -> PgCluster {
        let pg = Self::empty(None).expect("FERRY_TEST_PG_BIN is set: the primary runs");
        primary.base_backup(&pg.data);
        pg.base_conf(&[]);
        pg.append_conf(conf);
        pg
    }

    /// Our lines in `postgresql.conf`: listen address, port, socket, then `extra`.
    fn base_conf(&self, extra: &[&str]) {
        let mut lines = vec![
            "# ferry-testkit".to_owned(),
            "listen_addresses = '127.0.0.1'".to_owned(),
            format!("port = {}", self.port()),
            format!("unix_socket_directories = '{}'", self.dir.display()),
        ];
        lines.extend(extra.iter().map(|l| l.to_string()));
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        self.append_conf(&refs);
    }

    /// Appends lines to `postgresql.conf` (later lines win); they apply at the next start,
    /// or at [`PgCluster::reload`] for settings that allow it.
    pub fn append_conf(&self, lines: &[&str]) {
        let mut f = fs::OpenOptions::new()
            .append(true)
            .open(self.data.join("postgresql.conf"))
            .expect("open postgresql.conf");
        for line in lines {
            writeln!(f, "{line}").expect("write postgresql.conf");
        }
    }

    /// A new directory `name` inside [`PgCluster::dir`], owned by the PostgreSQL user, mode
    /// 0700 (for an archive, a spool, a repository that `archive_command` writes). Removed with
    /// the cluster.
    pub fn make_dir(&self, name: &str) -> PathBuf {
        let p = self.dir.join(name);
        self.user.mkdir(&p);
        p
    }

    /// Gives `path`, and everything below it, to the PostgreSQL user (see [`chown_to_pg`]).
    pub fn chown_to_pg(&self, path: &Path) {
        self.user.chown(path);
    }

    /// Creates `recovery.signal` in the data directory: the next start runs archive recovery.
    pub fn recovery_signal(&self) {
        self.signal_file("recovery.signal");
    }

    /// Creates `standby.signal` in the data directory: the next start runs as a standby.
    pub fn standby_signal(&self) {
        self.signal_file("standby.signal");
    }

    fn signal_file(&self, name: &str) {
        let p = self.data.join(name);
        fs::write(&p, "").unwrap_or_else(|e| panic!("create {}: {e}", p.display()));
        self.user.chown(&p);
    }

    /// The cluster's own directory (`/tmp/ferry-pg-*`, owned by the PostgreSQL user): the unix
    /// socket, `server.log`, and usually the data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data
    }

    /// The data directory's `pg_wal`.
    pub fn pg_wal(&self) -> PathBuf {
        self.data.join("pg_wal")
    }

    /// The TCP port on 127.0.0.1 (also the unix socket's, in [`PgCluster::dir`]).
    pub fn port(&self) -> u16 {
        self.port.load(Ordering::Relaxed)
    }

    /// A libpq connection string for this cluster (over its unix socket).
    pub fn conninfo(&self) -> String {
        format!(
            "host={} port={} user=postgres dbname=postgres",
            self.dir.display(),
            self.port()
        )
    }

    /// The path of a PostgreSQL program (`pg_waldump`, `pgbench`, ...) in `FERRY_TEST_PG_BIN`.
    pub fn bin(&self, program: &str) -> PathBuf {
        self.bin.join(program)
    }

    /// The server log so far (`pg_ctl -l`, appended across starts).
    pub fn log(&self) -> String {
        fs::read(self.log_path())
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    /// A command running `program` as the PostgreSQL user, in [`PgCluster::dir`], its
    /// environment pointing at this cluster (`PG*` variables but `PGBACKREST_*` replaced by
    /// `PGHOST`, `PGPORT`, `PGUSER`, `PGDATABASE`, `PGDATA`; `HOME` is the cluster's
    /// directory). A bare name found in `FERRY_TEST_PG_BIN` runs from there, otherwise it is
    /// looked up as usual.
    pub fn command_as_pg(&self, program: impl AsRef<OsStr>) -> Command {
        let program = program.as_ref();
        let in_bin = self.bin.join(program);
        let is_bare = !program.as_encoded_bytes().contains(&b'/');
        let mut c = Command::new(if is_bare && in_bin.is_file() {
            in_bin.as_os_str()
        } else {
            program
        });
        for (k, _) in std::env::vars_os() {
            // libpq's and PostgreSQL's variables; pgBackRest's (PGBACKREST_*) pass through.
            let k_bytes = k.as_encoded_bytes();
            if k_bytes.starts_with(b"PG") && !k_bytes.starts_with(b"PGBACKREST") {
                c.env_remove(k);
            }
        }
        c.env("PGHOST", &self.dir)
            .env("PGPORT", self.port().to_string())
            .env("PGUSER", "postgres")
            .env("PGDATABASE", "postgres")
            .env("PGDATA", &self.data)
            .env("HOME", &self.dir)
            .current_dir(&self.dir);
        if self.user.switch {
            c.uid(self.user.uid).gid(self.user.gid);
        }
        c
    }

    /// Runs `program args` as the PostgreSQL user against this cluster (see
    /// [`PgCluster::command_as_pg`]), stdin empty, and returns its output whatever the exit.
    pub fn run_as_pg<I, S>(&self, program: impl AsRef<OsStr>, args: I) -> Output
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let program = program.as_ref();
        self.command_as_pg(program)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("run {}: {e}", program.to_string_lossy()))
    }

    fn pg_ctl(&self, args: &[&str]) -> Result<(), String> {
        let data = self.data.to_str().expect("UTF-8 path");
        let log = self.log_path();
        let log = log.to_str().expect("UTF-8 path");
        let mut all = vec!["-D", data, "-l", log];
        all.extend_from_slice(args);
        let out = self.run_as_pg("pg_ctl", &all);
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "pg_ctl {}: {}{}",
                args.join(" "),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// Starts the server and waits until it accepts connections (`pg_ctl start -w`; during
    /// archive recovery, once consistent). Panics with the log's end if it does not come up.
    pub fn start(&self) {
        if let Err(e) = self.try_start() {
            panic!("{e}");
        }
    }

    /// [`PgCluster::start`], returning the failure (with the log's end) instead.
    /// A port lost to another process meanwhile is replaced by a new one.
    pub fn try_start(&self) -> Result<(), String> {
        for attempt in 0.. {
            let before = self.log().len();
            self.log_mark.store(before, Ordering::Relaxed);
            match self.pg_ctl(&["start", "-w", "-t", START_TIMEOUT_S]) {
                Ok(()) => return Ok(()),
                Err(e) => {
                    let log = self.log();
                    let new = log.get(before..).unwrap_or(&log);
                    if attempt < 3 && new.contains("could not bind") {
                        self.port.store(free_port(), Ordering::Relaxed);
                        self.append_conf(&[&format!("port = {}", self.port())]);
                        continue;
                    }
                    return Err(format!("{e}\nserver.log:\n{}", tail(new, 30)));
                }
            }
        }
        unreachable!()
    }

    /// Starts the server without waiting (`pg_ctl start -W`): for a recovery that may end
    /// with the server exiting; follow with [`PgCluster::wait_recovery_done`].
    pub fn start_no_wait(&self) {
        self.log_mark.store(self.log().len(), Ordering::Relaxed);
        if let Err(e) = self.pg_ctl(&["start", "-W"]) {
            panic!("{e}");
        }
    }

    /// Stops the server cleanly (`pg_ctl stop -m fast`, a shutdown checkpoint).
    pub fn stop(&self) {
        if let Err(e) = self.pg_ctl(&["stop", "-m", "fast", "-w", "-t", "120"]) {
            panic!("{e}\nserver.log:\n{}", tail(&self.log(), 30));
        }
    }

    /// Stops the server as a crash would (`pg_ctl stop -m immediate`: no shutdown
    /// checkpoint, the next start runs crash recovery).
    pub fn crash(&self) {
        if let Err(e) = self.pg_ctl(&["stop", "-m", "immediate", "-w", "-t", "120"]) {
            panic!("{e}");
        }
    }

    /// [`PgCluster::stop`] then [`PgCluster::start`] (settings that need a restart apply).
    pub fn restart(&self) {
        self.stop();
        self.start();
    }

    /// Rereads the configuration (`pg_ctl reload`).
    pub fn reload(&self) {
        if let Err(e) = self.pg_ctl(&["reload"]) {
            panic!("{e}");
        }
    }

    /// The postmaster's PID from `postmaster.pid`, if that process runs.
    pub fn pid(&self) -> Option<u32> {
        let text = fs::read_to_string(self.data.join("postmaster.pid")).ok()?;
        let pid = text.lines().next()?.trim().parse().ok()?;
        alive(pid).then_some(pid)
    }

    /// True while the postmaster runs.
    pub fn is_running(&self) -> bool {
        self.pid().is_some()
    }

    /// Runs SQL (one or more statements, each in its own transaction unless the text says
    /// otherwise) with `psql -XAtq -v ON_ERROR_STOP=1` as the PostgreSQL user; returns the
    /// trimmed output (unaligned, tuples only: `a|b` per row). Panics with psql's errors.
    pub fn sql(&self, sql: &str) -> String {
        self.try_sql(sql)
            .unwrap_or_else(|e| panic!("SQL failed: {sql}\n{e}"))
    }

    /// [`PgCluster::sql`], returning psql's errors instead of panicking.
    pub fn try_sql(&self, sql: &str) -> Result<String, String> {
        let mut child = self
            .command_as_pg("psql")
            .args(["-XAtq", "-v", "ON_ERROR_STOP=1", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run psql");
        // psql stops reading on a connection failure: a broken pipe is its error to report.
        let _ = child.stdin.take().expect("stdin").write_all(sql.as_bytes());
        let out = child.wait_with_output().expect("wait for psql");
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
        }
    }

    /// Switches to a new WAL segment (`pg_switch_wal()`) and returns the name of the segment
    /// it completed, which is then due for archiving. (With no WAL written since the last
    /// switch nothing is switched and this names the segment completed before.)
    pub fn switch_wal(&self) -> String {
        self.sql("select pg_walfile_name(pg_switch_wal())")
    }

    /// The name of the WAL segment being written now.
    pub fn current_wal_file(&self) -> String {
        self.sql("select pg_walfile_name(pg_current_wal_lsn())")
    }

    /// Waits until the WAL file `name` is archived: `pg_stat_archiver.last_archived_wal` has
    /// reached it, or `pg_wal/archive_status/<name>.done` exists. False after `timeout`
    /// (the archiver's state and the log's end go to stderr then).
    pub fn wait_archived(&self, name: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let done = self
            .pg_wal()
            .join("archive_status")
            .join(format!("{name}.done"));
        loop {
            if done.exists() {
                return true;
            }
            let row = self
                .try_sql("select coalesce(last_archived_wal, '') from pg_stat_archiver")
                .unwrap_or_default();
            // Compare segments with segments (not a `.history` file); `X.partial` and
            // `X.000000D8.backup` come after X, as they should.
            let seg = row.get(..24).unwrap_or("");
            if is_segment(seg) && (seg > name || (seg == name && row.len() == name.len())) {
                return true;
            }
            if Instant::now() >= deadline {
                let state = self
                    .try_sql("select * from pg_stat_archiver")
                    .unwrap_or_else(|e| e);
                eprintln!(
                    "{name} not archived in {timeout:?}; pg_stat_archiver: {state}\nserver.log:\n{}",
                    tail(&self.log(), 20)
                );
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Runs `pg_basebackup -D dest -X none -c fast` as the PostgreSQL user: a base backup
    /// without WAL, which a recovery then needs from the archive (pg_basebackup waits until
    /// the backup's last segment is archived). `dest` is created if missing, and given to the
    /// PostgreSQL user with mode 0700; it must be empty. Panics on failure.
    pub fn base_backup(&self, dest: &Path) {
        self.user.mkdir(dest);
        let d = dest.to_str().expect("UTF-8 path");
        let pg_basebackup = self.bin.join("pg_basebackup");
        let b = pg_basebackup.to_str().expect("UTF-8 path");
        // pg_basebackup waits, without end, for its WAL to be archived: a broken
        // archive_command would hang the test run instead of failing this test.
        let out = self.run_as_pg("timeout", ["600", b, "-D", d, "-X", "none", "-c", "fast"]);
        assert!(
            out.status.success(),
            "pg_basebackup failed (exit {:?}; 124: not archived within 600 s):\n{}{}\nserver.log:\n{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            tail(&self.log(), 30)
        );
    }

    /// Waits until recovery has ended (`select pg_is_in_recovery()` is false, so the server
    /// was promoted). An error, with the log's end, when the server exits first (a recovery
    /// target not reached, a restore failure...) or after `timeout`.
    pub fn wait_recovery_done(&self, timeout: Duration) -> Result<(), String> {
        let start = Instant::now();
        let mut seen_running = false;
        loop {
            // Not running yet just after start_no_wait; gone once its last words are logged.
            let exited = || {
                let log = self.log();
                let run = log
                    .get(self.log_mark.load(Ordering::Relaxed)..)
                    .unwrap_or(&log);
                run.contains("database system is shut down")
            };
            if self.is_running() {
                seen_running = true;
            } else if seen_running || exited() || start.elapsed() > Duration::from_secs(5) {
                return Err(format!(
                    "postgres is not running (exited during recovery?)\nserver.log:\n{}",
                    tail(&self.log(), 30)
                ));
            }
            if let Ok(r) = self.try_sql("select pg_is_in_recovery()") {
                if r == "f" {
                    return Ok(());
                }
            }
            if start.elapsed() > timeout {
                return Err(format!(
                    "still in recovery after {timeout:?}\nserver.log:\n{}",
                    tail(&self.log(), 30)
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for PgCluster {
    /// Stops the server (immediate mode) and removes the cluster's directory, unless
    /// `FERRY_TEST_KEEP` is set.
    fn drop(&mut self) {
        if self.is_running() {
            let _ = self.pg_ctl(&["stop", "-m", "immediate", "-w", "-t", "60"]);
        }
        if std::env::var_os("FERRY_TEST_KEEP").is_some() {
            eprintln!("FERRY_TEST_KEEP: kept {}", self.dir.display());
        } else {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}
