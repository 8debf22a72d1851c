//! Bad input: unreadable files are reported and left out while the backup goes on (exit 3);
//! a location that is not a repository and a second init are refused with one line.

mod repokit;

use std::os::unix::fs::PermissionsExt;

use repokit::{scratch, stderr, Repo};

fn one_line_error(out: &std::process::Output, needle: &str) {
    let err = stderr(out);
    assert!(!out.status.success(), "succeeded: {err}");
    assert!(err.contains(needle), "lacks '{needle}': {err}");
    assert_eq!(err.trim().lines().count(), 1, "not one line: {err}");
}

#[test]
fn unreadable_files_are_reported_and_skipped() {
    let dir = scratch("bk-unreadable");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("closed")).unwrap();
    std::fs::write(src.join("ok.txt"), b"readable").unwrap();
    std::fs::write(src.join("secret"), b"root only").unwrap();
    std::fs::write(src.join("closed/inner"), b"inside").unwrap();
    std::fs::set_permissions(src.join("secret"), std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::set_permissions(src.join("closed"), std::fs::Permissions::from_mode(0o700)).unwrap();
    let repo = Repo::local(&dir);
    // Root reads everything: run as nobody, for whom two entries are closed.
    let as_nobody = |args: &[&str]| {
        let mut c = std::process::Command::new("setpriv");
        c.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"])
            .arg(env!("CARGO_BIN_EXE_ferry"))
            .args(args)
            .env("FERRY_REPO", &repo.url)
            .env("FERRY_PASSWORD", "pw")
            .env("HOME", &dir);
        c.output().unwrap()
    };
    let init = as_nobody(&["init"]);
    assert!(init.status.success(), "{}", stderr(&init));
    let out = as_nobody(&["backup", src.to_str().unwrap()]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("secret") && err.contains("closed"), "{err}");
    assert!(err.contains("2 unreadable"), "{err}");
    let target = dir.join("out");
    let r = as_nobody(&["restore", "latest", "--target", target.to_str().unwrap()]);
    assert!(r.status.success(), "{}", stderr(&r));
    let base = target.join(src.strip_prefix("/").unwrap());
    assert_eq!(std::fs::read(base.join("ok.txt")).unwrap(), b"readable");
    assert!(!base.join("secret").exists());
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn not_a_repository_and_second_init() {
    let dir = scratch("bk-notrepo");
    std::fs::write(dir.join("file"), b"x").unwrap();
    let not = Repo {
        url: dir.display().to_string(),
        env: vec![("FERRY_PASSWORD".into(), "pw".into())],
    };
    one_line_error(&not.run(&["snapshots"], &[]), "is not a ferry repository");
    let repo = Repo::local(&dir);
    repo.ok(&["init"]);
    one_line_error(
        &repo.run(&["init"], &[]),
        "already holds a ferry repository",
    );
    one_line_error(
        &repo.run(&["backup", "/nonexistent/path"], &[]),
        "no such file or directory",
    );
    one_line_error(
        &repo.run(&["restore", "abcdef12", "--target", "/tmp/x"], &[]),
        "no snapshot abcdef12",
    );
    one_line_error(&repo.run(&["forget"], &[]), "no policy");
    std::fs::remove_dir_all(dir).unwrap();
}
