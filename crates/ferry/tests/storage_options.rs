//! Where and how objects are stored, on real servers: the storage class (S3 on MinIO, Azure's
//! access tier on Azurite, GCS's class on fake-gcs-server), S3 server-side encryption with KMS
//! (asked for, and a bucket's default) and with a customer key over TLS (MinIO), each refused
//! in one line where it cannot apply.

mod common;

use std::process::{Command, Output};

use common::{fails_with, ferry_env, s, temp_dir};

fn succeeds(out: &Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A header of `url`'s HEAD answer, signed for MinIO's root user (`curl --aws-sigv4`).
fn s3_header(url: &str, name: &str, extra: &[&str]) -> Option<String> {
    let out = Command::new("curl")
        .args([
            "-sI",
            "--aws-sigv4",
            "aws:amz:us-east-1:s3",
            "--user",
            "minioadmin:minioadmin",
        ])
        .args(extra)
        .arg(url)
        .output()
        .expect("curl");
    String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
    })
}

fn s3_bucket() -> Option<(String, String)> {
    let endpoint = ferry_testkit::require("AWS_ENDPOINT_URL")?;
    let name = ferry_testkit::unique("ferry-opts");
    succeeds(&ferry_env(&["mkdir", &format!("s3://{name}")], &[], None));
    Some((endpoint, name))
}

#[test]
fn the_storage_class_is_set_on_every_cloud_whole_and_in_blocks() {
    let Some((endpoint, bucket)) = s3_bucket() else {
        return;
    };
    let dir = temp_dir();
    let big = dir.join("big");
    ferry_testkit::random_file(&big, 12 << 20, 1);
    for (src, key) in [("/etc/hostname", "small"), (s(&big), "big")] {
        let url = format!("s3://{bucket}/{key}");
        succeeds(&ferry_env(
            &["cp", "--storage-class", "reduced_redundancy", src, &url],
            &[],
            None,
        ));
        let class = s3_header(
            &format!("{endpoint}/{bucket}/{key}"),
            "x-amz-storage-class",
            &[],
        );
        assert_eq!(class.as_deref(), Some("REDUCED_REDUNDANCY"), "{key}");
    }
    // A backup repository's files carry it too (ferry.toml's storage_class).
    let cfg = dir.join("ferry.toml");
    std::fs::write(&cfg, "storage_class = \"REDUCED_REDUNDANCY\"\n").unwrap();
    let repo = format!("s3://{bucket}/repo");
    let env = [("FERRY_PASSWORD", "pw"), ("FERRY_CONFIG", s(&cfg))];
    succeeds(&ferry_env(&["--repo", &repo, "init"], &env, None));
    let class = s3_header(
        &format!("{endpoint}/{bucket}/repo/config"),
        "x-amz-storage-class",
        &[],
    );
    assert_eq!(class.as_deref(), Some("REDUCED_REDUNDANCY"));

    // A class the cloud does not have: one line listing those it has.
    let out = ferry_env(
        &[
            "cp",
            "--storage-class",
            "NEARLINE",
            "/etc/hostname",
            &format!("s3://{bucket}/x"),
        ],
        &[],
        None,
    );
    fails_with(&out, "not one of S3's");

    if ferry_testkit::require("AZURE_STORAGE_CONNECTION_STRING").is_some() {
        let c = format!("az://{}", ferry_testkit::unique("ferry-tier"));
        succeeds(&ferry_env(&["mkdir", &c], &[], None));
        succeeds(&ferry_env(
            &[
                "cp",
                "--storage-class",
                "cool",
                s(&big),
                &format!("{c}/big"),
            ],
            &[],
            None,
        ));
        let tier = azure_tier(&c[5..], "big");
        assert_eq!(tier.as_deref(), Some("Cool"));
    }
    if let Some(url) = ferry_testkit::require("FERRY_TEST_GCS_URL") {
        let b = ferry_testkit::unique("ferry-class");
        succeeds(&ferry_env(&["mkdir", &format!("gs://{b}")], &[], None));
        for (src, key) in [("/etc/hostname", "small"), (s(&big), "big")] {
            let dst = format!("gs://{b}/{key}");
            succeeds(&ferry_env(
                &[
                    "cp",
                    "--storage-class",
                    "coldline",
                    "--block-size",
                    "1MiB",
                    src,
                    &dst,
                ],
                &[],
                None,
            ));
            let out = Command::new("curl")
                .arg("-s")
                .arg(format!("{url}/storage/v1/b/{b}/o/{key}"))
                .output()
                .unwrap();
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(v["storageClass"], "COLDLINE", "{key}: {v}");
        }
    }
}

/// The access tier Azurite reports for a blob, asked with a read-only account SAS.
fn azure_tier(container: &str, blob: &str) -> Option<String> {
    let url = format!("http://127.0.0.1:10000/devstoreaccount1/{container}/{blob}");
    let sas = common::azurite_sas("r");
    let out = Command::new("curl")
        .args(["-sI", &format!("{url}?{sas}")])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("x-ms-access-tier")
            .then(|| v.trim().to_string())
    })
}

#[test]
fn sse_kms_asked_for_and_a_bucket_default_both_round_trip() {
    let Some((endpoint, bucket)) = s3_bucket() else {
        return;
    };
    let dir = temp_dir();
    let src = dir.join("src");
    ferry_testkit::random_file(&src, 12 << 20, 2);
    let url = format!("s3://{bucket}/kms");
    let kms = ["--sse", "aws:kms", "--sse-kms-key-id", "ferry-test-key"];
    let mut args = vec!["cp"];
    args.extend(kms);
    args.extend([s(&src), url.as_str()]);
    succeeds(&ferry_env(&args, &[], None));
    let sse = s3_header(
        &format!("{endpoint}/{bucket}/kms"),
        "x-amz-server-side-encryption",
        &[],
    );
    assert_eq!(sse.as_deref(), Some("aws:kms"));
    // Read back by anyone with the bucket's rights (KMS decrypts), ETag no MD5 and no matter.
    let back = dir.join("back");
    succeeds(&ferry_env(&["cp", &url, s(&back)], &[], None));
    assert!(ferry_testkit::same_file(&src, &back));

    // A bucket that encrypts everything with KMS by default: plain uploads of many blocks.
    let other = ferry_testkit::unique("ferry-kmsdef");
    succeeds(&ferry_env(&["mkdir", &format!("s3://{other}")], &[], None));
    let rule = "<ServerSideEncryptionConfiguration><Rule><ApplyServerSideEncryptionByDefault>\
                <SSEAlgorithm>aws:kms</SSEAlgorithm><KMSMasterKeyID>ferry-test-key</KMSMasterKeyID>\
                </ApplyServerSideEncryptionByDefault></Rule></ServerSideEncryptionConfiguration>";
    // curl signs a body only when told its SHA-256; S3 wants its MD5 besides.
    let (md5, sha) = {
        use base64::prelude::{Engine, BASE64_STANDARD};
        use md5::{Digest, Md5};
        let sha = <sha2::Sha256 as sha2::Digest>::digest(rule.as_bytes());
        let hex: String = sha.iter().map(|b| format!("{b:02x}")).collect();
        (BASE64_STANDARD.encode(Md5::digest(rule.as_bytes())), hex)
    };
    let put = Command::new("curl")
        .args([
            "-sf",
            "-X",
            "PUT",
            "--aws-sigv4",
            "aws:amz:us-east-1:s3",
            "--user",
            "minioadmin:minioadmin",
        ])
        .args([
            "-H",
            &format!("Content-MD5: {md5}"),
            "-H",
            &format!("x-amz-content-sha256: {sha}"),
        ])
        .args(["-H", "Content-Type: application/xml", "--data", rule])
        .arg(format!("{endpoint}/{other}?encryption="))
        .status()
        .unwrap();
    assert!(put.success(), "setting the bucket's default encryption");
    let url = format!("s3://{other}/plain");
    succeeds(&ferry_env(&["cp", s(&src), &url], &[], None));
    assert_eq!(
        s3_header(
            &format!("{endpoint}/{other}/plain"),
            "x-amz-server-side-encryption",
            &[]
        )
        .as_deref(),
        Some("aws:kms")
    );
    let back = dir.join("back2");
    succeeds(&ferry_env(&["cp", &url, s(&back)], &[], None));
    assert!(ferry_testkit::same_file(&src, &back));

    // S3's settings on other clouds are refused, not ignored.
    let out = ferry_env(
        &["cp", "--sse", "aws:kms", "/etc/hostname", "az://c/x"],
        &[],
        None,
    );
    fails_with(&out, "are S3's");
}

#[test]
fn sse_c_round_trips_over_tls_and_is_refused_over_http_or_without_its_key() {
    let Some(endpoint) = ferry_testkit::require("FERRY_TEST_S3_TLS_ENDPOINT") else {
        return;
    };
    let Some(ca) = ferry_testkit::require("FERRY_TEST_CA") else {
        return;
    };
    let dir = temp_dir();
    let key = dir.join("key");
    std::fs::write(&key, ferry_testkit::random_bytes(32, 3)).unwrap();
    let src = dir.join("src");
    ferry_testkit::random_file(&src, 12 << 20, 4);
    let env = [
        ("AWS_ENDPOINT_URL", endpoint.as_str()),
        ("FERRY_CA_CERT", ca.as_str()),
    ];
    let bucket = format!("s3://{}", ferry_testkit::unique("ferry-ssec"));
    succeeds(&ferry_env(&["mkdir", &bucket], &env, None));
    let url = format!("{bucket}/secret");
    for (from, to) in [
        (s(&src).to_string(), url.clone()),
        (url.clone(), dir.join("back").display().to_string()),
    ] {
        succeeds(&ferry_env(
            &["cp", "--sse-c-key-file", s(&key), &from, &to],
            &env,
            None,
        ));
    }
    assert!(ferry_testkit::same_file(&src, &dir.join("back")));
    // Without the key: one line saying which is missing.
    let out = ferry_env(&["cp", &url, "-"], &env, None);
    fails_with(&out, "--sse-c-key-file");
    // Over plain HTTP the key would travel in clear: refused before any request.
    if let Some(plain) = ferry_testkit::require("AWS_ENDPOINT_URL") {
        let out = ferry_env(
            &[
                "cp",
                "--sse-c-key-file",
                s(&key),
                "/etc/hostname",
                "s3://x/y",
            ],
            &[("AWS_ENDPOINT_URL", plain.as_str())],
            None,
        );
        fails_with(&out, "is not https");
    }
    // A key file that holds no 256-bit key.
    std::fs::write(&key, "short").unwrap();
    let out = ferry_env(&["cp", "--sse-c-key-file", s(&key), &url, "-"], &env, None);
    fails_with(&out, "not a 256-bit key");
}
