//! Settings precedence: flags, then FERRY_* variables, then ferry.toml, then the cloud's own
//! variables. A dead endpoint at each lower level proves the higher one won.

mod common;

use common::{ferry_env, s, temp_dir};

#[test]
fn flags_beat_env_beat_file_beat_cloud_env() {
    let Some(live) = ferry_testkit::require("AWS_ENDPOINT_URL") else {
        return;
    };
    let dead = "http://127.0.0.1:9";
    let dir = temp_dir();
    let toml = dir.join("ferry.toml");
    let bucket = format!("s3://{}", ferry_testkit::unique("ferry-cfg"));
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let mut a = vec!["--config", s(&toml), "--retries", "1"];
        a.extend_from_slice(args);
        ferry_env(&a, env, None).status.success()
    };

    // The file beats the cloud's variables.
    std::fs::write(&toml, format!("[s3]\nendpoint = \"{live}\"\n")).unwrap();
    assert!(
        run(&["mkdir", &bucket], &[("AWS_ENDPOINT_URL", dead)]),
        "ferry.toml lost to AWS_ENDPOINT_URL"
    );
    // FERRY_* beats the file.
    std::fs::write(&toml, format!("[s3]\nendpoint = \"{dead}\"\n")).unwrap();
    assert!(
        run(&["ls", &bucket], &[("FERRY_S3_ENDPOINT", &live)]),
        "FERRY_S3_ENDPOINT lost to ferry.toml"
    );
    // A flag beats FERRY_*.
    assert!(
        run(
            &["--s3-endpoint", &live, "ls", &bucket],
            &[("FERRY_S3_ENDPOINT", dead)]
        ),
        "--s3-endpoint lost to FERRY_S3_ENDPOINT"
    );
    // And the dead endpoint really is dead.
    assert!(!run(&["ls", &bucket], &[]), "the dead endpoint answered");
    std::fs::remove_dir_all(dir).unwrap();
}

/// Boolean settings take what people type: 1/0, yes/no, on/off, true/false.
#[test]
fn boolean_variables_take_what_people_type() {
    let dir = temp_dir();
    let parsed = |v: &str| {
        let out = ferry_env(
            &["wal-status", "-D", s(&dir)],
            &[("FERRY_WAL_ASYNC", v), ("FERRY_REPO", s(&dir.join("none")))],
            None,
        );
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        (!err.contains("invalid value"), err)
    };
    for v in ["1", "0", "yes", "no", "on", "off", "true", "false", "TRUE"] {
        let (ok, err) = parsed(v);
        assert!(ok, "FERRY_WAL_ASYNC={v}: {err}");
    }
    assert!(!parsed("maybe").0);
}
