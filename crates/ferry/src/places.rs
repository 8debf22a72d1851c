//! Turning command-line locations into stores and keys.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use ferry_store::cloud::CloudStore;
use ferry_store::local::LocalStore;
use ferry_store::{Location, Scheme};
use ferry_transfer::{Class, Engine, Remote, SharedStore};

use crate::settings::{Rados, Settings};

/// A location opened: the store it lives in, seen through the engine, and the key inside it.
#[derive(Debug, Clone)]
pub struct Place {
    pub loc: Location,
    pub store: Remote,
    /// Key in `store`; for local paths, the absolute path without its leading `/`.
    pub key: String,
    /// The user wrote a trailing `/`: a directory or prefix is meant.
    pub dir_hint: bool,
}

impl Place {
    /// The local path of a local place.
    pub fn path(&self) -> PathBuf {
        Path::new("/").join(&self.key)
    }

    /// Shows the place as the user would write it.
    pub fn show(&self, key: &str) -> String {
        match self.loc.scheme {
            Scheme::Local => format!("/{key}"),
            _ => format!("{}/{key}", self.store.url()),
        }
    }
}

/// Opens stores once per bucket, so that one connection pool serves every object. This is
/// the only place a raw store exists: it is wrapped in the engine at once, and every call
/// above goes through the engine's scheduling and retries.
pub struct Stores {
    settings: Settings,
    engine: Engine,
    cache: HashMap<(String, String), SharedStore>,
}

impl Stores {
    /// Stores opened with `settings`, seen through one engine made from them.
    pub fn new(settings: Settings) -> Self {
        Self {
            engine: Engine::new(settings.engine.clone()),
            settings,
            cache: HashMap::new(),
        }
    }

    /// The engine every store is seen through.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The settings stores are opened with.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    pub fn open(&mut self, raw: &str) -> Result<Place> {
        self.open_as(raw, false)
    }

    /// Opens a repository's place: on a local disk, its files are created 0600 and its
    /// directories 0700 whatever the umask (key files can be attacked offline).
    pub fn open_repo(&mut self, raw: &str) -> Result<Place> {
        self.open_as(raw, true)
    }

    fn open_as(&mut self, raw: &str, private: bool) -> Result<Place> {
        let loc = Location::parse(raw)?;
        let dir_hint = raw.ends_with('/');
        let (store, key): (SharedStore, String) = match loc.scheme {
            Scheme::Stdio => (Arc::new(LocalStore::new("/")), String::new()),
            Scheme::Local => {
                let abs = std::path::absolute(&loc.key)
                    .with_context(|| format!("bad path '{}'", loc.key))?;
                let key = abs
                    .to_string_lossy()
                    .trim_start_matches('/')
                    .trim_end_matches('/')
                    .to_string();
                let store: SharedStore = match private {
                    true => Arc::new(LocalStore::private("/")),
                    false => self.cached(&loc, || Ok(Arc::new(LocalStore::new("/"))))?,
                };
                (store, key)
            }
            Scheme::S3 => {
                let cfg = self.settings.s3.clone();
                let bucket = loc.bucket.clone();
                (
                    self.cached(&loc, || Ok(Arc::new(CloudStore::s3(&cfg, &bucket)?)))?,
                    loc.key.clone(),
                )
            }
            Scheme::Azure => {
                self.no_sse(&loc)?;
                let mut cfg = self.settings.azure.clone();
                // https://ACCOUNT.blob.core.windows.net/...: the URL names the account, and
                // its SAS token (if any) is the credential.
                if let Some(e) = &loc.endpoint {
                    cfg.account = loc.account().map(str::to_string);
                    cfg.endpoint = Some(e.clone());
                    if let Some(sas) = &loc.sas {
                        cfg.sas_token = Some(sas.0.clone());
                        cfg.key = None;
                    }
                }
                let bucket = loc.bucket.clone();
                (
                    self.cached(&loc, || Ok(Arc::new(CloudStore::azure(&cfg, &bucket)?)))?,
                    loc.key.clone(),
                )
            }
            Scheme::Gcs => {
                self.no_sse(&loc)?;
                let cfg = self.settings.gcs.clone();
                let bucket = loc.bucket.clone();
                (
                    self.cached(&loc, || Ok(Arc::new(CloudStore::gcs(&cfg, &bucket)?)))?,
                    loc.key.clone(),
                )
            }
            Scheme::Served => {
                self.no_sse(&loc)?;
                let (token, ca) = (
                    self.settings.served_token.clone(),
                    self.settings.served_ca.clone(),
                );
                let host = loc.bucket.clone();
                (
                    self.cached(&loc, || {
                        Ok(Arc::new(ferry_store::served::ServedStore::new(
                            &host,
                            &token,
                            ca.as_ref(),
                        )?))
                    })?,
                    loc.key.clone(),
                )
            }
            Scheme::Rados => {
                let cfg = self.settings.rados.clone();
                let bucket = loc.bucket.clone();
                (self.cached(&loc, || rados(&bucket, &cfg))?, loc.key.clone())
            }
        };
        if loc.is_remote() && key.split('/').any(|p| p == "." || p == "..") {
            // (Shown up to its query: an Azure URL's SAS token is a secret.)
            bail!(
                "'{}': object keys may not contain . or .. segments",
                Location::shown(raw)
            );
        }
        Ok(Place {
            loc,
            // Bulk unless said otherwise: the WAL archive marks its own calls urgent.
            store: self.engine.remote(store, Class::Bulk),
            key,
            dir_hint,
        })
    }

    /// S3's encryption settings are refused elsewhere rather than silently ignored.
    fn no_sse(&self, loc: &Location) -> Result<()> {
        let s3 = &self.settings.s3;
        if s3.sse.is_some() || s3.sse_kms_key_id.is_some() || s3.sse_c_key.is_some() {
            bail!(
                "{loc}: --sse, --sse-kms-key-id and --sse-c-key-file are S3's; Azure and GCS \
                 encrypt at rest always (customer-managed keys are set on the account or bucket)"
            );
        }
        Ok(())
    }

    fn cached(
        &mut self, loc: &Location, make: impl FnOnce() -> Result<SharedStore>,
    ) -> Result<SharedStore> {
        let id = (
            format!(
                "{:?}{}",
                loc.scheme,
                loc.endpoint.as_deref().unwrap_or_default()
            ),
            loc.bucket.clone(),
        );
        if let Some(s) = self.cache.get(&id) {
            return Ok(s.clone());
        }
        let s = make()?;
        self.cache.insert(id, s.clone());
        Ok(s)
    }
}

/// A Ceph pool as a store (`--ceph-conf`, else librados' search, names the cluster); it
/// connects on first use.
#[cfg(feature = "rados")]
fn rados(pool: &str, r: &Rados) -> Result<SharedStore> {
    let opts = ferry_rados::Options {
        cluster: ferry_rados::Config {
            conf: r.conf.clone(),
            op_timeout: Some(r.op_timeout.as_secs().max(1)),
            aio: r.aio.unwrap_or(0),
        },
        stripe_unit: r.stripe_unit,
        stripe_count: r.stripe_count,
        object_size: r.object_size,
    };
    Ok(ferry_rados::open(pool, &opts)?)
}

/// Built without the `rados` feature (`--no-default-features`), ferry has no Ceph store.
#[cfg(not(feature = "rados"))]
fn rados(_pool: &str, _r: &Rados) -> Result<SharedStore> {
    bail!("this ferry was built without Ceph support (cargo feature rados)")
}

/// `prefix/rel`, without doubled or leading slashes.
pub fn join(prefix: &str, rel: &str) -> String {
    match (prefix.trim_end_matches('/'), rel.trim_start_matches('/')) {
        ("", r) => r.to_string(),
        (p, "") => p.to_string(),
        (p, r) => format!("{p}/{r}"),
    }
}

/// The last segment of a key.
pub fn base_name(key: &str) -> &str {
    key.trim_end_matches('/').rsplit('/').next().unwrap_or(key)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::Cli;

    fn stores() -> Stores {
        let cli = Cli::parse_from(["ferry", "snapshots"]);
        Stores::new(Settings::load(&cli.global).unwrap())
    }

    /// A refused location is named without its query: an Azure URL's is a SAS token.
    #[tokio::test]
    async fn refusals_leave_a_sas_token_out() {
        let mut s = stores();
        for raw in [
            "https://acct.blob.core.windows.net/c/a%2F..%2Fb?sv=1&sig=SIGSECRET",
            "az:///c/r?sv=1&sig=SIGSECRET",
            "az://c/r?sv=1&sig=SIGSECRET",
        ] {
            let e = format!("{:#}", s.open(raw).unwrap_err());
            assert!(!e.contains("SIGSECRET"), "{raw}: {e}");
        }
        let e = format!(
            "{:#}",
            s.open("https://acct.blob.core.windows.net/c/a%2F..%2Fb?sv=1&sig=SIGSECRET")
                .unwrap_err()
        );
        assert!(e.contains(". or .. segments"), "{e}");
    }
}
