//! How this binary reaches its WAL archive and starts its WAL agents: the password asked
//! for only when a key is needed, and `ferry wal-agent ROLE` started with this process's
//! settings (ferry-wal's `spawn`).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use ferry_pg::walaccess::WalAccess;
use ferry_store::Error;
use ferry_wal::Spool;

use crate::cli::{Global, WalArgs};
use crate::cmd::repo::repo_place;
use crate::password::password;
use crate::places::Stores;
use crate::settings::Settings;

/// The WAL archive at `--repo`, written at zstd `level`: sealed or refused when a password
/// was given without a prompt (see [`WalAccess::sealed_only`]).
pub fn access(g: &Global, stores: &mut Stores, level: i32) -> Result<WalAccess> {
    let place = repo_place(stores)?;
    let given = !password_was_prompted(g);
    Ok(WalAccess::new(place.store, &place.key, level).sealed_only(given))
}

/// The password, asked for when a repository's key is needed.
pub fn ask(g: &Global) -> impl FnOnce() -> ferry_store::Result<Vec<u8>> + '_ {
    move || {
        password(g, false)
            .context("the WAL archive is in an encrypted ferry repository")
            .map_err(|e| Error::Permanent(format!("{e:#}")))
    }
}

/// True when none of the non-interactive password sources is set: the password came from a
/// prompt, and an agent (without a terminal) must be handed it.
fn password_was_prompted(g: &Global) -> bool {
    // (An empty FERRY_PASSWORD is none: `password` refuses it.)
    std::env::var_os("FERRY_PASSWORD").is_none_or(|v| v.is_empty())
        && g.password_file.is_none()
        && g.password_command.is_none()
}

/// Settings travel to the agent as `FERRY_*` variables: every flag has one.
fn agent_env(settings: &Settings, w: &WalArgs) -> Vec<(&'static str, String)> {
    let mut v = settings.to_env();
    let wal = [
        ("FERRY_WAL_PREFETCH", w.prefetch.map(|p| p.to_string())),
        (
            "FERRY_WAL_COMPRESS_LEVEL",
            w.compress_level.map(|p| p.to_string()),
        ),
        ("FERRY_WAL_PARALLEL", w.parallel.map(|p| p.to_string())),
    ];
    v.extend(wal.into_iter().filter_map(|(k, val)| Some((k, val?))));
    v
}

/// Starts `ferry wal-agent ROLE` on `spool`, reading `pg_wal`.
pub fn start(
    settings: &Settings, w: &WalArgs, role: &str, pg_wal: &Path, spool: &Spool,
    password: Option<&[u8]>,
) -> Result<()> {
    let program = std::env::current_exe().context("locating the ferry binary")?;
    let agent = ferry_wal::spawn::Agent {
        program: &program,
        role,
        pg_wal,
        spool,
        env: agent_env(settings, w),
        password,
    };
    agent
        .start()
        .with_context(|| format!("spool {}", spool.dir().display()))
}

/// Starts push agents for `wal-push`, opening the repository first (once per process): a
/// wrong or missing password then fails the push with its own message, instead of an agent
/// dying in its log and the push timing out.
pub struct PushStarter {
    global: Global,
    settings: Settings,
    wal: WalArgs,
    access: WalAccess,
    pg_wal: PathBuf,
    rt: tokio::runtime::Handle,
    /// After the first start: the password to hand over, when it was prompted for.
    checked: Option<Option<Vec<u8>>>,
}

impl PushStarter {
    /// A starter for agents reading `pg_wal`, with this process's settings.
    pub fn new(
        global: &Global, settings: &Settings, wal: &WalArgs, access: WalAccess, pg_wal: PathBuf,
    ) -> PushStarter {
        PushStarter {
            global: global.clone(),
            settings: settings.clone(),
            wal: wal.clone(),
            access,
            pg_wal,
            rt: tokio::runtime::Handle::current(),
            checked: None,
        }
    }

    /// Starts an agent on `spool`; blocking (called from ferry-wal's synchronous hand-off).
    pub fn start(&mut self, spool: &Spool) -> ferry_store::Result<()> {
        let fail = |e: anyhow::Error| Error::Permanent(format!("{e:#}"));
        if self.checked.is_none() {
            let unlocked = self.rt.block_on(self.access.unlock(ask(&self.global)))?;
            let prompted = password_was_prompted(&self.global);
            self.checked = Some(unlocked.filter(|_| prompted).map(|u| u.password));
        }
        let pw = self.checked.as_ref().and_then(|c| c.as_deref());
        start(&self.settings, &self.wal, "push", &self.pg_wal, spool, pw).map_err(fail)
    }
}
