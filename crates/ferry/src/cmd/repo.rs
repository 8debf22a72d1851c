//! Repository commands: `init`, `snapshots`, `ls SNAPSHOT`, `key passwd`, and opening the
//! repository for the others.

use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use ferry_repo::cache::Cache;
use ferry_repo::Repo;

use crate::cli::{Global, InitArgs, SnapshotsArgs};
use crate::ctx::Ctx;
use crate::password::password;
use crate::places::Stores;
use ferry_store::LockMode;

/// The place `--repo` names, opened for a repository (private files on a local disk).
pub fn repo_place(stores: &mut Stores) -> Result<crate::places::Place> {
    let Some(repo) = stores.settings().repo.clone() else {
        bail!("no repository: set --repo, FERRY_REPO or repo in ferry.toml");
    };
    stores.open_repo(&repo)
}

/// Opens the configured repository, with a local cache of its metadata when it is remote.
pub async fn open(g: &Global, stores: &mut Stores) -> Result<Arc<Repo>> {
    open_with(g, stores, !g.no_cache).await
}

/// Opens the configured repository reading every file from the store: `check` must see
/// what the store holds, not a good copy of it.
pub async fn open_uncached(g: &Global, stores: &mut Stores) -> Result<Arc<Repo>> {
    open_with(g, stores, false).await
}

async fn open_with(g: &Global, stores: &mut Stores, cached: bool) -> Result<Arc<Repo>> {
    let place = repo_place(stores)?;
    let pw = password(g, false)?;
    // A local repository is its own cache.
    let cache = if cached && place.loc.is_remote() {
        cache_base(g).and_then(|base| Cache::new(&base, &place.loc.to_string()))
    } else {
        None
    };
    Ok(Arc::new(
        Repo::open(place.store, &place.key, &pw, cache).await?,
    ))
}

fn cache_base(g: &Global) -> Option<std::path::PathBuf> {
    if let Some(d) = &g.cache_dir {
        return Some(d.clone());
    }
    let xdg = std::env::var_os("XDG_CACHE_HOME").map(std::path::PathBuf::from);
    let home = || std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache"));
    Some(xdg.or_else(home)?.join("ferry/repos"))
}

/// `--lock-retention`: whole days, as Object Lock counts them.
fn lock_days(s: &str) -> Result<u32> {
    let d = humantime::parse_duration(s).with_context(|| format!("--lock-retention '{s}'"))?;
    let secs = d.as_secs();
    if secs == 0 || secs % 86_400 != 0 || d.subsec_nanos() != 0 {
        bail!("--lock-retention '{s}': a whole number of days (Object Lock counts days), e.g. 30d");
    }
    u32::try_from(secs / 86_400).context("--lock-retention: too long")
}

pub async fn init(a: &InitArgs, ctx: &mut Ctx) -> Result<()> {
    let (g, stores, out) = ctx.parts();
    let place = repo_place(stores)?;
    let lock = a.lock_retention.as_deref().map(lock_days).transpose()?;
    let pw = password(g, true)?;
    if let Some(days) = lock {
        let mode = match a.lock_mode.as_str() {
            "compliance" => LockMode::Compliance,
            _ => LockMode::Governance,
        };
        place.store.lock_new_objects(days, mode).await?;
        if !out.json {
            eprintln!(
                "objects written to {} are locked for {days} days ({})",
                place.loc, a.lock_mode
            );
        }
    } else if place.loc.is_remote() {
        // A bucket that does not exist yet is created; one that exists is fine.
        let _ = place.store.create_root().await;
    } else {
        // A local repository is its owner's alone: its key files can be attacked offline.
        let dir = std::path::Path::new("/").join(&place.key);
        ferry_fs::Dir::create_root(&dir)
            .and_then(|d| d.set_mode(0o700, None))
            .with_context(|| format!("repository directory {}", dir.display()))?;
    }
    let repo = Repo::init(place.store, &place.key, &pw, a.format).await?;
    if out.json {
        println!(
            "{}",
            serde_json::json!({"repository": repo.url(), "id": repo.config.id})
        );
    } else {
        eprintln!(
            "created repository {} ({})",
            repo.url(),
            repo.config.id.short()
        );
    }
    Ok(())
}

pub fn when(t: i64) -> String {
    humantime::format_rfc3339_seconds(
        std::time::UNIX_EPOCH + std::time::Duration::from_secs(t.max(0) as u64),
    )
    .to_string()
}

pub async fn snapshots(args: &SnapshotsArgs, ctx: &mut Ctx) -> Result<()> {
    let (g, stores, out) = ctx.parts();
    let repo = open(g, stores).await?;
    let snaps = repo.snapshots_matching(&args.filter.filter()).await?;
    if out.json {
        let v: Vec<_> = snaps
            .iter()
            .map(|(id, s)| {
                let mut j = serde_json::to_value(s).expect("serializable");
                j["id"] = serde_json::json!(id);
                j
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "{:<10} {:<21} {:<16} {:<16} {:>12}  paths",
        "id", "time", "host", "tags", "size"
    );
    for (id, s) in &snaps {
        println!(
            "{:<10} {:<21} {:<16} {:<16} {:>12}  {}",
            id.short(),
            when(s.time),
            s.hostname,
            s.tags.join(","),
            s.summary.total_bytes,
            s.paths.join(" ")
        );
    }
    Ok(())
}

/// True when `ferry ls ARG` means a snapshot of the repository, not a store location.
pub fn names_snapshot(arg: &str, stores: &Stores) -> bool {
    stores.settings().repo.is_some()
        && !arg.contains("://")
        && !Path::new(arg).exists()
        && (arg == "latest" || (arg.len() >= 4 && arg.bytes().all(|b| b.is_ascii_hexdigit())))
}

pub async fn ls(which: &str, dir: Option<&Path>, ctx: &mut Ctx) -> Result<()> {
    let (g, stores, out) = ctx.parts();
    let repo = open(g, stores).await?;
    let (prefix, nodes) = repo.list_dir(which, dir.unwrap_or(Path::new("/"))).await?;
    let rows: Vec<(String, &ferry_repo::tree::Node)> = nodes
        .iter()
        .map(|n| {
            let name = String::from_utf8_lossy(&n.name_bytes()).into_owned();
            (prefix.join(name).display().to_string(), n)
        })
        .collect();
    if out.json {
        let v: Vec<_> = rows
            .iter()
            .map(|(p, n)| serde_json::json!({"path": p, "kind": n.kind, "size": n.size, "mode": n.mode, "mtime_ns": n.mtime}))
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        for (p, n) in rows {
            println!(
                "{:<8} {:>12}  {p}",
                format!("{:?}", n.kind).to_lowercase(),
                n.size
            );
        }
    }
    Ok(())
}
