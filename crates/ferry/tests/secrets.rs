//! Secrets never shown: repository passwords, PostgreSQL passwords and cloud keys, each a
//! distinctive string, are looked for in everything the real binary prints (stdout, stderr,
//! `--json`, `-vvv` logs) on the paths where they are most likely to slip: a wrong password,
//! a bad or unreachable connection, a refused credential. Flags that would put a secret on
//! the command line (readable by every local user) are refused without repeating it.

mod repokit;

use std::process::Output;

use repokit::{scratch, Repo};

const REPO_PW: &str = "REPO-SECRET-xyzzy";
const WRONG_PW: &str = "WRONG-SECRET-plugh";
const PG_PW: &str = "PG-SECRET-frotz";
const CLOUD_KEY: &str = "CLOUD-SECRET-gnusto";

/// Fails when any secret appears anywhere in `out`; returns stderr.
fn clean(out: &Output) -> String {
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    for s in [REPO_PW, WRONG_PW, PG_PW, CLOUD_KEY] {
        assert!(!all.contains(s), "{s} shown: {all}");
    }
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn repo(tag: &str) -> (std::path::PathBuf, Repo) {
    let dir = scratch(tag);
    let mut repo = Repo::local(&dir);
    repo.env = vec![("FERRY_PASSWORD".into(), REPO_PW.into())];
    repo.ok(&["init"]);
    (dir, repo)
}

#[test]
fn repository_passwords_are_never_shown() {
    let (dir, repo) = repo("sec-pw");
    let wrong = [("FERRY_PASSWORD", WRONG_PW)];
    for args in [
        &["snapshots"][..],
        &["-vvv", "snapshots"],
        &["--json", "snapshots"],
        &["-vvv", "key", "list"],
    ] {
        let out = repo.run(args, &wrong);
        assert!(!out.status.success());
        assert!(clean(&out).contains("wrong password"));
        let out = repo.run(args, &[]);
        assert!(out.status.success(), "{}", clean(&out));
        clean(&out);
    }
    let out = repo.run(
        &["-vvv", "key", "passwd"],
        &[("FERRY_NEW_PASSWORD", WRONG_PW)],
    );
    assert!(out.status.success(), "{}", clean(&out));
    clean(&out);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn postgres_passwords_are_redacted_and_refused_on_the_command_line() {
    let (dir, repo) = repo("sec-pg");
    let url = format!("postgres://u:{PG_PW}@127.0.0.1:1/db");
    let kv = format!("host=127.0.0.1 port=1 password={PG_PW}");
    // On the command line: refused before anything runs, the password not repeated.
    for c in [&url, &kv] {
        let out = repo.run(&["pg", "backup", "--conninfo", c], &[]);
        assert_eq!(out.status.code(), Some(2));
        assert!(clean(&out).contains("PGPASSWORD"));
    }
    // From the environment: accepted, and redacted in every error.
    for (env, c) in [
        ("FERRY_PG_CONNINFO", url.as_str()),
        ("FERRY_PG_CONNINFO", kv.as_str()),
        ("FERRY_PG_CONNINFO", &format!("{kv} nonsense")),
    ] {
        let out = repo.run(
            &["-vvv", "pg", "backup"],
            &[(env, c), ("PGPASSWORD", PG_PW)],
        );
        assert!(!out.status.success());
        let err = clean(&out);
        assert!(
            err.contains("PostgreSQL") || err.contains("connection"),
            "{err}"
        );
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn cloud_keys_are_never_shown_nor_taken_from_the_command_line() {
    let dir = scratch("sec-cloud");
    let src = dir.join("f");
    std::fs::write(&src, b"x").unwrap();
    let ferry = |args: &[&str], env: &[(&str, &str)]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_ferry"))
            .args(args)
            .envs(env.iter().copied())
            .env("HOME", &dir)
            .output()
            .unwrap()
    };
    let cs = format!("AccountName=devstoreaccount1;AccountKey={CLOUD_KEY}");
    let out = ferry(&["--azure-connection-string", &cs, "ls", "az://c/"], &[]);
    assert_eq!(out.status.code(), Some(2));
    clean(&out);
    if ferry_testkit::require("AWS_ENDPOINT_URL").is_some() {
        // A refused secret key: the error names the request, never the key.
        let to = format!("s3://{}/x", ferry_testkit::unique("sec"));
        let out = ferry(
            &["-vvv", "cp", src.to_str().unwrap(), &to],
            &[("AWS_SECRET_ACCESS_KEY", CLOUD_KEY), ("FERRY_RETRIES", "1")],
        );
        assert!(!out.status.success());
        clean(&out);
    }
    if let Some(good) = ferry_testkit::require("AZURE_STORAGE_CONNECTION_STRING") {
        // A wrong account key in the environment, where it belongs: refused, never shown.
        let bad = good.replace("AccountKey=", &format!("AccountKey={CLOUD_KEY}"));
        let out = ferry(
            &["-vvv", "ls", "az://nothere/"],
            &[
                ("AZURE_STORAGE_CONNECTION_STRING", bad.as_str()),
                ("FERRY_RETRIES", "1"),
            ],
        );
        assert!(!out.status.success());
        clean(&out);
    }
    std::fs::remove_dir_all(dir).unwrap();
}
