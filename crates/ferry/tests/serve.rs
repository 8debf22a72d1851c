//! `ferry serve` against real clients and an attacker's requests: restic 0.19.1 through its
//! REST backend, tenants confined to their prefixes and roles, bad requests refused with
//! nothing changed.

mod common;
mod repokit;
mod servekit;
mod walkit;

use std::path::Path;
use std::process::{Command, Output};

use common::{s, temp_dir};
use servekit::Served;

const LIMITS: &str = "max_body = \"1MiB\"\nbody_memory = \"8MiB\"";

fn restic(served: &Served, tenant: &str, repo: &str, args: &[&str]) -> Option<Output> {
    let bin = ferry_testkit::tool("restic")?;
    let cache = served.dir.join("restic-cache");
    Some(
        Command::new(bin)
            .args(["--cacert", s(&served.ca)])
            .args(args)
            .env("RESTIC_REPOSITORY", served.restic_url(tenant, repo))
            .env("RESTIC_PASSWORD", "pw")
            .env("RESTIC_CACHE_DIR", &cache)
            .output()
            .expect("run restic"),
    )
}

fn assert_ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A small tree with a file larger than restic's 512 KiB minimum pack fill.
fn tree(d: &Path) {
    std::fs::create_dir_all(d.join("sub/deeper")).unwrap();
    ferry_testkit::random_file(&d.join("big"), 3 << 20, 7);
    std::fs::write(d.join("sub/a.txt"), "alpha\n").unwrap();
    std::fs::write(d.join("sub/deeper/b.txt"), "beta\n").unwrap();
}

/// A tree, and `tenant`'s restic repository `repo` initialised with one backup of it;
/// `None` (a loud skip) without restic outside CI.
fn restic_backed_up(served: &Served, tenant: &str) -> Option<std::path::PathBuf> {
    let src = temp_dir().join("src");
    tree(&src);
    assert_ok(&restic(served, tenant, "repo", &["init"])?, "restic init");
    assert_ok(
        &restic(served, tenant, "repo", &["backup", s(&src)])?,
        "backup",
    );
    Some(src)
}

#[test]
fn restic_init_backup_check_restore_forget_prune_through_ferry_serve() {
    let served = Served::start("");
    let Some(src) = restic_backed_up(&served, "alice") else {
        return;
    };
    std::fs::write(src.join("sub/a.txt"), "alpha, changed\n").unwrap();
    assert_ok(
        &restic(&served, "alice", "repo", &["backup", s(&src)]).unwrap(),
        "backup 2",
    );
    assert_ok(
        &restic(&served, "alice", "repo", &["check", "--read-data"]).unwrap(),
        "check",
    );
    let to = temp_dir();
    assert_ok(
        &restic(
            &served,
            "alice",
            "repo",
            &["restore", "latest", "--target", s(&to)],
        )
        .unwrap(),
        "restore",
    );
    let back = to.join(src.strip_prefix("/").unwrap());
    assert!(ferry_testkit::same_file(
        &src.join("big"),
        &back.join("big")
    ));
    assert_eq!(
        std::fs::read(back.join("sub/a.txt")).unwrap(),
        b"alpha, changed\n"
    );
    assert_eq!(
        std::fs::read(back.join("sub/deeper/b.txt")).unwrap(),
        b"beta\n"
    );
    // Everything landed under alice's prefix, data fanned out as restic lays it out.
    let files = served.snapshot();
    assert!(files
        .iter()
        .all(|(p, _)| p.starts_with(served.store.join("alice/repo"))));
    assert!(files
        .iter()
        .any(|(p, _)| p.starts_with(served.store.join("alice/repo/data"))));
    // An admin may forget and prune; the server writes an audit line per delete.
    assert_ok(
        &restic(
            &served,
            "alice",
            "repo",
            &["forget", "--keep-last", "1", "--prune"],
        )
        .unwrap(),
        "forget --prune",
    );
    assert!(
        served.log().contains("\"audit\":\"delete\""),
        "{}",
        served.log()
    );
    assert_ok(
        &restic(&served, "alice", "repo", &["check"]).unwrap(),
        "check after prune",
    );
}

#[test]
fn an_append_only_tenant_backs_up_but_cannot_delete_or_overwrite() {
    let served = Served::start("");
    let Some(src) = restic_backed_up(&served, "bob") else {
        return;
    };
    assert_ok(
        &restic(&served, "bob", "repo", &["backup", s(&src)]).unwrap(),
        "backup 2",
    );
    let before = served.snapshot();
    // restic's forget deletes snapshot files: refused, nothing goes.
    let out = restic(&served, "bob", "repo", &["forget", "--keep-last", "1"]).unwrap();
    assert!(
        !out.status.success(),
        "forget succeeded for an append-only tenant"
    );
    // Raw: overwrite an existing snapshot, delete a pack.
    let snap = before
        .iter()
        .find(|(p, _)| p.parent().unwrap().ends_with("snapshots"))
        .expect("a snapshot file");
    let name = snap.0.file_name().unwrap().to_str().unwrap();
    let (code, _) = served.request(
        "PUT",
        &format!("/v1/bob/repo/snapshots/{name}"),
        Some("bob"),
        b"evil",
    );
    assert_eq!(code, 403);
    let pack = before
        .iter()
        .find(|(p, _)| p.to_str().unwrap().contains("/data/"))
        .expect("a pack");
    let rel = pack.0.strip_prefix(served.store.join("bob")).unwrap();
    let (code, _) = served.request("DELETE", &format!("/v1/bob/{}", s(rel)), Some("bob"), b"");
    assert_eq!(code, 403);
    // Only restic's own lock files came and went: every other byte is as it was.
    let unlocked = |v: Vec<(std::path::PathBuf, Vec<u8>)>| {
        v.into_iter()
            .filter(|(p, _)| !p.to_str().unwrap().contains("/locks/"))
            .collect::<Vec<_>>()
    };
    assert_eq!(unlocked(served.snapshot()), unlocked(before));
    assert_ok(
        &restic(&served, "bob", "repo", &["check", "--read-data"]).unwrap(),
        "check",
    );
}

#[test]
fn tokens_and_prefixes_are_checked() {
    let served = Served::start(LIMITS);
    let (code, _) = served.request("PUT", "/v1/alice/x", None, b"data");
    assert_eq!(code, 401, "no credentials");
    let head = "PUT /v1/alice/x HTTP/1.1\nHost: h\nAuthorization: Bearer not-a-token\nContent-Length: 4\nConnection: close\n\n";
    assert_eq!(served.raw(head, b"data", false).0, 401, "a wrong token");
    // Basic auth: alice's name with bob's token.
    use base64::Engine;
    let basic = base64::engine::general_purpose::STANDARD
        .encode(format!("alice:{}", served.tenant("bob").token));
    let head = format!("PUT /v1/alice/x HTTP/1.1\nHost: h\nAuthorization: Basic {basic}\nContent-Length: 4\nConnection: close\n\n");
    assert_eq!(
        served.raw(&head, b"data", false).0,
        401,
        "another tenant's token"
    );
    // bob's token on alice's prefix, by either protocol.
    assert_eq!(
        served.request("PUT", "/v1/alice/x", Some("bob"), b"data").0,
        403
    );
    assert_eq!(
        served
            .request("GET", "/alice/repo/config", Some("bob"), b"")
            .0,
        403
    );
    // carol reads only.
    assert_eq!(
        served
            .request("PUT", "/v1/carol/x", Some("carol"), b"data")
            .0,
        403
    );
    assert!(
        served.snapshot().is_empty(),
        "a refused request stored something"
    );
    // The owner may.
    assert_eq!(
        served
            .request("PUT", "/v1/alice/x", Some("alice"), b"data")
            .0,
        200
    );
    let (code, body) = served.request("GET", "/v1/alice/x", Some("alice"), b"");
    assert_eq!((code, body.as_slice()), (200, &b"data"[..]));
    assert_eq!(
        served.request("GET", "/v1/alice/x", Some("bob"), b"").0,
        403
    );
    let (code, list) = served.request("GET", "/v1/alice/?list", Some("alice"), b"");
    assert_eq!(code, 200);
    assert_eq!(String::from_utf8_lossy(&list), r#"[{"key":"x","size":4}]"#);
    // No token ever reaches the log.
    let log = served.log();
    for t in &served.tenants {
        assert!(!log.contains(&t.token), "a token in the log");
    }
}

#[test]
fn bad_requests_are_refused_and_change_nothing() {
    let served = Served::start(LIMITS);
    assert_eq!(
        served
            .request("PUT", "/v1/alice/keep", Some("alice"), b"kept")
            .0,
        200
    );
    let before = served.snapshot();
    for path in [
        "/v1/alice/../bob/x",
        "/v1/alice/%2e%2e/bob/x",
        "/v1/alice/a%2Fb",
        "/v1/alice/a%00b",
        "/v1/alice//x",
    ] {
        let (code, _) = served.request("PUT", path, Some("alice"), b"data");
        assert!((400..500).contains(&code), "{path}: {code}");
    }
    // A body shorter than its Content-Length, the connection then closed.
    let auth = format!("Authorization: Bearer {}\n", served.tenant("alice").token);
    let head = format!("PUT /v1/alice/cut HTTP/1.1\nHost: h\n{auth}Content-Length: 100000\n\n");
    let (code, _) = served.raw(&head, &[7u8; 1000], true);
    assert!(
        code == 0 || (400..500).contains(&code),
        "a truncated body: {code}"
    );
    // No Content-Length; a body over max_body; headers past 64 KiB.
    let head = format!("PUT /v1/alice/nolen HTTP/1.1\nHost: h\n{auth}Transfer-Encoding: chunked\nConnection: close\n\n");
    assert_eq!(served.raw(&head, b"4\r\ndata\r\n0\r\n\r\n", false).0, 411);
    let head = format!(
        "PUT /v1/alice/big HTTP/1.1\nHost: h\n{auth}Content-Length: 2000000\nConnection: close\n\n"
    );
    assert_eq!(served.raw(&head, b"", false).0, 413);
    let huge = format!(
        "GET /v1/alice/keep HTTP/1.1\nHost: h\n{auth}X-Pad: {}\nConnection: close\n\n",
        "a".repeat(100_000)
    );
    assert_eq!(served.raw(&huge, b"", false).0, 431);
    // Past the quota: refused before the body is read.
    assert_eq!(
        served
            .request("PUT", "/v1/dave/a", Some("dave"), &[1u8; 40 << 10])
            .0,
        200
    );
    let before_dave = served.snapshot();
    assert_eq!(
        served
            .request("PUT", "/v1/dave/b", Some("dave"), &[2u8; 40 << 10])
            .0,
        507
    );
    assert_eq!(served.snapshot(), before_dave);
    // Freed by a delete, the room is there again.
    assert_eq!(
        served.request("DELETE", "/v1/dave/a", Some("dave"), b"").0,
        200
    );
    assert_eq!(
        served
            .request("PUT", "/v1/dave/b", Some("dave"), &[2u8; 40 << 10])
            .0,
        200
    );
    // Nothing of alice's changed, and no temp file was left behind.
    let alice = |v: Vec<(std::path::PathBuf, Vec<u8>)>| {
        v.into_iter()
            .filter(|(p, _)| p.starts_with(served.store.join("alice")))
            .collect::<Vec<_>>()
    };
    assert_eq!(alice(served.snapshot()), alice(before));
    // Ranges, and a range past the end.
    let head = format!(
        "GET /v1/alice/keep HTTP/1.1\nHost: h\n{auth}Range: bytes=1-2\nConnection: close\n\n"
    );
    assert_eq!(served.raw(&head, b"", false), (206, b"ep".to_vec()));
    let head = format!(
        "GET /v1/alice/keep HTTP/1.1\nHost: h\n{auth}Range: bytes=9-\nConnection: close\n\n"
    );
    assert_eq!(served.raw(&head, b"", false).0, 416);
    assert_eq!(
        served
            .request("GET", "/v1/alice/missing", Some("alice"), b"")
            .0,
        404
    );
}

#[test]
fn health_and_metrics_are_served() {
    let served = Served::start(LIMITS);
    assert_eq!(
        served.request("GET", "/healthz", None, b""),
        (200, b"ok\n".to_vec())
    );
    assert_eq!(
        served
            .request(
                "PUT",
                "/v1/alice/pg/wal/000000010000000000000001",
                Some("alice"),
                b"wal"
            )
            .0,
        200
    );
    assert_eq!(
        served.request("PUT", "/v1/alice/y", Some("bob"), b"x").0,
        403
    );
    let (code, body) = served.request("GET", "/metrics", None, b"");
    assert_eq!(code, 200);
    let text = String::from_utf8_lossy(&body);
    assert!(
        text.contains(
            r#"ferry_serve_requests_total{tenant="alice",class="urgent",status="200"} 1"#
        ),
        "{text}"
    );
    assert!(
        text.contains(r#"ferry_serve_bytes_in_total{tenant="alice",class="urgent"} 3"#),
        "{text}"
    );
    assert!(
        text.contains("ferry_serve_service_seconds_bucket"),
        "{text}"
    );
}

/// What a ferry client needs to reach `served` as `tenant`.
fn client_env(served: &Served, tenant: &str) -> Vec<(String, String)> {
    vec![
        (
            "FERRY_SERVE_TOKEN".into(),
            served.tenant(tenant).token.clone(),
        ),
        ("FERRY_CA_CERT".into(), s(&served.ca).into()),
    ]
}

fn ferry_as(served: &Served, tenant: &str, args: &[&str]) -> Output {
    let env = client_env(served, tenant);
    let mut all: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    all.push(("FERRY_PASSWORD", "pw"));
    common::ferry_env(args, &all, None)
}

#[test]
fn ferry_backs_up_restores_and_copies_through_ferry_serve() {
    let served = Served::start("");
    let src = temp_dir().join("src");
    tree(&src);
    let repo = format!("ferry+https://127.0.0.1:{}/alice/repo", served.port);
    for args in [
        vec!["--repo", &repo, "init"],
        vec!["--repo", &repo, "backup", s(&src)],
        vec!["--repo", &repo, "check", "--read-data"],
    ] {
        assert_ok(&ferry_as(&served, "alice", &args), &format!("{args:?}"));
    }
    let to = temp_dir();
    assert_ok(
        &ferry_as(
            &served,
            "alice",
            &["--repo", &repo, "restore", "latest", "--target", s(&to)],
        ),
        "restore",
    );
    let back = to.join(src.strip_prefix("/").unwrap());
    assert!(ferry_testkit::same_file(
        &src.join("big"),
        &back.join("big")
    ));
    assert_eq!(
        std::fs::read(back.join("sub/deeper/b.txt")).unwrap(),
        b"beta\n"
    );
    // cp both ways.
    let obj = format!("ferry+https://127.0.0.1:{}/alice/files/big", served.port);
    assert_ok(
        &ferry_as(&served, "alice", &["cp", s(&src.join("big")), &obj]),
        "cp up",
    );
    let got = temp_dir().join("big");
    assert_ok(
        &ferry_as(&served, "alice", &["cp", &obj, s(&got)]),
        "cp down",
    );
    assert!(ferry_testkit::same_file(&src.join("big"), &got));
    // An object larger than one request takes: sent in blocks, composed by the server.
    let huge = temp_dir().join("huge");
    ferry_testkit::random_file(&huge, 100 << 20, 11);
    let obj = format!("ferry+https://127.0.0.1:{}/alice/files/huge", served.port);
    assert_ok(
        &ferry_as(&served, "alice", &["cp", s(&huge), &obj]),
        "cp huge up",
    );
    let got = temp_dir().join("huge");
    assert_ok(
        &ferry_as(&served, "alice", &["cp", &obj, s(&got)]),
        "cp huge down",
    );
    assert!(ferry_testkit::same_file(&huge, &got));
    assert!(
        !served
            .snapshot()
            .iter()
            .any(|(p, _)| p.to_str().unwrap().contains(".ferry-uploads")),
        "blocks left behind after the composition"
    );
    // An append-only tenant cannot compose over what exists.
    let bobs = format!("ferry+https://127.0.0.1:{}/bob/huge", served.port);
    assert_ok(
        &ferry_as(&served, "bob", &["cp", s(&huge), &bobs]),
        "bob's first cp",
    );
    let out = ferry_as(&served, "bob", &["cp", s(&got), &bobs]);
    assert!(
        !out.status.success(),
        "an append-only tenant replaced an object"
    );
    // Another tenant's token on alice's repository: one line, nothing written.
    let before = served.snapshot();
    let out = ferry_as(&served, "bob", &["--repo", &repo, "backup", s(&src)]);
    common::fails_with(&out, "403");
    assert_eq!(served.snapshot(), before);
    // No token at all.
    let out = common::ferry_env(
        &["cp", s(&src.join("big")), &obj],
        &[("FERRY_CA_CERT", s(&served.ca))],
        None,
    );
    common::fails_with(&out, "FERRY_SERVE_TOKEN");
}

/// PostgreSQL archives through the server and a copy recovers from it: WAL keys are served
/// in the urgent class.
#[test]
fn wal_archive_and_recovery_through_ferry_serve() {
    let served = Served::start("");
    let url = format!("ferry+https://127.0.0.1:{}/alice/pg", served.port);
    let repo = walkit::Repo::Served {
        url,
        env: client_env(&served, "alice"),
    };
    let Some(rig) = walkit::Rig::new(&repo, true, &[]) else {
        return;
    };
    rig.load(8);
    let copy = rig.recovery_copy(&[]);
    rig.load(40);
    rig.pg.sql("insert into t values (-1, 'last row')");
    rig.settle();
    let n = rig.verify_archive();
    assert!(n >= 3, "only {n} segments archived");
    let expect = rig.pg.sql("select count(*), sum(i) from t");
    copy.start();
    copy.wait_recovery_done(walkit::T)
        .unwrap_or_else(|e| panic!("recovery: {e}\n{}", walkit::tail(&copy.log())));
    assert_eq!(copy.sql("select count(*), sum(i) from t"), expect);
    assert!(
        served.log().contains(r#""class":"urgent""#),
        "no WAL request in the urgent class"
    );
}

/// One slot for store work, and a client trickling a 64 KiB body at 8 KB/s through
/// Toxiproxy: the others' requests are all answered while it is still sending, since a body
/// is read before a slot is taken.
#[test]
fn a_slow_client_does_not_hold_up_the_others() {
    let Some(toxi) = ferry_testkit::toxiproxy::Toxiproxy::from_env() else {
        return;
    };
    let served = std::sync::Arc::new(Served::start("slots = 1"));
    let proxy = toxi.proxy(&format!("127.0.0.1:{}", served.port));
    proxy.toxic("bandwidth", "upstream", 1.0, serde_json::json!({"rate": 8}));
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let slow = {
        let (served, done, listen) = (served.clone(), done.clone(), proxy.listen.clone());
        std::thread::spawn(move || {
            let body = vec![5u8; 64 << 10];
            let head = served.head("PUT", "/v1/bob/slow", "bob", body.len());
            let got = served.raw_via(&listen, &head, &body, false);
            done.store(true, std::sync::atomic::Ordering::SeqCst);
            got
        })
    };
    // Let the slow request's head arrive; its body takes about 8 s more.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    for i in 0..10 {
        let path = format!("/v1/alice/fast-{i}");
        assert_eq!(served.request("PUT", &path, Some("alice"), b"quick").0, 200);
        assert_eq!(served.request("GET", &path, Some("alice"), b"").1, b"quick");
    }
    assert!(
        !done.load(std::sync::atomic::Ordering::SeqCst),
        "the fast requests were answered only after the slow upload ended: it held the only slot"
    );
    assert_eq!(slow.join().unwrap().0, 200, "the slow upload failed");
    assert_eq!(
        std::fs::read(served.store.join("bob/slow")).unwrap(),
        vec![5u8; 64 << 10]
    );
    // The access log puts the slow upload's time where it was: receiving its body, not
    // waiting for memory nor for a slot.
    let log = served.log();
    let line = log
        .lines()
        .find(|l| l.contains(r#""path":"/v1/bob/slow""#))
        .unwrap_or_else(|| panic!("no access-log line for the slow upload:\n{log}"));
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    let ms = |k: &str| v[k].as_f64().unwrap_or_else(|| panic!("no {k} in {line}"));
    assert!(ms("body_ms") > 4000.0, "{line}");
    assert!(ms("memory_ms") < 1000.0 && ms("wait_ms") < 1000.0, "{line}");
    assert!(ms("total_ms") >= ms("body_ms"), "{line}");
}

/// Eight clients writing; the server killed with SIGKILL among them, then started again:
/// every write it acknowledged reads back whole, and nothing half-written is listed.
#[test]
fn kill_9_under_load_loses_nothing_acknowledged() {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};
    let mut served = Served::start("");
    let acked = Arc::new(Mutex::new(HashMap::<String, Vec<u8>>::new()));
    let tried = Arc::new(Mutex::new(HashMap::<String, Vec<u8>>::new()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let port = served.port;
    let writers: Vec<_> = (0..8u64)
        .map(|w| {
            let (acked, tried, stop) = (acked.clone(), tried.clone(), stop.clone());
            let (ca, token) = (served.ca.clone(), served.tenant("alice").token.clone());
            std::thread::spawn(move || {
                for i in 0u64.. {
                    if stop.load(std::sync::atomic::Ordering::SeqCst) {
                        return;
                    }
                    let key = format!("kill/w{w}-{i}");
                    let body = ferry_testkit::random_bytes(
                        (64 << 10) + (i as usize % 4) * (200 << 10),
                        w * 1000 + i,
                    );
                    tried.lock().unwrap().insert(key.clone(), body.clone());
                    match servekit::put(port, &ca, &token, &format!("/v1/alice/{key}"), &body) {
                        Some(200) => {
                            acked.lock().unwrap().insert(key, body);
                        }
                        _ => return, // the server is gone
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    served.kill9_and_restart();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    for w in writers {
        w.join().unwrap();
    }
    let acked = acked.lock().unwrap();
    let tried = tried.lock().unwrap();
    assert!(
        acked.len() >= 8,
        "only {} writes acknowledged before the kill",
        acked.len()
    );
    eprintln!("{} writes acknowledged, {} tried", acked.len(), tried.len());
    for (key, body) in acked.iter() {
        let (code, got) = served.request("GET", &format!("/v1/alice/{key}"), Some("alice"), b"");
        assert_eq!(code, 200, "{key} acknowledged, then lost");
        assert!(got == *body, "{key} acknowledged, then changed");
    }
    let (code, list) = served.request("GET", "/v1/alice/kill/?list", Some("alice"), b"");
    assert_eq!(code, 200);
    let listed: Vec<serde_json::Value> = serde_json::from_slice(&list).unwrap();
    for o in listed {
        let key = o["key"].as_str().unwrap();
        let want = tried
            .get(key)
            .unwrap_or_else(|| panic!("{key}: listed, never written"));
        assert_eq!(
            o["size"].as_u64().unwrap(),
            want.len() as u64,
            "{key}: half-written"
        );
    }
}

/// A client certificate signed by the server's client CA authenticates its tenant; one with
/// the same subject signed by another CA does not.
#[test]
fn a_client_certificate_stands_for_a_token() {
    let served = Served::start_opts(LIMITS, true);
    let put = "PUT /v1/erin/x HTTP/1.1\nHost: h\nContent-Length: 0\nConnection: close\n\n";
    assert_eq!(served.raw_cert("erin", put).0, 200);
    assert!(served.store.join("erin/x").exists());
    let get = "GET /v1/alice/x HTTP/1.1\nHost: h\nConnection: close\n\n";
    assert_eq!(
        served.raw_cert("erin", get).0,
        403,
        "erin's certificate on alice's prefix"
    );
    // Another CA's certificate: the handshake fails, or the request is not authenticated.
    let put2 = "PUT /v1/erin/y HTTP/1.1\nHost: h\nContent-Length: 0\nConnection: close\n\n";
    let (code, _) = served.raw_cert("mallory", put2);
    assert!(
        code == 0 || code == 401,
        "a certificate from another CA: {code}"
    );
    assert!(!served.store.join("erin/y").exists());
    // Without a certificate, tokens work as before.
    assert_eq!(
        served.request("PUT", "/v1/alice/z", Some("alice"), b"z").0,
        200
    );
}

/// Four PUTs by bob (`/v1/bob/stall-N`) announcing `len` bytes, each sending `sent` and then
/// nothing. The stalling clients hold no handle on the server: it is killed when the test
/// ends, which ends them.
fn stall_puts(served: &Served, len: usize, sent: &[u8]) {
    for i in 0..4 {
        let head = served.head("PUT", &format!("/v1/bob/stall-{i}"), "bob", len);
        let (port, ca, sent) = (served.port, served.ca.clone(), sent.to_vec());
        std::thread::spawn(move || servekit::send(port, &ca, &head, &sent));
    }
}

/// One tenant stalling four uploads, each announced at the largest body and never sent,
/// holds only its own share of the body memory: another tenant's writes go through.
#[test]
fn one_tenant_cannot_take_all_the_body_memory() {
    let served = Served::start("max_body = \"2MiB\"\nbody_memory = \"8MiB\"");
    stall_puts(&served, 2 << 20, b"a few bytes, then nothing");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let (code, _) = served.request("PUT", "/v1/alice/through", Some("alice"), &[1u8; 1 << 20]);
    assert_eq!(code, 200, "alice waited for bob's stalled bodies");
}

/// Over a directory backend a body goes to its file as it arrives (as rest-server's do), not
/// into memory first: bodies stalled half-way hold a chunk of memory each, not their length,
/// so the same tenant's next write goes through; nothing of them appears under their keys,
/// and a body cut off leaves no file behind.
#[test]
fn bodies_stream_to_a_directory_backend() {
    // bob's share of the body memory is 16 MiB: one stalled body held whole took all of it,
    // and his next write waited for it until refused (503).
    let served = Served::start("max_body = \"16MiB\"\nbody_memory = \"64MiB\"");
    stall_puts(&served, 16 << 20, &[5u8; 2 << 20]);
    let staged = |n: usize| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while temp_files(&served.store.join("bob")) != n {
            assert!(std::time::Instant::now() < deadline, "not {n} temp files");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    };
    staged(4);
    let body = vec![1u8; 3 << 20];
    let (code, _) = served.request("PUT", "/v1/bob/through", Some("bob"), &body);
    assert_eq!(
        code, 200,
        "bob's write waited for his stalled bodies' memory"
    );
    assert_eq!(
        std::fs::read(served.store.join("bob/through")).unwrap(),
        body
    );
    assert!((0..4).all(|i| !served.store.join(format!("bob/stall-{i}")).exists()));
    // Cut off half-way: refused, and its file goes, with the directories made for its key
    // (no quota counts them).
    let head = served.head("PUT", "/v1/alice/deep/er/cut", "alice", 4 << 20);
    let (code, _) = served.raw(&head, &[7u8; 3 << 20], true);
    assert!(
        code == 0 || (400..500).contains(&code),
        "a cut body: {code}"
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while served.store.join("alice/deep").exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "a cut body's file or the directories made for it stayed"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(temp_files(&served.store.join("alice")), 0);
}

/// What a killed server leaves over a directory backend (the temp files of bodies it was
/// receiving) is removed at the next start once idle past any live body's; a fresh one is
/// kept, and a link named like one is neither followed nor removed.
#[test]
fn temp_files_a_killed_server_left_are_swept_at_start() {
    let mut served = Served::start(LIMITS);
    let dir = served.store.join("alice");
    std::fs::create_dir_all(dir.join("data/ab")).unwrap();
    let two_hours_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(7200);
    let aged = |p: &std::path::Path, body: &[u8]| {
        std::fs::write(p, body).unwrap();
        let f = std::fs::File::options().write(true).open(p).unwrap();
        f.set_modified(two_hours_ago).unwrap();
    };
    let old = dir.join("data/ab/.abcd.ferry-tmp-00000000000000aa");
    aged(&old, b"half a body");
    let fresh = dir.join(".obj.ferry-tmp-00000000000000bb");
    std::fs::write(&fresh, b"a body arriving").unwrap();
    // Links, themselves as old: one named like a temp file to an old file outside the store,
    // one to a directory outside holding an old temp file. Neither is followed nor removed.
    let outside = served.dir.join("outside");
    aged(&outside, b"not the server's");
    let link = dir.join(".x.ferry-tmp-00000000000000cc");
    std::os::unix::fs::symlink(&outside, &link).unwrap();
    let elsewhere = served.dir.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let theirs = elsewhere.join(".y.ferry-tmp-00000000000000dd");
    aged(&theirs, b"someone else's");
    let linked = dir.join("data/linked");
    std::os::unix::fs::symlink(&elsewhere, &linked).unwrap();
    let secs = two_hours_ago
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    for l in [&link, &linked] {
        repokit::set_mtime(l, secs as i64, 0);
    }
    assert_eq!(temp_files(&dir.join("data/ab")), 1);
    served.kill9_and_restart();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while old.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "an old temp file stayed"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(fresh.exists(), "a fresh temp file went");
    assert!(link.symlink_metadata().is_ok(), "a link went");
    assert_eq!(std::fs::read(&outside).unwrap(), b"not the server's");
    assert!(
        theirs.exists(),
        "the sweep went through a link to a directory"
    );
    assert!(
        served.log().contains("\"sweep\":\"temp\""),
        "{}",
        served.log()
    );
}

/// ferry's temp files (`.NAME.ferry-tmp-TAG`) in `dir`.
fn temp_files(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |d| {
        d.filter(|e| {
            let e = e.as_ref().unwrap();
            e.file_name().to_string_lossy().contains(".ferry-tmp-")
        })
        .count()
    })
}

#[test]
fn abandoned_upload_sessions_are_swept_and_live_ones_kept() {
    let served = Served::start(&format!("{LIMITS}\nupload_idle = 2"));
    let (gone, live) = ("a".repeat(32), "b".repeat(32));
    let part = |session: &str, n: u32, body: &[u8]| {
        let path = format!("/v1/alice/obj?upload={session}&part={n}");
        served.request("PUT", &path, Some("alice"), body).0
    };
    assert_eq!(part(&gone, 0, b"left behind"), 200);
    // (A directory store keeps the session's directory, empty: its block is what counts.)
    let block = served
        .store
        .join(format!("alice/.ferry-uploads/{gone}/000000"));
    assert!(block.exists());
    // The live session gets a block every 250 ms for 6 s: three sweeps, 2 s apart, each
    // after several blocks (a loaded machine may slow a block, not eight of them).
    let mut sent = Vec::new();
    for n in 0..24u32 {
        let body = format!("block {n};");
        assert_eq!(part(&live, n, body.as_bytes()), 200);
        sent.extend_from_slice(body.as_bytes());
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    assert!(!block.exists(), "an idle session outlived two sweeps");
    let path = format!("/v1/alice/obj?upload={live}&parts=24");
    let (code, body) = served.request("POST", &path, Some("alice"), b"");
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
    assert_eq!(std::fs::read(served.store.join("alice/obj")).unwrap(), sent);
}

/// A tenant that asks for objects and never reads the answers pins memory (its own share
/// first), never the slots: while its other requests wait for memory, other tenants are
/// served; once the reader is gone, the waiting requests are answered.
#[test]
fn answers_nobody_reads_do_not_hold_the_slots() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let served = std::sync::Arc::new(Served::start(
        "slots = 2\nmax_body = \"16MiB\"\nbody_memory = \"64MiB\"",
    ));
    let big = vec![3u8; 16 << 20];
    let put = served.request("PUT", "/v1/alice/big", Some("alice"), &big);
    assert_eq!(put.0, 200, "{}", String::from_utf8_lossy(&put.1));
    // Answers nobody reads, streamed from the directory backend, each holding two 1 MiB
    // chunks of memory until its 16 MiB are taken: eight take all of alice's share.
    let unread: Vec<_> = (0..8)
        .map(|_| unread_get(&served, "/v1/alice/big", "alice"))
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    // As many more of alice's GETs as there are slots: each waits for memory.
    let answered = std::sync::Arc::new(AtomicUsize::new(0));
    let waiting: Vec<_> = (0..2)
        .map(|_| {
            let (served, answered) = (served.clone(), answered.clone());
            std::thread::spawn(move || {
                let got = served.request("GET", "/v1/alice/big", Some("alice"), b"");
                answered.fetch_add(1, Ordering::SeqCst);
                got
            })
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert_eq!(
        served.request("PUT", "/v1/bob/x", Some("bob"), b"small").0,
        200
    );
    assert_eq!(
        served.request("GET", "/v1/bob/x", Some("bob"), b"").1,
        b"small"
    );
    assert_eq!(
        answered.load(Ordering::SeqCst),
        0,
        "bob was served only once alice's waiting GETs had given up: they held the slots"
    );
    drop(unread);
    for w in waiting {
        let (code, body) = w.join().unwrap();
        assert_eq!(code, 200, "a GET that waited for memory");
        assert!(body == big, "a GET that waited for memory got other bytes");
    }
}

/// A GET by `tenant` whose answer nobody reads: 16 MiB is more than the sockets hold (the
/// reader's kept at 64 KiB, whatever the host's tuning), so the answer stays unfinished
/// until the connection is dropped.
fn unread_get(
    served: &Served, path: &str, tenant: &str,
) -> rustls::StreamOwned<rustls::ClientConnection, std::net::TcpStream> {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    let mut unread = served.stream();
    let small: libc::c_int = 64 << 10;
    // SAFETY: a valid socket and a c_int option of its size.
    let rc = unsafe {
        libc::setsockopt(
            unread.sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&small as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "SO_RCVBUF");
    let head = served.head("GET", path, tenant, 0);
    unread
        .write_all(head.replace('\n', "\r\n").as_bytes())
        .unwrap();
    unread.flush().unwrap();
    unread
}

/// Over a directory backend an answer is read from the file as the client takes it: an
/// answer nobody reads holds two chunks of memory, not its length, so the same tenant's
/// next reads are answered at once.
#[test]
fn answers_stream_from_a_directory_backend() {
    // bob's share of the body memory is 16 MiB: one unread 12 MiB answer held whole took
    // most of it, and his next reads waited for it until refused (503).
    let served = Served::start("max_body = \"16MiB\"\nbody_memory = \"64MiB\"");
    let big: Vec<u8> = (0..12u32 << 20).map(|i| (i % 251) as u8).collect();
    assert_eq!(
        served.request("PUT", "/v1/bob/big", Some("bob"), &big).0,
        200
    );
    let _unread: Vec<_> = (0..4)
        .map(|_| unread_get(&served, "/v1/bob/big", "bob"))
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let (code, body) = served.request("GET", "/v1/bob/big", Some("bob"), b"");
    assert_eq!(
        code, 200,
        "bob's read waited for his unread answers' memory"
    );
    assert!(body == big, "a streamed answer has other bytes");
    // A range across chunks.
    let auth = format!("Authorization: Bearer {}\n", served.tenant("bob").token);
    let head = format!(
        "GET /v1/bob/big HTTP/1.1\nHost: h\n{auth}Range: bytes=1048570-3145740\nConnection: close\n\n"
    );
    let (code, part) = served.raw(&head, b"", false);
    assert_eq!(code, 206);
    assert!(
        part == big[1048570..=3145740],
        "a streamed range has other bytes"
    );
}

/// Writes in flight together cannot pass a quota each on its own (their bytes count from
/// the moment they are let in), and a tenant at its quota makes no more objects, empty ones
/// included.
#[test]
fn writes_in_flight_together_cannot_pass_the_quota() {
    use std::io::{Read, Write};
    let served = Served::start(LIMITS); // dave: 64 KiB
    let body = vec![1u8; 60 << 10];
    let mut streams: Vec<_> = (0..4)
        .map(|i| {
            let mut s = served.stream();
            let head = served.head("PUT", &format!("/v1/dave/k{i}"), "dave", body.len());
            s.write_all(head.replace('\n', "\r\n").as_bytes()).unwrap();
            s.flush().unwrap();
            s
        })
        .collect();
    // Every head is in before any body.
    std::thread::sleep(std::time::Duration::from_millis(1000));
    let mut codes = Vec::new();
    for s in &mut streams {
        // A write refused at its head is answered already; the others get their body.
        s.sock
            .set_read_timeout(Some(std::time::Duration::from_secs(2)))
            .unwrap();
        let mut first = [0u8; 12];
        let early = s.read(&mut first);
        s.sock.set_read_timeout(None).unwrap();
        let code = match early {
            Ok(n) if n >= 12 => String::from_utf8_lossy(&first[9..12]).parse().unwrap_or(0),
            _ => {
                // (A refusal later than the wait above closes the connection: the body
                // then meets a closed socket, and the answer read is the refusal.)
                let _ = s.write_all(&body).and_then(|_| s.flush());
                servekit::response(s).0
            }
        };
        codes.push(code);
    }
    assert_eq!(codes.iter().filter(|c| **c == 200).count(), 1, "{codes:?}");
    assert_eq!(codes.iter().filter(|c| **c == 507).count(), 3, "{codes:?}");
    let stored: u64 = served
        .snapshot()
        .iter()
        .filter(|(p, _)| p.starts_with(served.store.join("dave")))
        .map(|(_, b)| b.len() as u64)
        .sum();
    assert_eq!(stored, 60 << 10);
    // Up to the quota exactly, then nothing more, not even an empty object.
    let rest = vec![2u8; 4 << 10];
    assert_eq!(
        served
            .request("PUT", "/v1/dave/rest", Some("dave"), &rest)
            .0,
        200
    );
    assert_eq!(
        served.request("PUT", "/v1/dave/empty", Some("dave"), b"").0,
        507
    );
    assert!(!served.store.join("dave/empty").exists());
}

/// One address opening connections that never say a word cannot hold every connection the
/// server allows: past its share it is closed at once, and other addresses are served.
#[test]
fn one_address_cannot_hold_every_connection() {
    use std::io::Read;
    use std::net::{Ipv4Addr, TcpStream};
    let served = Served::start("connections = 8\nper_address = 4");
    let mallory = Ipv4Addr::new(127, 0, 0, 1);
    let addr = format!("127.0.0.1:{}", served.port).parse().unwrap();
    let idle: Vec<TcpStream> = (0..4)
        .map(|_| servekit::connect_from(mallory, addr).unwrap())
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let mut fifth = servekit::connect_from(mallory, addr).unwrap();
    fifth
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let mut b = [0u8; 1];
    let closed = match fifth.read(&mut b) {
        Ok(n) => n == 0,
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    };
    assert!(closed, "a fifth connection from one address was kept open");
    let other = Ipv4Addr::new(127, 0, 0, 2);
    assert_eq!(
        servekit::healthz_from(served.port, &served.ca, other),
        Some(200),
        "another address was not served"
    );
    drop(idle);
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(
        servekit::healthz_from(served.port, &served.ca, mallory),
        Some(200),
        "the address was not served again once its connections closed"
    );
}

/// Over an object store (MinIO) a read is one GET that also tells the object's size (a
/// longer one without a range's end, two); it answers what a HEAD first did: the bytes, a
/// Content-Range naming the whole size, 416 for a range that starts past the end, all of an
/// empty object, 404 for a missing one.
#[test]
fn ranged_reads_over_an_object_store_backend() {
    let Some(cfg) = ferry_testkit::s3() else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (_, bucket) = rt.block_on(ferry_testkit::s3_bucket(&cfg));
    let served = Served::start_over("", &format!("s3://{bucket}"));
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    for (key, body) in [("obj", &data[..]), ("empty", b"")] {
        let path = format!("/v1/alice/{key}");
        assert_eq!(served.request("PUT", &path, Some("alice"), body).0, 200);
    }
    let auth = format!("Authorization: Bearer {}\n", served.tenant("alice").token);
    let get = |key: &str, range: &str| {
        served.raw_headers(&format!(
            "GET /v1/alice/{key} HTTP/1.1\nHost: h\n{auth}Range: bytes={range}\nConnection: close\n\n"
        ))
    };
    let content_range = |h: &str| {
        h.lines()
            .map(str::to_ascii_lowercase)
            .find_map(|l| l.strip_prefix("content-range: ").map(str::to_string))
    };
    // From the object's middle, its first byte, and across its end (cut there).
    for (range, want) in [
        ("1000-2999", 1000..3000),
        ("0-0", 0..1),
        ("299990-400000", 299_990..300_000),
    ] {
        let (code, head, body) = get("obj", range);
        assert_eq!(code, 206, "{range}");
        assert!(body == data[want.clone()], "{range}: {} bytes", body.len());
        let whole = format!("bytes {}-{}/300000", want.start, want.end - 1);
        assert_eq!(content_range(&head), Some(whole), "{range}");
    }
    // Without an end (restic reads its small files so): within the bytes asked for first,
    // and past them (the rest read after).
    for start in [200_000usize, 1000, 0] {
        let (code, head, body) = get("obj", &format!("{start}-"));
        assert_eq!(code, 206, "{start}-");
        assert!(body == data[start..], "{start}-: {} bytes", body.len());
        let whole = format!("bytes {start}-299999/300000");
        assert_eq!(content_range(&head), Some(whole), "{start}-");
    }
    // And no range at all: the whole object, long or short.
    for (key, want) in [("obj", &data[..]), ("short", &data[..1000])] {
        if key == "short" {
            assert_eq!(
                served
                    .request("PUT", "/v1/alice/short", Some("alice"), want)
                    .0,
                200
            );
        }
        let (code, body) = served.request("GET", &format!("/v1/alice/{key}"), Some("alice"), b"");
        assert_eq!((code, body == want), (200, true), "{key}, whole");
    }
    assert_eq!(get("obj", "300000-").0, 416, "an open range past the end");
    let (code, _, body) = get("empty", "0-");
    assert_eq!(
        (code, body.len()),
        (200, 0),
        "an open range of an empty object"
    );
    assert_eq!(get("missing", "0-").0, 404);
    assert_eq!(get("obj", "300000-300010").0, 416, "a range past the end");
    // Ranges at the last offsets there are: refused, nothing overflows.
    for range in [
        "18446744073709551615-",
        "18446744073709551614-18446744073709551615",
    ] {
        assert_eq!(get("obj", range).0, 416, "{range}");
    }
    let (code, _, body) = get("empty", "0-10");
    assert_eq!((code, body.len()), (200, 0), "a range of an empty object");
    assert_eq!(get("missing", "0-10").0, 404);
    // A range longer than an answer may hold, of a shorter object: what it holds.
    let (code, head, body) = get("obj", "0-99999999999");
    assert_eq!((code, body == data), (206, true), "a long range");
    assert_eq!(
        content_range(&head).as_deref(),
        Some("bytes 0-299999/300000")
    );
}
