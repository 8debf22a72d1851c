//! The keys of a libpq connection string that tokio-postgres does not parse (TLS files and
//! modes, the password file), taken out of the string before tokio-postgres sees the rest.

use std::collections::HashMap;
use std::ops::Range;

use ferry_transfer::{Error, Result};

/// The keys ferry reads itself.
const TAKEN: [&str; 5] = ["sslmode", "sslrootcert", "sslcert", "sslkey", "passfile"];

/// Settings taken out of a connection string, by key.
pub type Taken = HashMap<&'static str, String>;

/// Splits `conninfo` (key=value pairs or a `postgres://` URL) into what tokio-postgres
/// parses and the [`TAKEN`] keys with their values (a URL's percent-decoded). A quoted
/// value left open is refused, as libpq refuses it: it would swallow the keys after it.
pub fn take(conninfo: &str) -> Result<(String, Taken)> {
    let all = pairs(conninfo).map_err(|open| {
        // Not the value: it may be a password.
        Error::Invalid(format!(
            "connection string: the quoted value of '{}' has no closing quote",
            open.key
        ))
    })?;
    let mut out = HashMap::new();
    let mut keep = Vec::new();
    for p in all {
        match taken(&p.key) {
            Some(k) => {
                out.insert(k, p.value);
            }
            None if p.key.is_empty() => {}
            None => keep.push(&conninfo[p.span]),
        }
    }
    let rest = match query_start(conninfo) {
        Some(q) if keep.is_empty() => conninfo[..q].to_string(),
        Some(q) => format!("{}?{}", &conninfo[..q], keep.join("&")),
        None if is_url(conninfo) => conninfo.to_string(),
        None => keep.join(" "),
    };
    Ok((rest, out))
}

/// One setting of a connection string, as libpq reads it.
#[derive(Debug)]
pub struct Pair {
    /// Its key (a URL's percent-decoded).
    pub key: String,
    /// Its value, unquoted and unescaped (a URL's percent-decoded).
    pub value: String,
    /// Where the whole setting is in the string.
    pub span: Range<usize>,
    /// Where its value is in the string, quotes included.
    pub value_span: Range<usize>,
}

/// A quoted value with no closing quote: its key, and where the value starts.
#[derive(Debug)]
pub struct OpenQuote {
    /// The key whose value is left open.
    pub key: String,
    /// Where the value (its opening quote) starts.
    pub at: usize,
}

/// The settings of `conninfo`: a URL's query parameters, or key=value pairs (values plain
/// or single-quoted, backslash escaping in both). The one reading of a connection string,
/// for what ferry takes out of it and for what it hides in messages: a password found by
/// another reading could be shown where libpq sees one.
pub fn pairs(conninfo: &str) -> std::result::Result<Vec<Pair>, OpenQuote> {
    match is_url(conninfo) {
        true => Ok(url_pairs(conninfo)),
        false => key_value_pairs(conninfo),
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

/// Where a URL's query (`?`) is.
fn query_start(conninfo: &str) -> Option<usize> {
    if !is_url(conninfo) {
        return None;
    }
    let host = host_start(conninfo).unwrap_or(0);
    conninfo[host..].find('?').map(|q| host + q)
}

/// The [`TAKEN`] key named `k`, if it is one.
fn taken(k: &str) -> Option<&'static str> {
    TAKEN.iter().copied().find(|t| *t == k)
}

fn url_pairs(url: &str) -> Vec<Pair> {
    let Some(q) = query_start(url) else {
        return Vec::new();
    };
    let decode = |x: &str| {
        percent_encoding::percent_decode_str(x)
            .decode_utf8_lossy()
            .into_owned()
    };
    let mut out = Vec::new();
    let mut at = q + 1;
    for raw in url[q + 1..].split('&') {
        let span = at..at + raw.len();
        at = span.end + 1;
        let (k, value_span) = match raw.find('=') {
            Some(eq) => (&raw[..eq], span.start + eq + 1..span.end),
            None => (raw, span.end..span.end),
        };
        out.push(Pair {
            key: decode(k),
            value: decode(&url[value_span.clone()]),
            span,
            value_span,
        });
    }
    out
}

fn key_value_pairs(s: &str) -> std::result::Result<Vec<Pair>, OpenQuote> {
    let mut out = Vec::new();
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
        let key = s[start..i].to_string();
        while i < b.len() && (b[i].is_ascii_whitespace() || b[i] == b'=') {
            i += 1;
        }
        let vstart = i;
        let mut value = Vec::new();
        let quoted = i < b.len() && b[i] == b'\'';
        if quoted {
            i += 1;
        }
        let ends = |c: u8| match quoted {
            true => c == b'\'',
            false => c.is_ascii_whitespace(),
        };
        while i < b.len() && !ends(b[i]) {
            if b[i] == b'\\' && i + 1 < b.len() {
                i += 1;
            }
            value.push(b[i]);
            i += 1;
        }
        if quoted {
            if i == b.len() {
                return Err(OpenQuote { key, at: vstart });
            }
            i += 1;
        }
        out.push(Pair {
            key,
            // Bytes, not chars: a quoted path may hold any UTF-8.
            value: String::from_utf8_lossy(&value).into_owned(),
            span: start..i,
            value_span: vstart..i,
        });
    }
    Ok(out)
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
