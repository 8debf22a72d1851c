//! The repository password: `FERRY_PASSWORD`, `--password-file`, `--password-command`, or a
//! prompt on a terminal, in that order.

use std::io::IsTerminal;

use anyhow::{bail, Context, Result};

use crate::cli::Global;

fn trim(mut b: Vec<u8>) -> Vec<u8> {
    while b.last().is_some_and(|c| *c == b'\n' || *c == b'\r') {
        b.pop();
    }
    b
}

/// The password; `confirm` asks twice on a terminal (for a new password).
pub fn password(g: &Global, confirm: bool) -> Result<Vec<u8>> {
    let pw = if let Some(p) = std::env::var_os("FERRY_PASSWORD") {
        p.into_encoded_bytes()
    } else if let Some(f) = &g.password_file {
        trim(std::fs::read(f).with_context(|| format!("password file {}", f.display()))?)
    } else if let Some(cmd) = &g.password_command {
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(cmd)
            .stderr(std::process::Stdio::inherit())
            .output()
            .with_context(|| format!("password command '{cmd}'"))?;
        if !out.status.success() {
            bail!("password command '{cmd}' failed ({})", out.status);
        }
        trim(out.stdout)
    } else if std::io::stdin().is_terminal() {
        let p = rpassword::prompt_password("repository password: ")?;
        if confirm && rpassword::prompt_password("again: ")? != p {
            bail!("the passwords differ");
        }
        p.into_bytes()
    } else {
        bail!("no password: set FERRY_PASSWORD, --password-file or --password-command");
    };
    if pw.is_empty() {
        bail!("empty password");
    }
    Ok(pw)
}
