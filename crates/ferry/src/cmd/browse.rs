//! `ferry diff`, `ferry find`, `ferry dump`: reading snapshots without restoring them.

use anyhow::{bail, Result};

use crate::cli::{DiffArgs, DumpArgs, FindArgs};
use crate::ctx::Ctx;

pub async fn diff(_args: &DiffArgs, _ctx: &mut Ctx) -> Result<()> {
    bail!("ferry diff is not built yet")
}

pub async fn find(_args: &FindArgs, _ctx: &mut Ctx) -> Result<()> {
    bail!("ferry find is not built yet")
}

pub async fn dump(_args: &DumpArgs, _ctx: &mut Ctx) -> Result<()> {
    bail!("ferry dump is not built yet")
}
