//! Running the real `ferry` binary from tests.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, Once, OnceLock};

/// Directories this test process made, removed when it exits.
static MADE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

extern "C" fn remove_made() {
    let made = MADE.lock().unwrap_or_else(|e| e.into_inner());
    for d in made.iter() {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// Removes `d` when the test process exits, passed or failed: tests leave nothing behind.
fn remember(d: &Path) {
    static HOOK: Once = Once::new();
    // SAFETY: remove_made is a plain function that only takes a lock and removes files.
    HOOK.call_once(|| unsafe {
        libc::atexit(remove_made);
    });
    MADE.lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(d.to_path_buf());
}

/// The metadata cache every ferry run of this process uses: never the user's own.
fn cache_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(temp_dir)
}

/// `ferry`, not started, with this process's cache.
fn command() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ferry"));
    cmd.env("FERRY_CACHE_DIR", cache_dir());
    cmd
}

/// Runs `ferry ARGS` with extra environment; returns its output.
pub fn ferry_env(args: &[&str], env: &[(&str, &str)], stdin: Option<&[u8]>) -> Output {
    let mut cmd = command();
    cmd.args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    let mut child = cmd.spawn().expect("run ferry");
    if let Some(data) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        let data = data.to_vec();
        std::thread::spawn(move || {
            let _ = pipe.write_all(&data);
        });
    }
    child.wait_with_output().expect("wait for ferry")
}

/// Runs `ferry ARGS` fed `data` on stdin in 1 MiB pieces, `pause` apart: a slow producer
/// such as pg_dump, so that early blocks finish while later ones are still being read.
pub fn ferry_slow_stdin(args: &[&str], data: Vec<u8>, pause: std::time::Duration) -> Output {
    let mut child = command()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run ferry");
    let mut pipe = child.stdin.take().unwrap();
    std::thread::spawn(move || {
        for piece in data.chunks(1 << 20) {
            if pipe.write_all(piece).is_err() {
                return;
            }
            std::thread::sleep(pause);
        }
    });
    child.wait_with_output().expect("wait for ferry")
}

/// Runs `ferry ARGS`.
pub fn ferry(args: &[&str]) -> Output {
    ferry_env(args, &[], None)
}

/// Runs `ferry ARGS` and insists it succeeds.
pub fn ok(args: &[&str]) -> Output {
    let out = ferry(args);
    assert!(
        out.status.success(),
        "ferry {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The `--json` summary of a run.
pub fn summary(out: &Output) -> serde_json::Value {
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("bad JSON {text:?}: {e}"))
}

/// Asserts a failed run with exactly one line on stderr that contains `needle`.
pub fn fails_with(out: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "expected failure, got success: {err}"
    );
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "expected one error line, got: {err}"
    );
    assert!(
        err.contains(needle),
        "error {err:?} does not mention {needle:?}"
    );
    assert!(err.starts_with("ferry: error: "), "{err}");
}

/// A fresh temp directory, removed when the test process exits.
pub fn temp_dir() -> PathBuf {
    let d = std::env::temp_dir().join(ferry_testkit::unique("ferry-it"));
    std::fs::create_dir_all(&d).unwrap();
    remember(&d);
    d
}

pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// An account SAS for Azurite's well-known account, signed as Azure does (version 2019-12-12).
pub fn azurite_sas(permissions: &str) -> String {
    use base64::prelude::{Engine, BASE64_STANDARD};
    use hmac::{Hmac, KeyInit, Mac};
    let key = BASE64_STANDARD
        .decode("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==")
        .unwrap();
    let (se, spr, sv) = ("2099-01-01T00:00:00Z", "https,http", "2019-12-12");
    let to_sign = format!("devstoreaccount1\n{permissions}\nb\nsco\n\n{se}\n\n{spr}\n{sv}\n");
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(&key).unwrap();
    mac.update(to_sign.as_bytes());
    let sig = BASE64_STANDARD.encode(mac.finalize().into_bytes());
    let sig = sig
        .replace('+', "%2B")
        .replace('/', "%2F")
        .replace('=', "%3D");
    format!("sv={sv}&ss=b&srt=sco&sp={permissions}&se={se}&spr={spr}&sig={sig}")
}
