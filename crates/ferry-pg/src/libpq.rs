//! The keys of a libpq connection string that tokio-postgres does not parse (TLS files and
//! modes, the password file), taken out of the string before tokio-postgres sees the rest.

use std::collections::HashMap;

use ferry_transfer::{Error, Result};

/// The keys ferry reads itself.
const TAKEN: [&str; 5] = ["sslmode", "sslrootcert", "sslcert", "sslkey", "passfile"];

/// Settings taken out of a connection string, by key.
pub type Taken = HashMap<&'static str, String>;

/// Splits `conninfo` (key=value pairs or a `postgres://` URL) into what tokio-postgres
/// parses and the [`TAKEN`] keys with their values (a URL's percent-decoded). A quoted
/// value left open is refused, as libpq refuses it: it would swallow the keys after it.
pub fn take(conninfo: &str) -> Result<(String, Taken)> {
    if is_url(conninfo) {
        Ok(take_url(conninfo))
    } else {
        take_pairs(conninfo)
    }
}

/// True for the URL form of a connection string.
fn is_url(conninfo: &str) -> bool {
    conninfo.starts_with("postgres://") || conninfo.starts_with("postgresql://")
}

/// The byte offset in `url` where its host begins: after the `user:password@` (up to the
/// last `@` before the first `/`: a password may hold `?` or `@`), else just after
/// `scheme://`.
pub fn host_start(url: &str) -> Option<usize> {
    let start = url.find("://")? + 3;
    let rest = &url[start..];
    let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
    Some(start + authority.rfind('@').map_or(0, |at| at + 1))
}

/// The [`TAKEN`] key named `k`, if it is one.
fn taken(k: &str) -> Option<&'static str> {
    TAKEN.iter().copied().find(|t| *t == k)
}

fn take_url(url: &str) -> (String, Taken) {
    let mut out = HashMap::new();
    let host = host_start(url).unwrap_or(0);
    let Some(q) = url[host..].find('?').map(|q| host + q) else {
        return (url.to_string(), out);
    };
    let (base, query) = (&url[..q], &url[q + 1..]);
    let mut keep = Vec::new();
    for pair in query.split('&') {
        let decode = |x| percent_encoding::percent_decode_str(x).decode_utf8_lossy();
        match pair
            .split_once('=')
            .and_then(|(k, v)| Some((taken(&decode(k))?, v)))
        {
            Some((k, v)) => {
                out.insert(k, decode(v).into_owned());
            }
            None => keep.push(pair),
        }
    }
    let rest = match keep.is_empty() {
        true => base.to_string(),
        false => format!("{base}?{}", keep.join("&")),
    };
    (rest, out)
}

/// key=value pairs, values plain or single-quoted, backslash escaping in both, as libpq
/// reads them.
fn take_pairs(s: &str) -> Result<(String, Taken)> {
    let (mut out, mut keep) = (HashMap::new(), Vec::new());
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        let start = i;
        while i < b.len() && b[i] != b'=' && !b[i].is_ascii_whitespace() {
            i += 1;
        }
        let key = &s[start..i];
        while i < b.len() && (b[i].is_ascii_whitespace() || b[i] == b'=') {
            i += 1;
        }
        let mut value = Vec::new();
        if i < b.len() && b[i] == b'\'' {
            i += 1;
            while i < b.len() && b[i] != b'\'' {
                if b[i] == b'\\' && i + 1 < b.len() {
                    i += 1;
                }
                value.push(b[i]);
                i += 1;
            }
            if i == b.len() {
                // Not the value: it may be a password.
                return Err(Error::Invalid(format!(
                    "connection string: the quoted value of '{key}' has no closing quote"
                )));
            }
            i += 1;
        } else {
            while i < b.len() && !b[i].is_ascii_whitespace() {
                if b[i] == b'\\' && i + 1 < b.len() {
                    i += 1;
                }
                value.push(b[i]);
                i += 1;
            }
        }
        match (key, taken(key)) {
            ("", _) => {}
            (_, Some(k)) => {
                // Bytes, not chars: a quoted path may hold any UTF-8.
                out.insert(k, String::from_utf8_lossy(&value).into_owned());
            }
            _ => keep.push(s[start..i.min(s.len())].to_string()),
        }
    }
    Ok((keep.join(" "), out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taken_keys_come_out_of_both_forms_and_the_rest_stays() {
        let (rest, t) = take("host=h passfile='/a b/pgpass' sslmode=require user=u").unwrap();
        assert_eq!(rest, "host=h user=u");
        assert_eq!(t["passfile"], "/a b/pgpass");
        assert_eq!(t["sslmode"], "require");
        let (rest, t) = take("postgres://u@h/db?passfile=%2Fp%C3%A9%20q&x=1&sslkey=%2fk").unwrap();
        assert_eq!(rest, "postgres://u@h/db?x=1");
        assert_eq!(t["passfile"], "/pé q");
        assert_eq!(t["sslkey"], "/k");
        let (_, t) = take("sslcert='/tmp/cl\\'é.crt'").unwrap();
        assert_eq!(t["sslcert"], "/tmp/cl'é.crt");
        let (rest, t) = take("postgres://u@h/db").unwrap();
        assert_eq!((rest.as_str(), t.len()), ("postgres://u@h/db", 0));
    }

    #[test]
    fn values_and_urls_split_where_libpq_splits_them() {
        // An unquoted value escapes with a backslash too: one value, not two keys.
        let (rest, t) = take("application_name=x\\ sslmode=disable passfile=/a\\\\b").unwrap();
        assert_eq!(rest, "application_name=x\\ sslmode=disable");
        assert_eq!((t.get("sslmode"), t["passfile"].as_str()), (None, "/a\\b"));
        // A password may hold '?': the query begins after the user info.
        let (rest, t) = take("postgresql://u:pa?ss@db/app?sslmode=require").unwrap();
        assert_eq!(rest, "postgresql://u:pa?ss@db/app");
        assert_eq!(t["sslmode"], "require");
        let (_, t) = take("postgres://h/db?ssl%6dode=verify-full").unwrap();
        assert_eq!(t["sslmode"], "verify-full");
        // A quote left open would swallow what follows it; the message holds no value.
        let e = take("password='se cret host=h").unwrap_err().to_string();
        assert!(
            e.contains("no closing quote") && !e.contains("se cret"),
            "{e}"
        );
    }
}
