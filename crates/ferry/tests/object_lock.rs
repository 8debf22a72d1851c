//! Immutable backups on MinIO with S3 Object Lock: `init --lock-retention` makes the bucket
//! with Object Lock and a default retention, so every pack, index and snapshot written is
//! locked; `forget` keeps a locked snapshot and says until when; `prune` keeps a locked pack it
//! would delete and says why; a locked version survives a delete by its version id; the
//! repository stays whole. Bad lock settings are refused in one line.

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
