//! Test support: the real servers `scripts/services up` started, Toxiproxy faults, test data.
//!
//! A test that needs a server asks [`require`]; without the server it fails under CI
//! (`CI=true`) and says loudly that it skipped otherwise, never silently.
#![warn(missing_docs)]

pub mod ceph;
pub mod conformance;
pub mod pg;
pub mod toxiproxy;

use std::io::Write;
use std::path::Path;

use ferry_store::cloud::{AzureConfig, CloudStore, GcsConfig, S3Config};
use rand::{Rng, RngCore, SeedableRng};

/// The value of `var`, or `None` (a loud skip) outside CI; panics under CI.
pub fn require(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Some(v),
        _ if std::env::var("CI").is_ok_and(|c| c == "true") => {
            panic!("{var} is not set: under CI every server must be up (scripts/services up)")
        }
        _ => {
            eprintln!(
                "SKIPPED: {var} is not set; run: eval \"$(scripts/services up minio azurite toxiproxy)\""
            );
            None
        }
    }
}

/// A tool `scripts/install-tools` built (in `FERRY_TOOLS`, else `~/.cache/ferry/bin`), for
/// tests that start their own instance; missing, it fails under CI like [`require`].
pub fn tool(name: &str) -> Option<std::path::PathBuf> {
    let dir = std::env::var_os("FERRY_TOOLS")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/ferry/bin")))?;
    let path = dir.join(name);
    if path.is_file() {
        return Some(path);
    }
    if std::env::var("CI").is_ok_and(|c| c == "true") {
        panic!(
            "{} is missing: under CI every tool must be built (scripts/install-tools)",
            path.display()
        );
    }
    eprintln!(
        "SKIPPED: {} is missing; run scripts/install-tools",
        path.display()
    );
    None
}

/// The S3 server under test (MinIO), if up.
pub fn s3() -> Option<S3Config> {
    require("AWS_ENDPOINT_URL").map(|_| S3Config::from_env())
}

/// The Azure server under test (Azurite), if up.
pub fn azure() -> Option<AzureConfig> {
    require("AZURE_STORAGE_CONNECTION_STRING").map(|_| AzureConfig::from_env())
}

/// The GCS server under test (fake-gcs-server), if up.
pub fn gcs() -> Option<GcsConfig> {
    require("FERRY_TEST_GCS_URL").map(|url| GcsConfig {
        endpoint: Some(url),
        ..Default::default()
    })
}

/// A fresh bucket or container name (3-63 lowercase characters).
pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{:012x}",
        rand::rng().random::<u64>() & 0xffff_ffff_ffff
    )
}

/// Creates a fresh S3 bucket and returns its store and name.
pub async fn s3_bucket(cfg: &S3Config) -> (CloudStore, String) {
    let name = unique("ferry-test");
    let store = CloudStore::s3(cfg, &name).expect("S3 store");
    ferry_store::Store::create_root(&store)
        .await
        .expect("create bucket");
    (store, name)
}

/// Creates a fresh Azure container and returns its store and name.
pub async fn azure_container(cfg: &AzureConfig) -> (CloudStore, String) {
    let name = unique("ferry-test");
    let store = CloudStore::azure(cfg, &name).expect("Azure store");
    ferry_store::Store::create_root(&store)
        .await
        .expect("create container");
    (store, name)
}

/// Creates a fresh GCS bucket and returns its store and name.
pub async fn gcs_bucket(cfg: &GcsConfig) -> (CloudStore, String) {
    let name = unique("ferry-test");
    let store = CloudStore::gcs(cfg, &name).expect("GCS store");
    ferry_store::Store::create_root(&store)
        .await
        .expect("create bucket");
    (store, name)
}

/// Deterministic pseudo-random bytes (incompressible, reproducible by seed).
pub fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    rand::rngs::SmallRng::seed_from_u64(seed).fill_bytes(&mut v);
    v
}

/// Writes `len` pseudo-random bytes to `path`, in pieces so that large files need little memory.
pub fn random_file(path: &Path, len: u64, seed: u64) {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).expect("create test file"));
    let mut buf = vec![0u8; 1 << 20];
    let mut left = len;
    while left > 0 {
        let n = left.min(buf.len() as u64) as usize;
        rng.fill_bytes(&mut buf[..n]);
        f.write_all(&buf[..n]).expect("write test file");
        left -= n as u64;
    }
    f.flush().expect("flush test file");
}

/// True when two files have the same bytes (compared in pieces).
pub fn same_file(a: &Path, b: &Path) -> bool {
    use std::io::Read;
    let (Ok(fa), Ok(fb)) = (std::fs::File::open(a), std::fs::File::open(b)) else {
        return false;
    };
    if fa.metadata().map(|m| m.len()).ok() != fb.metadata().map(|m| m.len()).ok() {
        return false;
    }
    let (mut ra, mut rb) = (std::io::BufReader::new(fa), std::io::BufReader::new(fb));
    let (mut x, mut y) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    loop {
        let n = ra.read(&mut x).expect("read");
        if n == 0 {
            return rb.read(&mut y).expect("read") == 0;
        }
        if rb.read_exact(&mut y[..n]).is_err() || x[..n] != y[..n] {
            return false;
        }
    }
}
