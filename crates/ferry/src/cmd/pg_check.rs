//! `ferry pg check` (is archiving working, end to end, now) and `ferry pg info` (the state a
//! monitoring system scrapes).

use anyhow::{bail, Result};
use ferry_pg::restore::show_time;

use crate::cli::{PgCheckArgs, PgInfoArgs};
use crate::cmd::pg::mb;
use crate::cmd::repo::open;
use crate::ctx::Ctx;

pub async fn check(a: &PgCheckArgs, ctx: &mut Ctx) -> Result<()> {
    let (g, stores, out) = ctx.parts();
    let repo = open(g, stores).await?;
    let c = ferry_pg::check::check(repo, &a.conninfo, a.archive_timeout).await?;
    if out.json {
        println!(
            "{}",
            serde_json::json!({"ok": c.problems.is_empty(), "segment": c.segment,
                "waited_s": c.waited.map(|w| w.as_secs_f64()), "backup": c.backup,
                "problems": c.problems})
        );
    } else {
        for p in &c.problems {
            eprintln!("problem: {p}");
        }
    }
    if !c.problems.is_empty() {
        bail!("pg check found {} problems", c.problems.len());
    }
    if !out.json {
        eprintln!(
            "ok: {} archived in {:.1}s and read back; backup {} reaches it",
            c.segment.as_deref().unwrap_or("-"),
            c.waited.unwrap_or_default().as_secs_f64(),
            c.backup.map(|b| b.short()).unwrap_or_default()
        );
    }
    Ok(())
}

pub async fn info(a: &PgInfoArgs, ctx: &mut Ctx) -> Result<()> {
    let (g, stores, out) = ctx.parts();
    let repo = open(g, stores).await?;
    let i = ferry_pg::info::info(repo, a.conninfo.as_deref()).await?;
    if out.json {
        let backups: Vec<_> = i
            .backups
            .iter()
            .map(|(id, s, b)| {
                serde_json::json!({"id": id, "start_time": show_time(b.start_time),
                    "stop_time": show_time(b.stop_time), "age_s": age_s(b.stop_time),
                    "start_wal": b.start_wal, "stop_wal": b.stop_wal, "timeline": b.timeline,
                    "size": s.summary.total_bytes, "stored": s.summary.bytes_stored})
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({"backups": backups, "wal": i.timelines, "archiving": i.archiving})
        );
        return Ok(());
    }
    match i.backups.last() {
        Some((id, s, b)) => println!(
            "{} backups; newest {} ended {} ({}), WAL {} - {}",
            i.backups.len(),
            id.short(),
            show_time(b.stop_time),
            mb(s.summary.total_bytes),
            b.start_wal,
            b.stop_wal
        ),
        None => println!("no backups"),
    }
    for t in &i.timelines {
        println!(
            "timeline {}: WAL {} - {}, {} segments",
            t.timeline, t.first, t.last, t.segments
        );
    }
    if let Some(w) = &i.archiving {
        println!(
            "archiving: writing {}, {} completed segments not archived, last archived {} ({}), {} failures{}",
            w.current,
            w.lag_segments,
            w.last_archived.as_deref().unwrap_or("-"),
            w.last_archived_age_s.map_or("never".into(), |s| format!("{s:.0}s ago")),
            w.failed_count,
            w.last_failed
                .as_deref()
                .map(|f| format!(", last {f}"))
                .unwrap_or_default()
        );
    }
    Ok(())
}

/// Seconds since `us` (microseconds since the epoch).
fn age_s(us: i64) -> f64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64);
    (now - us) as f64 / 1e6
}
