//! The `ferry` command: parses, wires, prints. The work is done by the library crates.

mod agents;
mod argv;
mod cli;
mod cmd;
mod ctx;
mod output;
mod password;
mod places;
mod settings;

use std::process::ExitCode;

use anyhow::Result;
use clap::Parser;

use cli::{Cli, Command};
use ctx::Ctx;
use output::Output;
use places::Stores;
use settings::Settings;

fn init_logging(verbose: u8, agent: bool) {
    // Other crates' logs only on request: rustls, say, logs a refused certificate at ERROR,
    // which ferry already reports as its one error line.
    let default = match verbose {
        // An agent's log is its only voice: what it pushed, fetched and failed on.
        0 if agent => "off,ferry=warn,ferry_wal=info,ferry_transfer=warn,ferry_store=warn",
        0 => "off,ferry=warn,ferry_transfer=warn,ferry_store=warn",
        1 => "warn,ferry=info,ferry_transfer=debug,ferry_store=debug",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("FERRY_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // Colours only on a terminal: the agents' stderr is a log file.
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
}

async fn run(cli: Cli) -> Result<()> {
    let mut ctx = Ctx {
        global: cli.global.clone(),
        stores: Stores::new(Settings::load(&cli.global)?),
        out: Output::new(&cli.global),
    };
    let ctx = &mut ctx;
    match &cli.command {
        Command::Cp(args) => cmd::cp::run(args, ctx).await,
        Command::Ls(args) if cmd::repo::names_snapshot(&args.url, &ctx.stores) => {
            cmd::repo::ls(&args.url, args.path.as_deref(), ctx).await
        }
        Command::Ls(args) => cmd::ls::ls(&args.url, ctx).await,
        Command::Init(a) => cmd::repo::init(a, ctx).await,
        Command::Backup(a) => cmd::backup::backup(a, ctx).await,
        Command::Snapshots(a) => cmd::repo::snapshots(a, ctx).await,
        Command::Restore(a) => cmd::backup::restore(a, ctx).await,
        Command::Check(a) => cmd::maint::check(a, ctx).await,
        Command::Forget(a) => cmd::maint::forget(a, ctx).await,
        Command::Prune(a) => cmd::maint::prune(a, ctx).await,
        Command::Diff(a) => cmd::browse::diff(a, ctx).await,
        Command::Find(a) => cmd::browse::find(a, ctx).await,
        Command::Dump(a) => cmd::browse::dump(a, ctx).await,
        Command::Tag(a) => cmd::manage::tag(a, ctx).await,
        Command::Unlock(a) => cmd::manage::unlock(a, ctx).await,
        Command::Stats(a) => cmd::manage::stats(a, ctx).await,
        Command::Repair(a) => cmd::repair::run(&a.cmd, ctx).await,
        Command::Mount(a) => cmd::mount::run(a, ctx).await,
        Command::Copy(a) => cmd::copy::run(a, ctx).await,
        Command::Key(k) => cmd::key::run(&k.cmd, ctx).await,
        Command::Mkdir(args) => cmd::ls::mkdir(&args.url, ctx).await,
        Command::WalPush(args) => cmd::wal::push_cmd(args, ctx).await,
        Command::WalFetch(args) => cmd::wal::fetch_cmd(args, ctx).await,
        Command::WalStatus(args) => cmd::wal::status_cmd(args, ctx).await,
        Command::WalAgent(args) => cmd::wal::agent_cmd(args, ctx).await,
        Command::Pg(a) => cmd::pg::run(&a.cmd, ctx).await,
        Command::Serve(a) => cmd::serve::run(a, ctx).await,
    }
}

/// Block buffers are large and short-lived. glibc raises its mmap threshold after the first
/// large free, after which such buffers come from arenas that keep the memory once freed, and
/// RSS creeps past `--max-memory`; a fixed threshold keeps every buffer an mmap returned on free.
/// And glibc gives each thread that allocates an arena of its own, up to 8 per core, each
/// keeping a few MiB it once used: a backup's 20-odd blocking threads held 20-30 MiB so (two
/// per core: 4-6 MiB less at the peak of a first backup, same time).
fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let arenas = i32::try_from(2 * cores.max(2)).unwrap_or(i32::MAX);
        // An operator's own setting wins.
        let told = std::env::var_os("MALLOC_ARENA_MAX").is_some()
            || std::env::var("GLIBC_TUNABLES").is_ok_and(|t| t.contains("arena_max"));
        // SAFETY: mallopt only changes allocator tuning and is called before any thread starts.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
            if !told {
                libc::mallopt(libc::M_ARENA_MAX, arenas);
            }
        }
    }
}

fn main() -> ExitCode {
    tune_allocator();
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Some(why) = argv::secret_on_command_line(&args) {
        eprintln!("ferry: error: {why}");
        return ExitCode::from(2);
    }
    let cli = Cli::parse_from(args);
    init_logging(
        cli.global.verbose,
        matches!(cli.command, Command::WalAgent(_)),
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match rt.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let msg = format!("{e:#}").replace('\n', " ");
            match e.downcast_ref::<cmd::Exit>() {
                Some(cmd::Exit::Miss(_)) => {
                    eprintln!("ferry: {msg}");
                    ExitCode::FAILURE
                }
                Some(cmd::Exit::Incomplete(_)) => {
                    eprintln!("ferry: error: {msg}");
                    ExitCode::from(3)
                }
                Some(cmd::Exit::Abort(_)) => {
                    eprintln!("ferry: error: {msg}");
                    ExitCode::from(255)
                }
                None => {
                    eprintln!("ferry: error: {msg}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
