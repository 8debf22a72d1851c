//! `wal-status`: what the archive holds, where it has holes, and what the agent has queued.

use std::collections::BTreeMap;
use std::path::Path;

use ferry_transfer::Result;
use serde::Serialize;

use crate::archive::{Archive, Gap};
use crate::audit::{audit, Finding};
use crate::name::{Kind, WalName};
use crate::push::queued;
use crate::spool::Spool;

/// One timeline's segments in the archive.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Timeline {
    /// The timeline id.
    pub timeline: u32,
    /// Oldest archived segment.
    pub first: String,
    /// Newest archived segment.
    pub last: String,
    /// Segments archived.
    pub segments: u64,
    /// Ranges of segments missing between `first` and `last`, inclusive.
    pub missing: Vec<(String, String)>,
}

/// The push side of one cluster's spool.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Queue {
    /// Files PostgreSQL marked ready and the agent has not acked.
    pub waiting: Vec<String>,
    /// Files acked, not yet marked done by PostgreSQL.
    pub acked: usize,
    /// Files the agent failed on, with why.
    pub errors: Vec<(String, String)>,
    /// Drop-policy gaps not yet recorded in the archive.
    pub unrecorded_gaps: Vec<String>,
    /// An agent holds the spool.
    pub agent_running: bool,
}

/// Everything `wal-status` reports.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Status {
    /// The archive's location.
    pub archive: String,
    /// The cluster it belongs to, once anything was pushed.
    pub system_id: Option<String>,
    /// Archived files of every kind.
    pub files: u64,
    /// Bytes they take in the store.
    pub stored_bytes: u64,
    /// Segments per timeline.
    pub timelines: Vec<Timeline>,
    /// Timeline history files.
    pub histories: Vec<String>,
    /// Backup labels.
    pub backups: Vec<String>,
    /// Partial segments.
    pub partials: Vec<String>,
    /// Gaps the drop policy recorded: PITR cannot cross them.
    pub gaps: Vec<Gap>,
    /// The agent's queue, when the cluster's pg_wal and spool were given.
    pub queue: Option<Queue>,
    /// Objects whose header is damaged, or says plaintext in an encrypted archive.
    pub suspect: Vec<Finding>,
}

/// Reads the archive (and the spool, when given) into a [`Status`]. `encrypted`: the archive
/// lies in a repository, so every object's header is read and a plaintext one reported.
pub async fn status(
    archive: &Archive, local: Option<(&Path, &Spool)>, encrypted: bool,
) -> Result<Status> {
    let cluster = archive.cluster().await?;
    let seg_size = cluster.as_ref().map_or(16 << 20, |c| c.seg_size);
    let files = archive.list().await?;
    let mut by_tli: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    let (mut histories, mut backups, mut partials) = (Vec::new(), Vec::new(), Vec::new());
    let mut stored_bytes = 0;
    for (name, info) in &files {
        stored_bytes += info.size;
        match name.kind() {
            Kind::Segment => by_tli
                .entry(name.timeline())
                .or_default()
                .push(name.segno(seg_size)),
            Kind::History => histories.push(name.to_string()),
            Kind::Backup => backups.push(name.to_string()),
            Kind::Partial => partials.push(name.to_string()),
        }
    }
    let timelines = by_tli
        .into_iter()
        .map(|(tli, mut segs)| {
            segs.sort_unstable();
            let show = |s: u64| WalName::segment(tli, s, seg_size).to_string();
            let missing = segs
                .windows(2)
                .filter(|w| w[1] > w[0] + 1)
                .map(|w| (show(w[0] + 1), show(w[1] - 1)))
                .collect();
            Timeline {
                timeline: tli,
                first: show(segs[0]),
                last: show(*segs.last().expect("non-empty")),
                segments: segs.len() as u64,
                missing,
            }
        })
        .collect();
    let queue = match local {
        Some((pg_wal, spool)) => {
            let mut q = Queue {
                waiting: Vec::new(),
                acked: 0,
                errors: Vec::new(),
                unrecorded_gaps: spool.names("gaps")?,
                agent_running: spool.locked("push")?,
            };
            for n in queued(pg_wal)? {
                if spool.acked(n.as_str()) {
                    q.acked += 1;
                } else {
                    q.waiting.push(n.to_string());
                }
                let e = spool.path(&format!("out/{n}.error"));
                if let Ok(msg) = std::fs::read_to_string(e) {
                    q.errors.push((n.to_string(), msg));
                }
            }
            Some(q)
        }
        None => None,
    };
    let suspect = match encrypted {
        true => {
            let names: Vec<WalName> = files.iter().map(|(n, _)| n.clone()).collect();
            audit(archive, &names, true, false).await
        }
        false => Vec::new(),
    };
    Ok(Status {
        archive: archive.url(),
        system_id: cluster.map(|c| c.system_id),
        files: files.len() as u64,
        stored_bytes,
        timelines,
        histories,
        backups,
        partials,
        gaps: archive.gaps().await?,
        queue,
        suspect,
    })
}
