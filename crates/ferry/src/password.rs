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

/// What `--password-command` prints. It is another program (a vault's client, say): it is
/// handed none of ferry's other secrets.
fn run(cmd: &str) -> Result<Vec<u8>> {
    let mut c = std::process::Command::new("sh");
    c.arg("-c").arg(cmd);
    for k in ferry_store::cloud::hidden_from_helpers() {
        c.env_remove(k);
    }
    let out = c
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("password command '{cmd}'"))?;
    if !out.status.success() {
        bail!("password command '{cmd}' failed ({})", out.status);
    }
    Ok(out.stdout)
}

/// The password; `confirm` asks twice on a terminal (for a new password).
pub fn password(g: &Global, confirm: bool) -> Result<Vec<u8>> {
    let pw = if let Some(p) = std::env::var_os("FERRY_PASSWORD") {
        p.into_encoded_bytes()
    } else if let Some(f) = &g.password_file {
        trim(std::fs::read(f).with_context(|| format!("password file {}", f.display()))?)
    } else if let Some(cmd) = &g.password_command {
        trim(run(cmd)?)
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

#[cfg(test)]
mod tests {
    /// A password command gets none of ferry's other secrets.
    #[test]
    fn a_password_command_is_not_handed_ferrys_secrets() {
        const SET: &[(&str, &str)] = &[
            ("FERRY_FROM_PASSWORD", "the source repository's password"),
            ("AZURE_STORAGE_SAS_KEY", "sv=1&sig=SIGSECRET"),
            ("FERRY_SERVE_TOKEN", "TOKSECRET"),
        ];
        // SAFETY: this test alone sets them; no other test here reads them.
        for (k, v) in SET {
            unsafe { std::env::set_var(k, v) };
        }
        let got = super::run(
            r#"test -z "$FERRY_FROM_PASSWORD$AZURE_STORAGE_SAS_KEY$FERRY_SERVE_TOKEN" || exit 9; echo pw"#,
        );
        for (k, _) in SET {
            unsafe { std::env::remove_var(k) };
        }
        let pw = got.expect("the command saw one of ferry's secrets");
        assert_eq!(super::trim(pw), b"pw");
    }
}
