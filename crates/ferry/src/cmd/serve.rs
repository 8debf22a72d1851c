//! `ferry serve`: parse the settings, open the backend through the engine, serve.

use anyhow::{anyhow, Result};

use crate::cli::ServeArgs;
use crate::ctx::Ctx;

/// Runs the server until it is stopped, or prints a new token.
pub async fn run(a: &ServeArgs, ctx: &mut Ctx) -> Result<()> {
    if a.new_token {
        let (token, hash) = ferry_serve::config::new_token();
        println!("token = {token}");
        println!("token_sha256 = \"{hash}\"");
        return Ok(());
    }
    let cfg = ctx
        .stores
        .settings()
        .serve
        .clone()
        .ok_or_else(|| anyhow!("no [serve] table in the config file (--config FILE)"))?;
    cfg.check().map_err(|e| anyhow!("[serve]: {e}"))?;
    // The backend is a repository-like place: private files on a local disk.
    let place = ctx.stores.open_repo(&cfg.backend)?;
    let (backend, base) = (place.store.clone(), place.key.clone());
    let listen = cfg.listen.clone();
    let stop = async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        Ok::<_, std::io::Error>(())
    };
    let served = ferry_serve::run(&cfg, backend, &base, |addr| {
        // The one line a supervisor or a test waits for.
        // (A backend URL may carry a SAS token: its query is not printed.)
        let backend = ferry_store::Location::shown(&cfg.backend);
        eprintln!("ferry serve: listening on https://{addr} (backend {backend})");
    });
    tokio::select! {
        r = served => r.map_err(|e| anyhow!("{listen}: {e}")),
        r = stop => r.map_err(|e| anyhow!("signals: {e}")),
    }
}
