//! Credentials from where deployments keep them. S3 against MinIO: a profile in the shared
//! files, a `credential_process`, a role assumed over a source profile (MinIO's STS), and EC2
//! instance metadata (amazon-ec2-metadata-mock serving IMDSv2); temporary credentials are
//! fetched again before they expire while a transfer goes on. No test reads the user's own
//! `~/.aws`: each points AWS_CONFIG_FILE and AWS_SHARED_CREDENTIALS_FILE at its own files.
//! GCS against fake-gcs-server: a service-account file (GOOGLE_APPLICATION_CREDENTIALS).
//! Azure against Azurite: a SAS token, from AZURE_STORAGE_SAS_TOKEN and from a connection
//! string, read-only where the token says so.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{fails_with, ferry_env};

/// A directory for one test's files, removed at the end.
struct Dir(PathBuf);

impl Dir {
    fn new() -> Self {
        let d = std::env::temp_dir().join(ferry_testkit::unique("ferry-aws"));
        std::fs::create_dir_all(&d).unwrap();
        Self(d)
    }
    fn file(&self, name: &str, text: &str) -> String {
        let p = self.0.join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The environment of a ferry that has no keys: only the endpoint, and these shared files.
fn keyless<'a>(endpoint: &'a str, config: &'a str, creds: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("AWS_ENDPOINT_URL", endpoint),
        ("AWS_ACCESS_KEY_ID", ""),
        ("AWS_SECRET_ACCESS_KEY", ""),
        ("AWS_SESSION_TOKEN", ""),
        ("AWS_PROFILE", ""),
        ("AWS_CONFIG_FILE", config),
        ("AWS_SHARED_CREDENTIALS_FILE", creds),
        ("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:9"),
    ]
}

/// A made bucket and the MinIO endpoint, or `None` when MinIO is down outside CI.
fn minio_bucket() -> Option<(String, String)> {
    let endpoint = ferry_testkit::require("AWS_ENDPOINT_URL")?;
    let bucket = format!("s3://{}", ferry_testkit::unique("ferry-creds"));
    let out = ferry_env(&["mkdir", &bucket], &[], None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some((endpoint, bucket))
}

fn succeeds(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Temporary credentials from MinIO's STS (AssumeRole with the root user), as
/// (key, secret, token).
fn sts_credentials(endpoint: &str) -> (String, String, String) {
    let out = Command::new("curl")
        .args([
            "-sf",
            "--aws-sigv4",
            "aws:amz:us-east-1:sts",
            "--user",
            "minioadmin:minioadmin",
        ])
        .args([
            "-d",
            "Action=AssumeRole&Version=2011-06-15&DurationSeconds=900",
            endpoint,
        ])
        .output()
        .expect("curl");
    let xml = String::from_utf8_lossy(&out.stdout).to_string();
    let tag = |t: &str| {
        let start = xml
            .find(&format!("<{t}>"))
            .unwrap_or_else(|| panic!("no {t} in {xml}"))
            + t.len()
            + 2;
        xml[start..start + xml[start..].find('<').unwrap()].to_string()
    };
    (
        tag("AccessKeyId"),
        tag("SecretAccessKey"),
        tag("SessionToken"),
    )
}

#[test]
fn keys_come_from_the_named_profile_of_the_shared_files() {
    let Some((endpoint, bucket)) = minio_bucket() else {
        return;
    };
    let d = Dir::new();
    let config = d.file(
        "config",
        "[default]\nregion = us-east-1\n[profile other]\nregion = eu-west-3\n",
    );
    let creds = d.file(
        "credentials",
        "[default]\naws_access_key_id = wrong\naws_secret_access_key = wrong\n\
         [backup] # the profile ferry is told to use\naws_access_key_id = minioadmin\n\
         aws_secret_access_key = minioadmin\n",
    );
    let mut env = keyless(&endpoint, &config, &creds);
    env.push(("AWS_PROFILE", "backup"));
    let key = format!("{bucket}/hostname");
    succeeds(&ferry_env(&["cp", "/etc/hostname", &key], &env, None));
    let out = ferry_env(&["cp", &key, "-"], &env, None);
    assert_eq!(out.stdout, std::fs::read("/etc/hostname").unwrap());
    // The flag overrides AWS_PROFILE; the default profile's keys are wrong, and refused.
    let out = ferry_env(&["cp", "--s3-profile", "default", &key, "-"], &env, None);
    fails_with(&out, "403 Forbidden");
    // A profile named but missing: one line naming the files looked in.
    let out = ferry_env(&["cp", "--s3-profile", "nobody", &key, "-"], &env, None);
    fails_with(&out, "AWS profile 'nobody' not found");
    assert!(String::from_utf8_lossy(&out.stderr).contains(&creds));
}

#[test]
fn a_role_is_assumed_over_its_source_profile() {
    let Some((endpoint, bucket)) = minio_bucket() else {
        return;
    };
    let d = Dir::new();
    let config = d.file(
        "config",
        "[profile ops]\nrole_arn = arn:aws:iam::000000000000:role/backup\nsource_profile = base\n",
    );
    let creds = d.file(
        "credentials",
        "[base]\naws_access_key_id = minioadmin\naws_secret_access_key = minioadmin\n",
    );
    let mut env = keyless(&endpoint, &config, &creds);
    env.extend([
        ("AWS_PROFILE", "ops"),
        ("AWS_ENDPOINT_URL_STS", endpoint.as_str()),
    ]);
    let key = format!("{bucket}/role");
    succeeds(&ferry_env(&["cp", "/etc/hostname", &key], &env, None));
    // Without the source's keys the role cannot be assumed: said in one line.
    let creds = d.file(
        "credentials",
        "[base]\naws_access_key_id = x\naws_secret_access_key = y\n",
    );
    let mut env = keyless(&endpoint, &config, &creds);
    env.extend([
        ("AWS_PROFILE", "ops"),
        ("AWS_ENDPOINT_URL_STS", endpoint.as_str()),
    ]);
    fails_with(&ferry_env(&["cp", &key, "-"], &env, None), "assume role");
}

#[test]
fn a_credential_process_is_asked_again_before_its_credentials_expire_mid_transfer() {
    let Some((endpoint, bucket)) = minio_bucket() else {
        return;
    };
    let Some(toxi) = ferry_testkit::toxiproxy::Toxiproxy::from_env() else {
        return;
    };
    let d = Dir::new();
    let calls = d.0.join("calls");
    // Each call assumes a new role session at MinIO's STS and says it expires 5 min 2 s from
    // now: ferry must ask again 2 s in (the AWS SDKs' 5-minute margin), while it uploads.
    let script = d.file(
        "creds.sh",
        &format!(
            r#"#!/bin/sh
set -e
echo call >> {calls}
x=$(curl -sf --aws-sigv4 aws:amz:us-east-1:sts --user minioadmin:minioadmin \
  -d 'Action=AssumeRole&Version=2011-06-15&DurationSeconds=900' {endpoint})
tag() {{ printf '%s' "$x" | sed -n "s:.*<$1>\([^<]*\)</$1>.*:\1:p"; }}
printf '{{"Version":1,"AccessKeyId":"%s","SecretAccessKey":"%s","SessionToken":"%s","Expiration":"%s"}}\n' \
  "$(tag AccessKeyId)" "$(tag SecretAccessKey)" "$(tag SessionToken)" "$(date -u -d '+302 seconds' +%Y-%m-%dT%H:%M:%SZ)"
"#,
            calls = calls.display()
        ),
    );
    let config = d.file(
        "config",
        &format!("[default]\ncredential_process = sh {script}\n"),
    );
    let creds = d.0.join("none").display().to_string();
    // About 10 s of upload: 24 MiB at 2.5 MB/s.
    let proxy = toxi.proxy(endpoint.trim_start_matches("http://"));
    proxy.toxic(
        "bandwidth",
        "upstream",
        1.0,
        serde_json::json!({"rate": 2500}),
    );
    let slow = proxy.endpoint();
    let env = keyless(&slow, &config, &creds);
    let src = d.0.join("data");
    ferry_testkit::random_file(&src, 24 << 20, 7);
    let key = format!("{bucket}/data");
    succeeds(&ferry_env(
        &["cp", &src.display().to_string(), &key],
        &env,
        None,
    ));
    let asked = std::fs::read_to_string(&calls).unwrap().lines().count();
    assert!(
        asked >= 2,
        "credential_process ran {asked} time(s) during an 8 s upload"
    );
    drop(proxy);
    let back = d.0.join("back");
    let env = keyless(&endpoint, &config, &creds);
    succeeds(&ferry_env(
        &["cp", &key, &back.display().to_string()],
        &env,
        None,
    ));
    assert!(ferry_testkit::same_file(&src, &back));

    // A process that fails: its first error line, never its output.
    let config = d.file(
        "config",
        "[default]\ncredential_process = sh -c 'echo SECRET; echo denied by policy >&2; exit 3'\n",
    );
    let env = keyless(&endpoint, &config, &creds);
    let out = ferry_env(&["cp", &key, "-"], &env, None);
    fails_with(&out, "denied by policy");
    assert!(!String::from_utf8_lossy(&out.stderr).contains("SECRET"));
}

/// amazon-ec2-metadata-mock on a free port, killed when dropped.
struct Imds(Child, String);

impl Imds {
    fn start(bin: &Path, dir: &Dir, creds: (String, String, String)) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let until = "2099-01-01T00:00:00Z";
        let cfg = serde_json::json!({
            "imdsv2": true,
            "server": {"hostname": "127.0.0.1", "port": port.to_string()},
            "metadata": {"values": {
                "iam-security-credentials-role": "ferry-backup",
                "iam-security-credentials": {
                    "Code": "Success", "LastUpdated": "2026-01-01T00:00:00Z", "Type": "AWS-HMAC",
                    "AccessKeyId": creds.0, "SecretAccessKey": creds.1, "Token": creds.2,
                    "Expiration": until
                }
            }}
        });
        let path = dir.file("imds.json", &cfg.to_string());
        let mut child = Command::new(bin)
            .args(["-c", &path])
            .current_dir(&dir.0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start ec2-metadata-mock");
        let url = format!("http://127.0.0.1:{port}");
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Self(child, url);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("ec2-metadata-mock did not listen on {url}");
    }
}

impl Drop for Imds {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn instance_credentials_come_from_imdsv2_and_their_absence_is_said_in_one_line() {
    let Some((endpoint, bucket)) = minio_bucket() else {
        return;
    };
    let Some(bin) = ferry_testkit::tool("ec2-metadata-mock") else {
        return;
    };
    let d = Dir::new();
    let none = d.0.join("none").display().to_string();
    let imds = Imds::start(&bin, &d, sts_credentials(&endpoint));
    let mut env = keyless(&endpoint, &none, &none);
    env.retain(|(k, _)| *k != "AWS_EC2_METADATA_SERVICE_ENDPOINT");
    env.push(("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.1.as_str()));
    let key = format!("{bucket}/imds");
    succeeds(&ferry_env(&["cp", "/etc/hostname", &key], &env, None));
    let out = ferry_env(&["cp", &key, "-"], &env, None);
    assert_eq!(out.stdout, std::fs::read("/etc/hostname").unwrap());
    drop(imds);

    // Nothing anywhere: what was looked for, in one line.
    let env = keyless(&endpoint, &none, &none);
    let out = ferry_env(&["--retries", "1", "cp", &key, "-"], &env, None);
    fails_with(&out, "no S3 credentials");
    assert!(String::from_utf8_lossy(&out.stderr).contains("instance metadata"));
}

#[test]
fn gcs_reads_a_service_account_file() {
    let Some(url) = ferry_testkit::require("FERRY_TEST_GCS_URL") else {
        return;
    };
    let d = Dir::new();
    // The emulator takes no token: object_store's fields for emulators say so, and where.
    let sa = serde_json::json!({
        "type": "service_account", "project_id": "ferry-test", "private_key_id": "",
        "private_key": "", "client_email": "", "gcs_base_url": url, "disable_oauth": true
    });
    let path = d.file("sa.json", &sa.to_string());
    let env = [
        ("STORAGE_EMULATOR_HOST", ""),
        ("GOOGLE_APPLICATION_CREDENTIALS", path.as_str()),
        ("GOOGLE_CLOUD_PROJECT", ""),
    ];
    let bucket = format!("gs://{}", ferry_testkit::unique("ferry-sa"));
    succeeds(&ferry_env(&["mkdir", &bucket], &env, None));
    let key = format!("{bucket}/hostname");
    succeeds(&ferry_env(&["cp", "/etc/hostname", &key], &env, None));
    let out = ferry_env(&["cp", &key, "-"], &env, None);
    assert_eq!(out.stdout, std::fs::read("/etc/hostname").unwrap());
    // A file that is not one: said in one line.
    let bad = d.file("bad.json", "{ not json");
    let env = [
        ("STORAGE_EMULATOR_HOST", ""),
        ("GOOGLE_APPLICATION_CREDENTIALS", bad.as_str()),
    ];
    fails_with(
        &ferry_env(&["cp", &key, "-"], &env, None),
        "not a Google credentials file",
    );
}

#[test]
fn azure_takes_a_sas_token_from_the_environment_and_a_connection_string() {
    let Some(_) = ferry_testkit::require("AZURE_STORAGE_CONNECTION_STRING") else {
        return;
    };
    let endpoint = "http://127.0.0.1:10000/devstoreaccount1";
    let sas = common::azurite_sas("rwdlac");
    let env = [
        ("AZURE_STORAGE_CONNECTION_STRING", ""),
        ("AZURE_STORAGE_ACCOUNT", "devstoreaccount1"),
        ("AZURE_STORAGE_ENDPOINT", endpoint),
        ("AZURE_STORAGE_KEY", ""),
        ("AZURE_STORAGE_SAS_TOKEN", sas.as_str()),
    ];
    let container = format!("az://{}", ferry_testkit::unique("ferry-sas"));
    succeeds(&ferry_env(&["mkdir", &container], &env, None));
    let d = Dir::new();
    let src = d.0.join("data");
    ferry_testkit::random_file(&src, 12 << 20, 5);
    let key = format!("{container}/data");
    succeeds(&ferry_env(
        &["cp", &src.display().to_string(), &key],
        &env,
        None,
    ));
    // A connection string with a read-only SAS (no key): reads, and is refused a write.
    let cs = format!(
        "BlobEndpoint={endpoint};SharedAccessSignature={}",
        common::azurite_sas("rl")
    );
    let ro = [
        ("AZURE_STORAGE_CONNECTION_STRING", cs.as_str()),
        ("AZURE_STORAGE_ACCOUNT", ""),
        ("AZURE_STORAGE_KEY", ""),
        ("AZURE_STORAGE_SAS_TOKEN", ""),
    ];
    let back = d.0.join("back");
    succeeds(&ferry_env(
        &["cp", &key, &back.display().to_string()],
        &ro,
        None,
    ));
    assert!(ferry_testkit::same_file(&src, &back));
    let out = ferry_env(
        &["cp", "/etc/hostname", &format!("{container}/no")],
        &ro,
        None,
    );
    fails_with(&out, "403");
    // The token never shows, even in the refusal.
    assert!(!String::from_utf8_lossy(&out.stderr).contains("sig="));
    // A SAS URL as an argument is readable by every local user: refused, token unrepeated.
    let url = format!(
        "https://devstoreaccount1.blob.core.windows.net/c/x?{}",
        common::azurite_sas("r")
    );
    let out = ferry_env(&["cp", &url, "-"], &[], None);
    fails_with(&out, "AZURE_STORAGE_SAS_TOKEN");
    assert!(!String::from_utf8_lossy(&out.stderr).contains("sig="));
}

/// A service account's token never goes over plain http: whoever listens at an emulator's
/// address (`STORAGE_EMULATOR_HOST`) gets requests without one. (object_store signs its own
/// JWT from the account's key: no network is needed to make one.)
#[test]
fn no_token_goes_to_a_plain_http_endpoint() {
    use std::io::{Read, Write};
    let d = Dir::new();
    let key = d.0.join("key.pem");
    let made = Command::new("openssl")
        .args([
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-out",
        ])
        .arg(&key)
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(made.success(), "openssl genpkey");
    let sa = serde_json::json!({
        "type": "service_account", "project_id": "ferry-test", "private_key_id": "k1",
        "private_key": std::fs::read_to_string(&key).unwrap(),
        "client_email": "ferry@ferry-test.iam.gserviceaccount.com",
        "token_uri": "https://oauth2.googleapis.com/token"
    });
    let path = d.file("sa.json", &sa.to_string());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let heads = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    {
        let heads = heads.clone();
        std::thread::spawn(move || {
            for mut c in listener.incoming().flatten() {
                let mut head = Vec::new();
                let mut b = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && c.read(&mut b).is_ok_and(|n| n == 1) {
                    head.push(b[0]);
                }
                heads
                    .lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&head).to_lowercase());
                let _ = c.write_all(
                    b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                );
            }
        });
    }
    let host = format!("127.0.0.1:{port}");
    let env = [
        ("STORAGE_EMULATOR_HOST", host.as_str()),
        ("GOOGLE_APPLICATION_CREDENTIALS", path.as_str()),
        ("GOOGLE_CLOUD_PROJECT", ""),
    ];
    let out = ferry_env(&["cp", "gs://bucket/key", "-"], &env, None);
    assert!(!out.status.success(), "a 404 store gave an object");
    let heads = heads.lock().unwrap().clone();
    assert!(!heads.is_empty(), "no request reached the endpoint");
    for h in &heads {
        assert!(
            !h.contains("\r\nauthorization:"),
            "a token went over plain http: {h}"
        );
    }
}
