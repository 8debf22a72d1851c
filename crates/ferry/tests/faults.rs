//! Faults between ferry and a real MinIO (and fake-gcs-server), through Toxiproxy: every
//! transfer completes byte-identical or fails with one clear line, leaving nothing under the
//! destination name and no abandoned multipart upload (or uncomposed GCS part).

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::thread::{sleep, JoinHandle};
use std::time::Duration;

use common::{ferry_env, s, summary, temp_dir};
use ferry_store::cloud::CloudStore;
use ferry_store::Store;
use ferry_testkit::toxiproxy::{gcs_behind_proxy, s3_behind_proxy, Proxy};
use ferry_testkit::{random_file, same_file};
use serde_json::json;

const MIB: u64 = 1 << 20;

struct Rig {
    proxy: Proxy,
    bucket: String,
    store: CloudStore,
    dir: PathBuf,
    rt: tokio::runtime::Runtime,
    scheme: &'static str,
    /// The variable that points ferry at an endpoint, and the server's own endpoint.
    endpoint_var: &'static str,
    direct: String,
}

/// A rig on MinIO (`s3`) or fake-gcs-server (`gs`).
fn rig_on(scheme: &'static str) -> Option<Rig> {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (store, bucket, proxy, endpoint_var, direct) = match scheme {
        "s3" => {
            let (cfg, bucket, proxy) = rt.block_on(s3_behind_proxy())?;
            let store = CloudStore::s3(&cfg, &bucket).unwrap();
            (store, bucket, proxy, "AWS_ENDPOINT_URL", cfg.endpoint?)
        }
        _ => {
            let (cfg, bucket, proxy) = rt.block_on(gcs_behind_proxy())?;
            let store = CloudStore::gcs(&cfg, &bucket).unwrap();
            (store, bucket, proxy, "FERRY_GCS_ENDPOINT", cfg.endpoint?)
        }
    };
    Some(Rig {
        proxy,
        bucket,
        store,
        dir: temp_dir(),
        rt,
        scheme,
        endpoint_var,
        direct,
    })
}

fn rig() -> Option<Rig> {
    rig_on("s3")
}

fn gcs_rig() -> Option<Rig> {
    rig_on("gs")
}

impl Rig {
    fn source(&self, size: u64, seed: u64) -> PathBuf {
        let p = self.dir.join(format!("src-{seed}"));
        random_file(&p, size, seed);
        p
    }
    fn url(&self, key: &str) -> String {
        format!("{}://{}/{key}", self.scheme, self.bucket)
    }
    /// ferry straight to the server, not through the proxy.
    fn direct(&self, args: &[&str]) -> Output {
        ferry_env(args, &[(self.endpoint_var, &self.direct)], None)
    }
    /// ferry through the proxy, in the background.
    fn spawn(&self, args: &[&str]) -> JoinHandle<Output> {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let endpoint = self.proxy.endpoint();
        let var = self.endpoint_var;
        std::thread::spawn(move || {
            let a: Vec<&str> = args.iter().map(String::as_str).collect();
            ferry_env(&a, &[(var, &endpoint)], None)
        })
    }
    /// ferry through the proxy.
    fn ferry(&self, args: &[&str]) -> Output {
        self.spawn(args).join().unwrap()
    }
    /// Complete and identical, or failed with one line and nothing left: never anything else.
    fn complete_or_clean(&self, out: &Output, src: &Path, key: &str) -> bool {
        let err = String::from_utf8_lossy(&out.stderr);
        let pending = self.rt.block_on(self.store.pending_uploads("")).unwrap();
        assert_eq!(
            pending,
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
            assert!(
                self.rt.block_on(self.store.head(key)).is_err(),
                "a failed upload left {key}"
            );
            false
        }
    }
    /// `ferry cp --json ARGS SRC URL` gets through despite faults it demonstrably hit. Toxics
    /// strike connections at random, so a run may open none they hit: it is run again, under
    /// another key, up to four times; every run must get through whole.
    fn survives(&self, args: &[&str], src: &Path, key: &str) {
        for run in 0..4 {
            let key = format!("{key}-{run}");
            let url = self.url(&key);
            let mut all = vec!["cp", "--json"];
            all.extend_from_slice(args);
            all.extend([s(src), url.as_str()]);
            let out = self.ferry(&all);
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(self.complete_or_clean(&out, src, &key), "failed: {err}");
            if summary(&out)["retries"].as_u64().unwrap() > 0 {
                return;
            }
        }
        panic!("no fault was hit in four runs");
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn connection_resets_mid_upload() {
    let Some(r) = rig() else { return };
    let src = r.source(40 * MIB + 1, 1);
    // 40% of connections are cut after 2 MiB, inside a 5 MiB block.
    r.proxy
        .toxic("limit_data", "upstream", 0.4, json!({"bytes": 2 * MIB}));
    r.survives(&["--retries", "12"], &src, "reset-up");
}

#[test]
fn gcs_connection_resets_mid_upload() {
    let Some(r) = gcs_rig() else { return };
    let src = r.source(40 * MIB + 1, 11);
    r.proxy
        .toxic("limit_data", "upstream", 0.4, json!({"bytes": 2 * MIB}));
    r.survives(&["--retries", "12"], &src, "gcs-reset-up");
}

#[test]
fn gcs_stall_longer_than_the_request_timeout() {
    let Some(r) = gcs_rig() else { return };
    let src = r.source(40 * MIB + 1, 13);
    r.proxy
        .toxic("timeout", "upstream", 0.5, json!({"timeout": 0}));
    r.survives(&["--timeout", "2s", "--retries", "12"], &src, "gcs-stall");
}

#[test]
fn connection_resets_mid_download() {
    let Some(r) = rig() else { return };
    let src = r.source(40 * MIB + 1, 2);
    assert!(ferry_env(&["cp", s(&src), &r.url("reset-down")], &[], None)
        .status
        .success());
    r.proxy
        .toxic("limit_data", "downstream", 0.4, json!({"bytes": 2 * MIB}));
    // As in `Rig::survives`: run again while a run meets no fault.
    for run in 0..4 {
        let back = r.dir.join(format!("back-{run}"));
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
        if summary(&out)["retries"].as_u64().unwrap() > 0 {
            return;
        }
    }
    panic!("no fault was hit in four runs");
}

#[test]
fn stall_longer_than_the_request_timeout() {
    let Some(r) = rig() else { return };
    let src = r.source(40 * MIB + 1, 3);
    // Half the connections stop moving data and never close.
    r.proxy
        .toxic("timeout", "upstream", 0.5, json!({"timeout": 0}));
    r.survives(&["--timeout", "2s", "--retries", "12"], &src, "stall");
}

#[test]
fn bandwidth_collapse_mid_upload_completes() {
    let Some(r) = rig() else { return };
    let src = r.source(60 * MIB, 4);
    // Slow from the start so that the collapse lands mid-transfer.
    let slow = r
        .proxy
        .toxic("bandwidth", "upstream", 1.0, json!({"rate": 8000}));
    let child = r.spawn(&["cp", "--json", s(&src), &r.url("collapse")]);
    sleep(Duration::from_millis(1500));
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

/// A slow request is not a stalled one: blocks that take several times `--timeout` to send
/// (5 MiB at 700 KB/s per connection, ~7 s, against 1 s) go through once each, both ways.
#[test]
fn blocks_slower_than_the_timeout_are_never_sent_again() {
    let Some(r) = rig() else { return };
    let src = r.source(20 * MIB, 5);
    let slow_args = [
        "--timeout",
        "1s",
        "--block-size",
        "5MiB",
        "--concurrency",
        "2",
    ];
    for (stream, down) in [("upstream", false), ("downstream", true)] {
        if down {
            assert!(ferry_env(&["cp", s(&src), &r.url("slow")], &[], None)
                .status
                .success());
        }
        let slow = r
            .proxy
            .toxic("bandwidth", stream, 1.0, json!({"rate": 700}));
        let back = r.dir.join("slow-back");
        let (from, to) = if down {
            (r.url("slow"), s(&back).to_string())
        } else {
            (s(&src).to_string(), r.url("slow"))
        };
        let mut args = vec!["cp", "--json"];
        args.extend(slow_args);
        args.extend([from.as_str(), to.as_str()]);
        let out = r.ferry(&args);
        r.proxy.remove(&slow);
        let err = String::from_utf8_lossy(&out.stderr);
        if down {
            assert!(out.status.success(), "{stream}: {err}");
            assert!(same_file(&src, &back));
        } else {
            assert!(r.complete_or_clean(&out, &src, "slow"), "{stream}: {err}");
        }
        let report = summary(&out);
        assert_eq!(
            report["retries"], 0,
            "{stream}: blocks were sent again: {report}"
        );
        assert_eq!(report["block_size"], 5 * MIB, "{stream}: {report}");
    }
}

#[test]
fn store_unreachable_mid_upload() {
    let Some(r) = rig() else { return };
    let src = r.source(60 * MIB, 6);
    let slow = r
        .proxy
        .toxic("bandwidth", "upstream", 1.0, json!({"rate": 10000}));
    let child = r.spawn(&[
        "cp",
        "--timeout",
        "1s",
        "--retries",
        "2",
        s(&src),
        &r.url("outage"),
    ]);
    sleep(Duration::from_millis(1500));
    r.proxy.enable(false);
    sleep(Duration::from_secs(3));
    r.proxy.remove(&slow);
    r.proxy.enable(true);
    let out = child.join().unwrap();
    r.complete_or_clean(&out, &src, "outage");
}
