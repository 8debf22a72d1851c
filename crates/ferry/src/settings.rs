//! Settings merged from flags, `FERRY_*` variables, `ferry.toml` and each cloud's own
//! variables, in that order of precedence.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use ferry_store::cloud::{AzureConfig, S3Config};
use ferry_transfer::{EngineConfig, RetryPolicy};
use serde::Deserialize;

use crate::cli::{Global, WalArgs};
use ferry_wal::push::QueuePolicy;

/// The `ferry.toml` file. Not `Debug`: it may hold secret keys.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    concurrency: Option<usize>,
    block_size: Option<String>,
    max_memory: Option<String>,
    timeout: Option<String>,
    retries: Option<u32>,
    ca_cert: Option<PathBuf>,
    repo: Option<String>,
    #[serde(default)]
    wal: WalFile,
    #[serde(default)]
    s3: S3File,
    #[serde(default)]
    azure: AzureFile,
}

/// Not `Debug`: it holds a secret key.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct S3File {
    endpoint: Option<String>,
    region: Option<String>,
    access_key_id: Option<String>,
    secret_access_key: Option<String>,
}

/// Not `Debug`: it holds an account key.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct AzureFile {
    connection_string: Option<String>,
    account: Option<String>,
    key: Option<String>,
    endpoint: Option<String>,
}

/// The `[wal]` table of `ferry.toml`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WalFile {
    #[serde(rename = "async")]
    async_: Option<bool>,
    spool: Option<PathBuf>,
    queue_max: Option<String>,
    queue_policy: Option<String>,
    prefetch: Option<u64>,
    compress_level: Option<i32>,
    parallel: Option<usize>,
    push_timeout: Option<String>,
}

/// WAL settings resolved for one cluster.
#[derive(Debug, Clone)]
pub struct Wal {
    pub async_: bool,
    pub spool: PathBuf,
    pub queue_max: Option<u64>,
    pub policy: QueuePolicy,
    pub prefetch: u64,
    pub compress_level: i32,
    pub parallel: usize,
    pub push_timeout: Duration,
}

impl Settings {
    /// The WAL settings for the cluster whose data directory is `pgdata`.
    pub fn wal(&self, args: &WalArgs, pgdata: &Path) -> Result<Wal> {
        let f = &self.wal_file;
        let spool = match args.spool.clone().or(f.spool.clone()) {
            Some(p) => p,
            None => {
                let state = std::env::var_os("XDG_STATE_HOME")
                    .map(PathBuf::from)
                    .or_else(|| {
                        std::env::var_os("HOME").map(|h| Path::new(&h).join(".local/state"))
                    })
                    .context("no spool: set --spool (HOME is not set)")?;
                let id = std::fs::canonicalize(pgdata).unwrap_or_else(|_| pgdata.to_path_buf());
                let hash = blake3::hash(id.as_os_str().as_encoded_bytes()).to_hex();
                state.join("ferry/spool").join(&hash.as_str()[..16])
            }
        };
        let policy = match args.queue_policy.as_deref().or(f.queue_policy.as_deref()) {
            None | Some("keep") => QueuePolicy::Keep,
            Some("drop") => QueuePolicy::Drop,
            Some(o) => bail!("bad queue policy '{o}': use keep or drop"),
        };
        let queue_max = args
            .queue_max
            .as_ref()
            .or(f.queue_max.as_ref())
            .map(|s| parse_size(s))
            .transpose()?;
        let parallel = args.parallel.or(f.parallel).unwrap_or(8);
        if parallel == 0 {
            bail!("parallel must be at least 1");
        }
        let compress_level = args.compress_level.or(f.compress_level).unwrap_or(1);
        if !(0..=19).contains(&compress_level) {
            bail!("bad compress level {compress_level}: use 0 (off) to 19");
        }
        Ok(Wal {
            async_: args.async_.or(f.async_).unwrap_or(true),
            spool,
            queue_max,
            policy,
            prefetch: args.prefetch.or(f.prefetch).unwrap_or(8),
            compress_level,
            parallel,
            push_timeout: match args.push_timeout.as_ref().or(f.push_timeout.as_ref()) {
                Some(t) => parse_duration(t)?,
                None => Duration::from_secs(60),
            },
        })
    }
}

/// Everything a command needs to open stores and run the engine.
#[derive(Debug, Clone)]
pub struct Settings {
    pub engine: EngineConfig,
    pub s3: S3Config,
    pub azure: AzureConfig,
    /// The repository: `--repo`, `FERRY_REPO` or `repo` in ferry.toml.
    pub repo: Option<String>,
    wal_file: WalFile,
}

fn load_file(explicit: Option<&Path>) -> Result<File> {
    let candidates: Vec<PathBuf> = match explicit {
        Some(p) => vec![p.to_path_buf()],
        None => {
            let mut v = vec![PathBuf::from("ferry.toml")];
            if let Some(home) = std::env::var_os("HOME") {
                v.push(Path::new(&home).join(".config/ferry/ferry.toml"));
            }
            v
        }
    };
    for path in candidates {
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                return toml::from_str(&text)
                    .map_err(|e| anyhow::anyhow!("{}: {}", path.display(), e.message()))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && explicit.is_none() => continue,
            // A command run as another user (archive_command under setpriv, say) may inherit
            // a HOME it cannot read: that is not this user's config.
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied && explicit.is_none() => {
                tracing::debug!("skipping unreadable {}: {e}", path.display());
                continue;
            }
            Err(e) => bail!("config {}: {e}", path.display()),
        }
    }
    Ok(File::default())
}

/// Parses `8MiB`, `8M` (binary), `8MB` (decimal) or a plain byte count
/// ([`ferry_store::size::parse`], the one reading of sizes).
pub fn parse_size(s: &str) -> Result<u64> {
    ferry_store::size::parse(s)
        .with_context(|| format!("bad size '{s}': use e.g. 8MiB, 8M, 8MB or 8000000"))
}

fn parse_duration(s: &str) -> Result<Duration> {
    humantime::parse_duration(s.trim()).with_context(|| format!("bad duration '{s}': use e.g. 30s"))
}

impl Settings {
    pub fn load(g: &Global) -> Result<Self> {
        let file = load_file(g.config.as_deref())?;
        let size = |flag: &Option<String>, file: &Option<String>| -> Result<Option<u64>> {
            flag.as_ref()
                .or(file.as_ref())
                .map(|s| parse_size(s))
                .transpose()
        };
        let mut retry = RetryPolicy::default();
        if let Some(t) = g.timeout.as_ref().or(file.timeout.as_ref()) {
            retry.timeout = parse_duration(t)?;
        }
        if let Some(n) = g.retries.or(file.retries) {
            retry.attempts = n.max(1);
        }
        let block_size = size(&g.block_size, &file.block_size)?;
        if block_size == Some(0) {
            bail!("block size must be more than 0");
        }
        let concurrency = g.concurrency.or(file.concurrency);
        if concurrency == Some(0) {
            bail!("concurrency must be at least 1");
        }
        let engine = EngineConfig {
            concurrency,
            block_size,
            max_memory: size(&g.max_memory, &file.max_memory)?.unwrap_or(256 << 20),
            retry,
        };

        let ca_cert = g.ca_cert.clone().or(file.ca_cert);
        let mut s3 = S3Config::from_env();
        let f = file.s3;
        s3.endpoint = g.s3_endpoint.clone().or(f.endpoint).or(s3.endpoint);
        s3.region = g.s3_region.clone().or(f.region).or(s3.region);
        s3.access_key_id = f.access_key_id.or(s3.access_key_id);
        s3.secret_access_key = f.secret_access_key.or(s3.secret_access_key);
        s3.ca_cert = ca_cert.clone().or(s3.ca_cert);

        let f = file.azure;
        let mut azure = match g
            .azure_connection_string
            .as_ref()
            .or(f.connection_string.as_ref())
        {
            Some(cs) => AzureConfig::from_connection_string(cs),
            None => AzureConfig::from_env(),
        };
        azure.account = f.account.or(azure.account);
        azure.key = f.key.or(azure.key);
        azure.endpoint = f.endpoint.or(azure.endpoint);
        azure.ca_cert = ca_cert.or(azure.ca_cert);
        Ok(Self {
            engine,
            s3,
            azure,
            repo: g.repo.clone().or(file.repo),
            wal_file: file.wal,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes() {
        // The readings themselves are ferry_store::size's; here, the error for a bad one.
        assert_eq!(parse_size("8MB").unwrap(), 8_000_000);
        let e = parse_size("8 parsecs").unwrap_err().to_string();
        assert!(e.contains("bad size '8 parsecs'"), "{e}");
    }
}
