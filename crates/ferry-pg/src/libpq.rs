//! The keys of a libpq connection string that tokio-postgres does not parse (TLS files and
//! modes, the password file), taken out of the string before tokio-postgres sees the rest.

use std::collections::HashMap;

/// The keys ferry reads itself.
const TAKEN: [&str; 5] = ["sslmode", "sslrootcert", "sslcert", "sslkey", "passfile"];

/// Settings taken out of a connection string, by key.
pub type Taken = HashMap<&'static str, String>;

/// Splits `conninfo` (key=value pairs or a `postgres://` URL) into what tokio-postgres
/// parses and the [`TAKEN`] keys with their values (a URL's percent-decoded).
pub fn take(conninfo: &str) -> (String, Taken) {
    if conninfo.starts_with("postgres://") || conninfo.starts_with("postgresql://") {
        take_url(conninfo)
    } else {
        take_pairs(conninfo)
    }
}

/// The [`TAKEN`] key named `k`, if it is one.
fn taken(k: &str) -> Option<&'static str> {
    TAKEN.iter().copied().find(|t| *t == k)
}

fn take_url(url: &str) -> (String, Taken) {
    let mut out = HashMap::new();
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_string(), out);
    };
    let mut keep = Vec::new();
    for pair in query.split('&') {
        match pair.split_once('=').and_then(|(k, v)| Some((taken(k)?, v))) {
            Some((k, v)) => {
                let v = percent_encoding::percent_decode_str(v).decode_utf8_lossy();
                out.insert(k, v.into_owned());
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

/// key=value pairs, values plain or single-quoted with backslash escapes, as libpq reads them.
fn take_pairs(s: &str) -> (String, Taken) {
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
        let (mut value, vstart) = (Vec::new(), i);
        if i < b.len() && b[i] == b'\'' {
            i += 1;
            while i < b.len() && b[i] != b'\'' {
                if b[i] == b'\\' && i + 1 < b.len() {
                    i += 1;
                }
                value.push(b[i]);
                i += 1;
            }
            i += 1;
        } else {
            while i < b.len() && !b[i].is_ascii_whitespace() {
                i += 1;
            }
            value.extend_from_slice(&b[vstart..i]);
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
    (keep.join(" "), out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taken_keys_come_out_of_both_forms_and_the_rest_stays() {
        let (rest, t) = take("host=h passfile='/a b/pgpass' sslmode=require user=u");
        assert_eq!(rest, "host=h user=u");
        assert_eq!(t["passfile"], "/a b/pgpass");
        assert_eq!(t["sslmode"], "require");
        let (rest, t) = take("postgres://u@h/db?passfile=%2Fp%C3%A9%20q&x=1&sslkey=%2fk");
        assert_eq!(rest, "postgres://u@h/db?x=1");
        assert_eq!(t["passfile"], "/pé q");
        assert_eq!(t["sslkey"], "/k");
        let (_, t) = take("sslcert='/tmp/cl\\'é.crt'");
        assert_eq!(t["sslcert"], "/tmp/cl'é.crt");
        let (rest, t) = take("postgres://u@h/db");
        assert_eq!((rest.as_str(), t.len()), ("postgres://u@h/db", 0));
    }
}
