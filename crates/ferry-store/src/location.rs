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

/// What [`Location::secret_in`] finds in a location that may be a credential.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Secret {
    /// A query with a signature (`sig=`): an Azure SAS token.
    Sas,
    /// A user name or password before a URL's host (`NAME:SECRET@HOST`).
    UserInfo,
    /// Any other query (`?token=...`).
    Query,
}

/// Host-name suffixes of Azure Blob endpoints (public, US government, China clouds).
const AZURE_HOSTS: &[&str] = &[
    ".blob.core.windows.net",
    ".blob.core.usgovcloudapi.net",
    ".blob.core.chinacloudapi.cn",
];

impl Location {
    /// Parses `-`, a local path, `file://PATH`, `s3://bucket/key`, `az://container/blob`,
    /// `https://ACCOUNT.blob.core.windows.net/container/blob`, `gs://bucket/object`,
    /// `rados://pool/name` or `ferry+https://HOST:PORT/TENANT/KEY`.
    ///
    /// A store URL carrying user info (`NAME:PASSWORD@`) is refused, and so is a query on
    /// any form but the Azure `https://` one: a secret there would be shown wherever the
    /// location is (messages, `--json`, child processes' arguments). No error repeats the
    /// location past its first `?`, nor its user info.
    pub fn parse(s: &str) -> Result<Self> {
        if s == "-" {
            return Ok(Self::plain(Scheme::Stdio, ""));
        }
        if let Some(l) = Self::azure_url(s)? {
            return Ok(l);
        }
        let Some((name, rest)) = s.split_once("://") else {
            if s.is_empty() {
                return Err(Error::Invalid("empty path".into()));
            }
            return Ok(Self::plain(Scheme::Local, s));
        };
        let name = name.to_ascii_lowercase();
        let scheme = match name.as_str() {
            "file" => return Ok(Self::plain(Scheme::Local, rest)),
            "s3" => Scheme::S3,
            "az" | "azure" => Scheme::Azure,
            "gs" => Scheme::Gcs,
            "rados" => Scheme::Rados,
            "ferry+https" => Scheme::Served,
            other => {
                // (Its query is not repeated: it may be a SAS token, `HTTPS://...?sig=`.)
                return Err(Error::Invalid(format!(
                    "unknown scheme '{other}' in '{}': use a local path, -, s3://bucket/key, az://container/blob, gs://bucket/object, rados://pool/name or ferry+https://host:port/tenant/key",
                    Self::shown(s)
                )));
            }
        };
        let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
        no_user_info(s, &name, scheme, bucket)?;
        if scheme != Scheme::Rados && rest.contains('?') {
            return Err(Error::Invalid(format!(
                "'{}?...': a {name}:// location takes no query string ({})",
                Self::shown(s),
                credentials_hint(scheme)
            )));
        }
        if bucket.is_empty() {
            return Err(Error::Invalid(format!(
                "'{}' names no bucket or container",
                Self::shown(s)
            )));
        }
        let key = key.trim_start_matches('/');
        if scheme == Scheme::Served {
            served_parts(bucket, key)?;
        }
        Ok(Self {
            scheme,
            bucket: bucket.into(),
            key: key.into(),
            endpoint: None,
            sas: None,
        })
    }

    /// What in `raw` may be a credential, if anything: the one rule for what messages cut
    /// ([`Location::shown`]), what the command line refuses and what a child process is not
    /// given. Only a URL (`SCHEME://...`) can hold one: a signature (`sig=`, a SAS token,
    /// anywhere: an encoded `?` still carries one), user info ([`user_info_end`]), a query.
    pub fn secret_in(raw: &str) -> Option<Secret> {
        let (scheme, rest) = raw.split_once("://")?;
        let lower = rest.to_ascii_lowercase();
        if lower.contains("sig=") || lower.contains("sig%3d") {
            return Some(Secret::Sas);
        }
        if user_info_end(scheme, rest).is_some() {
            return Some(Secret::UserInfo);
        }
        rest.contains('?').then_some(Secret::Query)
    }

    /// `raw` as a message may show it: user info as `***`, nothing from its first `?`, `#`,
    /// encoded `?` or signature on, whatever [`Location::secret_in`] calls it (a URL may
    /// hold more than one). Every error that repeats a location the user gave goes through
    /// here.
    pub fn shown(raw: &str) -> String {
        let Some((scheme, rest)) = raw.split_once("://") else {
            return raw.split('?').next().unwrap_or_default().to_string();
        };
        let (hidden, rest) = match user_info_end(scheme, rest) {
            Some(end) => ("***", &rest[end..]),
            None => ("", rest),
        };
        // ASCII lowercase keeps every byte where it was: its offsets are `rest`'s.
        let lower = rest.to_ascii_lowercase();
        let cut = ["?", "#", "%3f", "sig=", "sig%3d"]
            .iter()
            .filter_map(|m| lower.find(m))
            .min()
            .unwrap_or(rest.len());
        format!("{scheme}://{hidden}{}", &rest[..cut])
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
        if !url.username().is_empty() || url.password().is_some() {
            return Err(user_info(s, Scheme::Azure));
        }
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

/// Where the user info of a URL's `rest` (what follows `://`) ends, if it has any: at the
/// last `@` before the first `/` (a password may hold `?` or `#`), or, when a secret holding
/// a `/` moved its `@` past it (`KEY:SE/CRET@host`), at the last `@` before the query, or at
/// the first `/`. Such a secret shows as a `:` before the first `/` that starts no port (any
/// `:` in a bucket or container name), or as an `@` in a served URL's tenant, where no
/// tenant name has one.
fn user_info_end(scheme: &str, rest: &str) -> Option<usize> {
    let scheme = scheme
        .rsplit('=')
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase();
    let head_end = rest.find('/').unwrap_or(rest.len());
    let head = &rest[..head_end];
    if let Some(at) = head.rfind('@') {
        return Some(at);
    }
    let bucket_named = matches!(scheme.as_str(), "s3" | "az" | "azure" | "gs");
    // An IPv6 host's `:`s are inside its brackets.
    let host = match head.strip_prefix('[') {
        Some(h) => h.split_once(']').map_or("", |(_, port)| port),
        None => head,
    };
    let not_a_port = host.split_once(':').is_some_and(|(_, port)| {
        let port = port.split(['?', '#']).next().unwrap_or_default();
        bucket_named || !port.bytes().all(|b| b.is_ascii_digit())
    });
    let tenant = rest[head_end..].trim_start_matches('/').split('/').next();
    let at_in_tenant = scheme == "ferry+https" && tenant.is_some_and(|t| t.contains('@'));
    if !(not_a_port || at_in_tenant) {
        return None;
    }
    let before_query = rest.find('?').unwrap_or(rest.len());
    Some(rest[..before_query].rfind('@').unwrap_or(head_end))
}

/// Where a store's credentials go instead of its URL.
fn credentials_hint(scheme: Scheme) -> &'static str {
    match scheme {
        Scheme::S3 => "S3 keys go in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a profile",
        Scheme::Azure => "a key goes in AZURE_STORAGE_KEY, a SAS token in AZURE_STORAGE_SAS_TOKEN",
        Scheme::Gcs => "credentials go in GOOGLE_APPLICATION_CREDENTIALS",
        Scheme::Served => "the tenant token goes in FERRY_SERVE_TOKEN or --serve-token-file",
        Scheme::Rados => "Ceph reads its key from its keyring",
        Scheme::Local | Scheme::Stdio => "",
    }
}

/// The refusal of a URL with user info; it repeats none of it.
fn user_info(raw: &str, scheme: Scheme) -> Error {
    Error::Invalid(format!(
        "'{}': a store URL takes no user name or password (every local user could read them \
         on a command line, and messages would show them): {}",
        Location::shown(raw),
        credentials_hint(scheme)
    ))
}

/// Refuses user info before the host: `NAME:SECRET@`, or a secret with a `/` in it, whose
/// `:` then lands in what would be read as the bucket (no bucket or container name of S3,
/// Azure or GCS holds one).
fn no_user_info(raw: &str, name: &str, scheme: Scheme, host: &str) -> Result<()> {
    if host.contains('@') {
        return Err(user_info(raw, scheme));
    }
    if matches!(scheme, Scheme::S3 | Scheme::Azure | Scheme::Gcs) && host.contains(':') {
        // (Not repeated: what precedes the `:` may be a name, what follows a secret.)
        return Err(Error::Invalid(format!(
            "{name}://...: a bucket or container name holds no ':', and a store URL takes no \
             user name or password: {}",
            credentials_hint(scheme)
        )));
    }
    Ok(())
}

/// Checks `HOST[:PORT]` and the tenant of a `ferry+https://` URL, repeating neither: a
/// malformed one may be a token whose `/` split it (`TENANT:TO/KEN@HOST`).
fn served_parts(host_port: &str, key: &str) -> Result<()> {
    let port = match host_port.rsplit_once(':') {
        Some((h, p)) if !host_port.ends_with(']') && !h.is_empty() => Some(p),
        _ => None,
    };
    if port.is_some_and(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit())) {
        return Err(Error::Invalid(format!(
            "ferry+https://...: the port is not a number ({})",
            credentials_hint(Scheme::Served)
        )));
    }
    let tenant = key.split('/').next().unwrap_or_default();
    if !is_tenant_name(tenant) {
        return Err(Error::Invalid(format!(
            "ferry+https://...: a tenant name is {TENANT_NAME} ({})",
            credentials_hint(Scheme::Served)
        )));
    }
    Ok(())
}

/// Paths of `ferry serve`'s own, which no tenant may be named.
const RESERVED_TENANTS: &[&str] = &["v1", "metrics", "healthz"];

/// What [`is_tenant_name`] accepts, for messages.
pub const TENANT_NAME: &str =
    "letters, digits, - and _ only, at most 64, not v1, metrics or healthz";

/// Whether `name` may name a tenant of `ferry serve`: one rule for the server's
/// configuration and the client's `ferry+https://` URLs, so that a URL the server could
/// never serve is refused before a request.
pub fn is_tenant_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        && !RESERVED_TENANTS.contains(&name)
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

    /// Restic users put passwords in URLs: ferry refuses them, without repeating them.
    #[test]
    fn user_info_is_refused_and_not_repeated() {
        for raw in [
            "ferry+https://t:TOKSECRET@h/t/r",
            "ferry+https://TOKSECRET@h:8443/t/r",
            "s3://AKIA:TOKSECRET@b/k",
            "az://acct:TOKSECRET@c/k",
            "gs://u:TOKSECRET@b/o",
            "rados://client:TOKSECRET@pool/name",
            "https://u:TOKSECRET@acct.blob.core.windows.net/c/k",
        ] {
            let e = Location::parse(raw).unwrap_err().to_string();
            assert!(!e.contains("TOKSECRET"), "{raw}: {e}");
            assert!(e.contains("no user name or password"), "{raw}: {e}");
        }
        // A secret with a `/` in it ends the host early: what is left is refused as well.
        for raw in [
            "ferry+https://t:PWPART1/PWPART2@h:8443/t/r",
            "ferry+https://PWPART1/PWPART2@h:8443/t/r",
            "s3://AKIA:PWPART1/PWPART2@b/k",
            "az://acct:PWPART1/PWPART2@c/k",
        ] {
            let e = Location::parse(raw).unwrap_err().to_string();
            assert!(!e.contains("PWPART"), "{raw}: {e}");
        }
        let e = Location::parse("ferry+https://t:TOKSECRET@h/t/r")
            .unwrap_err()
            .to_string();
        assert!(e.contains("FERRY_SERVE_TOKEN"), "{e}");
        // What a ferry serve URL looks like still parses, IPv6 too; keys may hold `@`.
        let l = Location::parse("ferry+https://[::1]:8443/db-1/repo@2/x").unwrap();
        assert_eq!(
            (l.bucket.as_str(), l.key.as_str()),
            ("[::1]:8443", "db-1/repo@2/x")
        );
        assert!(Location::parse("ferry+https://h.example/t/r").is_ok());
        assert!(Location::parse("s3://b/k@v1").is_ok());
    }

    /// A `ferry+https://` URL's tenant follows the rule the server's configuration does: a
    /// name the server could never serve (its own paths, too long, empty) is refused here.
    #[test]
    fn served_tenants_follow_the_servers_rule() {
        let long = "a".repeat(65);
        assert!(!is_tenant_name(""));
        for bad in ["metrics", "healthz", "v1", long.as_str(), "t.x"] {
            let url = format!("ferry+https://h:8443/{bad}/repo");
            let e = Location::parse(&url).unwrap_err().to_string();
            assert!(e.contains(TENANT_NAME), "{bad:?}: {e}");
            assert!(!is_tenant_name(bad), "{bad:?}");
        }
        for good in ["db-1", "A_b", &long[..64]] {
            assert!(is_tenant_name(good), "{good:?}");
            assert!(Location::parse(&format!("ferry+https://h/{good}/r")).is_ok());
        }
    }

    /// A query on a URL form that takes none is refused; no message shows a query.
    #[test]
    fn queries_are_refused_and_never_repeated() {
        for raw in [
            "az://c/r?sv=1&sig=SIGSECRET",
            "az:///c/r?sv=1&sig=SIGSECRET",
            "s3://b/k?X-Amz-Signature=SIGSECRET",
            "gs://b/k?SIGSECRET",
            "ferry+https://h:8443/t/r?token=SIGSECRET",
            "s3:///k?SIGSECRET",
        ] {
            let e = Location::parse(raw).unwrap_err().to_string();
            assert!(!e.contains("SIGSECRET"), "{raw}: {e}");
        }
        let e = Location::parse("az://c/r?sv=1&sig=SIGSECRET")
            .unwrap_err()
            .to_string();
        assert!(e.contains("AZURE_STORAGE_SAS_TOKEN"), "{e}");
        assert_eq!(
            Location::shown("https://a.blob.core.windows.net/c/k?sig=S"),
            "https://a.blob.core.windows.net/c/k"
        );
        assert_eq!(
            Location::shown("ferry+https://t:T@h/t/r?q"),
            "ferry+https://***@h/t/r"
        );
        assert_eq!(Location::shown("/a/b@c"), "/a/b@c");
    }

    /// One rule finds what may be a credential; `shown` cuts each, and nothing else.
    #[test]
    fn one_rule_finds_the_secret_in_a_url_and_shown_cuts_it() {
        let cases = [
            (
                "https://a.blob.core.windows.net/c/k?sv=1&SIG=SECRET",
                Some(Secret::Sas),
            ),
            ("az://c/k?sig%3DSECRET", Some(Secret::Sas)),
            ("ferry+https://t:SECRET@h:8443/t/r", Some(Secret::UserInfo)),
            ("--repo=s3://SECRET@b/k", Some(Secret::UserInfo)),
            // A secret holding a `/`: its first half looks like a bucket with a `:`.
            ("s3://AKIA:SE/CRET@b/k", Some(Secret::UserInfo)),
            ("gs://AKIA:SECRET", Some(Secret::UserInfo)),
            ("ferry+https://h:8443/t/r?token=SECRET", Some(Secret::Query)),
            // More than one: each is cut.
            (
                "https://u:SECRET@a.blob.core.windows.net/c/k?sv=1&sig=SECRET",
                Some(Secret::Sas),
            ),
            ("ferry+https://t:SECRET@h/t/r?sig=1", Some(Secret::Sas)),
            // A signature behind an encoded `?` or a `#`.
            (
                "https://a.blob.core.windows.net/c/k%3Fsv=1%26sig=SECRET",
                Some(Secret::Sas),
            ),
            // A password holding `#`, `?` or `/`, outside a bucket name.
            ("ferry+https://t:AB#SECRET@h/t/r", Some(Secret::UserInfo)),
            (
                "https://key:hun#SECRET@s3.example:9000",
                Some(Secret::UserInfo),
            ),
            ("ferry+https://t:A?SECRET@h/t/r", Some(Secret::UserInfo)),
            (
                "ferry+https://t:A/SECRET@h:8443/t/r",
                Some(Secret::UserInfo),
            ),
            (
                "ferry+https://t:12/SECRET@h:8443/t/r",
                Some(Secret::UserInfo),
            ),
            ("rados://client:A/SECRET@pool/x", Some(Secret::UserInfo)),
            ("s3://b/k@v1", None),
            ("ferry+https://h:8443/t/a@b", None),
            ("http://[::1]:9000/b", None),
            ("https://s3.example:9000", None),
            ("rados://pool/na:me@snap", None),
            ("/srv/a@c:d", None),
            ("-", None),
        ];
        for (raw, secret) in cases {
            assert_eq!(Location::secret_in(raw), secret, "{raw}");
            let shown = Location::shown(raw);
            assert!(
                !shown.contains("SECRET") && !shown.contains("CRET"),
                "{raw}: {shown}"
            );
            if secret.is_none() {
                assert_eq!(shown, raw);
            }
        }
        assert_eq!(Location::shown("s3://AKIA:SE/CRET@b/k"), "s3://***@b/k");
        assert_eq!(Location::shown("/srv/a?SECRET"), "/srv/a");
        assert_eq!(
            Location::shown("minio:9000/?X-Amz-Signature=S"),
            "minio:9000/"
        );
        assert_eq!(
            Location::shown("ferry+https://t:T@h/t/a@b"),
            "ferry+https://***@h/t/a@b"
        );
    }
}
