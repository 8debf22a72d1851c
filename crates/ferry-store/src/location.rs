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
}

impl Location {
    /// Parses `-`, a local path, `file://PATH`, `s3://bucket/key`, `az://container/blob`,
    /// `https://ACCOUNT.blob.core.windows.net/container/blob`, `gs://bucket/object` or
    /// `rados://pool/name`.
    pub fn parse(s: &str) -> Result<Self> {
        if s == "-" {
            return Ok(Self {
                scheme: Scheme::Stdio,
                bucket: String::new(),
                key: String::new(),
            });
        }
        let Some((scheme, rest)) = s.split_once("://") else {
            if s.is_empty() {
                return Err(Error::Invalid("empty path".into()));
            }
            return Ok(Self {
                scheme: Scheme::Local,
                bucket: String::new(),
                key: s.to_string(),
            });
        };
        let scheme = match scheme.to_ascii_lowercase().as_str() {
            "file" => {
                return Ok(Self { scheme: Scheme::Local, bucket: String::new(), key: rest.into() })
            }
            "s3" => Scheme::S3,
            "az" | "azure" => Scheme::Azure,
            "gs" => Scheme::Gcs,
            "rados" => Scheme::Rados,
            other => {
                return Err(Error::Invalid(format!(
                    "unknown scheme '{other}' in '{s}': use a local path, -, s3://bucket/key, az://container/blob, gs://bucket/object or rados://pool/name"
                )))
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
        })
    }

    /// True for object stores (as opposed to local paths and stdio).
    pub fn is_remote(&self) -> bool {
        matches!(
            self.scheme,
            Scheme::S3 | Scheme::Azure | Scheme::Gcs | Scheme::Rados
        )
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.scheme {
            Scheme::Stdio => f.write_str("-"),
            Scheme::Local => f.write_str(&self.key),
            Scheme::S3 => write!(f, "s3://{}/{}", self.bucket, self.key),
            Scheme::Azure => write!(f, "az://{}/{}", self.bucket, self.key),
            Scheme::Gcs => write!(f, "gs://{}/{}", self.bucket, self.key),
            Scheme::Rados => write!(f, "rados://{}/{}", self.bucket, self.key),
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
        let l = Location::parse("gs://b/k/o").unwrap();
        assert_eq!((l.scheme, l.key.as_str()), (Scheme::Gcs, "k/o"));
        assert!(Location::parse("s3:///key").is_err());
    }
}
