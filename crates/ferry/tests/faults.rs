//! Faults between ferry and a real MinIO, through Toxiproxy: every transfer completes
//! byte-identical or fails with one clear line, leaving nothing under the destination name and
//! no abandoned multipart upload.

mod common;

use std::process::Output;
use std::time::Duration;

use common::{ferry_env, s, summary, temp_dir};
use ferry_store::cloud::CloudStore;
use ferry_store::Store;
use ferry_testkit::toxiproxy::{Proxy, Toxiproxy};
use ferry_testkit::{random_file, same_file};
use serde_json::json;

const MIB: u64 = 1 << 20;

struct Rig {
    proxy: Proxy,
    bucket: String,
    store: CloudStore,
    rt: tokio::runtime::Runtime,
}

fn rig() -> Option<Rig> {
    let cfg = ferry_testkit::s3()?;
    let toxi = Toxiproxy::from_env()?;
    let upstream = cfg
        .endpoint
        .clone()
        .unwrap()
        .trim_start_matches("http://")
        .to_string();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (store, bucket) = rt.block_on(ferry_testkit::s3_bucket(&cfg));
    Some(Rig {
        proxy: toxi.proxy(&upstream),
        bucket,
        store,
        rt,
    })
}

impl Rig {
    /// ferry through the proxy.
    fn ferry(&self, args: &[&str]) -> Output {
        ferry_env(args, &[("AWS_ENDPOINT_URL", &self.proxy.endpoint())], None)
    }
    /// ferry straight to the server.
    fn direct(&self, args: &[&str]) -> Output {
        ferry_env(args, &[], None)
    }
    fn url(&self, key: &str) -> String {
        format!("s3://{}/{key}", self.bucket)
    }
    fn exists(&self, key: &str) -> bool {
        self.rt.block_on(self.store.head(key)).is_ok()
    }
    fn pending(&self) -> Vec<String> {
        self.rt.block_on(self.store.pending_uploads("")).unwrap()
    }
    /// Complete and identical, or failed with one line and nothing left: never anything else.
    fn complete_or_clean(&self, out: &Output, src: &std::path::Path, key: &str) -> bool {
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            self.pending(),
            Vec::<String>::new(),
            "abandoned multipart upload; ferry said {err}"
        );
        if out.status.success() {
            let back = src.with_extension("back");
            let got = self.direct(&["cp", &self.url(key), s(&back)]);
            assert!(
                got.status.success(),
                "{}",
                String::from_utf8_lossy(&got.stderr)
            );
            assert!(same_file(src, &back), "{key} differs from its source");
            true
        } else {
            assert_eq!(err.trim_end().lines().count(), 1, "not one line: {err}");
            assert!(!self.exists(key), "a failed upload left {key} behind");
            false
        }
    }
}

#[test]
fn connection_resets_mid_upload() {
    let Some(r) = rig() else { return };
    let dir = temp_dir();
    let src = dir.join("src");
    random_file(&src, 40 * MIB + 1, 1);
    // 40% of connections are cut after 2 MiB, inside a 5 MiB block.
    r.proxy
        .toxic("limit_data", "upstream", 0.4, json!({"bytes": 2 * MIB}));
    let out = r.ferry(&[
        "cp",
        "--json",
        "--retries",
        "12",
        s(&src),
        &r.url("reset-up"),
    ]);
    assert!(
        r.complete_or_clean(&out, &src, "reset-up"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        summary(&out)["retries"].as_u64().unwrap() > 0,
        "no fault was hit"
    );
}

#[test]
fn connection_resets_mid_download() {
    let Some(r) = rig() else { return };
    let dir = temp_dir();
    let src = dir.join("src");
    random_file(&src, 40 * MIB + 1, 2);
    assert!(r
        .direct(&["cp", s(&src), &r.url("reset-down")])
        .status
        .success());
    r.proxy
        .toxic("limit_data", "downstream", 0.4, json!({"bytes": 2 * MIB}));
    let back = dir.join("back");
    let out = r.ferry(&[
        "cp",
        "--json",
        "--retries",
        "12",
        &r.url("reset-down"),
        s(&back),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(same_file(&src, &back));
    assert!(
        summary(&out)["retries"].as_u64().unwrap() > 0,
        "no fault was hit"
    );
}

#[test]
fn stall_longer_than_the_request_timeout() {
    let Some(r) = rig() else { return };
    let dir = temp_dir();
    let src = dir.join("src");
    random_file(&src, 20 * MIB + 1, 3);
    // A third of connections stop moving data and never close.
    r.proxy
        .toxic("timeout", "upstream", 0.33, json!({"timeout": 0}));
    let out = r.ferry(&[
        "cp",
        "--json",
        "--timeout",
        "2s",
        "--retries",
        "12",
        s(&src),
        &r.url("stall"),
    ]);
    assert!(
        r.complete_or_clean(&out, &src, "stall"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        summary(&out)["retries"].as_u64().unwrap() > 0,
        "no stall was hit"
    );
}

#[test]
fn bandwidth_collapse_mid_upload_completes() {
    let Some(r) = rig() else { return };
    let dir = temp_dir();
    let src = dir.join("src");
    random_file(&src, 60 * MIB, 4);
    // Slow from the start so the collapse lands mid-transfer.
    let slow = r
        .proxy
        .toxic("bandwidth", "upstream", 1.0, json!({"rate": 8000}));
    let child = {
        let args = ["cp", "--json", s(&src), &r.url("collapse")].map(String::from);
        let endpoint = r.proxy.endpoint();
        std::thread::spawn(move || {
            let a: Vec<&str> = args.iter().map(|x| x.as_str()).collect();
            ferry_env(&a, &[("AWS_ENDPOINT_URL", &endpoint)], None)
        })
    };
    std::thread::sleep(Duration::from_millis(1500));
    r.proxy.remove(&slow);
    r.proxy
        .toxic("bandwidth", "upstream", 1.0, json!({"rate": 1000}));
    let out = child.join().unwrap();
    assert!(
        r.complete_or_clean(&out, &src, "collapse"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn bandwidth_collapse_to_a_trickle_fails_cleanly() {
    let Some(r) = rig() else { return };
    let dir = temp_dir();
    let src = dir.join("src");
    random_file(&src, 20 * MIB, 5);
    let trickle = r
        .proxy
        .toxic("bandwidth", "upstream", 1.0, json!({"rate": 20}));
    let out = r.ferry(&[
        "cp",
        "--timeout",
        "1s",
        "--retries",
        "2",
        s(&src),
        &r.url("trickle"),
    ]);
    r.proxy.remove(&trickle);
    assert!(
        !out.status.success(),
        "20 KB/s should not carry 20 MiB within the deadlines"
    );
    assert!(!r.complete_or_clean(&out, &src, "trickle"));
}

#[test]
fn store_unreachable_mid_upload() {
    let Some(r) = rig() else { return };
    let dir = temp_dir();
    let src = dir.join("src");
    random_file(&src, 60 * MIB, 6);
    let slow = r
        .proxy
        .toxic("bandwidth", "upstream", 1.0, json!({"rate": 10000}));
    let child = {
        let args = [
            "cp",
            "--timeout",
            "1s",
            "--retries",
            "2",
            s(&src),
            &r.url("outage"),
        ]
        .map(String::from);
        let endpoint = r.proxy.endpoint();
        std::thread::spawn(move || {
            let a: Vec<&str> = args.iter().map(|x| x.as_str()).collect();
            ferry_env(&a, &[("AWS_ENDPOINT_URL", &endpoint)], None)
        })
    };
    std::thread::sleep(Duration::from_millis(1500));
    r.proxy.enable(false);
    std::thread::sleep(Duration::from_secs(3));
    r.proxy.remove(&slow);
    r.proxy.enable(true);
    let out = child.join().unwrap();
    r.complete_or_clean(&out, &src, "outage");
}
