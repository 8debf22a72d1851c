//! `copy --from-repo`: snapshots move between repositories with different passwords, restore
//! byte-identical from the new one, deduplicate on arrival (a second snapshot sharing most
//! data adds little), are not copied twice; bad input changes nothing. To a local
//! repository and to MinIO.

mod repokit;

use std::path::Path;

use repokit::{assert_same_tree, scratch, stderr, Repo};

/// Arguments, environment, and what stderr must say.
type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);

fn copied(to: &Repo, dir: &Path) {
    let from = Repo {
        url: dir.join("from").display().to_string(),
        env: vec![("FERRY_PASSWORD".into(), "another one".into())],
    };
    let src = dir.join("src");
    repokit::corpus(&src, 8 << 20);
    std::thread::sleep(std::time::Duration::from_millis(2100));
    from.ok(&["init"]);
    let s = src.to_str().unwrap();
    let first = from.ok(&["--json", "backup", s, "--tag", "one"]);
    std::fs::write(src.join("added"), b"new in the second").unwrap();
    from.ok(&["--json", "backup", s, "--tag", "two"]);
    to.ok(&["init"]);
    let from_env = [("FERRY_FROM_PASSWORD", "another one")];
    let run = |args: &[&str]| {
        let mut a = vec!["--json", "copy", "--from-repo", from.url.as_str()];
        a.extend(args);
        let out = to.run(&a, &from_env);
        assert!(out.status.success(), "copy {args:?}: {}", stderr(&out));
        repokit::last_json(&out.stdout)
    };

    let c1 = run(&["--tag", "one"]);
    assert_eq!(c1["copied"].as_array().unwrap().len(), 1, "{c1}");
    // As much new data as the first backup stored (blob for blob, named again).
    let stored = first["summary"]["bytes_new"].as_u64().unwrap();
    let new = c1["bytes_new"].as_u64().unwrap();
    assert!(
        new >= stored * 9 / 10 && new <= stored * 11 / 10,
        "{c1} vs {first}"
    );
    // The second shares all but one small file with the first: deduplicated on arrival.
    let c2 = run(&[]);
    assert_eq!(c2["copied"].as_array().unwrap().len(), 1, "{c2}");
    assert_eq!(c2["skipped"].as_array().unwrap().len(), 1, "{c2}");
    assert!(c2["bytes_new"].as_u64().unwrap() < 1 << 20, "{c2}");
    let again = run(&[]);
    assert_eq!(again["skipped"].as_array().unwrap().len(), 2, "{again}");
    assert_eq!(again["blobs_new"], 0, "{again}");

    let snaps = to.ok(&["--json", "snapshots"]);
    assert_eq!(snaps.as_array().unwrap().len(), 2);
    to.ok(&["check", "--read-data"]);
    let out = dir.join("out");
    to.ok(&[
        "restore",
        "latest",
        "--tag",
        "two",
        "--target",
        out.to_str().unwrap(),
    ]);
    assert_same_tree(&src, &out.join(src.strip_prefix("/").unwrap()));

    // Bad input: one line, nothing copied.
    let f = from.url.as_str();
    let cases: [Case; 3] = [
        (
            &["copy", "--from-repo", f],
            &[("FERRY_FROM_PASSWORD", "wrong")],
            "--from-repo",
        ),
        (
            &["copy", "--from-repo", f, "zzzz"],
            &from_env,
            "'zzzz' is no snapshot",
        ),
        (
            &["copy", "--from-repo", f],
            &[],
            "no password for --from-repo",
        ),
    ];
    for (args, env, needle) in cases {
        let out = to.run(args, env);
        let err = stderr(&out);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
    }
    assert_eq!(to.ok(&["--json", "snapshots"]), snaps);
}

#[test]
fn copy_local() {
    let dir = scratch("copy-local");
    let to = Repo::local(&dir);
    copied(&to, &dir);
    let itself = to.run(
        &["copy", "--from-repo", to.url.as_str()],
        &[("FERRY_FROM_PASSWORD", "correct horse")],
    );
    assert!(
        stderr(&itself).contains("--from-repo is --repo itself"),
        "{}",
        stderr(&itself)
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn copy_minio() {
    let Some(to) = Repo::s3() else { return };
    let dir = scratch("copy-s3");
    copied(&to, &dir);
    std::fs::remove_dir_all(dir).unwrap();
}

/// A source repository whose password holder wrote a listing with a name no entry may have:
/// copy refuses that snapshot, and the destination stays one that `check` finds sound.
#[test]
fn a_hostile_source_snapshot_is_not_copied() {
    let dir = scratch("copy-hostile");
    let from = Repo::local(&dir.join("a"));
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("f"), b"a file").unwrap();
    from.ok(&["init"]);
    from.ok(&["backup", src.to_str().unwrap()]);
    repokit::forge(Path::new(&from.url), |nodes| {
        let mut n = nodes[0].clone();
        n.name = "..".into();
        nodes.push(n);
    });
    let to = Repo::local(&dir.join("b"));
    to.ok(&["init"]);
    let out = to.run(
        &["copy", "--from-repo", from.url.as_str()],
        &[("FERRY_FROM_PASSWORD", "correct horse")],
    );
    assert!(!out.status.success(), "a hostile snapshot was copied");
    assert!(stderr(&out).contains("not copied"), "{}", stderr(&out));
    to.ok(&["check"]);
    std::fs::remove_dir_all(dir).unwrap();
}
