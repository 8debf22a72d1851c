//! What every command runs with.

use crate::cli::Global;
use crate::output::Output;
use crate::places::Stores;

/// The global flags, the stores opened so far (all seen through one engine), and how to
/// print: one argument for every command handler instead of five.
pub struct Ctx {
    /// Flags that apply to every command: `--repo`, password sources, cache.
    pub global: Global,
    /// Stores, opened once per bucket, each call through the engine.
    pub stores: Stores,
    /// JSON or a line for people; a bar on a terminal.
    pub out: Output,
}

impl Ctx {
    /// The flags, the stores and the output at once, for a handler that needs all three.
    pub fn parts(&mut self) -> (&Global, &mut Stores, &Output) {
        (&self.global, &mut self.stores, &self.out)
    }
}
