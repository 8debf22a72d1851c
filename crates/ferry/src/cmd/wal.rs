//! `ferry wal-push`, `wal-fetch`, `wal-status` and the hidden `wal-agent`.
//!
//! When `--repo` is an initialized ferry repository (its `ferry-repo` marker exists), the WAL
//! archive under it is encrypted with a key derived from the repository's master key: the
//! password is needed to push, and to fetch an encrypted file. Without the marker the archive
//! is plaintext, as before `ferry init`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use ferry_store::Error;
use ferry_wal::agent::PushAgent;
use ferry_wal::fetch::{self, FetchAgent};
use ferry_wal::push::{self, Handed, PushOptions};
use ferry_wal::{status, Pushed, Spool, WalName};

use crate::agents::{self, PushStarter};
use crate::cli::{WalAgentArgs, WalFetchArgs, WalPushArgs, WalStatusArgs};
use crate::ctx::Ctx;
use crate::output::Output;
use crate::settings::Wal;

/// An agent with nothing to do lingers this long, so that the next segments find it warm.
const AGENT_IDLE: Duration = Duration::from_secs(30);

/// PostgreSQL runs archive and restore commands in the data directory.
fn pgdata() -> Result<PathBuf> {
    std::env::current_dir().context("current directory")
}

pub async fn push_cmd(args: &WalPushArgs, ctx: &mut Ctx) -> Result<()> {
    let (g, stores, out) = ctx.parts();
    let dir = pgdata()?;
    let wal = stores.settings().wal(&args.wal, &dir)?;
    let path = args.path.clone();
    if wal.async_ {
        let spool = Spool::open(&wal.spool)?;
        // The agent reads the directory PostgreSQL hands files from, wherever it is.
        let parent = path.parent().unwrap_or(Path::new("."));
        let pg_wal = std::path::absolute(parent).context("pg_wal directory")?;
        let access = agents::access(g, stores, wal.compress_level)?;
        let opts = PushOptions {
            timeout: wal.push_timeout,
            queue_max: wal.queue_max,
            policy: wal.policy,
            source: access.plain().url(),
        };
        let mut starter = PushStarter::new(g, stores.settings(), &args.wal, access, pg_wal);
        let p = path.clone();
        let handed = tokio::task::spawn_blocking(move || {
            push::push_via_agent(&spool, &p, &opts, &mut || starter.start(&spool))
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
    let archive = agents::access(g, stores, wal.compress_level)?
        .keyed(agents::ask(g))
        .await?;
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

/// `wal-fetch`: a miss exits 1 (the archive's end, to PostgreSQL); any other failure stops a
/// recovery (exit 255) unless the cluster is a standby, which asks again in 5 s and never
/// promotes on its own. A store that cannot be reached, or a damaged or forged object,
/// would otherwise end a recovery early, in silence, with every later transaction lost.
pub async fn fetch_cmd(args: &WalFetchArgs, ctx: &mut Ctx) -> Result<()> {
    let dir = pgdata()?;
    match fetch(args, ctx, &dir).await {
        Err(e)
            if e.downcast_ref::<super::Exit>().is_none()
                && !dir.join("standby.signal").exists() =>
        {
            Err(super::Exit::Abort(format!(
                "{e:#} (recovery stops here rather than end early without it: fix this and \
                 start the server again)"
            ))
            .into())
        }
        r => r,
    }
}

async fn fetch(args: &WalFetchArgs, ctx: &mut Ctx, dir: &Path) -> Result<()> {
    let (g, stores, out) = ctx.parts();
    let wal = stores.settings().wal(&args.wal, dir)?;
    let name = WalName::parse(&args.name)?;
    let access = agents::access(g, stores, wal.compress_level)?;
    if wal.async_ && wal.prefetch > 0 {
        let spool = Spool::open(&wal.spool)?;
        let source = access.plain().url();
        let taken =
            fetch::take_prefetched(&spool, &name, &args.dest, Duration::from_secs(60), &source)?;
        // Every request moves the look-ahead, hits too (else the window stays behind and
        // refetches what was taken). Only segments: PostgreSQL also probes for histories.
        if name.kind() == ferry_wal::Kind::Segment {
            fetch::want(&spool, &name)?;
            if !spool.locked("fetch")? {
                let s = stores.settings();
                agents::start(s, &args.wal, "fetch", &dir.join("pg_wal"), &spool, None)?;
            }
        }
        if taken {
            return report(out, &args.dest, "prefetched");
        }
    }
    // The header first: a file the archive lacks (PostgreSQL probes for them) or a plaintext
    // one needs no password, and so no Argon2.
    let miss = |url: String| super::Exit::Miss(format!("{name} is not in archive {url}"));
    let archive = match access.for_fetch(&name, agents::ask(g)).await {
        Err(Error::NotFound(_)) => return Err(miss(access.plain().url()).into()),
        r => r?,
    };
    match fetch::fetch_to(&archive, &name, &args.dest).await {
        Ok(()) => report(out, &args.dest, "fetched"),
        Err(Error::NotFound(_)) => Err(miss(archive.url()).into()),
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
    let access = agents::access(g, stores, wal.compress_level)?;
    let (archive, encrypted) = (access.plain(), access.is_repository().await?);
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
    let role = args.role.as_str();
    if !matches!(role, "push" | "fetch") {
        bail!("unknown agent role '{role}'");
    }
    // The agent is whoever holds the lock: the others leave before sending a request.
    let Some(lock) = spool.try_lock(role)? else {
        return Ok(());
    };
    // Once per agent: the repository's key serves every file it pushes or prefetches. Its
    // first files go out on connections opened while the marker is read.
    let access = agents::access(g, stores, wal.compress_level)?;
    access.warm();
    let archive = access.keyed(agents::ask(g)).await?;
    match role {
        "push" => {
            PushAgent {
                archive,
                spool,
                pg_wal,
                parallel: wal.parallel,
                // The agent's uploads are slices of what it holds, not copies: the engine's
                // own buffers (its budget, the rest of --max-memory and more) stay near
                // empty, and the quarter left covers its connections and the allocator.
                memory: stores.settings().engine.max_memory / 4 * 3,
                idle: AGENT_IDLE,
            }
            .run(lock)
            .await?
        }
        _ => {
            FetchAgent {
                archive,
                spool,
                depth: wal.prefetch.max(1),
                idle: AGENT_IDLE,
            }
            .run(lock)
            .await?
        }
    }
    Ok(())
}
