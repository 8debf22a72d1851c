//! A progress bar on a terminal, nothing otherwise.

use std::io::IsTerminal;

use ferry_transfer::Progress;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

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
                "{msg} {bytes:>10}/{total_bytes:<10} {wide_bar} {binary_bytes_per_sec:>12} ETA {eta}",
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

    /// Shows `done` of `total` files beside the bytes.
    pub fn files(&self, done: u64, total: u64) {
        if !self.0.is_hidden() {
            self.0.set_message(format!("{done}/{total} files"));
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
