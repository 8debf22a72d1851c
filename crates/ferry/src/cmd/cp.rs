//! `ferry cp`: files, trees, streams and objects, any side to any side.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Result};
use ferry_store::{Error, Scheme};
use ferry_transfer::{Described, Progress};
use futures::StreamExt;

use crate::cli::CpArgs;
use crate::ctx::Ctx;
use crate::output::Bar;
use crate::places::{base_name, join, Place};

/// Objects copied at once; the scheduler, not this number, bounds requests in flight, so it
/// only needs to be large enough to keep the scheduler fed with small files.
const FILES_AT_ONCE: usize = 256;

/// One object to copy.
struct Job {
    src: Place,
    src_key: String,
    /// What the source's HEAD said while planning: a lone copy, which follows at once,
    /// starts from it.
    info: Option<Described>,
    dst: Place,
    dst_key: String,
}

pub async fn run(args: &CpArgs, ctx: &mut Ctx) -> Result<()> {
    let (_, stores, out) = ctx.parts();
    let engine = stores.engine().clone();
    let (dst_raw, srcs) = args.paths.split_last().expect("clap requires two paths");
    let dst = stores.open(dst_raw)?;
    let many = srcs.len() > 1 || args.recursive;
    let bar = Arc::new(Bar::new(out.progress));
    let started = Instant::now();

    if srcs.iter().any(|s| s == "-") || dst.loc.scheme == Scheme::Stdio {
        if srcs.len() != 1 || args.recursive {
            bail!("'-' copies exactly one stream: give one source and one destination");
        }
        let src = stores.open(&srcs[0])?;
        stream(&src, &dst, bar.clone()).await?;
        bar.finish();
        return out.summary(&engine.report(), started, 0);
    }

    let mut jobs = Vec::new();
    for raw in srcs {
        let src = stores.open(raw)?;
        plan(&src, &dst, many, args.recursive, &mut jobs).await?;
    }
    if let [job] = &jobs[..] {
        // One object: its error is the command's error, on one line.
        let (src, dst) = (&job.src.store, &job.dst.store);
        let r = match &job.info {
            Some(obj) => src.copy_described_to(obj, dst, &job.dst_key, &*bar).await,
            None => src.copy_to(&job.src_key, dst, &job.dst_key, &*bar).await,
        };
        bar.finish();
        r.map_err(|e| {
            anyhow::anyhow!(
                "{} -> {}: {e}",
                job.src.show(&job.src_key),
                job.dst.show(&job.dst_key)
            )
        })?;
        return out.summary(&engine.report(), started, 0);
    }
    let failed = copy_all(jobs, &bar).await;
    bar.finish();
    out.summary(&engine.report(), started, failed)?;
    if failed > 0 {
        bail!(
            "{failed} of {} objects failed (see above)",
            engine.report().objects + failed
        );
    }
    Ok(())
}

async fn stream(src: &Place, dst: &Place, bar: Arc<Bar>) -> Result<()> {
    match (src.loc.scheme, dst.loc.scheme) {
        (Scheme::Stdio, Scheme::Stdio) => bail!("copying stdin to stdout: use cat"),
        (Scheme::Stdio, _) => {
            let key = single_dst_key(dst, None)?;
            dst.store.upload(tokio::io::stdin(), &key, bar).await?;
        }
        (_, Scheme::Stdio) => {
            if src.dir_hint || src.key.is_empty() {
                bail!("{}: names a directory or prefix, not one object", src.loc);
            }
            src.store
                .download(&src.key, tokio::io::stdout(), &*bar)
                .await?;
        }
        _ => unreachable!("one side is a stream"),
    }
    Ok(())
}

/// Where a single object goes: `dst` itself, or `dst/NAME` when `dst` is a directory or prefix.
fn single_dst_key(dst: &Place, name: Option<&str>) -> Result<String> {
    let is_dir = dst.dir_hint
        || (dst.loc.is_remote() && dst.key.is_empty())
        || (dst.loc.scheme == Scheme::Local && dst.path().is_dir());
    let key = match (is_dir, name) {
        (false, _) => dst.key.clone(),
        (true, Some(n)) => join(&dst.key, n),
        (true, None) => bail!(
            "{}: is a directory or prefix; name the object to write",
            dst.loc
        ),
    };
    if dst.loc.scheme == Scheme::Local && std::path::Path::new("/").join(&key).is_dir() {
        bail!("/{key}: destination exists as a directory");
    }
    Ok(key)
}

/// Adds the objects `src` names to `jobs`.
async fn plan(
    src: &Place, dst: &Place, many: bool, recursive: bool, jobs: &mut Vec<Job>,
) -> Result<()> {
    let (is_prefix, info) = match src.loc.scheme {
        Scheme::Local => {
            let path = src.path();
            match std::fs::metadata(&path) {
                Ok(m) if m.is_dir() => (true, None),
                Ok(_) => (false, None),
                Err(e) => bail!("{}: {e}", path.display()),
            }
        }
        _ if src.key.is_empty() || src.dir_hint => (true, None),
        _ => match src.store.describe(&src.key).await {
            Ok(obj) => (false, Some(obj)),
            Err(Error::NotFound(_)) if recursive => (true, None),
            Err(Error::NotFound(_)) => {
                bail!("{}: no such object (use -r to copy a prefix)", src.loc)
            }
            Err(e) => return Err(e.into()),
        },
    };
    if !is_prefix {
        let name = base_name(&src.key);
        let dst_key = if many {
            join(&dst.key, name)
        } else {
            single_dst_key(dst, Some(name))?
        };
        jobs.push(Job {
            src: src.clone(),
            src_key: src.key.clone(),
            info,
            dst: dst.clone(),
            dst_key,
        });
        return Ok(());
    }
    if !recursive {
        bail!("{}: is a directory or prefix (use -r)", src.loc);
    }
    // `s3://b/p` and `s3://b/p/` name the same prefix.
    let base = src.key.trim_end_matches('/');
    let prefix = if base.is_empty() {
        String::new()
    } else {
        format!("{base}/")
    };
    let listed = src.store.list(&prefix).await?;
    if listed.is_empty() && src.loc.is_remote() {
        bail!("{}: nothing under this prefix", src.loc);
    }
    for obj in &listed {
        below(&prefix, &obj.key)?;
    }
    for obj in listed {
        let rel = below(&prefix, &obj.key)?;
        jobs.push(Job {
            src: src.clone(),
            src_key: obj.key.clone(),
            info: None,
            dst: dst.clone(),
            dst_key: join(&dst.key, rel),
        });
    }
    Ok(())
}

/// `key`'s part below `prefix`, refused when a segment of it is `.` or `..`: a listing is
/// the store's word (a hostile bucket or server), and such a name joined to the destination
/// would write outside it. Checked for every key before anything is copied.
fn below<'a>(prefix: &str, key: &'a str) -> Result<&'a str> {
    let rel = key.strip_prefix(prefix).unwrap_or(key);
    if rel.split('/').any(|p| p == "." || p == "..") {
        bail!("the store listed {key:?}, a name with . or ..: refused, nothing copied");
    }
    Ok(rel)
}

/// Copies every job, many at once; a failed object is reported and the rest go on.
async fn copy_all(jobs: Vec<Job>, bar: &Arc<Bar>) -> u64 {
    let progress: &dyn Progress = &**bar;
    let results = futures::stream::iter(jobs)
        .map(|j| async move {
            // Described again: a job may start long after its planning.
            let r = j
                .src
                .store
                .copy_to(&j.src_key, &j.dst.store, &j.dst_key, progress)
                .await;
            (j, r)
        })
        .buffer_unordered(FILES_AT_ONCE);
    futures::pin_mut!(results);
    let mut failed = 0;
    while let Some((j, r)) = results.next().await {
        if let Err(e) = r {
            failed += 1;
            bar.println(&format!(
                "ferry: error: {} -> {}: {e}",
                j.src.show(&j.src_key),
                j.dst.show(&j.dst_key)
            ));
        }
    }
    failed
}

#[cfg(test)]
mod tests {
    use super::below;

    #[test]
    fn a_listed_name_cannot_climb_out_of_the_destination() {
        assert_eq!(below("p/", "p/a/b").unwrap(), "a/b");
        for hostile in ["p/../etc/passwd", "p/a/../../x", "p/./a", "p/.."] {
            assert!(below("p/", hostile).is_err(), "{hostile} accepted");
        }
    }
}
