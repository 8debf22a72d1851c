//! Connecting the way libpq does: a conninfo string or URL, with `PGHOST`, `PGPORT`,
//! `PGUSER`, `PGDATABASE` and `PGPASSWORD` filling in what it leaves out, and the password
//! file (`passfile=`, else `PGPASSFILE`, else `~/.pgpass`) when nothing gave a password.

use std::path::PathBuf;

use ferry_transfer::{Error, Result};
use tokio_postgres::{Client, Config};

use crate::tls::{self, Tls};
use crate::{libpq, passfile};

/// The configuration `conninfo` (may be empty) and the environment give, and its TLS
/// settings (docs/pg.md: `sslmode`, `sslrootcert`).
pub fn config(conninfo: &str) -> Result<(Config, Tls)> {
    let (rest, mut taken) = libpq::take(conninfo)?;
    let tls = tls::settings(&mut taken)?;
    let mut c: Config = if rest.trim().is_empty() {
        Config::new()
    } else {
        rest.parse().map_err(|e| {
            Error::Invalid(format!("bad connection string '{}': {e}", redact(conninfo)))
        })?
    };
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    if c.get_hosts().is_empty() {
        let host = env("PGHOST").unwrap_or_else(|| "/var/run/postgresql".into());
        for h in host.split(',') {
            c.host(h);
        }
    }
    if c.get_ports().is_empty() {
        let port = env("PGPORT").unwrap_or_else(|| "5432".into());
        let port = port
            .parse()
            .map_err(|_| Error::Invalid(format!("PGPORT '{port}' is not a port")))?;
        c.port(port);
    }
    if c.get_user().is_none() {
        let user = env("PGUSER")
            .or_else(|| env("USER"))
            .unwrap_or_else(|| "postgres".into());
        c.user(&user);
    }
    if c.get_dbname().is_none() {
        let db = env("PGDATABASE").unwrap_or_else(|| c.get_user().unwrap_or("postgres").into());
        c.dbname(&db);
    }
    // As in libpq: the string's `passfile`, else PGPASSFILE, else ~/.pgpass.
    let file = taken.remove("passfile").filter(|v| !v.is_empty());
    let file = file.map(PathBuf::from);
    let file = file.or_else(passfile::path);
    if c.get_password().is_none() {
        let from_file = || {
            let host = match c.get_hosts().first()? {
                tokio_postgres::config::Host::Tcp(h) => h.clone(),
                tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
            };
            let port = c.get_ports().first().copied().unwrap_or(5432);
            let (db, user) = (c.get_dbname()?, c.get_user()?);
            passfile::lookup(file.as_deref()?, &host, port, db, user)
        };
        if let Some(pw) = env("PGPASSWORD").or_else(from_file) {
            c.password(pw);
        }
    }
    c.application_name("ferry");
    c.ssl_mode(tls.ssl_mode());
    Ok((c, tls))
}

/// True when `conninfo` carries a password (`password=` or another of libpq's secrets in
/// either form, or `user:pw@` in a URL), or may (it is malformed): on a command line every
/// local user can read it in `ps`.
pub fn has_password(conninfo: &str) -> bool {
    redact(conninfo) != conninfo
}

/// `conninfo` with its password replaced by `***`, for messages: the value of every
/// `password` setting (and libpq's other secrets, [`libpq::is_secret`]) as libpq reads them
/// ([`libpq::pairs`]: quoted or not, key=value form or a URL query, its key percent-encoded
/// or not, in any case), a URL's `user:password@` under either reading
/// ([`libpq::url_passwords`]), and in a string neither reader would take, all from where it
/// stops making sense or from the first password on, whichever comes first.
pub fn redact(conninfo: &str) -> String {
    let mut hide = libpq::url_passwords(conninfo);
    let pairs = match libpq::pairs(conninfo) {
        Ok(pairs) => pairs,
        Err(bad) => {
            let from = malformed_from(&hide, &bad);
            hide.push(from..conninfo.len());
            bad.before
        }
    };
    hide.extend(
        pairs
            .into_iter()
            .filter(|p| libpq::is_secret(&p.key))
            .map(|p| p.value_span),
    );
    // One pass over the string, the ranges merged: one inside another (a value that looks
    // like a URL) must not move the other's bounds.
    hide.sort_by_key(|r| r.start);
    let (mut out, mut at) = (String::new(), 0);
    for r in hide {
        if r.end <= at && at > 0 {
            continue;
        }
        if r.start >= at {
            out.push_str(&conninfo[at..r.start]);
            out.push_str("***");
        }
        at = at.max(r.end);
    }
    out.push_str(&conninfo[at..]);
    out
}

/// Where [`redact`] hides all from in a malformed string (`bad`): where it went wrong, or
/// the first password's value (or a URL's user info's, in `urls`) if that comes earlier.
/// What a malformed string has after a password may be more of it: an unquoted password
/// with spaces makes settings of its words ("password=correct horse battery").
fn malformed_from(urls: &[std::ops::Range<usize>], bad: &libpq::Malformed) -> usize {
    let secrets = bad.before.iter().filter(|p| libpq::is_secret(&p.key));
    let starts = secrets.map(|p| p.value_span.start);
    let starts = starts.chain(urls.iter().map(|r| r.start));
    starts.fold(bad.at, usize::min)
}

/// A connected client; the connection runs on its own task.
pub async fn connect(conninfo: &str) -> Result<Client> {
    let (cfg, tls) = config(conninfo)?;
    let (client, conn) = cfg.connect(tls.connector()?).await.map_err(|e| {
        Error::Invalid(format!(
            "cannot connect to PostgreSQL ({}): {}",
            describe(&cfg),
            pg_message(&e)
        ))
    })?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!("connection closed: {e}");
        }
    });
    Ok(client)
}

fn describe(c: &Config) -> String {
    let host = match c.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        Some(tokio_postgres::config::Host::Unix(p)) => p.display().to_string(),
        None => "?".into(),
    };
    format!(
        "host {host} port {} user {}",
        c.get_ports().first().copied().unwrap_or(5432),
        c.get_user().unwrap_or("?")
    )
}

/// The server's message for `e` when it sent one, else the error itself.
pub fn pg_message(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => db.message().to_string(),
        None => {
            let mut s = e.to_string();
            let mut src = std::error::Error::source(e);
            while let Some(inner) = src {
                s = format!("{s}: {inner}");
                src = inner.source();
            }
            s
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted_in_every_form() {
        for (given, shown) in [
            (
                "host=h password=s3cret user=u",
                "host=h password=*** user=u",
            ),
            (
                "host=h password = 's3 cr\\'et' user=u",
                "host=h password = *** user=u",
            ),
            ("postgres://u:s3cret@h:5/db", "postgres://u:***@h:5/db"),
            ("postgres://u:s3?c@ret@h/db?x=1", "postgres://***"),
            (
                "host=h password=s3\\ cret user=u",
                "host=h password=*** user=u",
            ),
            (
                "postgresql://u@h/db?password=s3cret&sslmode=require",
                "postgresql://u@h/db?password=***&sslmode=require",
            ),
            ("host=h user=u", "host=h user=u"),
            // Read as libpq reads them: '&' ends nothing in key=value form, a URL's keys are
            // percent-decoded, and a quote left open swallows the rest.
            ("host=h password=se&cret", "host=h password=***"),
            (
                "postgres://h/db?pass%77ord=s3cret&port=1",
                "postgres://h/db?pass%77ord=***&port=1",
            ),
            ("user=u password='se cret host=h", "user=u password=***"),
            (
                "application_name='password=x' user=u",
                "application_name='password=x' user=u",
            ),
            // Where libpq and tokio-postgres split, either one: a vertical tab, Unicode spaces.
            ("user=u\x0bpassword=secret", "user=u\x0bpassword=***"),
            (
                "user=u\u{a0}password=secret host=h",
                "user=u\u{a0}password=*** host=h",
            ),
            // Exactly one '=': "user= = password=x" sets user to '=', then a password.
            ("user= = password=secret", "user= = password=***"),
            ("sslmode password=secret", "sslmode***"),
            ("PASSWORD=secret", "PASSWORD=***"),
            // libpq's other secrets, which tokio-postgres refuses by name.
            ("sslpassword=secret host=h", "sslpassword=*** host=h"),
            // A value that looks like a URL: one range inside another.
            ("password=Xk9://a:b@Qz host=h", "password=*** host=h"),
            ("password=a://b:@\u{e9}\u{e9} x", "password=***"),
            // Malformed after a password: all hidden from its value on, as what follows may
            // be more of it (spaces unquoted, a URL's '&' not percent-encoded).
            ("password=secret x", "password=***"),
            (
                "host=db password=correct horse battery",
                "host=db password=***",
            ),
            (
                "host=db password=correct horse=battery",
                "host=db password=***",
            ),
            (
                "postgres://h/db?password=a&horse",
                "postgres://h/db?password=***",
            ),
            (
                "postgres://h/db?password=a&horse=b",
                "postgres://h/db?password=***",
            ),
            ("postgres://u:pw@h/db?horse", "postgres://u:***"),
            ("host=h user=u x", "host=h user=u x***"),
            // A URL that libpq and tokio-postgres read differently ('/' or '@' in a password).
            ("postgres://app:Xy/9kL@db/prod", "postgres://***"),
            ("postgres://u:p@h@x/db", "postgres://***"),
            ("postgres://u:p%40h@x/db", "postgres://u:***@x/db"),
            // A URL's user info ends at its '@': spaces in it are the password's.
            ("postgres://u:pa ss@h/db", "postgres://u:***@h/db"),
        ] {
            assert_eq!(redact(given), shown);
            assert_eq!(has_password(given), given != shown);
        }
    }

    #[test]
    fn an_unquoted_password_with_spaces_is_neither_shown_nor_named() {
        for given in [
            "password=a horse",
            "host=db password=correct horse battery",
            "host=db password=correct horse=battery",
            "host=db password=correct horse='battery",
            "host=db sslpassword=correct horse battery",
            "postgres://u@h/db?password=a&horse&battery",
            "postgres://u@h/db?password=a&horse=battery",
        ] {
            let shown = redact(given);
            let refused = config(given).err().map(|e| e.to_string());
            let refused = refused.expect("a malformed string is refused");
            for text in [&shown, &refused] {
                assert!(
                    !text.contains("horse") && !text.contains("battery"),
                    "{text}"
                );
            }
            assert!(refused.contains("quoted"), "{refused}");
        }
    }
}
