//! `ferry repair index`, `ferry repair snapshots`.

use anyhow::{bail, Result};
use ferry_repo::repair::{IndexRepaired, RepairOptions, SnapshotsRepaired};

use crate::cli::RepairCmd;
use crate::cmd::repo::open_uncached;
use crate::ctx::Ctx;
use crate::output::Output;

pub async fn run(cmd: &RepairCmd, ctx: &mut Ctx) -> Result<()> {
    let (g, stores, out) = ctx.parts();
    // The cache may hold the very files being replaced: read the store.
    let repo = open_uncached(g, stores).await?;
    match cmd {
        RepairCmd::Index => index(&ferry_repo::repair::repair_index(repo).await?, out),
        RepairCmd::Snapshots(a) => {
            let o = RepairOptions {
                filter: a.filter.filter(),
                forget: a.forget,
                dry_run: a.dry_run,
            };
            snapshots(&ferry_repo::repair::repair_snapshots(repo, &o).await?, out)
        }
    }
}

fn index(r: &IndexRepaired, out: &Output) -> Result<()> {
    if out.json {
        println!("{}", serde_json::to_string(r)?);
    } else {
        for d in &r.damaged {
            eprintln!("damaged: {d}");
        }
        eprintln!(
            "index rebuilt: {} packs, {} blobs in {} index files; {} old index files removed",
            r.packs, r.blobs, r.written, r.deleted
        );
    }
    if !r.damaged.is_empty() {
        bail!(
            "{} packs could not be read and are left out of the index (listed above): run \
             repair snapshots to drop what they held",
            r.damaged.len()
        );
    }
    Ok(())
}

fn snapshots(r: &SnapshotsRepaired, out: &Output) -> Result<()> {
    if out.json {
        println!("{}", serde_json::to_string(r)?);
        return Ok(());
    }
    for d in &r.dropped {
        eprintln!("{}: {d}", if r.dry_run { "would drop" } else { "dropped" });
    }
    for (old, new) in &r.repaired {
        match new {
            Some(n) => eprintln!("snapshot {} written again as {}", old.short(), n.short()),
            None => eprintln!("snapshot {} would be written again", old.short()),
        }
    }
    eprintln!(
        "{} snapshots intact, {} {}{}",
        r.intact,
        r.repaired.len(),
        if r.dry_run { "to repair" } else { "repaired" },
        if r.forgot { " (originals removed)" } else { "" }
    );
    Ok(())
}
