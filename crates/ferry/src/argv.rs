//! Secrets never ride on the command line: every local user can read a process's arguments
//! (`ps`, `/proc/<pid>/cmdline`). The flags that could carry one, and URLs with a SAS token,
//! are refused when they do, before anything runs, naming where the secret belongs instead.

use std::ffi::OsString;

use ferry_store::{Location, Secret};

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
        if Location::secret_in(a) == Some(Secret::Sas) {
            let shown = Location::shown(a);
            return Some(format!(
                "'{shown}?...' carries a SAS token, readable by every local user on the command \
                 line: set AZURE_STORAGE_SAS_TOKEN (and give the URL without its query), or put \
                 the URL in FERRY_REPO or ferry.toml"
            ));
        }
        // A store URL with user info: restic users write passwords there.
        if has_user_info(a) {
            return Some(format!(
                "'{}' carries a user name or password, readable by every local user on the \
                 command line (and refused anywhere): give the tenant token in FERRY_SERVE_TOKEN \
                 or --serve-token-file, a store's keys in its credential variables \
                 (AWS_SECRET_ACCESS_KEY, AZURE_STORAGE_KEY, ...)",
                Location::shown(a)
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

/// Whether `arg` (or the value of `--flag=arg`) is a store or endpoint URL with user info
/// (`NAME:SECRET@` before its host). PostgreSQL URLs are `--conninfo`'s, checked there.
pub fn has_user_info(arg: &str) -> bool {
    let Some((scheme, _)) = arg.split_once("://") else {
        return false;
    };
    let scheme = scheme.rsplit('=').next().unwrap_or_default();
    let store = [
        "s3",
        "az",
        "azure",
        "gs",
        "rados",
        "ferry+https",
        "https",
        "http",
    ]
    .contains(&scheme.to_ascii_lowercase().as_str());
    store && Location::secret_in(arg) == Some(Secret::UserInfo)
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

    #[test]
    fn user_info_in_a_store_url_is_refused_and_not_repeated() {
        let cases: [&[&str]; 4] = [
            &[
                "ferry",
                "--repo",
                "ferry+https://t:TOKSECRET@h:8443/t/r",
                "init",
            ],
            &[
                "ferry",
                "--repo=ferry+https://t:TOKSECRET@h:8443/t/r",
                "init",
            ],
            &["ferry", "cp", "f", "s3://AKIA:TOKSECRET@b/k"],
            &[
                "ferry",
                "--s3-endpoint",
                "https://u:TOKSECRET@minio:9000",
                "ls",
            ],
        ];
        for args in cases {
            let e = check(args).expect("refused");
            assert!(
                e.contains("FERRY_SERVE_TOKEN") && !e.contains("TOKSECRET"),
                "{e}"
            );
        }
        // A secret with a `/` in it looks like a bucket with a `:` then a key with an `@`.
        let e = check(&["ferry", "cp", "f", "s3://AKIA:TOK/SEKRIT@b/k"]).expect("refused");
        assert!(!e.contains("SEKRIT") && !e.contains("TOK/"), "{e}");
        assert!(check(&["ferry", "cp", "f", "s3://b/k@v1"]).is_none());
        assert!(check(&["ferry", "cp", "f", "/tmp/me@host"]).is_none());
        // PostgreSQL URLs are --conninfo's: a user without a password is fine there.
        assert!(check(&["ferry", "pg", "backup", "--conninfo", "postgres://u@h/db"]).is_none());
    }
}
