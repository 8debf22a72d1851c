//! `ferry wal-push`, `wal-fetch`, `wal-status` and the hidden `wal-agent`.
//!
//! When `--repo` is an initialized ferry repository (its `ferry-repo` marker exists), the WAL
//! archive under it is encrypted with a key derived from the repository's master key: the
//! password is needed to push, and to fetch an encrypted file. Without the marker the archive
//! is plaintext, as before `ferry init`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use ferry_repo::Repo;
use ferry_store::Error;
use ferry_wal::agent::PushAgent;
use ferry_wal::envelope::Cipher;
use ferry_wal::fetch::{self, FetchAgent};
use ferry_wal::push::{self, Handed, PushOptions};
use ferry_wal::{status, Archive, Pushed, Spool, WalKey, WalName};

use crate::cli::{Global, WalAgentArgs, WalArgs, WalFetchArgs, WalPushArgs, WalStatusArgs};
use crate::cmd::repo::repo_place;
use crate::ctx::Ctx;
use crate::output::Output;
use crate::password::password;
use crate::places::{Place, Stores};
use crate::settings::Settings;
use crate::settings::Wal;

/// An agent with nothing to do lingers this long, so that the next segments find it warm.
const AGENT_IDLE: Duration = Duration::from_secs(30);

/// The repository, opened: the WAL key, and the password that opened it.
struct Unlocked {
    key: WalKey,
    password: Vec<u8>,
}

/// True when `place` is a ferry repository: its WAL archive is then encrypted, and a
/// plaintext object in it is refused. One HEAD, no password.
async fn is_repository(place: &Place) -> Result<bool> {
    Ok(Repo::exists(&place.store, &place.key).await?)
}

/// Opens the repository at `place` when there is one (its marker exists) and derives the WAL
/// key; `None` when `--repo` is no repository (the archive is then plaintext). Costs the
/// password's Argon2 (about 0.2 s of CPU), so each process does it at most once.
async fn unlock(g: &Global, place: &Place) -> Result<Option<Unlocked>> {
    if !is_repository(place).await? {
        return Ok(None);
    }
    let pw = password(g, false).context("the WAL archive is in an encrypted ferry repository")?;
    let repo = Repo::open(place.store.clone(), &place.key, &pw, None).await?;
    let key = ferry_pg::walview::wal_key(&repo);
    Ok(Some(Unlocked { key, password: pw }))
}

/// The archive at `--repo`; with `keyed`, encrypted when `--repo` is a repository.
async fn open_archive(
    g: &Global,
    stores: &mut Stores,
    level: i32,
    keyed: bool,
) -> Result<Arc<Archive>> {
    let place = repo_place(stores)?;
    let key = match keyed {
        true => unlock(g, &place).await?.map(|u| u.key),
        false => None,
    };
    Ok(Archive::with_key(place.store, &place.key, level, key))
}

/// True when none of the non-interactive password sources is set: the password came from a
/// prompt, and an agent (without a terminal) must be handed it.
fn password_was_prompted(g: &Global) -> bool {
    std::env::var_os("FERRY_PASSWORD").is_none()
        && g.password_file.is_none()
        && g.password_command.is_none()
}

/// PostgreSQL runs archive and restore commands in the data directory.
fn pgdata() -> Result<PathBuf> {
    std::env::current_dir().context("current directory")
}

/// Settings travel to the agent as `FERRY_*` variables: every flag has one.
fn agent_env(settings: &Settings, w: &WalArgs) -> Vec<(&'static str, String)> {
    let mut v = settings.to_env();
    let mut put = |k: &'static str, val: Option<String>| {
        if let Some(val) = val {
            v.push((k, val));
        }
    };
    put("FERRY_WAL_PREFETCH", w.prefetch.map(|p| p.to_string()));
    put(
        "FERRY_WAL_COMPRESS_LEVEL",
        w.compress_level.map(|p| p.to_string()),
    );
    put("FERRY_WAL_PARALLEL", w.parallel.map(|p| p.to_string()));
    v
}

/// Starts `ferry wal-agent ROLE` with this process's settings (ferry-wal's `spawn`).
fn start_agent(
    settings: &Settings,
    w: &WalArgs,
    role: &str,
    pg_wal: &Path,
    spool: &Spool,
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

pub async fn push_cmd(args: &WalPushArgs, ctx: &mut Ctx) -> Result<()> {
    let (g, stores, out) = ctx.parts();
    let dir = pgdata()?;
    let wal = stores.settings().wal(&args.wal, &dir)?;
    let path = args.path.clone();
    if wal.async_ {
        let spool = Spool::open(&wal.spool)?;
        let opts = PushOptions {
            timeout: wal.push_timeout,
            queue_max: wal.queue_max,
            policy: wal.policy,
        };
        // The agent reads the directory PostgreSQL hands files from, wherever it is.
        let parent = path.parent().unwrap_or(Path::new("."));
        let pg_wal = std::path::absolute(parent).context("pg_wal directory")?;
        let (g2, s2, w2) = (g.clone(), stores.settings().clone(), args.wal.clone());
        let place = repo_place(stores)?;
        let rt = tokio::runtime::Handle::current();
        let p = path.clone();
        let handed = tokio::task::spawn_blocking(move || {
            // Before starting an agent, this process opens the repository itself (once): a
            // wrong or missing password fails this push with its own message, instead of an
            // agent dying in its log and the push timing out.
            let mut checked: Option<Option<Vec<u8>>> = None;
            push::push_via_agent(&spool, &p, &opts, &mut || {
                let fail = |e: anyhow::Error| Error::Permanent(format!("{e:#}"));
                if checked.is_none() {
                    let unlocked = rt.block_on(unlock(&g2, &place)).map_err(fail)?;
                    checked = Some(
                        unlocked
                            .filter(|_| password_was_prompted(&g2))
                            .map(|u| u.password),
                    );
                }
                let pw = checked.as_ref().and_then(|c| c.as_deref());
                start_agent(&s2, &w2, "push", &pg_wal, &spool, pw).map_err(fail)
            })
        })
        .await??;
        match handed {
            Handed::Archived => return report(out, &path, "archived"),
            Handed::Dropped(gap) => {
                eprintln!(
                    "ferry: WARNING: {} was NOT archived ({}); point-in-time recovery across \
                     it is impossible until the next base backup",
                    gap.name, gap.reason
                );
                return report(out, &path, "dropped");
            }
            Handed::NotQueued => {}
        }
    }
    // A sync push is a process per file: it pays the password's Argon2 every time.
    let archive = open_archive(g, stores, wal.compress_level, true).await?;
    let pushed = push::push_file(&archive, &path).await?;
    let what = match pushed {
        Pushed::Stored { .. } => "archived",
        Pushed::AlreadyArchived(_) => "already archived",
    };
    report(out, &path, what)
}

fn report(out: &Output, path: &Path, what: &str) -> Result<()> {
    if out.json {
        println!(
            "{}",
            serde_json::json!({"file": path.display().to_string(), "result": what})
        );
    }
    Ok(())
}

pub async fn fetch_cmd(args: &WalFetchArgs, ctx: &mut Ctx) -> Result<()> {
    let (g, stores, out) = ctx.parts();
    let dir = pgdata()?;
    let wal = stores.settings().wal(&args.wal, &dir)?;
    let name = WalName::parse(&args.name)?;
    if wal.async_ && wal.prefetch > 0 {
        let spool = Spool::open(&wal.spool)?;
        let taken = fetch::take_prefetched(&spool, &name, &args.dest, Duration::from_secs(60))?;
        // Every request moves the look-ahead, hits too (else the window stays behind and
        // refetches what was taken). Only segments: PostgreSQL also probes for histories.
        if name.kind() == ferry_wal::Kind::Segment {
            fetch::want(&spool, &name)?;
            if !spool.locked("fetch")? {
                let s = stores.settings();
                start_agent(s, &args.wal, "fetch", &dir.join("pg_wal"), &spool, None)?;
            }
        }
        if taken {
            return report(out, &args.dest, "prefetched");
        }
    }
    // The header first: a file the archive lacks (PostgreSQL probes for them) or a plaintext
    // one needs no password, and so no Argon2.
    let plain = open_archive(g, stores, wal.compress_level, false).await?;
    let archive = match plain.peek(&name).await {
        Err(Error::NotFound(_)) => {
            let url = plain.url();
            return Err(super::Exit::Miss(format!("{name} is not in archive {url}")).into());
        }
        Ok(h) if h.cipher == Cipher::XChaCha20Poly1305 => {
            open_archive(g, stores, wal.compress_level, true).await?
        }
        // Plaintext in a repository, whose archive is encrypted: planted (a downgrade).
        Ok(_) if is_repository(&repo_place(stores)?).await? => {
            let what = format!("{}/wal/{}", plain.url(), name.key());
            return Err(ferry_wal::envelope::downgraded(&what).into());
        }
        // Plaintext, or a damaged header the fetch below reports.
        Ok(_) | Err(Error::Checksum(_)) => plain,
        Err(e) => return Err(e.into()),
    };
    match fetch::fetch_to(&archive, &name, &args.dest).await {
        Ok(()) => report(out, &args.dest, "fetched"),
        Err(Error::NotFound(_)) => {
            Err(super::Exit::Miss(format!("{name} is not in archive {}", archive.url())).into())
        }
        Err(e) => Err(e.into()),
    }
}

pub async fn status_cmd(args: &WalStatusArgs, ctx: &mut Ctx) -> Result<()> {
    let (g, stores, out) = ctx.parts();
    let dir = match &args.pgdata {
        Some(d) => d.clone(),
        None => pgdata()?,
    };
    let wal: Wal = stores.settings().wal(&args.wal, &dir)?;
    // Listing, cluster.json, gaps and headers are plaintext: no password needed.
    let archive = open_archive(g, stores, wal.compress_level, false).await?;
    let encrypted = is_repository(&repo_place(stores)?).await?;
    let pg_wal = dir.join("pg_wal");
    let spool = match &args.pgdata {
        Some(_) => Some(Spool::open(&wal.spool)?),
        None => None,
    };
    let local = spool.as_ref().map(|s| (pg_wal.as_path(), s));
    let st = status::status(&archive, local, encrypted).await?;
    if out.json {
        println!("{}", serde_json::to_string_pretty(&st)?);
    } else {
        print_status(&st);
    }
    if !st.suspect.is_empty() {
        bail!(
            "{} archived objects are suspect (listed above): see docs/security.md",
            st.suspect.len()
        );
    }
    Ok(())
}

fn print_status(st: &status::Status) {
    println!("archive    {}", st.archive);
    println!(
        "cluster    {}",
        st.system_id.as_deref().unwrap_or("(nothing archived yet)")
    );
    println!(
        "files      {} ({:.1} MB stored)",
        st.files,
        st.stored_bytes as f64 / 1e6
    );
    for t in &st.timelines {
        println!(
            "timeline {:<3} {} .. {} ({} segments){}",
            t.timeline,
            t.first,
            t.last,
            t.segments,
            if t.missing.is_empty() {
                ""
            } else {
                ", WITH HOLES"
            }
        );
        for (a, b) in &t.missing {
            println!("  missing  {a} .. {b}");
        }
    }
    for h in &st.histories {
        println!("history    {h}");
    }
    for gap in &st.gaps {
        println!("GAP        {}: {}", gap.name, gap.reason);
    }
    for f in &st.suspect {
        println!("SUSPECT    {}: {}", f.name, f.problem);
    }
    if let Some(q) = &st.queue {
        println!(
            "agent      {}; {} waiting, {} acked",
            if q.agent_running {
                "running"
            } else {
                "not running"
            },
            q.waiting.len(),
            q.acked
        );
        for (n, e) in &q.errors {
            println!("  failed   {n}: {e}");
        }
    }
}

pub async fn agent_cmd(args: &WalAgentArgs, ctx: &mut Ctx) -> Result<()> {
    let (g, stores, _) = ctx.parts();
    let here = pgdata()?;
    let pg_wal = args.pg_wal.clone().unwrap_or_else(|| here.join("pg_wal"));
    let wal = stores.settings().wal(&args.wal, &here)?;
    let spool = Spool::open(&wal.spool)?;
    // Once per agent: the repository's key serves every file it pushes or prefetches.
    let archive = open_archive(g, stores, wal.compress_level, true).await?;
    match args.role.as_str() {
        "push" => {
            PushAgent {
                archive,
                spool,
                pg_wal,
                parallel: wal.parallel,
                idle: AGENT_IDLE,
            }
            .run()
            .await?
        }
        "fetch" => {
            FetchAgent {
                archive,
                spool,
                depth: wal.prefetch.max(1),
                idle: AGENT_IDLE,
            }
            .run()
            .await?
        }
        r => bail!("unknown agent role '{r}'"),
    }
    Ok(())
}
