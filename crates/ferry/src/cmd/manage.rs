//! `ferry tag`, `ferry unlock`, `ferry stats`: managing snapshots and the repository.

use anyhow::Result;
use ferry_repo::lock::LockState;
use ferry_repo::tagging::TagChange;

use crate::cli::{StatsArgs, StatsMode, TagArgs, UnlockArgs};
use crate::cmd::repo::open;
use crate::ctx::Ctx;
use crate::output::human_bytes;

pub async fn tag(args: &TagArgs, ctx: &mut Ctx) -> Result<()> {
    let (g, stores, out) = ctx.parts();
    let change = TagChange {
        set: (!args.set.is_empty()).then(|| args.set.clone()),
        add: args.add.clone(),
        remove: args.remove.clone(),
    };
    // Refused before the repository is opened: no password asked for nothing.
    change.check()?;
    let repo = open(g, stores).await?;
    let filter = args.filter.filter();
    let r = ferry_repo::tagging::tag(repo, &args.snapshots, &filter, &change).await?;
    if out.json {
        let changed: Vec<_> = r
            .changed
            .iter()
            .map(|(old, new)| serde_json::json!({"old": old, "new": new}))
            .collect();
        println!(
            "{}",
            serde_json::json!({"changed": changed, "unchanged": r.unchanged})
        );
        return Ok(());
    }
    for (old, new) in &r.changed {
        eprintln!("snapshot {} is now {}", old.short(), new.short());
    }
    eprintln!(
        "changed {} snapshots ({} unchanged)",
        r.changed.len(),
        r.unchanged.len()
    );
    Ok(())
}

pub async fn unlock(args: &UnlockArgs, ctx: &mut Ctx) -> Result<()> {
    let (g, stores, out) = ctx.parts();
    let repo = open(g, stores).await?;
    let u = ferry_repo::lock::unlock(&repo, args.remove_all, ferry_repo::lock::TIMING).await?;
    if out.json {
        println!("{}", serde_json::to_string(&u)?);
        return Ok(());
    }
    let why = |l: &LockState| match &l.stale {
        Some(s) => format!(": {s}"),
        None => " (live)".into(),
    };
    for l in &u.removed {
        eprintln!("removed {}{}", l.describe(), why(l));
    }
    for l in &u.kept {
        eprintln!("kept {}: live (--remove-all removes it)", l.describe());
    }
    let fate = if u.remove_all { "removed" } else { "kept" };
    for (id, e) in &u.unreadable {
        eprintln!("{fate} unreadable lock {}: {e}", id.short());
    }
    eprintln!(
        "removed {} locks, kept {} live",
        u.removed.len(),
        u.kept.len()
    );
    Ok(())
}

pub async fn stats(args: &StatsArgs, ctx: &mut Ctx) -> Result<()> {
    let (g, stores, out) = ctx.parts();
    let repo = open(g, stores).await?;
    let (which, filter) = (&args.snapshots, args.filter.filter());
    match args.mode {
        StatsMode::RestoreSize => {
            let s = ferry_repo::stats::restore_size(repo, which, &filter).await?;
            if out.json {
                let mut j = serde_json::to_value(&s)?;
                j["mode"] = "restore-size".into();
                println!("{j}");
                return Ok(());
            }
            println!("restore size of {} snapshots:", s.snapshots_count);
            println!(
                "  entries: {} ({} files, {} directories)",
                s.total_file_count, s.files, s.dirs
            );
            println!("  size:    {}", bytes(s.total_size));
        }
        StatsMode::RawData => {
            let s = ferry_repo::stats::raw_data(repo, which, &filter).await?;
            if out.json {
                let mut j = serde_json::to_value(&s)?;
                j["mode"] = "raw-data".into();
                println!("{j}");
                return Ok(());
            }
            println!("raw data of {} snapshots:", s.snapshots_count);
            println!(
                "  blobs:        {} ({} data, {} tree)",
                s.total_blob_count, s.data_blobs, s.tree_blobs
            );
            println!("  uncompressed: {}", bytes(s.total_uncompressed_size));
            println!("  stored:       {}", bytes(s.total_size));
            println!("  compression:  {:.2}x", s.compression_ratio);
        }
    }
    Ok(())
}

/// Bytes as people read them, with the exact count beside.
fn bytes(b: u64) -> String {
    match b < 1024 {
        true => human_bytes(b),
        false => format!("{} ({b} bytes)", human_bytes(b)),
    }
}
