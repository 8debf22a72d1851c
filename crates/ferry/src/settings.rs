//! Settings merged from flags, `FERRY_*` variables, `ferry.toml` and each cloud's own
//! variables, in that order of precedence.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use ferry_store::cloud::{AzureConfig, GcsConfig, S3Config};
use ferry_transfer::{EngineConfig, RetryPolicy};
use serde::Deserialize;

use crate::cli::{ExcludeArgs, Global, WalArgs};
use ferry_repo::exclude::ExcludeOptions;
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
    storage_class: Option<String>,
    repo: Option<String>,
    #[serde(default)]
    wal: WalFile,
    #[serde(default)]
    s3: S3File,
    #[serde(default)]
    azure: AzureFile,
    #[serde(default)]
    gcs: GcsFile,
    #[serde(default)]
    rados: RadosFile,
    #[serde(default)]
    backup: BackupFile,
    /// `ferry serve`'s settings (its own crate reads them).
    serve: Option<ferry_serve::Config>,
}

/// The `[backup]` table of `ferry.toml`: what every backup leaves out.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct BackupFile {
    #[serde(default)]
    exclude: Vec<String>,
    #[serde(default)]
    iexclude: Vec<String>,
    #[serde(default)]
    exclude_file: Vec<PathBuf>,
    #[serde(default)]
    iexclude_file: Vec<PathBuf>,
    #[serde(default)]
    exclude_if_present: Vec<String>,
    #[serde(default)]
    exclude_caches: bool,
    exclude_larger_than: Option<String>,
    #[serde(default)]
    one_file_system: bool,
}

/// The `[rados]` table of `ferry.toml`.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RadosFile {
    conf: Option<PathBuf>,
    stripe_unit: Option<String>,
    stripe_count: Option<u64>,
    object_size: Option<String>,
    op_timeout: Option<String>,
    aio: Option<usize>,
}

/// How to reach a Ceph cluster and lay objects out in it (for `ferry_rados::Options`).
/// Read only where ferry is built with RADOS.
#[derive(Debug, Clone)]
#[cfg_attr(not(feature = "rados"), allow(dead_code))]
pub struct Rados {
    pub conf: Option<PathBuf>,
    pub op_timeout: Duration,
    pub aio: Option<usize>,
    pub stripe_unit: Option<u64>,
    pub stripe_count: Option<u64>,
    pub object_size: Option<u64>,
}

/// One setting a child ferry must be given too: a WAL agent gets it as `env`, the
/// `restore_command` PostgreSQL runs gets it as `flag`. Made once, from the flags and
/// variables this process was given, so that the two never list different things.
#[derive(Clone)]
struct Pass {
    flag: &'static str,
    env: &'static str,
    value: String,
    /// Never on a command line, which every user can read: only in the environment.
    secret: bool,
}

impl std::fmt::Debug for Pass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = if self.secret { "<secret>" } else { &self.value };
        write!(f, "{}={v}", self.env)
    }
}

/// Not `Debug`: it holds a secret key.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct S3File {
    endpoint: Option<String>,
    region: Option<String>,
    profile: Option<String>,
    addressing_style: Option<String>,
    sse: Option<String>,
    sse_kms_key_id: Option<String>,
    sse_c_key_file: Option<PathBuf>,
    access_key_id: Option<String>,
    secret_access_key: Option<String>,
}

/// The `[gcs]` table of `ferry.toml`.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct GcsFile {
    endpoint: Option<String>,
    service_account: Option<PathBuf>,
    project: Option<String>,
}

/// Not `Debug`: it holds an account key.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct AzureFile {
    connection_string: Option<String>,
    account: Option<String>,
    key: Option<String>,
    endpoint: Option<String>,
    sas_token: Option<String>,
}

/// The `[wal]` table of `ferry.toml`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct WalFile {
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
    /// What a backup leaves out: the `[backup]` table of ferry.toml, then the flags (patterns
    /// add up; a size given as a flag wins).
    pub fn exclude(&self, a: &ExcludeArgs) -> Result<ExcludeOptions> {
        let f = &self.backup_file;
        let both = |x: &[String], y: &[String]| [x, y].concat();
        let paths = |x: &[PathBuf], y: &[PathBuf]| [x, y].concat();
        let larger = a
            .exclude_larger_than
            .as_ref()
            .or(f.exclude_larger_than.as_ref());
        Ok(ExcludeOptions {
            exclude: both(&f.exclude, &a.exclude),
            iexclude: both(&f.iexclude, &a.iexclude),
            exclude_files: paths(&f.exclude_file, &a.exclude_file),
            iexclude_files: paths(&f.iexclude_file, &a.iexclude_file),
            if_present: both(&f.exclude_if_present, &a.exclude_if_present),
            caches: f.exclude_caches || a.exclude_caches,
            larger_than: larger.map(|s| parse_size(s)).transpose()?,
            one_file_system: f.one_file_system || a.one_file_system,
        })
    }

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
        let parallel = args.parallel.or(f.parallel).unwrap_or(16);
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

/// Everything a command needs to open stores and run the engine. Its `Debug` hides the
/// repository URL's query (a SAS token) and the tenant token.
#[derive(Clone)]
pub struct Settings {
    pub engine: EngineConfig,
    pub s3: S3Config,
    pub azure: AzureConfig,
    pub gcs: GcsConfig,
    /// The repository: `--repo`, `FERRY_REPO` or `repo` in ferry.toml.
    pub repo: Option<String>,
    pub rados: Rados,
    wal_file: WalFile,
    backup_file: BackupFile,
    pass: Vec<Pass>,
    /// The `[serve]` table, for `ferry serve`.
    pub serve: Option<ferry_serve::Config>,
    /// For `ferry+https://` stores: the tenant's token (`FERRY_SERVE_TOKEN`: a secret, so
    /// from the environment only) and the CA to trust.
    pub served_token: String,
    pub served_ca: Option<PathBuf>,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let repo = self
            .repo
            .as_deref()
            .map(|r| match ferry_store::Location::secret_in(r) {
                Some(_) => format!("{}?***", ferry_store::Location::shown(r)),
                None => r.to_string(),
            });
        f.debug_struct("Settings")
            .field("engine", &self.engine)
            .field("s3", &self.s3)
            .field("azure", &self.azure)
            .field("gcs", &self.gcs)
            .field("repo", &repo)
            .field("rados", &self.rados)
            .field("wal_file", &self.wal_file)
            .field("backup_file", &self.backup_file)
            .field("pass", &self.pass)
            .field("serve", &self.serve)
            .field("served_token", &"***")
            .field("served_ca", &self.served_ca)
            .finish()
    }
}

/// The config file and where it was read from (none found: the defaults).
fn load_file(explicit: Option<&Path>) -> Result<(File, Option<PathBuf>)> {
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
                let file = toml::from_str(&text)
                    .map_err(|e| anyhow::anyhow!("{}: {}", path.display(), e.message()))?;
                return Ok((file, Some(path)));
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
    Ok((File::default(), None))
}

/// Parses `8MiB`, `8M` (binary), `8MB` (decimal) or a plain byte count
/// ([`ferry_store::size::parse`], the one reading of sizes).
pub fn parse_size(s: &str) -> Result<u64> {
    ferry_store::size::parse(s)
        .with_context(|| format!("bad size '{s}': use e.g. 8MiB, 8M, 8MB or 8000000"))
}

/// Parses `30s`, `2m`, `1h 30m`; a plain number is seconds.
fn parse_duration(s: &str) -> Result<Duration> {
    if let Ok(secs) = s.trim().parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    humantime::parse_duration(s.trim()).with_context(|| format!("bad duration '{s}': use e.g. 30s"))
}

/// `p` as an absolute path: a child may run elsewhere (PostgreSQL runs restore_command in
/// the data directory).
fn abs(p: &Path) -> String {
    std::path::absolute(p)
        .unwrap_or_else(|_| p.to_path_buf())
        .display()
        .to_string()
}

/// The settings a child ferry is told of: its flag, its variable, and its value in `g`.
type Field = (&'static str, &'static str, fn(&Global) -> Option<String>);

/// Every setting of [`Global`] a child ferry needs, paths made absolute (a child may run
/// elsewhere: PostgreSQL runs restore_command in the data directory). The password's source,
/// not the password: `FERRY_PASSWORD` is inherited as it is, and a password command only
/// when no password file overrides it (as `password.rs` reads them).
const FIELDS: &[Field] = &[
    ("--password-file", "FERRY_PASSWORD_FILE", |g| {
        path(&g.password_file)
    }),
    ("--password-command", "FERRY_PASSWORD_COMMAND", |g| {
        g.password_command
            .clone()
            .filter(|_| g.password_file.is_none())
    }),
    ("--serve-token-file", "FERRY_SERVE_TOKEN_FILE", |g| {
        path(&g.serve_token_file)
    }),
    ("--concurrency", "FERRY_CONCURRENCY", |g| {
        text(g.concurrency)
    }),
    ("--block-size", "FERRY_BLOCK_SIZE", |g| g.block_size.clone()),
    ("--max-memory", "FERRY_MAX_MEMORY", |g| g.max_memory.clone()),
    ("--timeout", "FERRY_TIMEOUT", |g| g.timeout.clone()),
    ("--retries", "FERRY_RETRIES", |g| text(g.retries)),
    ("--s3-endpoint", "FERRY_S3_ENDPOINT", |g| {
        g.s3_endpoint.clone()
    }),
    ("--s3-region", "FERRY_S3_REGION", |g| g.s3_region.clone()),
    ("--s3-profile", "FERRY_S3_PROFILE", |g| g.s3_profile.clone()),
    ("--storage-class", "FERRY_STORAGE_CLASS", |g| {
        g.storage_class.clone()
    }),
    ("--sse", "FERRY_SSE", |g| g.sse.clone()),
    ("--sse-kms-key-id", "FERRY_SSE_KMS_KEY_ID", |g| {
        g.sse_kms_key_id.clone()
    }),
    ("--sse-c-key-file", "FERRY_SSE_C_KEY_FILE", |g| {
        path(&g.sse_c_key_file)
    }),
    ("--gcs-endpoint", "FERRY_GCS_ENDPOINT", |g| {
        g.gcs_endpoint.clone()
    }),
    ("--s3-addressing-style", "FERRY_S3_ADDRESSING_STYLE", |g| {
        g.s3_addressing_style.clone()
    }),
    ("--ca-cert", "FERRY_CA_CERT", |g| path(&g.ca_cert)),
    ("--ceph-conf", "CEPH_CONF", |g| path(&g.ceph_conf)),
    ("--rados-stripe-unit", "FERRY_RADOS_STRIPE_UNIT", |g| {
        g.rados_stripe_unit.clone()
    }),
    ("--rados-stripe-count", "FERRY_RADOS_STRIPE_COUNT", |g| {
        text(g.rados_stripe_count)
    }),
    ("--rados-object-size", "FERRY_RADOS_OBJECT_SIZE", |g| {
        g.rados_object_size.clone()
    }),
    ("--rados-op-timeout", "FERRY_RADOS_OP_TIMEOUT", |g| {
        g.rados_op_timeout.clone()
    }),
    ("--rados-aio", "FERRY_RADOS_AIO", |g| text(g.rados_aio)),
];

/// An SSE-C key file: 32 bytes, or their base64 (with or without a trailing newline); the
/// key as S3 wants it, base64. The key is never printed.
fn sse_c_key(p: &Path) -> Result<String> {
    use base64::prelude::{Engine, BASE64_STANDARD};
    let raw = std::fs::read(p).with_context(|| format!("SSE-C key file {}", p.display()))?;
    let key = match raw.len() {
        32 => raw,
        _ => BASE64_STANDARD
            .decode(raw.trim_ascii())
            .ok()
            .filter(|k| k.len() == 32)
            .with_context(|| {
                format!(
                    "SSE-C key file {}: not a 256-bit key (32 bytes, or their base64)",
                    p.display()
                )
            })?,
    };
    Ok(BASE64_STANDARD.encode(key))
}

/// The tenant token for ferry+https:// stores: `--serve-token-file`, else `FERRY_SERVE_TOKEN`
/// (empty when neither: the store says so when one is opened).
fn served_token(g: &Global) -> Result<String> {
    match &g.serve_token_file {
        Some(p) => {
            let t = std::fs::read_to_string(p)
                .with_context(|| format!("--serve-token-file {}", p.display()))?;
            Ok(t.trim().to_string())
        }
        None => Ok(std::env::var("FERRY_SERVE_TOKEN").unwrap_or_default()),
    }
}

fn path(p: &Option<PathBuf>) -> Option<String> {
    p.as_deref().map(abs)
}

fn text(n: Option<impl ToString>) -> Option<String> {
    n.map(|n| n.to_string())
}

/// What a child ferry must be told of `g`, the resolved repository and the config file read
/// (found in the working directory or HOME, it must be named: a child may run elsewhere).
fn passed(g: &Global, repo: Option<&str>, config: Option<&Path>) -> Vec<Pass> {
    let pass = |flag, env, value: Option<String>, secret| {
        value.map(|value| Pass {
            flag,
            env,
            value,
            secret,
        })
    };
    let repo = repo.map(|r| match r.contains("://") {
        true => r.to_string(),
        false => abs(Path::new(r)),
    });
    // A URL that may hold a secret (a SAS token; any query or user info, which
    // Location::parse refuses, but a child might be spawned before it runs) goes to a child
    // by environment only, never on a command line or in restore_command.
    let sas = repo
        .as_deref()
        .is_some_and(|r| ferry_store::Location::secret_in(r).is_some());
    let mut v: Vec<Pass> = pass("--repo", "FERRY_REPO", repo, sas)
        .into_iter()
        .collect();
    v.extend(pass("--config", "FERRY_CONFIG", config.map(abs), false));
    v.extend(
        FIELDS
            .iter()
            .filter_map(|(flag, env, get)| pass(flag, env, get(g), false)),
    );
    let cs = g.azure_connection_string.clone();
    v.extend(pass(
        "--azure-connection-string",
        "FERRY_AZURE_CONNECTION_STRING",
        cs,
        true,
    ));
    v
}

impl Settings {
    pub fn load(g: &Global) -> Result<Self> {
        let (file, file_path) = load_file(g.config.as_deref())?;
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
        let served_ca = ca_cert.clone();
        let mut s3 = S3Config::from_env();
        let f = file.s3;
        s3.endpoint = g.s3_endpoint.clone().or(f.endpoint).or(s3.endpoint);
        s3.region = g.s3_region.clone().or(f.region).or(s3.region);
        s3.access_key_id = f.access_key_id.or(s3.access_key_id);
        s3.secret_access_key = f.secret_access_key.or(s3.secret_access_key);
        s3.profile = g.s3_profile.clone().or(f.profile).or(s3.profile);
        let class = g.storage_class.clone().or(file.storage_class);
        s3.storage_class = class.clone();
        s3.sse = g.sse.clone().or(f.sse);
        s3.sse_kms_key_id = g.sse_kms_key_id.clone().or(f.sse_kms_key_id);
        s3.sse_c_key = g
            .sse_c_key_file
            .clone()
            .or(f.sse_c_key_file)
            .map(|p| sse_c_key(&p))
            .transpose()?;
        s3.virtual_hosted = match g
            .s3_addressing_style
            .clone()
            .or(f.addressing_style)
            .as_deref()
        {
            None => None,
            Some("virtual") => Some(true),
            Some("path") => Some(false),
            Some(other) => bail!("s3 addressing_style '{other}': path or virtual"),
        };
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
        azure.sas_token = f.sas_token.or(azure.sas_token);
        azure.access_tier = class.clone();
        azure.endpoint = f.endpoint.or(azure.endpoint);
        azure.ca_cert = ca_cert.clone().or(azure.ca_cert);
        let f = file.gcs;
        let mut gcs = GcsConfig::from_env();
        gcs.endpoint = g.gcs_endpoint.clone().or(f.endpoint).or(gcs.endpoint);
        gcs.service_account = f.service_account.or(gcs.service_account);
        gcs.project = f.project.or(gcs.project);
        gcs.ca_cert = ca_cert.or(gcs.ca_cert);
        gcs.storage_class = class;
        let f = file.rados;
        let rados = Rados {
            conf: g.ceph_conf.clone().or(f.conf),
            op_timeout: match g.rados_op_timeout.as_ref().or(f.op_timeout.as_ref()) {
                Some(t) => parse_duration(t)?,
                None => Duration::from_secs(60),
            },
            aio: g.rados_aio.or(f.aio),
            stripe_unit: size(&g.rados_stripe_unit, &f.stripe_unit)?,
            stripe_count: g.rados_stripe_count.or(f.stripe_count),
            object_size: size(&g.rados_object_size, &f.object_size)?,
        };
        let repo = g.repo.clone().or(file.repo);
        Ok(Self {
            engine,
            s3,
            azure,
            gcs,
            pass: passed(g, repo.as_deref(), file_path.as_deref()),
            repo,
            rados,
            wal_file: file.wal,
            backup_file: file.backup,
            serve: file.serve,
            served_token: served_token(g)?,
            served_ca,
        })
    }

    /// The settings a child ferry inherits, as its environment.
    pub fn to_env(&self) -> Vec<(&'static str, String)> {
        self.pass.iter().map(|p| (p.env, p.value.clone())).collect()
    }

    /// The settings a child ferry is given on its command line: secrets left out (they
    /// reach it through its environment or ferry.toml, never through `ps`).
    pub fn to_args(&self) -> Vec<String> {
        self.pass
            .iter()
            .filter(|p| !p.secret)
            .flat_map(|p| [p.flag.to_string(), p.value.clone()])
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::{parse_size, Settings};
    use crate::cli::Cli;
    use clap::Parser;

    #[test]
    fn a_child_is_told_the_same_settings_by_environment_and_by_flags() {
        let cli = Cli::parse_from([
            "ferry",
            "--config",
            "/nonexistent-ferry-test.toml",
            "--repo",
            "relative/repo",
            "--password-file",
            "pw.txt",
            "--timeout",
            "5s",
            "--rados-object-size",
            "16MiB",
            "--azure-connection-string",
            "AccountKey=SECRETKEY",
            "ls",
            "/tmp",
        ]);
        // The config file named does not exist: loading fails, as it should.
        assert!(Settings::load(&cli.global).is_err());
        let mut g = cli.global.clone();
        g.config = None;
        let s = Settings::load(&g).unwrap();
        let env = s.to_env();
        let args = s.to_args();
        let cwd = std::env::current_dir().unwrap();
        let repo = cwd.join("relative/repo").display().to_string();
        let pw = cwd.join("pw.txt").display().to_string();
        for (k, v) in [
            ("FERRY_REPO", repo.as_str()),
            ("FERRY_PASSWORD_FILE", pw.as_str()),
            ("FERRY_TIMEOUT", "5s"),
            ("FERRY_RADOS_OBJECT_SIZE", "16MiB"),
            ("FERRY_AZURE_CONNECTION_STRING", "AccountKey=SECRETKEY"),
        ] {
            assert!(env.contains(&(k, v.to_string())), "{env:?} lacks {k}");
        }
        for pair in [
            ["--repo", repo.as_str()],
            ["--password-file", pw.as_str()],
            ["--timeout", "5s"],
            ["--rados-object-size", "16MiB"],
        ] {
            assert!(
                args.windows(2).any(|w| w == pair),
                "{args:?} lacks {pair:?}"
            );
        }
        assert!(!args.iter().any(|a| a.contains("SECRETKEY")), "{args:?}");
        assert_eq!(s.rados.object_size, Some(16 << 20));
        // Every variable the environment carries, the flags carry too, but the secret.
        assert_eq!(env.len(), args.len() / 2 + 1);
        assert!(!format!("{s:?}").contains("SECRETKEY"));
        // Nor a SAS token in the repository's URL, nor the tenant token.
        let mut s = s;
        s.repo = Some("https://a.blob.core.windows.net/c/r?sv=1&sig=SIGSECRET".into());
        s.served_token = "TOKSECRET".into();
        // Nor the [serve] table's backend query, nor a tenant's token hash.
        let hash = "ab".repeat(32);
        s.serve = Some(
            toml::from_str(&format!(
                r#"
                listen = "127.0.0.1:8443"
                backend = "https://a.blob.core.windows.net/c/b?sv=1&sig=SIGSECRET"
                tls_cert = "/c.pem"
                tls_key = "/k.pem"
                [[tenant]]
                name = "db1"
                token_sha256 = "{hash}"
                role = "admin"
                "#
            ))
            .unwrap(),
        );
        let shown = format!("{s:?}");
        assert!(
            !shown.contains("SIGSECRET") && !shown.contains("TOKSECRET") && !shown.contains(&hash),
            "{shown}"
        );
        assert!(shown.contains("a.blob.core.windows.net/c/r?***"), "{shown}");
    }

    #[test]
    fn sizes() {
        // The readings themselves are ferry_store::size's; here, the error for a bad one.
        assert_eq!(parse_size("8MB").unwrap(), 8_000_000);
        let e = parse_size("8 parsecs").unwrap_err().to_string();
        assert!(e.contains("bad size '8 parsecs'"), "{e}");
    }

    #[test]
    fn a_password_file_hides_the_password_command_and_a_found_config_is_named() {
        let cli = Cli::parse_from([
            "ferry",
            "--password-file",
            "/run/pw",
            "--password-command",
            "echo $X",
            "ls",
            "/tmp",
        ]);
        let mut g = cli.global.clone();
        g.config = None;
        let dir = std::env::temp_dir().join(format!("ferry-settings-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let conf = dir.join("ferry.toml");
        std::fs::write(&conf, "retries = 3\n").unwrap();
        let pass = super::passed(&g, None, Some(&conf));
        std::fs::remove_dir_all(&dir).unwrap();
        let envs: Vec<_> = pass.iter().map(|p| (p.env, p.value.as_str())).collect();
        assert!(
            envs.contains(&("FERRY_PASSWORD_FILE", "/run/pw")),
            "{envs:?}"
        );
        assert!(
            !envs.iter().any(|e| e.0 == "FERRY_PASSWORD_COMMAND"),
            "{envs:?}"
        );
        let conf = conf.display().to_string();
        assert!(envs.contains(&("FERRY_CONFIG", conf.as_str())), "{envs:?}");
    }
}
