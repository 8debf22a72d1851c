//! What the commands print: the closing summary (JSON or one line) and the progress bar.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::Result;
use ferry_repo::archiver::BackupProgress;
use ferry_transfer::{Progress, Report};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How a command reports: a JSON summary on stdout, a bar on a terminal, or nothing.
pub struct Output {
    pub json: bool,
    pub progress: bool,
    /// With `--json`: status lines on stdout while a backup or restore runs (not `--quiet`).
    pub status_lines: bool,
}

impl Output {
    /// As the global flags say: `--json` prints JSON and no bar, `--quiet` no bar.
    pub fn new(g: &crate::cli::Global) -> Self {
        Self {
            json: g.json,
            progress: !g.quiet && !g.json,
            status_lines: g.json && !g.quiet,
        }
    }

    /// Prints the closing summary: JSON with `--json`, one line on a terminal, else nothing.
    pub fn summary(&self, r: &Report, started: Instant, failed: u64) -> Result<()> {
        let secs = started.elapsed().as_secs_f64();
        if self.json {
            println!("{}", summary_json(r, secs, failed));
        } else if self.progress && std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            eprintln!(
                "copied {} objects, {:.1} MB in {secs:.1}s ({:.1} MB/s, {} in flight at most, {} retries)",
                r.objects,
                r.bytes as f64 / 1e6,
                r.bytes as f64 / 1e6 / secs.max(1e-9),
                r.concurrency,
                r.retries
            );
        }
        Ok(())
    }
}

/// Files and bytes done of those known, with rate and ETA, drawn on stderr.
pub struct Bar(ProgressBar);

impl Bar {
    /// A bar when stderr is a terminal and the user wants one; hidden otherwise.
    pub fn new(wanted: bool) -> Self {
        let target = if wanted && std::io::stderr().is_terminal() {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = ProgressBar::with_draw_target(Some(0), target);
        bar.set_style(
            ProgressStyle::with_template(
                "{bytes:>10}/{total_bytes:<10} {wide_bar} {binary_bytes_per_sec:>12} ETA {eta}\n{wide_msg}",
            )
            .expect("static template"),
        );
        Self(bar)
    }

    /// True when the bar is drawn: totals for its ETA are worth gathering.
    pub fn is_drawn(&self) -> bool {
        !self.0.is_hidden()
    }

    /// Prints a line above the bar.
    pub fn println(&self, line: &str) {
        if self.0.is_hidden() {
            eprintln!("{line}");
        } else {
            self.0.println(line);
        }
    }

    /// Shows `done` of `total` files and the file being read, under the bytes.
    pub fn files(&self, done: u64, total: u64, current: &str) {
        if !self.0.is_hidden() {
            self.0
                .set_message(format!("{done}/{total} files  {current}"));
        }
    }

    /// Removes the bar.
    pub fn finish(&self) {
        self.0.finish_and_clear();
    }
}

impl Progress for Bar {
    fn add_total(&self, bytes: u64) {
        self.0.inc_length(bytes);
    }
    fn advance(&self, bytes: u64) {
        self.0.inc(bytes);
    }
}

/// The numbers `--json` prints. `verified` counts objects checked against a digest their
/// source store vouched for, `unverified` those whose source keeps none (local disk, a
/// stream): each only when not zero, since `"verified": 0` read as a failed check.
pub fn summary_json(r: &Report, seconds: f64, failed: u64) -> serde_json::Value {
    let mut v = serde_json::json!({
        "objects": r.objects,
        "failed": failed,
        "bytes": r.bytes,
        "seconds": seconds,
        "mb_per_s": r.bytes as f64 / 1e6 / seconds.max(1e-9),
        "block_size": r.block_size,
        "concurrency": r.concurrency,
        "retries": r.retries,
    });
    let unverified = r.objects.saturating_sub(r.verified);
    for (k, n) in [("verified", r.verified), ("unverified", unverified)] {
        if n > 0 {
            v[k] = n.into();
        }
    }
    v
}

/// The progress backups and restores show: a bar on a terminal, or with `--json` a status
/// line on stdout every second, as restic's `message_type: "status"` lines.
pub(crate) struct BarProgress {
    pub(crate) bar: Bar,
    files: AtomicU64,
    files_total: AtomicU64,
    bytes: AtomicU64,
    bytes_total: AtomicU64,
    current: Mutex<String>,
    started: Instant,
    /// The status ticker (with `--json`): stopped and joined by [`BarProgress::finish`].
    ticker: Mutex<Option<(Arc<AtomicBool>, std::thread::JoinHandle<()>)>>,
}

impl BarProgress {
    pub(crate) fn new(out: &Output) -> Arc<Self> {
        let p = Arc::new(BarProgress {
            bar: Bar::new(out.progress),
            files: AtomicU64::new(0),
            files_total: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            bytes_total: AtomicU64::new(0),
            current: Mutex::new(String::new()),
            started: Instant::now(),
            ticker: Mutex::new(None),
        });
        if out.json && out.status_lines {
            let stop = Arc::new(AtomicBool::new(false));
            let (me, s2) = (Arc::downgrade(&p), stop.clone());
            let t = std::thread::spawn(move || loop {
                std::thread::sleep(STATUS_EVERY);
                match (s2.load(Ordering::Relaxed), me.upgrade()) {
                    (false, Some(p)) => println!("{}", p.status()),
                    _ => return,
                }
            });
            *p.ticker.lock().expect("ticker") = Some((stop, t));
        }
        p
    }

    /// True when totals are worth a scan of the sources: a bar or status lines show them.
    pub(crate) fn wants_totals(&self) -> bool {
        self.bar.is_drawn() || self.ticker.lock().expect("ticker").is_some()
    }

    /// A status line: done of total, the share done, the file being read.
    fn status(&self) -> serde_json::Value {
        let (bytes, total) = (
            self.bytes.load(Ordering::Relaxed),
            self.bytes_total.load(Ordering::Relaxed),
        );
        let current = self.current.lock().expect("current").clone();
        serde_json::json!({
            "message_type": "status",
            "seconds_elapsed": self.started.elapsed().as_secs(),
            "percent_done": if total == 0 { 0.0 } else { (bytes as f64 / total as f64).min(1.0) },
            "total_files": self.files_total.load(Ordering::Relaxed),
            "files_done": self.files.load(Ordering::Relaxed),
            "total_bytes": total,
            "bytes_done": bytes,
            "current_files": if current.is_empty() { vec![] } else { vec![current] },
        })
    }

    /// Adds `bytes` to the total (a restore knows its total from the snapshot).
    pub(crate) fn add_total(&self, bytes: u64) {
        self.bar.add_total(bytes);
        self.bytes_total.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Removes the bar and stops the status lines, before the summary is printed.
    pub(crate) fn finish(&self) {
        self.bar.finish();
        if let Some((stop, t)) = self.ticker.lock().expect("ticker").take() {
            stop.store(true, Ordering::Relaxed);
            let _ = t.join();
        }
    }
}

/// How often `--json` prints a status line.
const STATUS_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

impl BackupProgress for BarProgress {
    fn scanned(&self, bytes: u64) {
        self.bar.add_total(bytes);
        self.bytes_total.fetch_add(bytes, Ordering::Relaxed);
        self.files_total.fetch_add(1, Ordering::Relaxed);
    }
    fn done(&self, bytes: u64) {
        self.bar.advance(bytes);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }
    fn file_done(&self) {
        let done = self.files.fetch_add(1, Ordering::Relaxed) + 1;
        let total = self.files_total.load(Ordering::Relaxed).max(done);
        let current = self.current.lock().expect("current").clone();
        self.bar.files(done, total, &current);
    }
    fn file_started(&self, path: &std::path::Path) {
        *self.current.lock().expect("current") = path.display().to_string();
    }
}

/// Bytes as people read them: B, KiB, MiB, GiB, TiB.
pub(crate) fn human_bytes(b: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let (mut v, mut u) = (b as f64, 0);
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    match u {
        0 => format!("{b} B"),
        _ => format!("{v:.1} {}", units[u]),
    }
}
