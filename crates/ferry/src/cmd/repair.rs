//! `ferry repair index`.

use anyhow::{bail, Result};

use crate::cli::RepairCmd;
use crate::cmd::repo::open_uncached;
use crate::ctx::Ctx;

pub async fn run(cmd: &RepairCmd, ctx: &mut Ctx) -> Result<()> {
    let (g, stores, out) = ctx.parts();
    match cmd {
        RepairCmd::Index => {
            // The cache may hold the very index files being replaced: read the store.
            let repo = open_uncached(g, stores).await?;
            let r = ferry_repo::repair::repair_index(repo).await?;
            if out.json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                for d in &r.damaged {
                    eprintln!("damaged: {d}");
                }
                eprintln!(
                    "index rebuilt: {} packs, {} blobs in {} index files; {} old index files \
                     removed",
                    r.packs, r.blobs, r.written, r.deleted
                );
            }
            if !r.damaged.is_empty() {
                bail!(
                    "{} packs could not be read and are left out of the index (listed above): \
                     run check to see which snapshots lost data",
                    r.damaged.len()
                );
            }
            Ok(())
        }
    }
}
