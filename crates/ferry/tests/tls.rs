//! TLS endpoints as on-premises MinIO and Ceph run them: a certificate signed by a private CA,
//! and a self-signed one made as the how-tos make it (its own CA), each trusted through --ca-cert
//! or AWS_CA_BUNDLE and refused at once (not retried) without it, in one line that says what was
//! presented and what was expected.

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

#[test]
fn a_self_signed_certificate_given_as_ca_cert_is_trusted_with_its_name_checked() {
    let Some(endpoint) = ferry_testkit::require("FERRY_TEST_S3_SELF_ENDPOINT") else {
        return;
    };
    let Some(cert) = ferry_testkit::require("FERRY_TEST_SELF_CERT") else {
        return;
    };
    let Some(other_ca) = ferry_testkit::require("FERRY_TEST_CA") else {
        return;
    };
    let bucket = format!("s3://{}", ferry_testkit::unique("ferry-self"));
    let key = format!("{bucket}/hostname");
    let env = [
        ("AWS_ENDPOINT_URL", endpoint.as_str()),
        ("AWS_CA_BUNDLE", ""),
        ("SSL_CERT_FILE", ""),
    ];
    let ok = |args: &[&str]| {
        let out = ferry_env(args, &env, None);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    };
    ok(&["mkdir", "--ca-cert", &cert, &bucket]);
    ok(&["cp", "--ca-cert", &cert, "/etc/hostname", &key]);
    let out = ok(&["cp", "--ca-cert", &cert, &key, "-"]);
    assert_eq!(out.stdout, std::fs::read("/etc/hostname").unwrap());

    // Another file: refused, naming the certificate presented and the file expected.
    let out = ferry_env(&["cp", "--ca-cert", &other_ca, &key, "-"], &env, None);
    fails_with(&out, "presented 'CN=127.0.0.1'");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&other_ca) && err.contains("CN=ferry test CA"),
        "{err}"
    );
    // The right file for another name: refused too.
    let by_name = endpoint.replace("127.0.0.1", "localhost");
    let env_name = [
        ("AWS_ENDPOINT_URL", by_name.as_str()),
        ("AWS_CA_BUNDLE", ""),
        ("SSL_CERT_FILE", ""),
    ];
    let out = ferry_env(&["cp", "--ca-cert", &cert, &key, "-"], &env_name, None);
    fails_with(&out, "not valid for this host name");
}
