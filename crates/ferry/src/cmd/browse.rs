//! `ferry diff`, `ferry find`, `ferry dump`: reading snapshots without restoring them.

use std::io::IsTerminal;
use std::path::Path;

use anyhow::{bail, Context, Result};
use ferry_repo::browse::{self, What};
use ferry_repo::pattern::{Patterns, Source};
use ferry_repo::tree::{Node, NodeKind};
use serde_json::json;

use super::repo::open;
use crate::cli::{DiffArgs, DumpArgs, FindArgs};
use crate::ctx::Ctx;
use crate::output::human_bytes;

pub async fn diff(args: &DiffArgs, ctx: &mut Ctx) -> Result<()> {
    let (g, stores, out) = ctx.parts();
    let repo = open(g, stores).await?;
    let ((from, old), (to, new), (index, _)) = tokio::try_join!(
        repo.snapshot(&args.from),
        repo.snapshot(&args.to),
        repo.index()
    )?;
    let d = browse::diff(&repo, &index, old.tree, new.tree).await?;
    if out.json {
        let changes: Vec<_> = d
            .changes
            .iter()
            .map(|c| json!({"path": lossy(&c.path), "change": c.what.mark(), "type": c.kind}))
            .collect();
        let counts = json!({"added": d.count(What::Added), "removed": d.count(What::Removed),
            "modified": d.count(What::Modified), "metadata": d.count(What::Metadata),
            "type": d.count(What::Type)});
        let v = json!({"from": from, "to": to, "changes": changes, "counts": counts,
            "bytes_added": d.bytes_added, "bytes_removed": d.bytes_removed});
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!("comparing snapshot {} to {}:\n", from.short(), to.short());
    for c in &d.changes {
        let slash = if c.kind == NodeKind::Dir { "/" } else { "" };
        println!("{:<5}{}{slash}", c.what.mark(), shown(&c.path));
    }
    println!(
        "\n{} added, {} removed, {} modified, {} metadata only, {} type changed; data: {} added, {} removed",
        d.count(What::Added),
        d.count(What::Removed),
        d.count(What::Modified),
        d.count(What::Metadata),
        d.count(What::Type),
        human_bytes(d.bytes_added),
        human_bytes(d.bytes_removed),
    );
    Ok(())
}

pub async fn find(args: &FindArgs, ctx: &mut Ctx) -> Result<()> {
    let from = Source {
        flag: "pattern",
        case_insensitive: args.ignore_case,
    };
    // A bad pattern is refused before the repository is opened.
    let patterns = Patterns::new(&args.patterns, from)?;
    let (g, stores, out) = ctx.parts();
    let repo = open(g, stores).await?;
    let filter = args.filter.filter();
    let (snaps, (index, _)) = tokio::try_join!(repo.snapshots_matching(&filter), repo.index())?;
    let roots: Vec<_> = snaps.iter().map(|(_, s)| s.tree).collect();
    let found = browse::find(&repo, &index, &roots, &patterns).await?;
    let hits = snaps.iter().zip(&found).filter(|(_, m)| !m.is_empty());
    if out.json {
        let v: Vec<_> = hits
            .map(|((id, s), matches)| {
                let m: Vec<_> = matches
                    .iter()
                    .map(|m| {
                        json!({"path": lossy(&m.path), "type": m.node.kind,
                        "size": size(&m.node), "mtime": when(m.node.mtime, true)})
                    })
                    .collect();
                json!({"snapshot": id, "time": when(s.time.saturating_mul(NS), false),
                    "hostname": s.hostname, "matches": m})
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    for (i, ((id, s), matches)) in hits.enumerate() {
        let gap = if i == 0 { "" } else { "\n" };
        println!(
            "{gap}snapshot {} of {} on {}:",
            id.short(),
            when(s.time.saturating_mul(NS), false),
            s.hostname
        );
        for m in matches {
            let kind = serde_json::to_value(m.node.kind)?;
            let kind = kind.as_str().unwrap_or("?");
            println!(
                "{kind:<8} {:>12}  {}  {}",
                size(&m.node),
                when(m.node.mtime, false),
                shown(&m.path)
            );
        }
    }
    Ok(())
}

pub async fn dump(args: &DumpArgs, ctx: &mut Ctx) -> Result<()> {
    let (g, stores, _) = ctx.parts();
    let repo = open(g, stores).await?;
    let filter = args.filter.filter();
    let ((id, snap), (index, _)) =
        tokio::try_join!(repo.snapshot_in(&args.snapshot, &filter), repo.index())?;
    let found = browse::lookup(&repo, &index, snap.tree, &args.path)
        .await
        .with_context(|| format!("snapshot {}", id.short()))?;
    let mut stdout = tokio::io::stdout();
    match &found.node {
        Some(n) if !found.is_dir() => {
            browse::write_file(&repo, &index, &found.path, n, &mut stdout).await?;
        }
        _ if std::io::stdout().is_terminal() => bail!(
            "{} is a directory, written as a tar archive: send stdout to a file or a pipe",
            found.path.display()
        ),
        _ => {
            browse::write_tar(&repo, &index, &found, &mut stdout).await?;
        }
    }
    Ok(())
}

const NS: i64 = 1_000_000_000;

/// A path for JSON: names that are not UTF-8 shown with replacement characters (JSON escapes
/// the rest).
fn lossy(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// A path for people, on one line: [`lossy`], with control characters escaped (`\n`,
/// `\u{1b}`). Names come from whoever owned the files backed up: a newline would forge
/// another line of the listing, an escape sequence would drive the reader's terminal.
fn shown(p: &Path) -> String {
    p.to_string_lossy()
        .chars()
        .map(|c| match c.is_control() {
            true => c.escape_default().to_string(),
            false => c.to_string(),
        })
        .collect()
}

/// A file's size; nothing for the other kinds.
fn size(n: &Node) -> u64 {
    match n.kind {
        NodeKind::File => n.size,
        _ => 0,
    }
}

/// RFC 3339 UTC of `ns` since the epoch, with nanoseconds when `nanos`; times a snapshot
/// may hold outside 1970..9999 are shown at those bounds, which is all the format can say.
fn when(ns: i64, nanos: bool) -> String {
    const LAST: i64 = 253_402_300_799;
    let (s, n) = (ns.div_euclid(NS), ns.rem_euclid(NS));
    let (s, n) = match s {
        s if s < 0 => (0, 0),
        s if s > LAST => (LAST, 0),
        s => (s, n),
    };
    let t = std::time::UNIX_EPOCH + std::time::Duration::new(s as u64, n as u32);
    match nanos {
        true => humantime::format_rfc3339_nanos(t).to_string(),
        false => humantime::format_rfc3339_seconds(t).to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_are_shown_on_one_line_without_escape_sequences() {
        let p = std::path::Path::new("/a\n+ /etc/shadow\u{1b}[2Jé");
        assert_eq!(super::shown(p), "/a\\n+ /etc/shadow\\u{1b}[2Jé");
    }
}
