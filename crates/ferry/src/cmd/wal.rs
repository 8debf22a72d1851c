//! `ferry wal-push`, `wal-fetch`, `wal-status` and the hidden `wal-agent`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use ferry_store::Error;
use ferry_transfer::Engine;
use ferry_wal::agent::PushAgent;
use ferry_wal::fetch::{self, FetchAgent};
use ferry_wal::push::{self, Handed, PushOptions};
use ferry_wal::{status, Archive, Pushed, Spool, WalName};

use crate::cli::{Global, WalAgentArgs, WalArgs, WalFetchArgs, WalPushArgs, WalStatusArgs};
use crate::places::Stores;
use crate::settings::Wal;
use crate::Output;

/// An agent with nothing to do lingers this long, so that the next segments find it warm.
const AGENT_IDLE: Duration = Duration::from_secs(30);

fn open_archive(stores: &mut Stores, engine: &Engine, level: i32) -> Result<Arc<Archive>> {
    let Some(repo) = stores.settings().repo.clone() else {
        bail!("no repository: set --repo, FERRY_REPO or repo in ferry.toml");
    };
    let place = stores.open(&repo)?;
    Ok(Archive::new(place.store, &place.key, engine.clone(), level))
}

/// PostgreSQL runs archive and restore commands in the data directory.
fn pgdata() -> Result<PathBuf> {
    std::env::current_dir().context("current directory")
}

/// Settings travel to the agent as `FERRY_*` variables: every flag has one.
fn agent_env(g: &Global, w: &WalArgs) -> Vec<(&'static str, String)> {
    let mut v = Vec::new();
    let mut put = |k: &'static str, val: Option<String>| {
        if let Some(val) = val {
            v.push((k, val));
        }
    };
    put(
        "FERRY_CONFIG",
        g.config.as_ref().map(|p| {
            std::path::absolute(p)
                .unwrap_or(p.clone())
                .display()
                .to_string()
        }),
    );
    put("FERRY_REPO", g.repo.clone());
    put("FERRY_CONCURRENCY", g.concurrency.map(|c| c.to_string()));
    put("FERRY_BLOCK_SIZE", g.block_size.clone());
    put("FERRY_MAX_MEMORY", g.max_memory.clone());
    put("FERRY_TIMEOUT", g.timeout.clone());
    put("FERRY_RETRIES", g.retries.map(|r| r.to_string()));
    put("FERRY_S3_ENDPOINT", g.s3_endpoint.clone());
    put("FERRY_S3_REGION", g.s3_region.clone());
    put(
        "FERRY_AZURE_CONNECTION_STRING",
        g.azure_connection_string.clone(),
    );
    put(
        "FERRY_CA_CERT",
        g.ca_cert.as_ref().map(|p| p.display().to_string()),
    );
    put(
        "FERRY_WAL_SPOOL",
        w.spool.as_ref().map(|p| p.display().to_string()),
    );
    put("FERRY_WAL_PREFETCH", w.prefetch.map(|p| p.to_string()));
    put(
        "FERRY_WAL_COMPRESS_LEVEL",
        w.compress_level.map(|p| p.to_string()),
    );
    put("FERRY_WAL_PARALLEL", w.parallel.map(|p| p.to_string()));
    v
}

/// Starts `ferry wal-agent ROLE` detached: its own session, output to the spool's log.
fn start_agent(g: &Global, w: &WalArgs, role: &str, pg_wal: &Path, spool: &Spool) -> Result<()> {
    let exe = std::env::current_exe().context("locating the ferry binary")?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(spool.path("agent.log"))
        .with_context(|| format!("spool {}", spool.dir().display()))?;
    let mut cmd = Command::new(exe);
    cmd.arg("wal-agent")
        .arg(role)
        .arg("--pg-wal")
        .arg(pg_wal)
        .envs(agent_env(g, w))
        .env("FERRY_WAL_SPOOL", spool.dir())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
    // Its own session: PostgreSQL's signals to the archiver's process group leave it alone.
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    cmd.spawn().context("starting the WAL agent")?;
    Ok(())
}

pub async fn push_cmd(
    args: &WalPushArgs,
    g: &Global,
    stores: &mut Stores,
    engine: &Engine,
    out: &Output,
) -> Result<()> {
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
        let (g2, w2) = (g.clone(), args.wal.clone());
        let p = path.clone();
        let handed = tokio::task::spawn_blocking(move || {
            push::push_via_agent(&spool, &p, &opts, &mut || {
                start_agent(&g2, &w2, "push", &pg_wal, &spool)
                    .map_err(|e| Error::Permanent(format!("{e:#}")))
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
    let archive = open_archive(stores, engine, wal.compress_level)?;
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

pub async fn fetch_cmd(
    args: &WalFetchArgs,
    g: &Global,
    stores: &mut Stores,
    engine: &Engine,
    out: &Output,
) -> Result<()> {
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
                start_agent(g, &args.wal, "fetch", &dir.join("pg_wal"), &spool)?;
            }
        }
        if taken {
            return report(out, &args.dest, "prefetched");
        }
    }
    let archive = open_archive(stores, engine, wal.compress_level)?;
    match fetch::fetch_to(&archive, &name, &args.dest).await {
        Ok(()) => report(out, &args.dest, "fetched"),
        Err(Error::NotFound(_)) => bail!("{name} is not in archive {}", archive.url()),
        Err(e) => Err(e.into()),
    }
}

pub async fn status_cmd(
    args: &WalStatusArgs,
    stores: &mut Stores,
    engine: &Engine,
    out: &Output,
) -> Result<()> {
    let dir = match &args.pgdata {
        Some(d) => d.clone(),
        None => pgdata()?,
    };
    let wal: Wal = stores.settings().wal(&args.wal, &dir)?;
    let archive = open_archive(stores, engine, wal.compress_level)?;
    let pg_wal = dir.join("pg_wal");
    let spool = match &args.pgdata {
        Some(_) => Some(Spool::open(&wal.spool)?),
        None => None,
    };
    let local = spool.as_ref().map(|s| (pg_wal.as_path(), s));
    let st = status::status(&archive, local).await?;
    if out.json {
        println!("{}", serde_json::to_string_pretty(&st)?);
        return Ok(());
    }
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
    Ok(())
}

pub async fn agent_cmd(args: &WalAgentArgs, stores: &mut Stores, engine: &Engine) -> Result<()> {
    let here = pgdata()?;
    let pg_wal = args.pg_wal.clone().unwrap_or_else(|| here.join("pg_wal"));
    let wal = stores.settings().wal(&args.wal, &here)?;
    let spool = Spool::open(&wal.spool)?;
    let archive = open_archive(stores, engine, wal.compress_level)?;
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
