//! Command-line syntax. Every setting here may also come from `FERRY_*` variables or
//! `ferry.toml` (flags win, then the environment, then the file).
//!
//! Nothing here derives `Debug`: arguments hold secrets (connection strings, conninfo with a
//! password, repository URLs with a SAS token), and a `{:?}` would print them.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Move backups and PostgreSQL WAL into object storage, fast.
#[derive(Parser)]
#[command(name = "ferry", version, about)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// Settings shared by every command.
#[derive(Args, Clone)]
pub struct Global {
    /// Config file [default: ./ferry.toml, then ~/.config/ferry/ferry.toml]
    #[arg(long, global = true, env = "FERRY_CONFIG")]
    pub config: Option<PathBuf>,
    /// Print a JSON summary on stdout instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// No progress bar.
    #[arg(long, short, global = true)]
    pub quiet: bool,
    /// More log output (repeat for more).
    #[arg(long, short, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Requests carrying data in flight; tuned from measured throughput when unset (HEADs,
    /// listings, deletes and small reads have a lane of 16 beside them).
    #[arg(long, global = true, env = "FERRY_CONCURRENCY")]
    pub concurrency: Option<usize>,
    /// Block size (e.g. 8MiB); chosen per object when unset.
    #[arg(long, global = true, env = "FERRY_BLOCK_SIZE")]
    pub block_size: Option<String>,
    /// Bound on buffered bytes [default: 256MiB].
    #[arg(long, global = true, env = "FERRY_MAX_MEMORY")]
    pub max_memory: Option<String>,
    /// Stall timeout: a request is retried when no byte of it moved, either way, for this long
    /// (a slow request is never cut short); connecting has its own 10 s [default: 30s].
    #[arg(long, global = true, env = "FERRY_TIMEOUT")]
    pub timeout: Option<String>,
    /// Attempts per request, the first included [default: 6].
    #[arg(long, global = true, env = "FERRY_RETRIES")]
    pub retries: Option<u32>,
    /// S3 endpoint URL [default: AWS_ENDPOINT_URL, or AWS].
    #[arg(long, global = true, env = "FERRY_S3_ENDPOINT")]
    pub s3_endpoint: Option<String>,
    /// S3 region [default: AWS_REGION, or us-east-1].
    #[arg(long, global = true, env = "FERRY_S3_REGION")]
    pub s3_region: Option<String>,
    /// AWS profile of ~/.aws/config and ~/.aws/credentials [default: AWS_PROFILE, or default].
    #[arg(long, global = true, env = "FERRY_S3_PROFILE")]
    pub s3_profile: Option<String>,
    /// S3 addressing: `virtual` (the bucket in the host name, AWS's way) or `path` (MinIO, Ceph RGW) [default: virtual on AWS, path with --s3-endpoint].
    #[arg(long, global = true, env = "FERRY_S3_ADDRESSING_STYLE", value_parser = ["path", "virtual"])]
    pub s3_addressing_style: Option<String>,
    /// Storage class of objects written: S3's (STANDARD_IA, GLACIER_IR, ...), Azure's access tier (Hot, Cool, Cold, Archive) or GCS's (NEARLINE, COLDLINE, ...).
    #[arg(long, global = true, env = "FERRY_STORAGE_CLASS")]
    pub storage_class: Option<String>,
    /// S3 server-side encryption: AES256, aws:kms or aws:kms:dsse.
    #[arg(long, global = true, env = "FERRY_SSE")]
    pub sse: Option<String>,
    /// KMS key for --sse aws:kms [default: the bucket's].
    #[arg(long, global = true, env = "FERRY_SSE_KMS_KEY_ID")]
    pub sse_kms_key_id: Option<String>,
    /// S3 SSE-C: a file holding the 256-bit key (32 bytes, or their base64); every request then carries it, over https only.
    #[arg(long, global = true, env = "FERRY_SSE_C_KEY_FILE")]
    pub sse_c_key_file: Option<PathBuf>,
    /// Google Cloud Storage endpoint, for an emulator (requests then carry no token) [default: STORAGE_EMULATOR_HOST, or Google].
    #[arg(long, global = true, env = "FERRY_GCS_ENDPOINT")]
    pub gcs_endpoint: Option<String>,
    /// Azure connection string [default: AZURE_STORAGE_CONNECTION_STRING].
    #[arg(
        long,
        global = true,
        env = "FERRY_AZURE_CONNECTION_STRING",
        hide_env_values = true
    )]
    pub azure_connection_string: Option<String>,
    /// Repository (WAL archive, backups): a local directory, s3://bucket/prefix, az://container/prefix or gs://bucket/prefix.
    #[arg(long, global = true, env = "FERRY_REPO", hide_env_values = true)]
    pub repo: Option<String>,
    /// File holding the repository password [default: FERRY_PASSWORD, else a prompt].
    #[arg(long, global = true, env = "FERRY_PASSWORD_FILE")]
    pub password_file: Option<PathBuf>,
    /// Command printing the repository password.
    #[arg(long, global = true, env = "FERRY_PASSWORD_COMMAND")]
    pub password_command: Option<String>,
    /// File holding the tenant token for ferry+https:// stores [default: FERRY_SERVE_TOKEN].
    #[arg(long, global = true, env = "FERRY_SERVE_TOKEN_FILE")]
    pub serve_token_file: Option<PathBuf>,
    /// Where remote repositories' metadata is cached [default: $XDG_CACHE_HOME/ferry/repos, else ~/.cache/ferry/repos].
    #[arg(long, global = true, env = "FERRY_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Read every repository file from the store, none from the local cache.
    #[arg(long, global = true)]
    pub no_cache: bool,
    /// Extra trusted CA certificates (PEM) [default: AWS_CA_BUNDLE or SSL_CERT_FILE].
    #[arg(long, global = true, env = "FERRY_CA_CERT")]
    pub ca_cert: Option<PathBuf>,
    /// Ceph cluster config for rados://pool/name [default: librados' search, /etc/ceph/ceph.conf].
    #[arg(long, global = true, env = "CEPH_CONF")]
    pub ceph_conf: Option<PathBuf>,
    /// RADOS stripe unit of objects ferry writes, a multiple of 64KiB [default: 4MiB, or the object size].
    #[arg(long, global = true, env = "FERRY_RADOS_STRIPE_UNIT")]
    pub rados_stripe_unit: Option<String>,
    /// RADOS stripe count [default: 1].
    #[arg(long, global = true, env = "FERRY_RADOS_STRIPE_COUNT")]
    pub rados_stripe_count: Option<u64>,
    /// RADOS object size, a multiple of the stripe unit, at most 128MiB [default: the stripe unit's, 4MiB].
    #[arg(long, global = true, env = "FERRY_RADOS_OBJECT_SIZE")]
    pub rados_object_size: Option<String>,
    /// Longest a RADOS operation waits for an OSD or monitor before it fails [default: 60s].
    #[arg(long, global = true, env = "FERRY_RADOS_OP_TIMEOUT")]
    pub rados_op_timeout: Option<String>,
    /// librados operations in flight per store, on top of the engine's requests [default: 32].
    #[arg(long, global = true, env = "FERRY_RADOS_AIO")]
    pub rados_aio: Option<usize>,
}

/// The commands.
#[derive(Subcommand)]
pub enum Command {
    /// Copy files, streams and objects: local paths, - (stdin/stdout), s3://bucket/key, az://container/blob, gs://bucket/object.
    Cp(CpArgs),
    /// List objects with their sizes.
    Ls(LsArgs),
    /// Create a bucket (s3://bucket, gs://bucket), container (az://container) or directory.
    Mkdir(MkdirArgs),
    /// Create a repository at --repo.
    Init(InitArgs),
    /// Back up files and directories (or --stdin) into the repository.
    Backup(BackupArgs),
    /// List the repository's snapshots.
    Snapshots(SnapshotsArgs),
    /// Restore a snapshot (or paths in it) into a directory.
    Restore(RestoreArgs),
    /// Check the repository's integrity (--read-data: every byte).
    Check(CheckArgs),
    /// Remove snapshots by a retention policy (their data goes with prune).
    Forget(ForgetArgs),
    /// Delete data no snapshot uses.
    Prune(PruneArgs),
    /// What changed between two snapshots: added, removed, changed, metadata only.
    Diff(DiffArgs),
    /// Which snapshots hold a path matching PATTERN.
    Find(FindArgs),
    /// Write a file of a snapshot to stdout, or a directory as a tar archive.
    Dump(DumpArgs),
    /// Add, remove or set tags on snapshots.
    Tag(TagArgs),
    /// Remove stale locks (those whose holder is gone), or every lock with --remove-all.
    Unlock(UnlockArgs),
    /// How much the snapshots hold: restored size, or the data they use in the repository.
    Stats(StatsArgs),
    /// Mend a damaged repository.
    Repair(RepairArgs),
    /// Browse the snapshots read-only through FUSE until Ctrl-C.
    Mount(MountArgs),
    /// Copy snapshots from another repository into --repo (re-encrypted, deduplicated).
    Copy(CopyArgs),
    /// Manage repository keys.
    Key(KeyArgs),
    /// Archive one WAL file: archive_command = 'ferry wal-push %p'.
    WalPush(WalPushArgs),
    /// Restore one WAL file: restore_command = 'ferry wal-fetch %f %p'.
    WalFetch(WalFetchArgs),
    /// What the WAL archive holds, its gaps, and the agent's queue.
    WalStatus(WalStatusArgs),
    /// The background agent wal-push and wal-fetch start (not for direct use).
    #[command(hide = true)]
    WalAgent(WalAgentArgs),
    /// PostgreSQL base backups and point-in-time restores (with the WAL archive).
    Pg(PgArgs),
    /// Serve one store to many tenants over HTTPS (ferry's protocol and restic's REST v2), as
    /// the [serve] table of the config file (--config) says: see docs/serve.md.
    Serve(ServeArgs),
}

/// WAL archiving settings, shared by the wal-* commands.
#[derive(Args, Clone)]
pub struct WalArgs {
    /// Push through the background agent and prefetch on fetch [default: on] (true/false,
    /// 1/0, yes/no, on/off).
    #[arg(
        long = "async",
        env = "FERRY_WAL_ASYNC",
        value_name = "BOOL",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub async_: Option<bool>,
    /// Spool directory for the agent's acks and prefetched files [default: ~/.local/state/ferry/spool/<cluster>].
    #[arg(long, env = "FERRY_WAL_SPOOL")]
    pub spool: Option<PathBuf>,
    /// WAL allowed to wait for archiving before --queue-policy applies (e.g. 4GiB) [default: no limit].
    #[arg(long, env = "FERRY_WAL_QUEUE_MAX")]
    pub queue_max: Option<String>,
    /// Past --queue-max: keep (fail the push, keep the WAL) or drop (ack, record a gap) [default: keep].
    #[arg(long, env = "FERRY_WAL_QUEUE_POLICY")]
    pub queue_policy: Option<String>,
    /// Segments fetched ahead during recovery; 0 turns prefetch off [default: 8].
    #[arg(long, env = "FERRY_WAL_PREFETCH")]
    pub prefetch: Option<u64>,
    /// zstd level; 0 stores WAL uncompressed [default: 1].
    #[arg(long, env = "FERRY_WAL_COMPRESS_LEVEL")]
    pub compress_level: Option<i32>,
    /// WAL files the agent pushes at once, at most; three quarters of --max-memory bound
    /// the bytes they hold [default: 16].
    #[arg(long, env = "FERRY_WAL_PARALLEL")]
    pub parallel: Option<usize>,
    /// How long wal-push waits for the agent before failing [default: 60s].
    #[arg(long, env = "FERRY_WAL_PUSH_TIMEOUT")]
    pub push_timeout: Option<String>,
}

/// `ferry wal-push`.
#[derive(Args)]
pub struct WalPushArgs {
    /// The WAL file (%p).
    pub path: PathBuf,
    #[command(flatten)]
    pub wal: WalArgs,
}

/// `ferry wal-fetch`.
#[derive(Args)]
pub struct WalFetchArgs {
    /// The WAL file's name (%f).
    pub name: String,
    /// Where to write it (%p).
    pub dest: PathBuf,
    #[command(flatten)]
    pub wal: WalArgs,
}

/// `ferry wal-status`.
#[derive(Args)]
pub struct WalStatusArgs {
    /// The cluster's data directory, to report the agent's queue too.
    #[arg(long, short = 'D', env = "PGDATA")]
    pub pgdata: Option<PathBuf>,
    #[command(flatten)]
    pub wal: WalArgs,
}

/// `ferry wal-agent`.
#[derive(Args)]
pub struct WalAgentArgs {
    /// push or fetch.
    pub role: String,
    /// The cluster's pg_wal directory (push).
    #[arg(long)]
    pub pg_wal: Option<PathBuf>,
    #[command(flatten)]
    pub wal: WalArgs,
}

/// `ferry cp`.
#[derive(Args)]
pub struct CpArgs {
    /// Copy directories and prefixes recursively.
    #[arg(short, long)]
    pub recursive: bool,
    /// Sources, then the destination.
    #[arg(required = true, num_args = 2.., value_name = "SRC... DST")]
    pub paths: Vec<String>,
}

/// `ferry ls`.
#[derive(Args)]
pub struct LsArgs {
    /// What to list: a store location, or a snapshot (id or "latest") of --repo.
    pub url: String,
    /// Within a snapshot: the directory to list.
    pub path: Option<PathBuf>,
}

/// `ferry backup`.
#[derive(Args)]
pub struct BackupArgs {
    /// Files and directories.
    #[arg(required_unless_present_any = ["stdin", "files_from", "files_from_verbatim", "files_from_raw"])]
    pub paths: Vec<PathBuf>,
    /// Also back up the paths listed in FILE, one a line; blank lines and lines starting
    /// with `#` are left out. `-` reads standard input. Repeatable.
    #[arg(long, value_name = "FILE")]
    pub files_from: Vec<PathBuf>,
    /// Like --files-from, each line taken as it is (no comments, no trimming).
    #[arg(long, value_name = "FILE")]
    pub files_from_verbatim: Vec<PathBuf>,
    /// Like --files-from, the paths separated by NUL bytes (`find -print0`).
    #[arg(long, value_name = "FILE")]
    pub files_from_raw: Vec<PathBuf>,
    #[command(flatten)]
    pub exclude: ExcludeArgs,
    #[command(flatten)]
    pub jitter: JitterArgs,
    /// Say what would be backed up and left out (files, bytes); read no file, write nothing.
    #[arg(long, short = 'n', conflicts_with = "stdin")]
    pub dry_run: bool,
    /// Back up standard input as one file named --name.
    #[arg(long, requires = "name", conflicts_with = "paths")]
    pub stdin: bool,
    /// The file name for --stdin.
    #[arg(long)]
    pub name: Option<String>,
    /// Tag the snapshot (repeatable, or comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub tag: Vec<String>,
    /// Record the snapshot as made on HOST [default: this host's name].
    #[arg(long)]
    pub host: Option<String>,
}

/// What a backup leaves out; added to the `[backup]` table of ferry.toml.
#[derive(Clone, Default, Args)]
pub struct ExcludeArgs {
    /// Leave out what matches: `*` within a name, `**` across directories, a leading `/`
    /// anchors at the root, a trailing `/` matches directories only, a leading `!` takes
    /// back an earlier match. Repeatable.
    #[arg(long, short = 'e', value_name = "PATTERN")]
    pub exclude: Vec<String>,
    /// Like --exclude, regardless of case.
    #[arg(long, value_name = "PATTERN")]
    pub iexclude: Vec<String>,
    /// Read --exclude patterns from FILE, one a line (`#` comments). Repeatable.
    #[arg(long, value_name = "FILE")]
    pub exclude_file: Vec<PathBuf>,
    /// Read --iexclude patterns from FILE. Repeatable.
    #[arg(long, value_name = "FILE")]
    pub iexclude_file: Vec<PathBuf>,
    /// Leave out directories holding a file NAME (that starts with HEADER, when given).
    #[arg(long, value_name = "NAME[:HEADER]")]
    pub exclude_if_present: Vec<String>,
    /// Leave out directories holding a valid CACHEDIR.TAG.
    #[arg(long)]
    pub exclude_caches: bool,
    /// Leave out files larger than SIZE (e.g. 1GiB, 500M).
    #[arg(long, value_name = "SIZE")]
    pub exclude_larger_than: Option<String>,
    /// Stay on the filesystem of each path given: mount points are kept as empty
    /// directories.
    #[arg(long, short = 'x')]
    pub one_file_system: bool,
}

/// `ferry restore`.
#[derive(Args)]
pub struct RestoreArgs {
    /// Snapshot id (a unique prefix) or "latest" (of those --host/--tag/--path choose).
    pub snapshot: String,
    #[command(flatten)]
    pub filter: FilterArgs,
    /// Directory to restore into (paths are recreated below it).
    #[arg(long)]
    pub target: PathBuf,
    /// Only these paths of the snapshot.
    pub paths: Vec<PathBuf>,
    /// Leave out devices, FIFOs, setuid/setgid bits and file capabilities (a root restore
    /// otherwise recreates them as stored).
    #[arg(long)]
    pub no_special: bool,
    /// What to do with an entry already in the target: replace it (always), leave a file
    /// whose size, mtime, mode and owner match (if-changed) or whose content does too, read
    /// and compared (if-different), or leave it (never).
    #[arg(long, value_enum, default_value_t = OverwriteArg::Always)]
    pub overwrite: OverwriteArg,
    /// Remove what the target holds and the snapshot does not (within what is selected).
    #[arg(long)]
    pub delete: bool,
    /// Restore only what matches (and the directories above it): `*` within a name, `**`
    /// across directories, a leading `/` anchors at the snapshot's root. Repeatable.
    #[arg(long, value_name = "PATTERN")]
    pub include: Vec<String>,
    /// Leave out what matches, and everything below it. Repeatable.
    #[arg(long, value_name = "PATTERN")]
    pub exclude: Vec<String>,
}

/// `restore --overwrite`.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OverwriteArg {
    /// Replace whatever is there.
    Always,
    /// Leave a file whose size, mtime, mode and owner match the snapshot's.
    IfChanged,
    /// Leave a file whose size, mode, owner and content (read and hashed) match.
    IfDifferent,
    /// Leave anything already there.
    Never,
}

/// `ferry check`.
#[derive(Args)]
pub struct CheckArgs {
    /// Also read every pack and check every blob.
    #[arg(long)]
    pub read_data: bool,
    /// Read only some packs: group n of t (`1/10`; `1/10` to `10/10` on ten runs read all
    /// once) or a random share (`5%`).
    #[arg(long, value_name = "n/t|x%", conflicts_with = "read_data")]
    pub read_data_subset: Option<String>,
}

/// Which snapshots a command considers (restic's --host, --tag, --path).
#[derive(Clone, Default, Args)]
pub struct FilterArgs {
    // Ids of their own: a command's positional `paths` (restore's) must not take these.
    /// Only snapshots made on HOST (repeatable: any of them).
    #[arg(long = "host", id = "filter_host", value_name = "HOST")]
    pub hosts: Vec<String>,
    /// Only snapshots carrying every tag of TAG[,TAG...] (repeatable: any of the lists).
    #[arg(long = "tag", id = "filter_tag", value_name = "TAG[,TAG]")]
    pub tags: Vec<String>,
    /// Only snapshots made of PATH (repeatable: all of them).
    #[arg(long = "path", id = "filter_path", value_name = "PATH")]
    pub paths: Vec<String>,
}

impl FilterArgs {
    /// The library's filter: each --tag split at commas.
    pub fn filter(&self) -> ferry_repo::snapshot::Filter {
        ferry_repo::snapshot::Filter {
            hosts: self.hosts.clone(),
            tags: self
                .tags
                .iter()
                .map(|t| {
                    t.split(',')
                        .filter(|x| !x.is_empty())
                        .map(String::from)
                        .collect()
                })
                .collect(),
            paths: self.paths.clone(),
        }
    }
}

/// `ferry snapshots`.
#[derive(Args)]
pub struct SnapshotsArgs {
    #[command(flatten)]
    pub filter: FilterArgs,
}

/// `ferry prune`.
#[derive(Args)]
pub struct PruneArgs {
    /// Say what would be deleted and rewritten; change nothing.
    #[arg(long, short = 'n')]
    pub dry_run: bool,
}

/// `ferry diff`.
#[derive(Args)]
pub struct DiffArgs {
    /// The older snapshot (id prefix or "latest").
    pub from: String,
    /// The newer snapshot.
    pub to: String,
}

/// `ferry find`.
#[derive(Args)]
pub struct FindArgs {
    /// Glob on the path (`*.conf`, `/etc/**`), as --exclude patterns are written; repeatable.
    #[arg(required = true)]
    pub patterns: Vec<String>,
    /// Match regardless of case.
    #[arg(long, short = 'i')]
    pub ignore_case: bool,
    #[command(flatten)]
    pub filter: FilterArgs,
}

/// `ferry dump`.
#[derive(Args)]
pub struct DumpArgs {
    /// Snapshot id (a unique prefix) or "latest".
    pub snapshot: String,
    /// The file or directory in the snapshot (absolute).
    pub path: PathBuf,
    #[command(flatten)]
    pub filter: FilterArgs,
}

/// `ferry tag`.
#[derive(Args)]
pub struct TagArgs {
    /// Snapshots to change (id prefixes); none: every one the filter chooses.
    pub snapshots: Vec<String>,
    /// Tags to add (repeatable, or comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub add: Vec<String>,
    /// Tags to remove.
    #[arg(long, value_delimiter = ',')]
    pub remove: Vec<String>,
    /// Replace the tags with these.
    #[arg(long, value_delimiter = ',', conflicts_with_all = ["add", "remove"])]
    pub set: Vec<String>,
    #[command(flatten)]
    pub filter: FilterArgs,
}

/// `ferry unlock`.
#[derive(Args)]
pub struct UnlockArgs {
    /// Remove every lock, live ones too (only when no ferry uses the repository).
    #[arg(long)]
    pub remove_all: bool,
}

/// What `ferry stats` counts.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StatsMode {
    /// The size a restore of the snapshots would write, counting each file once per snapshot.
    RestoreSize,
    /// The stored data the snapshots use, each blob once: what deleting them all would free.
    RawData,
}

/// `ferry stats`.
#[derive(Args)]
pub struct StatsArgs {
    /// Snapshots (id prefixes or "latest"); none: every one the filter chooses.
    pub snapshots: Vec<String>,
    #[arg(long, value_enum, default_value_t = StatsMode::RestoreSize)]
    pub mode: StatsMode,
    #[command(flatten)]
    pub filter: FilterArgs,
}

/// `ferry copy`.
#[derive(Args)]
pub struct CopyArgs {
    /// The repository to copy from.
    #[arg(long, value_name = "URL")]
    pub from_repo: String,
    /// File holding the source repository's password [or FERRY_FROM_PASSWORD].
    #[arg(long, value_name = "FILE")]
    pub from_password_file: Option<PathBuf>,
    /// Snapshots to copy (id prefixes or "latest"); none: every one the filter chooses.
    pub snapshots: Vec<String>,
    #[command(flatten)]
    pub filter: FilterArgs,
}

/// `ferry mount`.
#[derive(Args)]
pub struct MountArgs {
    /// An existing empty directory to mount on.
    pub mountpoint: PathBuf,
    #[command(flatten)]
    pub filter: FilterArgs,
}

/// `ferry repair`.
#[derive(Args)]
pub struct RepairArgs {
    #[command(subcommand)]
    pub cmd: RepairCmd,
}

/// What `ferry repair` mends.
#[derive(Subcommand)]
pub enum RepairCmd {
    /// Rebuild the index from the packs' own headers (lost or damaged index files).
    Index,
    /// Write snapshots that name lost data again without it (after `repair index`).
    Snapshots(RepairSnapshotsArgs),
}

/// `ferry repair snapshots`.
#[derive(Args)]
pub struct RepairSnapshotsArgs {
    /// Remove each original once its repaired copy is written.
    #[arg(long)]
    pub forget: bool,
    /// Say what would go; write nothing.
    #[arg(long, short = 'n')]
    pub dry_run: bool,
    #[command(flatten)]
    pub filter: FilterArgs,
}

/// `ferry forget`.
#[derive(Args)]
pub struct ForgetArgs {
    /// Keep the newest N snapshots.
    #[arg(long)]
    pub keep_last: Option<u32>,
    /// Keep the newest snapshot of each of the last N hours.
    #[arg(long)]
    pub keep_hourly: Option<u32>,
    /// Keep the newest snapshot of each of the last N days.
    #[arg(long)]
    pub keep_daily: Option<u32>,
    /// Keep the newest snapshot of each of the last N weeks.
    #[arg(long)]
    pub keep_weekly: Option<u32>,
    /// Keep the newest snapshot of each of the last N months.
    #[arg(long)]
    pub keep_monthly: Option<u32>,
    /// Keep the newest snapshot of each of the last N years.
    #[arg(long)]
    pub keep_yearly: Option<u32>,
    /// Keep every snapshot made within DURATION of the group's newest (e.g. 30d, 1y6m, 12h;
    /// m is months).
    #[arg(long, value_name = "DURATION")]
    pub keep_within: Option<String>,
    /// Keep every snapshot carrying all of TAG[,TAG...] (repeatable: any of the lists).
    #[arg(long, value_name = "TAG[,TAG]")]
    pub keep_tag: Vec<String>,
    /// Judge each group apart: any of host, paths, tags, comma-separated; "" for one group.
    #[arg(long, default_value = "host,paths")]
    pub group_by: String,
    /// Say what would be removed (and pruned); change nothing.
    #[arg(long, short = 'n')]
    pub dry_run: bool,
    /// Prune afterwards.
    #[arg(long)]
    pub prune: bool,
    #[command(flatten)]
    pub filter: FilterArgs,
}

/// `ferry init`.
#[derive(Args)]
pub struct InitArgs {
    /// Repository format: 2 binds every sealed file to its kind and repository; 1 only for
    /// an older ferry that must read the repository (docs/format.md).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=2))]
    pub format: u32,
    /// Make every object written from now on undeletable for this long, whole days (30d):
    /// S3 Object Lock, the bucket created with it (or an existing one that has it).
    #[arg(long)]
    pub lock_retention: Option<String>,
    /// Object Lock mode: governance (lifted by users allowed to bypass it) or compliance (by no one).
    #[arg(long, default_value = "governance", value_parser = ["governance", "compliance"], requires = "lock_retention")]
    pub lock_mode: String,
}

/// `ferry key`.
#[derive(Args)]
pub struct KeyArgs {
    #[command(subcommand)]
    pub cmd: KeyCmd,
}

/// Where a new password comes from: FERRY_NEW_PASSWORD, this file, or a prompt.
#[derive(Args)]
pub struct NewPassword {
    /// File holding the new password.
    #[arg(long, env = "FERRY_NEW_PASSWORD_FILE")]
    pub new_password_file: Option<PathBuf>,
}

/// `ferry key` subcommands. A key file wraps the one master key under one password: adding,
/// changing or removing one never re-encrypts data (docs/format.md, Keys).
#[derive(Subcommand)]
pub enum KeyCmd {
    /// Change the password: add a key file for the new one, remove the one that opened the repository.
    Passwd(NewPassword),
    /// Add a password (a key file) beside the others.
    Add(NewPassword),
    /// List the key files: id, when and where each was made, * for the one that opened the repository.
    List,
    /// Remove a key file by id (a unique prefix); never the one in use, never the last.
    Remove {
        /// The key file's id or a unique prefix of it.
        id: String,
    },
}

/// `--jitter`, for commands a fleet runs from cron at the same minute.
#[derive(Args, Clone)]
pub struct JitterArgs {
    /// Wait a random part of DURATION before starting (`5m`): hosts started by cron at the
    /// same second then reach a shared server spread over it.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub jitter: Option<std::time::Duration>,
}

impl JitterArgs {
    /// Sleeps the random part, if asked.
    pub async fn wait(&self) {
        if let Some(d) = self.jitter.filter(|d| !d.is_zero()) {
            let part = rand_fraction();
            tokio::time::sleep(d.mul_f64(part)).await;
        }
    }
}

/// A uniform pick in [0, 1), from the kernel's random bytes (no seeded generator to share).
fn rand_fraction() -> f64 {
    let mut b = [0u8; 8];
    // SAFETY: getrandom writes at most b.len() bytes into b.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != b.len() as isize {
        return 0.5;
    }
    (u64::from_le_bytes(b) >> 11) as f64 / (1u64 << 53) as f64
}

/// `ferry serve`.
#[derive(Args)]
pub struct ServeArgs {
    /// Print a new tenant token and the SHA-256 that goes into serve.toml, and exit.
    #[arg(long)]
    pub new_token: bool,
}

/// `ferry mkdir`.
#[derive(Args)]
pub struct MkdirArgs {
    /// What to create.
    pub url: String,
}

/// `ferry pg ...`.
#[derive(Args)]
pub struct PgArgs {
    #[command(subcommand)]
    pub cmd: PgCommand,
}

/// The PostgreSQL commands.
#[derive(Subcommand)]
pub enum PgCommand {
    /// Back up a running cluster (connection: PGHOST, PGPORT, PGUSER, PGDATABASE or --conninfo).
    Backup(PgBackupArgs),
    /// Restore a backup into an empty directory, set up to recover to a target.
    Restore(PgRestoreArgs),
    /// List the backups with their times, sizes and WAL ranges.
    Backups,
    /// Remove old backups and the WAL no kept backup needs.
    Expire(PgExpireArgs),
    /// Check that every backup has all its WAL and that its data is sound.
    Verify(PgVerifyArgs),
    /// Prove archiving works now: switch WAL, wait for it in the repository, read it back, and
    /// check that the newest backup reaches it.
    Check(PgCheckArgs),
    /// Backups, archived WAL per timeline and, with --conninfo, archiving lag: for monitoring.
    Info(PgInfoArgs),
}

/// `ferry pg backup`.
#[derive(Args)]
pub struct PgBackupArgs {
    #[command(flatten)]
    pub jitter: JitterArgs,
    /// libpq connection string or URL [default: from PG* variables].
    #[arg(
        long,
        env = "FERRY_PG_CONNINFO",
        default_value = "",
        hide_env_values = true
    )]
    pub conninfo: String,
    /// Data directory, when the server's data_directory is not the path seen here.
    #[arg(long, short = 'D', env = "PGDATA")]
    pub pgdata: Option<PathBuf>,
    /// Read every file, even those proven unchanged since the previous backup.
    #[arg(long)]
    pub full: bool,
    /// When --conninfo reaches a standby (files are then read there): its primary, which
    /// ferry asks to switch WAL at the end of the backup.
    #[arg(long, env = "FERRY_PG_PRIMARY_CONNINFO", hide_env_values = true)]
    pub primary_conninfo: Option<String>,
    /// Block size relation files are cut into (a multiple of 8KiB).
    #[arg(long, default_value = "64KiB")]
    pub block: String,
}

/// `ferry pg restore`.
#[derive(Args)]
pub struct PgRestoreArgs {
    /// The new data directory (absent or empty; with --delta, an existing one).
    #[arg(long)]
    pub to: PathBuf,
    /// Recover up to this time (with zone, e.g. '2026-11-22 14:05:00+00').
    #[arg(long, group = "target")]
    pub target_time: Option<String>,
    /// Recover up to this WAL position.
    #[arg(long, group = "target")]
    pub target_lsn: Option<String>,
    /// Recover up to this transaction.
    #[arg(long, group = "target")]
    pub target_xid: Option<String>,
    /// Recover up to this restore point (pg_create_restore_point).
    #[arg(long, group = "target")]
    pub target_name: Option<String>,
    /// Backup to start from [default: the newest that ends before the target].
    #[arg(long)]
    pub backup: Option<String>,
    /// What the server does at the target: promote, pause or shutdown.
    #[arg(long, default_value = "promote")]
    pub target_action: String,
    /// Restore into an existing (stopped) data directory: files holding the backup's content
    /// are kept, the others rewritten, and what the backup does not hold is removed.
    #[arg(long)]
    pub delta: bool,
    /// Put tablespace OID in DIR instead of where it was (absent or empty). Repeatable.
    #[arg(long, value_name = "OID=DIR")]
    pub tablespace_map: Vec<String>,
}

/// `ferry pg expire`.
#[derive(Args)]
pub struct PgExpireArgs {
    /// Keep the newest N backups.
    #[arg(long)]
    pub keep: Option<usize>,
    /// Keep backups younger than D days.
    #[arg(long)]
    pub keep_days: Option<u32>,
    /// Say what would go; remove nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// `ferry pg verify`.
#[derive(Args)]
pub struct PgVerifyArgs {
    /// Also read and authenticate every pack.
    #[arg(long)]
    pub read_data: bool,
}

/// `ferry pg check`.
#[derive(Args)]
pub struct PgCheckArgs {
    /// libpq connection string or URL [default: from PG* variables].
    #[arg(
        long,
        env = "FERRY_PG_CONNINFO",
        default_value = "",
        hide_env_values = true
    )]
    pub conninfo: String,
    /// How long the switched WAL file may take to reach the repository.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub archive_timeout: std::time::Duration,
}

/// `ferry pg info`.
#[derive(Args)]
pub struct PgInfoArgs {
    /// Also ask the cluster how far archiving lags (libpq connection string or URL; "" for
    /// the PG* variables').
    #[arg(long, env = "FERRY_PG_CONNINFO", hide_env_values = true)]
    pub conninfo: Option<String>,
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// clap checks its definitions only in debug builds; the suite runs in release: two
    /// arguments with one id (a flattened filter's `paths` and restore's positional ones)
    /// would silently share their values.
    #[test]
    fn the_command_line_is_well_formed() {
        super::Cli::command().debug_assert();
    }
}
