//! `ferry copy --from-repo URL [SNAP...]`: snapshots from another repository into --repo.

use anyhow::{bail, Context, Result};
use ferry_repo::Repo;

use crate::cli::CopyArgs;
use crate::cmd::repo::open;
use crate::ctx::Ctx;

/// The source's password: FERRY_FROM_PASSWORD, else --from-password-file.
fn from_password(args: &CopyArgs) -> Result<Vec<u8>> {
    let pw = match (
        std::env::var_os("FERRY_FROM_PASSWORD"),
        &args.from_password_file,
    ) {
        (Some(p), _) => p.into_encoded_bytes(),
        (None, Some(f)) => {
            let mut b =
                std::fs::read(f).with_context(|| format!("password file {}", f.display()))?;
            while b.last().is_some_and(|c| *c == b'\n' || *c == b'\r') {
                b.pop();
            }
            b
        }
        (None, None) => {
            bail!("no password for --from-repo: set FERRY_FROM_PASSWORD or --from-password-file")
        }
    };
    if pw.is_empty() {
        bail!("empty password for --from-repo");
    }
    Ok(pw)
}

pub async fn run(args: &CopyArgs, ctx: &mut Ctx) -> Result<()> {
    let pw = from_password(args)?;
    let (g, stores, out) = ctx.parts();
    let place = stores.open_repo(&args.from_repo)?;
    let from = Repo::open(place.store, &place.key, &pw, None)
        .await
        .with_context(|| format!("--from-repo {}", args.from_repo))?;
    let to = open(g, stores).await?;
    if from.config.id == to.config.id {
        bail!("--from-repo is --repo itself: nothing to copy");
    }
    let filter = args.filter.filter();
    let snaps = match args.snapshots.is_empty() {
        true => from.snapshots_matching(&filter).await?,
        false => {
            let mut v = Vec::new();
            for s in &args.snapshots {
                v.push(from.snapshot_in(s, &filter).await?);
            }
            v
        }
    };
    let c = ferry_repo::copy::copy(std::sync::Arc::new(from), to, snaps).await?;
    if out.json {
        println!("{}", serde_json::to_string(&c)?);
    } else {
        for (old, new) in &c.copied {
            eprintln!("snapshot {} copied as {}", old.short(), new.short());
        }
        eprintln!(
            "copied {} snapshots ({} already there); {} new blobs, {:.1} MB",
            c.copied.len(),
            c.skipped.len(),
            c.blobs_new,
            c.bytes_new as f64 / 1e6
        );
    }
    Ok(())
}
