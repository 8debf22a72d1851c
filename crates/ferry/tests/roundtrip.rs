//! Byte-identical round trips through real MinIO, Azurite and fake-gcs-server, and store to
//! store.

mod common;

use common::{ok, s, summary, temp_dir};
use ferry_testkit::{random_file, same_file};

const MIB: u64 = 1 << 20;

/// Upload then download each size; downloads must be checked against the store's digest.
fn sizes_round_trip(base: &str, sizes: &[u64]) {
    let dir = temp_dir();
    for (i, &size) in sizes.iter().enumerate() {
        let src = dir.join(format!("in-{size}"));
        let back = dir.join(format!("out-{size}"));
        random_file(&src, size, i as u64);
        let url = format!("{base}/obj-{size}");
        let up = summary(&ok(&["cp", "--json", s(&src), &url]));
        assert_eq!(up["bytes"], size, "{up}");
        let down = summary(&ok(&["cp", "--json", &url, s(&back)]));
        assert!(
            same_file(&src, &back),
            "{url}: round trip of {size} bytes differs"
        );
        assert_eq!(
            down["verified"], 1,
            "download of {size} bytes was not checked: {down}"
        );
    }
    std::fs::remove_dir_all(dir).unwrap();
}

fn bucket(scheme: &str) -> Option<String> {
    let rt = tokio::runtime::Runtime::new().unwrap();
    match scheme {
        "s3" => ferry_testkit::s3()
            .map(|c| format!("s3://{}", rt.block_on(ferry_testkit::s3_bucket(&c)).1)),
        "gs" => ferry_testkit::gcs()
            .map(|c| format!("gs://{}", rt.block_on(ferry_testkit::gcs_bucket(&c)).1)),
        _ => ferry_testkit::azure()
            .map(|c| format!("az://{}", rt.block_on(ferry_testkit::azure_container(&c)).1)),
    }
}

const EDGES: &[u64] = &[0, 1, MIB + 1, 5 * MIB + 1, 8 * MIB + 1, 40 * MIB + 3];

#[test]
fn s3_sizes() {
    let Some(b) = bucket("s3") else { return };
    sizes_round_trip(&b, EDGES);
}

#[test]
fn azure_sizes() {
    let Some(b) = bucket("az") else { return };
    sizes_round_trip(&b, EDGES);
}

#[test]
fn gcs_sizes() {
    let Some(b) = bucket("gs") else { return };
    sizes_round_trip(&b, EDGES);
}

/// More blocks than one compose request takes: composed in rounds, parts gone after.
#[test]
fn gcs_many_blocks() {
    let Some(b) = bucket("gs") else { return };
    let dir = temp_dir();
    let (src, back) = (dir.join("in"), dir.join("out"));
    random_file(&src, 70 * MIB + 5, 9);
    let url = format!("{b}/many");
    let up = summary(&ok(&[
        "cp",
        "--json",
        "--block-size",
        "1MiB",
        s(&src),
        &url,
    ]));
    assert_eq!(up["block_size"], MIB, "{up}");
    ok(&["cp", &url, s(&back)]);
    assert!(same_file(&src, &back));
    let listed = String::from_utf8_lossy(&ok(&["ls", &format!("{b}/")]).stdout).to_string();
    assert_eq!(listed.lines().count(), 1, "{listed}");
}

#[test]
fn s3_one_gib() {
    let Some(b) = bucket("s3") else { return };
    sizes_round_trip(&b, &[1 << 30]);
}

#[test]
fn azure_one_gib() {
    let Some(b) = bucket("az") else { return };
    sizes_round_trip(&b, &[1 << 30]);
}

/// A stream of unknown length goes up in blocks and comes back through stdout.
fn stream_round_trip(base: &str) {
    for (i, len) in [0usize, 3, (20 * MIB + 3) as usize].into_iter().enumerate() {
        let data = ferry_testkit::random_bytes(len, 40 + i as u64);
        let url = format!("{base}/stream-{len}");
        let out = common::ferry_env(&["cp", "--json", "-", &url], &[], Some(&data));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(summary(&out)["bytes"], len as u64);
        let back = ok(&["cp", &url, "-"]);
        assert!(
            back.stdout == data,
            "stream of {len} bytes differs after the round trip"
        );
    }
}

#[test]
fn s3_stdin_stream() {
    let Some(b) = bucket("s3") else { return };
    stream_round_trip(&b);
}

#[test]
fn gcs_stdin_stream() {
    let Some(b) = bucket("gs") else { return };
    stream_round_trip(&b);
}

#[test]
fn azure_stdin_stream() {
    let Some(b) = bucket("az") else { return };
    stream_round_trip(&b);
}

/// Regression: blocks that finished while the stream was still being read were left out of
/// the committed object (a 5 GB stream became 215 MB, reported as success).
fn slow_stream_keeps_every_block(base: &str) {
    let data = ferry_testkit::random_bytes((48 * MIB + 5) as usize, 77);
    let url = format!("{base}/slow-stream");
    let pause = std::time::Duration::from_millis(25);
    let out = common::ferry_slow_stdin(
        &["cp", "--block-size", "5MiB", "-", &url],
        data.clone(),
        pause,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let back = ok(&["cp", &url, "-"]);
    assert_eq!(
        back.stdout.len(),
        data.len(),
        "blocks lost from a slow stream"
    );
    assert!(
        back.stdout == data,
        "slow stream differs after the round trip"
    );
}

#[test]
fn s3_slow_stream() {
    let Some(b) = bucket("s3") else { return };
    slow_stream_keeps_every_block(&b);
}

#[test]
fn gcs_slow_stream() {
    let Some(b) = bucket("gs") else { return };
    slow_stream_keeps_every_block(&b);
}

#[test]
fn azure_slow_stream() {
    let Some(b) = bucket("az") else { return };
    slow_stream_keeps_every_block(&b);
}

/// A tree of 1,000 files goes up and comes back identical.
fn tree_round_trip(base: &str) {
    let dir = temp_dir();
    let src = dir.join("src");
    for i in 0..1000u64 {
        let sub = src.join(format!("d{}", i % 10));
        std::fs::create_dir_all(&sub).unwrap();
        random_file(&sub.join(format!("f{i}")), (i * 37) % 5000, i);
    }
    let url = format!("{base}/tree");
    let up = summary(&ok(&["cp", "-r", "--json", s(&src), &url]));
    assert_eq!(up["objects"], 1000, "{up}");
    let dst = dir.join("dst");
    // A trailing slash names the same prefix.
    ok(&["cp", "-r", &format!("{url}/"), s(&dst)]);
    for i in 0..1000u64 {
        let rel = format!("d{}/f{i}", i % 10);
        assert!(same_file(&src.join(&rel), &dst.join(&rel)), "{rel} differs");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn s3_tree_of_1000_files() {
    let Some(b) = bucket("s3") else { return };
    tree_round_trip(&b);
}

#[test]
fn azure_tree_of_1000_files() {
    let Some(b) = bucket("az") else { return };
    tree_round_trip(&b);
}

#[test]
fn store_to_store_both_ways() {
    let (Some(s3), Some(az)) = (bucket("s3"), bucket("az")) else {
        return;
    };
    let dir = temp_dir();
    let src = dir.join("src");
    random_file(&src, 13 * MIB + 5, 7);
    ok(&["cp", s(&src), &format!("{s3}/a")]);
    let hop = summary(&ok(&[
        "cp",
        "--json",
        &format!("{s3}/a"),
        &format!("{az}/b"),
    ]));
    assert_eq!(hop["verified"], 1, "S3 source not checked: {hop}");
    let hop = summary(&ok(&[
        "cp",
        "--json",
        &format!("{az}/b"),
        &format!("{s3}/c"),
    ]));
    assert_eq!(hop["verified"], 1, "Azure source not checked: {hop}");
    ok(&["cp", &format!("{s3}/c"), s(&dir.join("back"))]);
    assert!(same_file(&src, &dir.join("back")));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn local_to_local() {
    let dir = temp_dir();
    random_file(&dir.join("a"), 9 * MIB + 1, 3);
    ok(&["cp", s(&dir.join("a")), s(&dir.join("b"))]);
    assert!(same_file(&dir.join("a"), &dir.join("b")));
    std::fs::remove_dir_all(dir).unwrap();
}

/// Local disk keeps no digest: the summary says the copy was not checked against one, rather
/// than `"verified": 0`, which reads as a check that failed.
#[test]
fn local_copies_say_unverified() {
    let dir = temp_dir();
    let (src, dst) = (dir.join("a"), dir.join("b"));
    random_file(&src, MIB + 7, 3);
    let out = summary(&ok(&["cp", "--json", s(&src), s(&dst)]));
    assert!(same_file(&src, &dst));
    assert_eq!(out["unverified"], 1, "{out}");
    assert!(out.get("verified").is_none(), "{out}");
    std::fs::remove_dir_all(dir).unwrap();
}
