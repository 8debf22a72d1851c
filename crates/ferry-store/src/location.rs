//! Parsing the places ferry reads from and writes to.

use std::fmt;

use crate::{Error, Result};

/// The kind of place a [`Location`] names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// A path on the local file system.
    Local,
    /// `-`: standard input or output.
    Stdio,
    /// `s3://bucket/key`.
    S3,
    /// `az://container/blob`.
    Azure,
    /// `gs://bucket/object`: Google Cloud Storage.
    Gcs,
    /// `rados://pool/name`: a striped object in a Ceph pool.
    Rados,
    /// `ferry+https://HOST:PORT/TENANT/KEY`: a `ferry serve` server.
    Served,
}

/// A parsed source or destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// Which kind of place.
    pub scheme: Scheme,
    /// Bucket or container (empty for local paths and stdio).
    pub bucket: String,
    /// Key inside the bucket, or the local path.
    pub key: String,
    /// For `https://ACCOUNT.blob.core.windows.net/...`: the account's endpoint.
    pub endpoint: Option<String>,
    /// The SAS token of such a URL (its query).
    pub sas: Option<Sas>,
}

/// A SAS token: a secret, never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Sas(pub String);

impl fmt::Debug for Sas {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Sas(***)")
    }
}

/// Host-name suffixes of Azure Blob endpoints (public, US government, China clouds).
const AZURE_HOSTS: &[&str] = &[
    ".blob.core.windows.net",
    ".blob.core.usgovcloudapi.net",
    ".blob.core.chinacloudapi.cn",
];

impl Location {
    /// Parses `-`, a local path, `file://PATH`, `s3://bucket/key`, `az://container/blob`,
    /// `https://ACCOUNT.blob.core.windows.net/container/blob`, `gs://bucket/object` or
    /// `rados://pool/name`.
    pub fn parse(s: &str) -> Result<Self> {
        if s == "-" {
            return Ok(Self::plain(Scheme::Stdio, ""));
        }
        if let Some(l) = Self::azure_url(s)? {
            return Ok(l);
        }
        let Some((scheme, rest)) = s.split_once("://") else {
            if s.is_empty() {
                return Err(Error::Invalid("empty path".into()));
            }
            return Ok(Self::plain(Scheme::Local, s));
        };
        let scheme = match scheme.to_ascii_lowercase().as_str() {
            "file" => return Ok(Self::plain(Scheme::Local, rest)),
            "s3" => Scheme::S3,
            "az" | "azure" => Scheme::Azure,
            "gs" => Scheme::Gcs,
            "rados" => Scheme::Rados,
            "ferry+https" => Scheme::Served,
            other => {
                // (Its query is not repeated: it may be a SAS token, `HTTPS://...?sig=`.)
                let shown = s.split('?').next().unwrap_or_default();
                return Err(Error::Invalid(format!(
                    "unknown scheme '{other}' in '{shown}': use a local path, -, s3://bucket/key, az://container/blob, gs://bucket/object, rados://pool/name or ferry+https://host:port/tenant/key"
                )));
            }
        };
        let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(Error::Invalid(format!(
                "'{s}' names no bucket or container"
            )));
        }
        Ok(Self {
            scheme,
            bucket: bucket.into(),
            key: key.trim_start_matches('/').into(),
            endpoint: None,
            sas: None,
        })
    }

    fn plain(scheme: Scheme, key: &str) -> Self {
        Self {
            scheme,
            bucket: String::new(),
            key: key.into(),
            endpoint: None,
            sas: None,
        }
    }

    /// `https://ACCOUNT.blob.core.windows.net/CONTAINER/BLOB[?SAS]`, as the Azure portal and
    /// `az` print them; `None` for anything else.
    fn azure_url(s: &str) -> Result<Option<Self>> {
        if !s.starts_with("https://") {
            return Ok(None);
        }
        let bad = |e: &dyn fmt::Display| Error::Invalid(format!("bad URL: {e}"));
        let url = url::Url::parse(s).map_err(|e| bad(&e))?;
        let host = url.host_str().unwrap_or_default();
        if !AZURE_HOSTS.iter().any(|h| host.ends_with(h)) {
            return Err(Error::Invalid(format!(
                "'{}': an https:// URL must be an Azure Blob endpoint (ACCOUNT.blob.core.windows.net); use s3://, gs:// or az:// with an endpoint setting",
                url.origin().ascii_serialization()
            )));
        }
        let path = url.path().trim_start_matches('/');
        let (bucket, key) = path.split_once('/').unwrap_or((path, ""));
        if bucket.is_empty() {
            return Err(Error::Invalid(format!("'{host}' names no container")));
        }
        let decode = |p: &str| {
            percent_encoding::percent_decode_str(p)
                .decode_utf8_lossy()
                .into_owned()
        };
        Ok(Some(Self {
            scheme: Scheme::Azure,
            bucket: decode(bucket),
            key: decode(key),
            endpoint: Some(format!("https://{host}")),
            sas: url
                .query()
                .filter(|q| !q.is_empty())
                .map(|q| Sas(q.to_string())),
        }))
    }

    /// The account named by an `https://ACCOUNT.blob...` endpoint.
    pub fn account(&self) -> Option<&str> {
        let e = self.endpoint.as_deref()?;
        e.strip_prefix("https://")?.split('.').next()
    }

    /// True for object stores (as opposed to local paths and stdio).
    pub fn is_remote(&self) -> bool {
        matches!(
            self.scheme,
            Scheme::S3 | Scheme::Azure | Scheme::Gcs | Scheme::Rados | Scheme::Served
        )
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.scheme {
            Scheme::Stdio => f.write_str("-"),
            Scheme::Local => f.write_str(&self.key),
            Scheme::S3 => write!(f, "s3://{}/{}", self.bucket, self.key),
            Scheme::Azure => match &self.endpoint {
                Some(e) => write!(f, "{e}/{}/{}", self.bucket, self.key),
                None => write!(f, "az://{}/{}", self.bucket, self.key),
            },
            Scheme::Gcs => write!(f, "gs://{}/{}", self.bucket, self.key),
            Scheme::Rados => write!(f, "rados://{}/{}", self.bucket, self.key),
            Scheme::Served => write!(f, "ferry+https://{}/{}", self.bucket, self.key),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_each_scheme() {
        let l = Location::parse("s3://b/a/b.txt").unwrap();
        assert_eq!(
            (l.scheme, l.bucket.as_str(), l.key.as_str()),
            (Scheme::S3, "b", "a/b.txt")
        );
        let l = Location::parse("az://c").unwrap();
        assert_eq!(
            (l.scheme, l.bucket.as_str(), l.key.as_str()),
            (Scheme::Azure, "c", "")
        );
        assert_eq!(Location::parse("-").unwrap().scheme, Scheme::Stdio);
        assert_eq!(Location::parse("./x").unwrap().scheme, Scheme::Local);
        assert_eq!(Location::parse("file:///tmp/x").unwrap().key, "/tmp/x");
    }

    #[test]
    fn parses_azure_https_urls_and_keeps_their_sas_out_of_sight() {
        let l = Location::parse(
            "https://acct.blob.core.windows.net/backups/pg/base%20one.tar?sv=2022-11-02&sig=a%2Bb%3D",
        )
        .unwrap();
        assert_eq!(
            (l.scheme, l.bucket.as_str(), l.key.as_str()),
            (Scheme::Azure, "backups", "pg/base one.tar")
        );
        assert_eq!(l.account(), Some("acct"));
        assert_eq!(l.sas.as_ref().unwrap().0, "sv=2022-11-02&sig=a%2Bb%3D");
        assert!(!format!("{l:?}").contains("sig=") && !l.to_string().contains("sig="));
        assert_eq!(
            l.to_string(),
            "https://acct.blob.core.windows.net/backups/pg/base one.tar"
        );
        let e = Location::parse("https://example.com/x")
            .unwrap_err()
            .to_string();
        assert!(e.contains("Azure Blob endpoint"), "{e}");
        assert!(Location::parse("https://acct.blob.core.windows.net/").is_err());
    }

    #[test]
    fn parses_rados_pool_and_name() {
        let l = Location::parse("rados://backups/pg/base.tar").unwrap();
        assert_eq!(
            (l.scheme, l.bucket.as_str(), l.key.as_str()),
            (Scheme::Rados, "backups", "pg/base.tar")
        );
        assert!(l.is_remote());
        assert_eq!(l.to_string(), "rados://backups/pg/base.tar");
        assert!(Location::parse("rados:///name").is_err());
    }

    #[test]
    fn rejects_unknown_scheme_and_missing_bucket() {
        let e = Location::parse("gcs://bucket/x").unwrap_err().to_string();
        assert!(e.contains("unknown scheme 'gcs'"), "{e}");
        // A SAS token in a URL of another spelling is not repeated.
        let e = Location::parse("HTTP://a.blob.core.windows.net/c/k?sv=1&sig=SECRETSIG")
            .unwrap_err()
            .to_string();
        assert!(!e.contains("SECRETSIG"), "{e}");
        let l = Location::parse("gs://b/k/o").unwrap();
        assert_eq!((l.scheme, l.key.as_str()), (Scheme::Gcs, "k/o"));
        assert!(Location::parse("s3:///key").is_err());
    }
}
