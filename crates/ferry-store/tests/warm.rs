//! `Store::warm` on a real S3 server (MinIO): it leaves the connections a transfer's first
//! wave needs open in the pool, and does so once per store.

use ferry_store::Store;

/// TCP connections of this process to `port` that are established, read from the kernel's
/// table (`/proc/net/tcp`) and this process's descriptors.
fn established_to(port: u16) -> usize {
    let ours: std::collections::HashSet<String> = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().into_owned();
            Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
        })
        .collect();
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    table
        .lines()
        .skip(1)
        .filter(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let remote_port = f[2].rsplit(':').next().unwrap();
            u16::from_str_radix(remote_port, 16) == Ok(port) && f[3] == "01" && ours.contains(f[9])
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_warm_opens_the_first_waves_connections_once() {
    let Some(cfg) = ferry_testkit::s3() else {
        return;
    };
    // The services script's MinIO listens on 127.0.0.1 with an explicit port.
    let endpoint = std::env::var("AWS_ENDPOINT_URL").unwrap();
    let port: u16 = endpoint
        .rsplit(':')
        .next()
        .and_then(|p| p.trim_end_matches('/').parse().ok())
        .unwrap_or_else(|| panic!("no port in AWS_ENDPOINT_URL {endpoint}"));
    let (store, _) = ferry_testkit::s3_bucket(&cfg).await;
    let before = established_to(port);
    assert!(
        before <= 2,
        "{before} connections after creating the bucket"
    );

    // HEADs of a missing object: 404s, each on a connection the pool keeps.
    store.warm("not-there-yet", 6).await;
    let warmed = established_to(port);
    assert!(warmed >= 6, "{warmed} connections open after warming 6");

    // The pool is open now: a second transfer asks for nothing.
    store.warm("not-there-yet", 12).await;
    assert_eq!(established_to(port), warmed, "a second warm opened more");
    // And the connections serve requests as any other.
    assert!(matches!(
        store.head("not-there-yet").await,
        Err(ferry_store::Error::NotFound(_))
    ));
}
