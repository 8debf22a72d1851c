//! Bad input: one line on stderr, a non-zero exit, nothing written.

mod common;

use common::{fails_with, ferry, ferry_env, ok, s, temp_dir};
use ferry_testkit::random_file;

#[test]
fn unknown_scheme() {
    fails_with(
        &ferry(&["cp", "/etc/hostname", "gcs://bucket/x"]),
        "unknown scheme 'gcs'",
    );
}

#[test]
fn missing_source() {
    let dir = temp_dir();
    let out = ferry(&["cp", s(&dir.join("nope")), s(&dir.join("dst"))]);
    fails_with(&out, "No such file");
    assert!(!dir.join("dst").exists());
}

#[test]
fn directory_without_recursive() {
    let dir = temp_dir();
    fails_with(&ferry(&["cp", s(&dir), s(&dir.join("x"))]), "use -r");
}

#[test]
fn unreadable_source_writes_nothing() {
    let dir = temp_dir();
    let src = dir.join("secret");
    random_file(&src, 1000, 1);
    std::fs::set_permissions(&src, std::os::unix::fs::PermissionsExt::from_mode(0o000)).unwrap();
    let dst = dir.join("copy");
    let args = ["cp", s(&src), s(&dst)];
    // root reads anything: drop to nobody for this run.
    let out = if is_root() {
        let mut cmd = std::process::Command::new("setpriv");
        cmd.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            env!("CARGO_BIN_EXE_ferry"),
        ]);
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777))
            .unwrap();
        cmd.args(args).output().expect("setpriv (util-linux)")
    } else {
        ferry(&args)
    };
    fails_with(&out, "ermission denied");
    assert!(!dst.exists(), "a copy appeared");
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        1,
        "temp files left"
    );
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

#[test]
fn stream_into_a_directory() {
    let dir = temp_dir();
    let out = ferry_env(&["cp", "-", s(&dir)], &[], Some(b"data"));
    fails_with(&out, "is a directory");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
}

#[test]
fn destination_exists_as_a_directory() {
    let dir = temp_dir();
    random_file(&dir.join("name"), 10, 1);
    std::fs::create_dir_all(dir.join("out/name")).unwrap();
    let out = ferry(&[
        "cp",
        s(&dir.join("name")),
        &format!("{}/", s(&dir.join("out"))),
    ]);
    fails_with(&out, "exists as a directory");
    assert_eq!(std::fs::read_dir(dir.join("out/name")).unwrap().count(), 0);
}

#[test]
fn missing_bucket() {
    let Some(_) = ferry_testkit::s3() else { return };
    let bucket = ferry_testkit::unique("ferry-missing");
    fails_with(
        &ferry(&["cp", "/etc/hostname", &format!("s3://{bucket}/x")]),
        "NoSuchBucket",
    );
    fails_with(&ferry(&["ls", &format!("s3://{bucket}")]), "NoSuchBucket");
}

#[test]
fn missing_container() {
    let Some(_) = ferry_testkit::azure() else {
        return;
    };
    let c = ferry_testkit::unique("ferry-missing");
    fails_with(
        &ferry(&["cp", "/etc/hostname", &format!("az://{c}/x")]),
        "ContainerNotFound",
    );
}

#[test]
fn wrong_credentials() {
    let Some(_) = ferry_testkit::s3() else { return };
    let out = ok(&[
        "mkdir",
        &format!("s3://{}", ferry_testkit::unique("ferry-cred")),
    ]);
    drop(out);
    let out = ferry_env(
        &["cp", "/etc/hostname", "s3://whatever/x"],
        &[("AWS_SECRET_ACCESS_KEY", "wrong")],
        None,
    );
    fails_with(&out, "access denied");
    let Some(cs) = ferry_testkit::require("AZURE_STORAGE_CONNECTION_STRING") else {
        return;
    };
    let bad = cs.replace("AccountKey=E", "AccountKey=F");
    let out = ferry_env(
        &["cp", "/etc/hostname", "az://whatever/x"],
        &[("AZURE_STORAGE_CONNECTION_STRING", &bad)],
        None,
    );
    fails_with(&out, "access denied");
}

#[test]
fn bad_settings() {
    fails_with(
        &ferry(&["cp", "--block-size", "lots", "/etc/hostname", "/tmp/x"]),
        "bad size",
    );
    fails_with(
        &ferry(&["cp", "--concurrency", "0", "/etc/hostname", "/tmp/x"]),
        "at least 1",
    );
    let dir = temp_dir();
    std::fs::write(dir.join("ferry.toml"), "concurrency = \"many\"\n").unwrap();
    fails_with(
        &ferry(&["--config", s(&dir.join("ferry.toml")), "ls", s(&dir)]),
        "ferry.toml",
    );
}
