//! `ferry mount`: the snapshots read-only through FUSE until Ctrl-C (or SIGTERM).

use anyhow::Result;
use tokio::signal::unix::{signal, SignalKind};

use crate::cli::MountArgs;
use crate::cmd::repo::open;
use crate::ctx::Ctx;

pub async fn run(args: &MountArgs, ctx: &mut Ctx) -> Result<()> {
    let (g, stores, _) = ctx.parts();
    let repo = open(g, stores).await?;
    let mounted = ferry_mount::mount(repo, &args.filter.filter(), &args.mountpoint).await?;
    eprintln!(
        "snapshots mounted read-only at {}; Ctrl-C unmounts",
        args.mountpoint.display()
    );
    let mut term = signal(SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    // Unmounting blocks until the kernel lets go: off the runtime, which FUSE calls use.
    tokio::task::spawn_blocking(move || drop(mounted)).await?;
    eprintln!("unmounted {}", args.mountpoint.display());
    Ok(())
}
