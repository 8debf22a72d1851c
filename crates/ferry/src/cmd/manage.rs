//! `ferry tag`, `ferry unlock`, `ferry stats`: managing snapshots and the repository.

use anyhow::{bail, Result};

use crate::cli::{StatsArgs, TagArgs, UnlockArgs};
use crate::ctx::Ctx;

pub async fn tag(_args: &TagArgs, _ctx: &mut Ctx) -> Result<()> {
    bail!("ferry tag is not built yet")
}

pub async fn unlock(_args: &UnlockArgs, _ctx: &mut Ctx) -> Result<()> {
    bail!("ferry unlock is not built yet")
}

pub async fn stats(_args: &StatsArgs, _ctx: &mut Ctx) -> Result<()> {
    bail!("ferry stats is not built yet")
}
