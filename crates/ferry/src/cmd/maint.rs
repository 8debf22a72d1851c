//! `ferry check`, `ferry forget`, `ferry prune`.

use anyhow::{bail, Result};
use ferry_repo::checker::ReadData;
use ferry_repo::forget::{parse_within, GroupBy, Policy, Scope};

use crate::cli::{CheckArgs, FilterArgs, ForgetArgs, PruneArgs};
use crate::cmd::repo::{open, open_uncached};
use crate::ctx::Ctx;
use crate::output::Output;

pub async fn check(args: &CheckArgs, ctx: &mut Ctx) -> Result<()> {
    let (g, stores, out) = ctx.parts();
    let read = match (&args.read_data_subset, args.read_data) {
        (Some(s), _) => ReadData::parse_subset(s)?,
        (None, true) => ReadData::All,
        (None, false) => ReadData::No,
    };
    let repo = open_uncached(g, stores).await?;
    let mut r = ferry_repo::checker::check_reading(&repo, read).await?;
    let wal = ferry_pg::walview::audit(&repo, read == ReadData::All).await?;
    r.errors.extend(wal.into_iter().map(|f| f.problem));
    if out.json {
        println!(
            "{}",
            serde_json::json!({"errors": r.errors, "warnings": r.warnings, "snapshots": r.snapshots,
                "packs": r.packs, "blobs": r.blobs, "packs_read": r.packs_read})
        );
    } else {
        for w in &r.warnings {
            eprintln!("warning: {w}");
        }
        for e in &r.errors {
            eprintln!("error: {e}");
        }
        eprintln!(
            "checked {} snapshots, {} packs, {} blobs{}: {} errors, {} warnings",
            r.snapshots,
            r.packs,
            r.blobs,
            match read {
                ReadData::No => String::new(),
                ReadData::All => " (all data read)".into(),
                _ => format!(" ({} packs read)", r.packs_read),
            },
            r.errors.len(),
            r.warnings.len()
        );
    }
    if !r.errors.is_empty() {
        bail!(
            "repository {} is damaged: {} errors (listed above)",
            repo.url(),
            r.errors.len()
        );
    }
    Ok(())
}

pub async fn forget(args: &ForgetArgs, ctx: &mut Ctx) -> Result<()> {
    let (g, stores, out) = ctx.parts();
    let policy = Policy {
        last: args.keep_last,
        hourly: args.keep_hourly,
        daily: args.keep_daily,
        weekly: args.keep_weekly,
        monthly: args.keep_monthly,
        yearly: args.keep_yearly,
        within: args.keep_within.as_deref().map(parse_within).transpose()?,
        tags: FilterArgs {
            tags: args.keep_tag.clone(),
            ..Default::default()
        }
        .filter()
        .tags,
    };
    let scope = Scope {
        filter: args.filter.filter(),
        group_by: GroupBy::parse(&args.group_by)?,
        dry_run: args.dry_run,
    };
    let repo = open(g, stores).await?;
    let f = ferry_repo::forget::forget(repo.clone(), &policy, &scope).await?;
    let would = if f.dry_run { "would remove" } else { "removed" };
    if out.json {
        println!(
            "{}",
            serde_json::json!({"kept": f.kept, "removed": f.removed, "dry_run": f.dry_run,
                "locked": f.locked.iter().map(|(id, why)| serde_json::json!({"id": id, "why": why})).collect::<Vec<_>>()})
        );
    } else {
        for id in &f.removed {
            eprintln!("{would} snapshot {}", id.short());
        }
        for (id, why) in &f.locked {
            eprintln!("kept snapshot {}: Object Lock, {why}", id.short());
        }
        eprintln!(
            "kept {} snapshots, {would} {}",
            f.kept.len(),
            f.removed.len()
        );
    }
    if args.prune {
        prune_repo(repo, args.dry_run, out).await?;
    }
    Ok(())
}

pub async fn prune(args: &PruneArgs, ctx: &mut Ctx) -> Result<()> {
    let repo = open(&ctx.global, &mut ctx.stores).await?;
    prune_repo(repo, args.dry_run, &ctx.out).await
}

async fn prune_repo(
    repo: std::sync::Arc<ferry_repo::Repo>, dry_run: bool, out: &Output,
) -> Result<()> {
    let p = ferry_repo::prune::prune(repo, dry_run).await?;
    if out.json {
        println!(
            "{}",
            serde_json::json!({"packs_deleted": p.packs_deleted, "packs_rewritten": p.packs_rewritten,
                "bytes_freed": p.bytes_freed, "blobs_kept": p.blobs_kept, "dry_run": p.dry_run,
                "packs_locked": p.packs_locked, "bytes_locked": p.bytes_locked, "locked_why": p.locked_why})
        );
    } else {
        if let Some(why) = &p.locked_why {
            eprintln!(
                "{} packs ({:.1} MB) are locked (Object Lock, {why} at the soonest): kept; a later prune deletes them",
                p.packs_locked,
                p.bytes_locked as f64 / 1e6
            );
        }
        eprintln!(
            "{}: {} packs deleted ({} rewritten), {:.1} MB freed, {} blobs kept",
            if p.dry_run {
                "prune would do"
            } else {
                "pruned"
            },
            p.packs_deleted,
            p.packs_rewritten,
            p.bytes_freed as f64 / 1e6,
            p.blobs_kept
        );
    }
    Ok(())
}
