//! Secrets never ride on the command line: every local user can read a process's arguments
//! (`ps`, `/proc/<pid>/cmdline`). The flags that could carry one, and URLs with a SAS token,
//! are refused when they do, before anything runs, naming where the secret belongs instead.

use std::ffi::OsString;

/// Why the command line `args` must be refused, if it holds a secret.
pub fn secret_on_command_line(args: &[OsString]) -> Option<String> {
    let args: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    for (i, a) in args.iter().enumerate() {
        let value = |flag: &str| {
            a.strip_prefix(&format!("{flag}="))
                .map(str::to_string)
                .or_else(|| (a == flag).then(|| args.get(i + 1).cloned().unwrap_or_default()))
        };
        if value("--azure-connection-string").is_some() {
            return Some(
                "--azure-connection-string on the command line is readable by every local user: \
                 set FERRY_AZURE_CONNECTION_STRING or AZURE_STORAGE_CONNECTION_STRING instead"
                    .into(),
            );
        }
        // An Azure URL with a SAS token in its query: the token is the credential.
        if has_sas(a) {
            let shown = a.split('?').next().unwrap_or_default();
            return Some(format!(
                "'{shown}?...' carries a SAS token, readable by every local user on the command \
                 line: set AZURE_STORAGE_SAS_TOKEN (and give the URL without its query), or put \
                 the URL in FERRY_REPO or ferry.toml"
            ));
        }
        for (flag, env) in [
            ("--conninfo", "FERRY_PG_CONNINFO"),
            ("--primary-conninfo", "FERRY_PG_PRIMARY_CONNINFO"),
        ] {
            if let Some(c) = value(flag).filter(|c| ferry_pg::conn::has_password(c)) {
                return Some(format!(
                    "{flag} '{}' holds a password, readable by every local user on the command \
                     line: set PGPASSWORD (or {env}) instead",
                    ferry_pg::conn::redact(&c)
                ));
            }
        }
    }
    None
}

/// Whether `url` carries an Azure SAS token in its query (the token is the credential).
pub fn has_sas(url: &str) -> bool {
    url.contains("://") && ["sig=", "sig%3D", "SIG="].iter().any(|m| url.contains(m))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(args: &[&str]) -> Option<String> {
        let v: Vec<OsString> = args.iter().map(OsString::from).collect();
        secret_on_command_line(&v)
    }

    #[test]
    fn secrets_in_flags_are_refused_and_not_repeated() {
        let e = check(&[
            "ferry",
            "pg",
            "backup",
            "--conninfo",
            "host=h password=hunter2",
        ]);
        let e = e.expect("refused");
        assert!(e.contains("PGPASSWORD") && !e.contains("hunter2"), "{e}");
        assert!(check(&["ferry", "--conninfo=postgres://u:hunter2@h/db"]).is_some());
        assert!(check(&["ferry", "--azure-connection-string", "AccountKey=x"]).is_some());
        assert!(check(&["ferry", "pg", "backup", "--conninfo", "host=h user=u"]).is_none());
        let e = check(&[
            "ferry",
            "pg",
            "backup",
            "--primary-conninfo",
            "host=p password=hunter2",
        ])
        .expect("refused");
        assert!(
            e.contains("FERRY_PG_PRIMARY_CONNINFO") && !e.contains("hunter2"),
            "{e}"
        );
        assert!(check(&["ferry", "cp", "a", "b"]).is_none());
        let e = check(&[
            "ferry",
            "cp",
            "f",
            "https://a.blob.core.windows.net/c/f?sv=1&sig=abc",
        ]);
        let e = e.expect("refused");
        assert!(
            e.contains("AZURE_STORAGE_SAS_TOKEN") && !e.contains("abc"),
            "{e}"
        );
        assert!(check(&["ferry", "cp", "f", "https://a.blob.core.windows.net/c/f"]).is_none());
    }
}
