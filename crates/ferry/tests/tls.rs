//! A TLS endpoint signed by a private CA, as on-premises MinIO and Ceph run: trusted through
//! --ca-cert or AWS_CA_BUNDLE, refused at once (not retried) without it.

mod common;

use common::{fails_with, ferry_env};

#[test]
fn private_ca_is_trusted_when_given_and_refused_otherwise() {
    let Some(endpoint) = ferry_testkit::require("FERRY_TEST_S3_TLS_ENDPOINT") else {
        return;
    };
    let Some(ca) = ferry_testkit::require("FERRY_TEST_CA") else {
        return;
    };
    let bucket = format!("s3://{}", ferry_testkit::unique("ferry-tls"));
    let key = format!("{bucket}/hostname");
    // Neither the system bundle nor anything else the machine trusts knows this CA.
    let plain = [
        ("AWS_ENDPOINT_URL", endpoint.as_str()),
        ("AWS_CA_BUNDLE", ""),
        ("SSL_CERT_FILE", ""),
    ];
    let with_ca = [
        ("AWS_ENDPOINT_URL", endpoint.as_str()),
        ("AWS_CA_BUNDLE", ca.as_str()),
        ("SSL_CERT_FILE", ""),
    ];

    let out = ferry_env(&["mkdir", "--ca-cert", &ca, &bucket], &plain, None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = ferry_env(&["cp", "/etc/hostname", &key], &with_ca, None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = ferry_env(&["cp", &key, "-"], &with_ca, None);
    assert_eq!(out.stdout, std::fs::read("/etc/hostname").unwrap());

    let out = ferry_env(
        &["cp", "--json", "/etc/hostname", &format!("{key}2")],
        &plain,
        None,
    );
    fails_with(&out, "--ca-cert");
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("attempts"),
        "a refused certificate was retried"
    );
}
