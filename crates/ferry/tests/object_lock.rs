//! Immutable backups on MinIO with S3 Object Lock: `init --lock-retention` makes the bucket
//! with Object Lock and a default retention, so every pack, index and snapshot written is
//! locked; `forget` keeps a locked snapshot and says until when; `prune` keeps a locked pack it
//! would delete and says why; a locked version survives a delete by its version id; the
//! repository stays whole. Bad lock settings are refused in one line.
//!
//! Azure version-level immutability against Azurite, which takes the policy headers but
//! neither keeps nor enforces them (Azure/Azurite#2648): what can be checked is what ferry
//! asks of the service, seen on the wire, and that a container whose lock record was
//! tampered with stops every write.

mod common;

use std::process::{Command, Output};

use common::{fails_with, ferry_env, s, temp_dir};

/// SHA-256 of nothing: curl signs a body only when told its hash.
const EMPTY: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

fn succeeds(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stderr).to_string()
}

/// `curl -X METHOD` signed for MinIO's root user: (status line and headers, body).
fn minio(method: &str, url: &str) -> (String, String) {
    // -I for HEAD: with -X HEAD curl waits for a body that never comes.
    let how: &[&str] = match method {
        "HEAD" => &["-I"],
        m => &["-i", "-X", m],
    };
    let out = Command::new("curl")
        .arg("-s")
        .args(how)
        .args(["--aws-sigv4", "aws:amz:us-east-1:s3"])
        .args([
            "--user",
            "minioadmin:minioadmin",
            "-H",
            &format!("x-amz-content-sha256: {EMPTY}"),
        ])
        .arg(url)
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (head.to_string(), body.to_string())
}

fn header(head: &str, name: &str) -> Option<String> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
    })
}

#[test]
fn locked_packs_and_snapshots_survive_forget_prune_and_a_delete() {
    let Some(endpoint) = ferry_testkit::require("AWS_ENDPOINT_URL") else {
        return;
    };
    let dir = temp_dir();
    let bucket = ferry_testkit::unique("ferry-lock");
    let repo = format!("s3://{bucket}/repo");
    let cache = dir.join("cache");
    let env = [("FERRY_PASSWORD", "pw"), ("FERRY_CACHE_DIR", s(&cache))];
    let run = |args: &[&str]| {
        let mut all = vec!["--repo", repo.as_str()];
        all.extend_from_slice(args);
        ferry_env(&all, &env, None)
    };
    let said = succeeds(&run(&["init", "--lock-retention", "1d"]));
    assert!(said.contains("locked for 1 days (governance)"), "{said}");
    let (a, b) = (dir.join("a"), dir.join("b"));
    for (d, seed) in [(&a, 1), (&b, 2)] {
        std::fs::create_dir_all(d).unwrap();
        ferry_testkit::random_file(&d.join("f"), 3 << 20, seed);
        succeeds(&run(&["backup", s(d)]));
    }

    // Every pack is locked, in the mode asked for.
    let listed = ferry_env(&["ls", &format!("{repo}/data/")], &[], None);
    let packs: Vec<String> = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1).map(str::to_string))
        .collect();
    assert!(!packs.is_empty());
    let key_of = |url: &str| {
        url.trim_start_matches(&format!("s3://{bucket}/"))
            .to_string()
    };
    for p in &packs {
        let (head, _) = minio("HEAD", &format!("{endpoint}/{bucket}/{}", key_of(p)));
        assert_eq!(
            header(&head, "x-amz-object-lock-mode").as_deref(),
            Some("GOVERNANCE"),
            "{p}"
        );
    }

    // forget: the policy lets snapshot a go, Object Lock keeps it and says so.
    let out = run(&["forget", "--keep-last", "1", "--group-by", "host"]);
    let said = succeeds(&out);
    assert!(said.contains("Object Lock, governance until"), "{said}");
    let listed = String::from_utf8_lossy(&run(&["snapshots"]).stdout).to_string();
    assert!(listed.contains(s(&a)) && listed.contains(s(&b)), "{listed}");

    // prune: a pack no index names (as an interrupted backup leaves) would go; it is locked.
    let orphan = format!("{repo}/data/ff/{}", "f".repeat(64));
    succeeds(&ferry_env(&["cp", &packs[0], &orphan], &[], None));
    let said = succeeds(&run(&["prune"]));
    assert!(
        said.contains("1 packs") && said.contains("locked"),
        "{said}"
    );
    let (head, _) = minio("HEAD", &format!("{endpoint}/{bucket}/{}", key_of(&orphan)));
    assert!(
        head.starts_with("HTTP/1.1 200"),
        "the locked pack was deleted: {head}"
    );

    // A delete of the version itself, as ransomware holding the keys would try: refused,
    // and the version is still there.
    let first = format!("{endpoint}/{bucket}/{}", key_of(&packs[0]));
    let version = header(&minio("HEAD", &first).0, "x-amz-version-id").expect("a version id");
    let (head, body) = minio("DELETE", &format!("{first}?versionId={version}"));
    assert!(
        !head.starts_with("HTTP/1.1 204"),
        "a locked version was deleted: {head}"
    );
    // MinIO: 400 "Object is WORM protected"; AWS: 403 AccessDenied.
    assert!(
        body.contains("WORM") || body.contains("AccessDenied"),
        "{head}{body}"
    );
    let (head, _) = minio("HEAD", &format!("{first}?versionId={version}"));
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");

    // The repository is whole and restores.
    succeeds(&run(&["check", "--read-data"]));
    let target = dir.join("restored");
    succeeds(&run(&["restore", "latest", "--target", s(&target)]));
    assert!(ferry_testkit::same_file(
        &b.join("f"),
        &target.join(b.strip_prefix("/").unwrap()).join("f")
    ));
}

#[test]
fn lock_settings_that_cannot_hold_are_refused() {
    let Some(_) = ferry_testkit::require("AWS_ENDPOINT_URL") else {
        return;
    };
    let dir = temp_dir();
    let env = [("FERRY_PASSWORD", "pw"), ("FERRY_CACHE_DIR", s(&dir))];
    // Object Lock counts whole days.
    let repo = format!("s3://{}/r", ferry_testkit::unique("ferry-lock"));
    let out = ferry_env(
        &["--repo", &repo, "init", "--lock-retention", "36h"],
        &env,
        None,
    );
    fails_with(&out, "whole number of days");
    // A bucket made without Object Lock cannot be given it.
    let plain = ferry_testkit::unique("ferry-nolock");
    succeeds(&ferry_env(&["mkdir", &format!("s3://{plain}")], &[], None));
    let out = ferry_env(
        &[
            "--repo",
            &format!("s3://{plain}/r"),
            "init",
            "--lock-retention",
            "1d",
        ],
        &env,
        None,
    );
    fails_with(&out, "exists without Object Lock");
    // A local repository has none.
    let local = dir.join("repo");
    let out = ferry_env(
        &["--repo", s(&local), "init", "--lock-retention", "1d"],
        &env,
        None,
    );
    fails_with(&out, "no Object Lock");
}

/// A TCP relay to `to` that keeps every byte the client sent, to read the requests back.
struct Relay {
    port: u16,
    sent: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
}

impl Relay {
    fn to(to: std::net::SocketAddr) -> Self {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let sent = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = sent.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let server = std::net::TcpStream::connect(to).unwrap();
                let (mut c2, mut s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                std::thread::spawn(move || std::io::copy(&mut s2, &mut c2));
                let log = log.clone();
                let (mut client, mut server) = (client, server);
                std::thread::spawn(move || {
                    let mut buf = vec![0; 64 << 10];
                    while let Ok(n @ 1..) = client.read(&mut buf) {
                        log.lock().unwrap().extend_from_slice(&buf[..n]);
                        if server.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = server.shutdown(std::net::Shutdown::Write);
                });
            }
        });
        Self { port, sent }
    }

    /// The heads of the requests sent since the last call: request line, then headers.
    fn take_heads(&self) -> Vec<String> {
        let bytes = std::mem::take(&mut *self.sent.lock().unwrap());
        let text = String::from_utf8_lossy(&bytes).to_string();
        let mut heads = Vec::new();
        for (i, _) in text.match_indices("HTTP/1.1\r\n") {
            let start = text[..i].rfind("\r\n").map_or(0, |p| p + 2);
            let start = ["PUT ", "GET ", "HEAD ", "DELETE ", "POST "]
                .iter()
                .filter_map(|m| text[start..i].find(m).map(|p| start + p))
                .min()
                .unwrap_or(start);
            let end = text[i..].find("\r\n\r\n").map_or(text.len(), |p| i + p);
            heads.push(text[start..end].to_string());
        }
        heads
    }
}

/// `curl` to Azurite's container `c` with an account SAS: (status, response head).
fn azurite(endpoint: &str, method: &str, c: &str, query: &str, headers: &[&str]) -> (u16, String) {
    let sas = common::azurite_sas("rwdlac");
    let mut cmd = Command::new("curl");
    cmd.args(["-s", "-i", "-X", method, "-H", "x-ms-version: 2019-12-12"]);
    if method == "PUT" {
        cmd.args(["-H", "Content-Length: 0"]);
    }
    for h in headers {
        cmd.args(["-H", h]);
    }
    let out = cmd
        .arg(format!("{endpoint}/{c}?{query}&{sas}"))
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let code = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, text)
}

/// Blob commits (a whole blob, or a block list) among request heads.
fn commits(heads: &[String]) -> Vec<&String> {
    heads
        .iter()
        .filter(|h| h.starts_with("PUT ") && !h.contains("restype=container"))
        .filter(|h| !h.lines().next().unwrap().contains("comp=block&"))
        .collect()
}

#[test]
fn azure_blobs_carry_the_retention_the_container_records() {
    let Some(cs) = ferry_testkit::require("AZURE_STORAGE_CONNECTION_STRING") else {
        return;
    };
    let endpoint = cs
        .split(';')
        .find_map(|kv| kv.strip_prefix("BlobEndpoint="))
        .expect("BlobEndpoint in the connection string");
    let port: u16 = endpoint
        .trim_start_matches("http://127.0.0.1:")
        .split('/')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("Azurite on http://127.0.0.1:PORT/");
    let relay = Relay::to(std::net::SocketAddr::from(([127, 0, 0, 1], port)));
    let relayed = cs.replace(&format!(":{port}/"), &format!(":{}/", relay.port));
    let dir = temp_dir();
    let container = ferry_testkit::unique("ferry-lock");
    let repo = format!("az://{container}/repo");
    let env = [
        ("FERRY_PASSWORD", "pw"),
        ("AZURE_STORAGE_CONNECTION_STRING", relayed.as_str()),
    ];
    let run = |args: &[&str]| {
        let mut all = vec!["--repo", repo.as_str()];
        all.extend_from_slice(args);
        ferry_env(&all, &env, None)
    };
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    ferry_testkit::random_file(&src.join("big"), 12 << 20, 7);
    std::fs::write(src.join("small"), b"x").unwrap();

    // The container exists, with its owner's metadata, which init keeps.
    let container_q = "restype=container";
    let made = azurite(
        endpoint,
        "PUT",
        &container,
        container_q,
        &["x-ms-meta-team: dba"],
    );
    assert_eq!(made.0, 201, "{made:?}");
    let said = succeeds(&run(&[
        "init",
        "--lock-retention",
        "30d",
        "--lock-mode",
        "compliance",
    ]));
    assert!(said.contains("locked for 30 days (compliance)"), "{said}");
    let (_, props) = azurite(endpoint, "GET", &container, container_q, &[]);
    assert_eq!(
        header(&props, "x-ms-meta-team").as_deref(),
        Some("dba"),
        "{props}"
    );
    let init = relay.take_heads();
    assert!(
        init.iter().any(|h| h.contains("comp=metadata")
            && h.to_ascii_lowercase()
                .contains("x-ms-meta-ferrylockdays: 30")),
        "the container does not record the lock: {init:#?}"
    );

    // A later process reads the lock from the container: every blob it commits carries it.
    succeeds(&run(&["backup", s(&src)]));
    let heads = [init, relay.take_heads()].concat();
    let written = commits(&heads);
    assert!(written.len() >= 5, "{heads:#?}");
    let now = std::time::SystemTime::now();
    let month = std::time::Duration::from_secs(30 * 86_400);
    for h in &written {
        let until = header(h, "x-ms-immutability-policy-until-date")
            .unwrap_or_else(|| panic!("a blob committed without the lock: {h}"));
        let until = httpdate::parse_http_date(&until).unwrap();
        // Written in the last minutes: held until that long before 30 days from now.
        let minutes = std::time::Duration::from_secs(600);
        assert!(
            until > now + month - minutes && until <= now + month + minutes / 100,
            "not 30 days from now: {h}"
        );
        assert_eq!(
            header(h, "x-ms-immutability-policy-mode").as_deref(),
            Some("Locked"),
            "{h}"
        );
    }
    // A large file went up in blocks, committed by a block list that carries the lock too.
    assert!(
        written.iter().any(|h| h.contains("comp=blocklist")),
        "{written:#?}"
    );

    // Someone with write access to the container garbles its lock record: writes stop, in
    // one line, rather than go on unlocked.
    let garbled = [
        "x-ms-meta-ferrylockdays: forever",
        "x-ms-meta-ferrylockmode: Locked",
    ];
    let set = azurite(
        endpoint,
        "PUT",
        &container,
        "restype=container&comp=metadata",
        &garbled,
    );
    assert_eq!(set.0, 200, "{set:?}");
    std::fs::write(src.join("small"), b"changed").unwrap();
    let out = run(&["backup", s(&src)]);
    fails_with(&out, "unreadable lock days");
    let listed = String::from_utf8_lossy(&run(&["snapshots", "--json"]).stdout).to_string();
    assert_eq!(listed.matches("\"id\"").count(), 1, "{listed}");

    // A container without a lock record gets no policy on its blobs.
    let plain = format!("az://{}/repo", ferry_testkit::unique("ferry-nolock"));
    relay.take_heads();
    succeeds(&ferry_env(&["--repo", &plain, "init"], &env, None));
    succeeds(&ferry_env(
        &["--repo", &plain, "backup", s(&src)],
        &env,
        None,
    ));
    let heads = relay.take_heads();
    let written = commits(&heads);
    assert!(written.len() >= 5, "{heads:#?}");
    assert!(
        written.iter().all(|h| !h.contains("immutability")),
        "{written:#?}"
    );
}
