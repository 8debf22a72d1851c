//! `ferry pg check`: proves, end to end, that the cluster's WAL reaches this repository and
//! that a backup there can be replayed up to now.
//!
//! As pgBackRest's `check` does: a restore point is created (so that there is WAL to switch
//! away from), the WAL file is switched, and the segment that completed is waited for in the
//! repository's archive; then it is read back and authenticated, and the newest backup of this
//! cluster must reach it with no segment missing. Each problem found is one line.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry_repo::{Id, Repo};
use ferry_transfer::{Error, Result};
use tokio_postgres::Client;

use crate::backup::{db, wait_archived};
use crate::conn::connect;
use crate::record::backups;
use crate::walview::{archive, WalView};

/// What the check found.
#[derive(Debug, Default)]
pub struct Checked {
    /// The segment switched away from, when the switch was made.
    pub segment: Option<String>,
    /// How long it took to reach the archive, when it did.
    pub waited: Option<Duration>,
    /// The newest backup of this cluster, when there is one.
    pub backup: Option<Id>,
    /// Everything that stops a restore to now, one line each; empty: all is well.
    pub problems: Vec<String>,
}

/// Checks the cluster `conninfo` reaches against `repo`, waiting up to `timeout` for the
/// switched segment. Errors only for what stops the check itself (no connection, no
/// repository); what the check finds wrong is in [`Checked::problems`].
pub async fn check(repo: Arc<Repo>, conninfo: &str, timeout: Duration) -> Result<Checked> {
    let work = check_locked(repo.clone(), conninfo, timeout);
    ferry_repo::lock::under(&repo, false, work).await
}

async fn check_locked(repo: Arc<Repo>, conninfo: &str, timeout: Duration) -> Result<Checked> {
    let c = connect(conninfo).await?;
    let mut out = Checked::default();
    let r = c
        .query_one(
            "SELECT pg_is_in_recovery(), current_setting('archive_mode'), \
             current_setting('archive_command'), \
             (SELECT system_identifier::text FROM pg_control_system()), \
             (SELECT setting::int8 FROM pg_settings WHERE name = 'wal_segment_size')",
            &[],
        )
        .await
        .map_err(db("describe itself"))?;
    let (standby, mode, command, system_id, seg_size): (bool, String, String, String, i64) =
        (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4));
    if standby {
        out.problems
            .push("the server is a standby, which cannot switch WAL: check the primary".into());
        return Ok(out);
    }
    if mode == "off" {
        out.problems
            .push("archive_mode is off: set archive_mode = on (a restart)".into());
        return Ok(out);
    }
    if let Some(problem) = not_ferry(&command, &repo.url()) {
        out.problems.push(problem);
    }
    let segment = switch(&c).await?;
    out.segment = Some(segment.clone());
    let start = Instant::now();
    if let Err(e) = wait_archived(&c, &repo, &segment, timeout).await {
        out.problems.push(e.to_string());
        return Ok(out);
    }
    out.waited = Some(start.elapsed());
    let wal = ferry_wal::WalName::parse(&segment)?;
    if let Err(e) = archive(&repo).fetch(&wal).await {
        out.problems.push(format!(
            "{segment} is archived but cannot be read back: {e}"
        ));
    }
    let mine: Vec<_> = backups(repo.snapshots().await?)
        .into_iter()
        .filter(|(_, _, b)| b.system_id == system_id)
        .collect();
    let Some((id, _, b)) = mine.last() else {
        out.problems.push(format!(
            "{} holds no backup of this cluster (system identifier {system_id}): run ferry pg backup",
            repo.url()
        ));
        return Ok(out);
    };
    out.backup = Some(*id);
    let view = WalView::load(&repo, seg_size as u64).await?;
    let from = b.start_lsn.segno(b.seg_size);
    let until = wal.segno(seg_size as u64);
    let mut gone = view.missing(b.timeline, from, b.stop_lsn.segno(b.seg_size).max(from));
    gone.extend(view.holes_after(b.timeline, b.stop_lsn.segno(b.seg_size) + 1));
    gone.retain(|n| ferry_wal::WalName::parse(n).is_ok_and(|w| w.segno(seg_size as u64) <= until));
    if let Some(first) = gone.first() {
        out.problems.push(format!(
            "backup {} cannot be replayed to now: {} WAL segments are missing from the archive, \
             the first {first}",
            id.short(),
            crate::walview::count(gone.len())
        ));
    }
    Ok(out)
}

/// The problem with an `archive_command` that does not run `ferry wal-push` into `repo`, if
/// it does not. It names no more of the command than its program ([`program`]): the rest may
/// hold another tool's keys (`AWS_SECRET_ACCESS_KEY=... aws s3 cp`,
/// `PGBACKREST_REPO1_S3_KEY_SECRET=... pgbackrest`), and problems go to stdout and `--json`.
fn not_ferry(command: &str, repo: &str) -> Option<String> {
    if command.contains("wal-push") {
        return None;
    }
    let runs = match program(command) {
        Some(p) => format!(" (it runs {p})"),
        None if command.trim().is_empty() => " (it is empty)".into(),
        None => String::new(),
    };
    Some(format!(
        "archive_command does not run 'ferry wal-push'{runs}: it must run \
         'ferry wal-push %p' into {repo}"
    ))
}

/// The program `command` runs, for a message: the basename of its first word that is not a
/// `VAR=value` assignment, if that word is a plain path (letters, digits, `._+-/`); else none.
fn program(command: &str) -> Option<&str> {
    let word = words(command).into_iter().find(|w| !is_assignment(w))?;
    let plain = |c: char| c.is_ascii_alphanumeric() || "._+-/".contains(c);
    let name = word.rsplit('/').next()?;
    (word.chars().all(plain) && !name.is_empty()).then_some(name)
}

/// The words of `command` as the shell splits them, as written: a quoted space or a
/// backslash's joins words, so the value of `KEY='a b'` is never taken for a program.
fn words(command: &str) -> Vec<&str> {
    let (mut out, mut start, mut quote) = (Vec::new(), None, None);
    let mut chars = command.char_indices();
    while let Some((i, c)) = chars.next() {
        if quote.is_none() && c.is_whitespace() {
            out.extend(start.take().map(|s| &command[s..i]));
            continue;
        }
        start.get_or_insert(i);
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (None, '\'' | '"') => quote = Some(c),
            // A backslash keeps the next character, but not between single quotes.
            (q, '\\') if q != Some('\'') => {
                chars.next();
            }
            _ => {}
        }
    }
    out.extend(start.map(|s| &command[s..]));
    out
}

/// True for a shell word that sets a variable for the command (`NAME=value`).
fn is_assignment(word: &str) -> bool {
    let Some((name, _)) = word.split_once('=') else {
        return false;
    };
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let digit_first = name.starts_with(|c: char| c.is_ascii_digit());
    !name.is_empty() && !digit_first && name.chars().all(ident)
}

/// Makes WAL to switch away from (a restore point, as pgBackRest does: with none written
/// since the last switch, the switch would do nothing), switches, and returns the name of the
/// segment completed.
async fn switch(c: &Client) -> Result<String> {
    c.query_one("SELECT pg_create_restore_point('ferry pg check')", &[])
        .await
        .map_err(db("create a restore point"))?;
    let r = c
        .query_one("SELECT pg_walfile_name(pg_switch_wal())", &[])
        .await
        .map_err(db("switch WAL"))?;
    let name: String = r.get(0);
    if name.len() != 24 {
        return Err(Error::Permanent(format!(
            "PostgreSQL named the switched WAL file {name:?}"
        )));
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_tools_archive_command_is_named_by_its_program_only() {
        for (command, runs) in [
            (
                "AWS_SECRET_ACCESS_KEY=abc aws s3 cp %p s3://b/%f",
                "(it runs aws)",
            ),
            (
                "PGBACKREST_REPO1_S3_KEY_SECRET='abc d' /usr/bin/pgbackrest archive-push %p",
                "(it runs pgbackrest)",
            ),
            ("K=\"abc \\\" d\" X=a\\ abc cp %p /x/%f", "(it runs cp)"),
            (
                "env AWS_SECRET_ACCESS_KEY=abc aws s3 cp %p s3://b/%f",
                "(it runs env)",
            ),
            ("'AWS=abc' aws", "wal-push':"),
            ("K='abc", "wal-push':"),
            ("  ", "(it is empty)"),
        ] {
            let p = not_ferry(command, "s3://r").unwrap();
            assert!(!p.contains("abc") && p.contains(runs), "{command}: {p}");
        }
        assert_eq!(not_ferry("ferry wal-push %p", "s3://r"), None);
    }
}
