//! S3 credentials, looked for in the AWS SDKs' order: keys given to ferry (flags, `FERRY_*`,
//! `ferry.toml`) or `AWS_ACCESS_KEY_ID`; the profile (`--s3-profile`, `AWS_PROFILE` or
//! `default`) in `~/.aws/config` and `~/.aws/credentials`, with its static keys,
//! `credential_process`, or `role_arn` over a `source_profile`; then web identity
//! (`AWS_WEB_IDENTITY_TOKEN_FILE` + `AWS_ROLE_ARN`), ECS/EKS container credentials and EC2
//! instance metadata (IMDSv2), which `object_store` implements and refreshes itself.
//!
//! Temporary credentials are fetched again [`EARLY`] before they expire, while requests go on
//! with the old ones: a six-hour backup outlives any one-hour role session.
//!
//! Not through the AWS SDK's `aws-config`: it brings its own HTTP stack and runtime (a third of
//! ferry's build again on two cores) for what is here a few hundred lines on `object_store`'s
//! signer, client and providers.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use object_store::aws::{
    AmazonS3Builder, AmazonS3ConfigKey as Key, AwsAuthorizer, AwsCredential, AwsCredentialProvider,
};
use object_store::client::{HttpClient, HttpRequestBody};
use object_store::{CredentialProvider, StaticCredentialProvider};

use super::aws_profile::{Profile, Profiles};
use super::explained::Explained;
use super::metered::Connector;
use crate::error::one_line;
use crate::{Error, Result};

/// How long before expiry temporary credentials are replaced (the AWS SDKs' margin).
pub(super) const EARLY: Duration = Duration::from_secs(5 * 60);
/// Longest a `credential_process` may run.
const PROCESS_TIMEOUT: Duration = Duration::from_secs(60);
/// Profiles naming profiles: deeper than this is a loop.
const MAX_HOPS: usize = 5;

/// What the chain found: the provider, where it came from, and the profile's region.
pub(super) struct Found {
    pub provider: AwsCredentialProvider,
    pub source: String,
    pub region: Option<String>,
}

/// What [`find`] needs to know besides the environment.
pub(super) struct Wanted<'a> {
    pub key: Option<(&'a str, &'a str, Option<&'a str>)>,
    pub profile: Option<&'a str>,
    pub region: &'a str,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn fixed(key: &str, secret: &str, token: Option<&str>) -> AwsCredentialProvider {
    Arc::new(StaticCredentialProvider::new(AwsCredential {
        key_id: key.into(),
        secret_key: secret.into(),
        token: token.map(str::to_string),
    }))
}

/// The first source of credentials in the chain's order.
pub(super) fn find(w: &Wanted<'_>, http: &Connector) -> Result<Found> {
    if let Some((k, s, t)) = w.key {
        return Ok(Found {
            provider: fixed(k, s, t),
            source: "static keys".into(),
            region: None,
        });
    }
    let profiles = Profiles::load()?;
    let named = w.profile.map(str::to_string).or_else(|| env("AWS_PROFILE"));
    let name = named.clone().unwrap_or_else(|| "default".into());
    match profiles.get(&name) {
        Some(p) => {
            let region = p.get("region").cloned();
            if let Some(provider) = from_profile(&profiles, &name, &p, w.region, http, 0)? {
                let source = format!("profile '{name}' ({})", profiles.files());
                return Ok(Found {
                    provider,
                    source,
                    region,
                });
            }
            let mut f = from_platform(w.region, http)?;
            f.region = region;
            Ok(f)
        }
        None if named.is_some() => Err(Error::Invalid(format!(
            "AWS profile '{name}' not found in {}",
            profiles.files()
        ))),
        None => from_platform(w.region, http),
    }
}

/// The credentials profile `name` holds or leads to; `None` if it holds none (a profile may
/// carry only a region).
fn from_profile(
    all: &Profiles, name: &str, p: &Profile, region: &str, http: &Connector, hops: usize,
) -> Result<Option<AwsCredentialProvider>> {
    if hops > MAX_HOPS {
        return Err(Error::Invalid(format!(
            "AWS profile '{name}': source_profile chain longer than {MAX_HOPS} (a loop?)"
        )));
    }
    let bad = |what: &str| Error::Invalid(format!("AWS profile '{name}': {what}"));
    if let Some(role) = p.get("role_arn") {
        let source = if let Some(src) = p.get("source_profile") {
            // A profile naming itself uses its own keys as the source (AWS CLI's rule).
            let sp = all
                .get(src)
                .ok_or_else(|| bad(&format!("source_profile '{src}' not found")))?;
            match src == name {
                true => {
                    keys_of(&sp).ok_or_else(|| bad("source_profile is itself, without keys"))?
                }
                false => from_profile(all, src, &sp, region, http, hops + 1)?
                    .ok_or_else(|| bad(&format!("source_profile '{src}' holds no credentials")))?,
            }
        } else if let Some(cs) = p.get("credential_source") {
            match cs.as_str() {
                "Environment" => {
                    let (Some(k), Some(s)) =
                        (env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY"))
                    else {
                        return Err(bad(
                            "credential_source Environment: AWS_ACCESS_KEY_ID is not set",
                        ));
                    };
                    fixed(&k, &s, env("AWS_SESSION_TOKEN").as_deref())
                }
                "Ec2InstanceMetadata" | "EcsContainer" => from_platform(region, http)?.provider,
                other => return Err(bad(&format!("unknown credential_source '{other}'"))),
            }
        } else if p.contains_key("web_identity_token_file") {
            return Ok(Some(web_identity(p, region, http)?));
        } else {
            return Err(bad("role_arn without source_profile or credential_source"));
        };
        let assume = AssumeRole {
            http: http.http(),
            endpoint: sts_endpoint(region),
            region: region.into(),
            role_arn: role.clone(),
            session: p
                .get("role_session_name")
                .cloned()
                .unwrap_or_else(|| format!("ferry-{}", std::process::id())),
            external_id: p.get("external_id").cloned(),
            duration: p.get("duration_seconds").cloned(),
            source,
        };
        return Ok(Some(Arc::new(Refreshing::new(assume))));
    }
    if let Some(cmd) = p.get("credential_process") {
        let process = Process {
            command: cmd.clone(),
            profile: name.into(),
        };
        return Ok(Some(Arc::new(Refreshing::new(process))));
    }
    if p.keys().any(|k| k.starts_with("sso_")) {
        return Err(bad(
            "SSO profiles are not read by ferry: set credential_process = aws configure \
             export-credentials --profile NAME --format process",
        ));
    }
    Ok(keys_of(p))
}

fn keys_of(p: &Profile) -> Option<AwsCredentialProvider> {
    match (p.get("aws_access_key_id"), p.get("aws_secret_access_key")) {
        (Some(k), Some(s)) => Some(fixed(k, s, p.get("aws_session_token").map(String::as_str))),
        _ => None,
    }
}

fn sts_endpoint(region: &str) -> String {
    // A region that is not one (from a config file someone else may write) does not make a
    // host name: the global endpoint then, AWS's either way.
    let fits = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
    let host = match !region.is_empty() && region.chars().all(fits) {
        true => format!("sts.{region}.amazonaws.com"),
        false => "sts.amazonaws.com".to_string(),
    };
    env("AWS_ENDPOINT_URL_STS").unwrap_or_else(|| format!("https://{host}"))
}

/// A profile's `web_identity_token_file` + `role_arn`, through `object_store`'s provider.
fn web_identity(p: &Profile, region: &str, http: &Connector) -> Result<AwsCredentialProvider> {
    let mut b = platform_builder(region, http);
    for (key, name) in [
        (Key::WebIdentityTokenFile, "web_identity_token_file"),
        (Key::RoleArn, "role_arn"),
        (Key::RoleSessionName, "role_session_name"),
    ] {
        if let Some(v) = p.get(name) {
            b = b.with_config(key, v);
        }
    }
    Ok(b.build()
        .map_err(|e| Error::Invalid(one_line(&e)))?
        .credentials()
        .clone())
}

fn platform_builder(region: &str, http: &Connector) -> AmazonS3Builder {
    AmazonS3Builder::new()
        .with_bucket_name("-")
        .with_region(region)
        .with_retry(object_store::RetryConfig {
            max_retries: 0,
            ..Default::default()
        })
        .with_http_connector(http.clone())
}

/// Web identity, container or instance credentials, as the environment says: built by
/// `object_store`, whose providers cache and refresh them.
fn from_platform(region: &str, http: &Connector) -> Result<Found> {
    let mut b = platform_builder(region, http);
    let mut source = "EC2 instance metadata (IMDSv2)".to_string();
    for (key, var) in [
        (Key::WebIdentityTokenFile, "AWS_WEB_IDENTITY_TOKEN_FILE"),
        (Key::RoleArn, "AWS_ROLE_ARN"),
        (Key::RoleSessionName, "AWS_ROLE_SESSION_NAME"),
        (Key::StsEndpoint, "AWS_ENDPOINT_URL_STS"),
        (
            Key::ContainerCredentialsRelativeUri,
            "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        ),
        (
            Key::ContainerCredentialsFullUri,
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        ),
        (
            Key::ContainerAuthorizationTokenFile,
            "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
        ),
        (Key::MetadataEndpoint, "AWS_EC2_METADATA_SERVICE_ENDPOINT"),
    ] {
        if let Some(v) = env(var) {
            b = b.with_config(key, v);
        }
    }
    if env("AWS_WEB_IDENTITY_TOKEN_FILE").is_some() && env("AWS_ROLE_ARN").is_some() {
        source = "web identity (AWS_WEB_IDENTITY_TOKEN_FILE)".into();
    } else if env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI").is_some()
        || env("AWS_CONTAINER_CREDENTIALS_FULL_URI").is_some()
    {
        source = "container credentials (ECS/EKS)".into();
    } else if let Some(e) = env("AWS_EC2_METADATA_SERVICE_ENDPOINT") {
        source = format!("EC2 instance metadata at {e}");
    }
    let inner = b
        .build()
        .map_err(|e| Error::Invalid(one_line(&e)))?
        .credentials()
        .clone();
    let provider = Arc::new(Explained::new(
        inner,
        format!(
            "no S3 credentials: none given (AWS_ACCESS_KEY_ID, --s3-profile, AWS_PROFILE, \
             ~/.aws/credentials), and {source} failed"
        ),
    ));
    Ok(Found {
        provider,
        source,
        region: None,
    })
}

fn failed(msg: String) -> object_store::Error {
    object_store::Error::Generic {
        store: "S3",
        source: msg.into(),
    }
}

/// Fetches one set of temporary credentials and says until when they hold.
#[async_trait]
trait Fetch: std::fmt::Debug + Send + Sync {
    async fn fetch(&self) -> Result<(AwsCredential, Option<SystemTime>)>;
}

/// A [`Fetch`] whose credentials are kept until [`EARLY`] before they expire; a failed
/// refresh keeps the old ones for as long as they are still valid.
#[derive(Debug)]
struct Refreshing<F> {
    fetch: F,
    held: tokio::sync::Mutex<Option<(Arc<AwsCredential>, Option<SystemTime>)>>,
}

impl<F> Refreshing<F> {
    fn new(fetch: F) -> Self {
        Self {
            fetch,
            held: tokio::sync::Mutex::new(None),
        }
    }
}

#[async_trait]
impl<F: Fetch> CredentialProvider for Refreshing<F> {
    type Credential = AwsCredential;

    async fn get_credential(&self) -> object_store::Result<Arc<AwsCredential>> {
        // One refresh at a time: the other requests wait for it rather than start their own.
        let mut held = self.held.lock().await;
        let now = SystemTime::now();
        if let Some((c, until)) = held.as_ref() {
            if until.is_none_or(|u| u > now + EARLY) {
                return Ok(c.clone());
            }
        }
        match self.fetch.fetch().await {
            Ok((c, until)) => {
                let c = Arc::new(c);
                *held = Some((c.clone(), until));
                Ok(c)
            }
            Err(e) => match held.as_ref() {
                Some((c, Some(u))) if *u > now => {
                    tracing::warn!("refreshing S3 credentials failed, the current ones hold until they expire: {e}");
                    Ok(c.clone())
                }
                _ => Err(failed(e.to_string())),
            },
        }
    }
}

/// An expiry time as the AWS tools write it (`2026-01-01T00:00:00Z`, offsets as `+00:00`).
fn expiry(s: &str) -> Result<SystemTime> {
    let s = s.trim().replace("+00:00", "Z");
    humantime::parse_rfc3339_weak(s.trim_end_matches('Z'))
        .map_err(|e| Error::Invalid(format!("expiration '{s}': {e}")))
}

/// `credential_process`: a command printing the credentials as JSON (`Version` 1).
#[derive(Debug)]
struct Process {
    command: String,
    profile: String,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ProcessOutput {
    version: u32,
    access_key_id: String,
    secret_access_key: String,
    session_token: Option<String>,
    expiration: Option<String>,
}

#[async_trait]
impl Fetch for Process {
    async fn fetch(&self) -> Result<(AwsCredential, Option<SystemTime>)> {
        let what = format!("credential_process of AWS profile '{}'", self.profile);
        let mut cmd = tokio::process::Command::new("sh");
        cmd.arg("-c").arg(&self.command);
        // A helper (often another vendor's program) gets what it needs, not ferry's other
        // secrets.
        for k in super::hidden_from_helpers() {
            cmd.env_remove(k);
        }
        let run = cmd
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(PROCESS_TIMEOUT, run)
            .await
            .map_err(|_| Error::Transient(format!("{what}: no answer in {PROCESS_TIMEOUT:?}")))?
            .map_err(|e| Error::Invalid(format!("{what}: {e}")))?;
        if !out.status.success() {
            // Its error output, never its standard output: that is where secrets go.
            let err = String::from_utf8_lossy(&out.stderr);
            let first = err.lines().next().unwrap_or("").trim();
            return Err(Error::Denied(format!(
                "{what} failed ({}): {first}",
                out.status
            )));
        }
        // The parse error would quote the output: say only where it went wrong.
        let o: ProcessOutput = serde_json::from_slice(&out.stdout).map_err(|e| {
            Error::Invalid(format!(
                "{what}: not the credentials JSON (line {}, column {})",
                e.line(),
                e.column()
            ))
        })?;
        if o.version != 1 {
            return Err(Error::Invalid(format!(
                "{what}: Version {} (1 expected)",
                o.version
            )));
        }
        let until = o.expiration.as_deref().map(expiry).transpose()?;
        let c = AwsCredential {
            key_id: o.access_key_id,
            secret_key: o.secret_access_key,
            token: o.session_token,
        };
        Ok((c, until))
    }
}

/// `role_arn` over a source: STS AssumeRole, signed with the source's credentials.
#[derive(Debug)]
struct AssumeRole {
    http: HttpClient,
    endpoint: String,
    region: String,
    role_arn: String,
    session: String,
    external_id: Option<String>,
    duration: Option<String>,
    source: AwsCredentialProvider,
}

/// The text of the first `<tag>` in `xml`.
fn tag<'a>(xml: &'a str, tag: &str) -> Option<&'a str> {
    let open = format!("<{tag}>");
    let start = xml.find(&open)? + open.len();
    let len = xml[start..].find(&format!("</{tag}>"))?;
    Some(&xml[start..start + len])
}

#[async_trait]
impl Fetch for AssumeRole {
    async fn fetch(&self) -> Result<(AwsCredential, Option<SystemTime>)> {
        let what = format!("assume role {} at {}", self.role_arn, self.endpoint);
        let source =
            self.source.get_credential().await.map_err(|e| {
                Error::Denied(format!("{what}: source credentials: {}", one_line(&e)))
            })?;
        let form = {
            let mut f = url::form_urlencoded::Serializer::new(String::new());
            f.append_pair("Action", "AssumeRole")
                .append_pair("Version", "2011-06-15")
                .append_pair("RoleArn", &self.role_arn)
                .append_pair("RoleSessionName", &self.session)
                .append_pair(
                    "DurationSeconds",
                    self.duration.as_deref().unwrap_or("3600"),
                );
            if let Some(x) = &self.external_id {
                f.append_pair("ExternalId", x);
            }
            f.finish()
        };
        let mut req = http::Request::builder()
            .method(http::Method::POST)
            .uri(format!("{}/", self.endpoint.trim_end_matches('/')))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(HttpRequestBody::from(form))
            .map_err(|e| Error::Invalid(format!("{what}: {e}")))?;
        AwsAuthorizer::new(&source, "sts", &self.region)
            .try_authorize(&mut req, None)
            .map_err(Error::from)?;
        let body = super::signed::send_for_body(&self.http, req, &what).await?;
        let xml = String::from_utf8_lossy(&body);
        let get = |t: &str| {
            tag(&xml, t).ok_or_else(|| Error::Permanent(format!("{what}: no {t} in the answer")))
        };
        let c = AwsCredential {
            key_id: get("AccessKeyId")?.into(),
            secret_key: get("SecretAccessKey")?.into(),
            token: Some(get("SessionToken")?.into()),
        };
        Ok((c, Some(expiry(get("Expiration")?)?)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_expiry_in_the_forms_aws_tools_write() {
        let t = expiry("2026-01-01T00:00:10Z").unwrap();
        assert_eq!(
            t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs(),
            1_767_225_610
        );
        assert_eq!(expiry("2026-01-01T00:00:10+00:00").unwrap(), t);
        assert!(expiry("2026-01-01T00:00:10.5Z").unwrap() > t);
        assert!(expiry("tomorrow").is_err());
    }

    /// A credential_process gets none of ferry's other secrets.
    #[tokio::test]
    async fn a_credential_process_is_not_handed_ferrys_secrets() {
        const SET: &[(&str, &str)] = &[
            ("FERRY_PASSWORD", "the repository's password"),
            ("FERRY_FROM_PASSWORD", "the source repository's password"),
            ("AZURE_STORAGE_SAS_KEY", "sv=1&sig=SIGSECRET"),
            (
                "FERRY_REPO",
                "https://a.blob.core.windows.net/c/r?sv=1&sig=SIGSECRET",
            ),
        ];
        // SAFETY: this test alone sets them; nothing here reads them otherwise.
        for (k, v) in SET {
            unsafe { std::env::set_var(k, v) };
        }
        let p = Process {
            command: r#"test -z "$FERRY_PASSWORD$FERRY_FROM_PASSWORD$AZURE_STORAGE_SAS_KEY$FERRY_REPO" || exit 9; echo '{"Version": 1, "AccessKeyId": "k", "SecretAccessKey": "s"}'"#.into(),
            profile: "test".into(),
        };
        let got = p.fetch().await;
        for (k, _) in SET {
            unsafe { std::env::remove_var(k) };
        }
        let (c, _) = got.expect("the helper saw one of ferry's secrets");
        assert_eq!(c.key_id, "k");
    }

    #[test]
    fn sts_hosts_come_from_regions_only() {
        assert_eq!(
            sts_endpoint("eu-north-1"),
            "https://sts.eu-north-1.amazonaws.com"
        );
        assert_eq!(sts_endpoint("evil.example/"), "https://sts.amazonaws.com");
    }

    #[test]
    fn finds_tags() {
        let x = "<A><AccessKeyId>k</AccessKeyId><Expiration>e</Expiration></A>";
        assert_eq!(tag(x, "AccessKeyId"), Some("k"));
        assert_eq!(tag(x, "SessionToken"), None);
    }
}
