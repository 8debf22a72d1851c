//! The keys of a libpq connection string that tokio-postgres does not parse (TLS files and
//! modes, the password file), taken out of the string before tokio-postgres sees the rest.

use std::collections::HashMap;
use std::ops::Range;

use ferry_transfer::{Error, Result};

/// The keys ferry reads itself.
const TAKEN: [&str; 5] = ["sslmode", "sslrootcert", "sslcert", "sslkey", "passfile"];

/// The keys tokio-postgres reads (0.7, `Config::param`): with [`TAKEN`], every key ferry
/// accepts (tokio-postgres refuses any other).
const TOKIO: [&str; 19] = [
    "user",
    "password",
    "dbname",
    "options",
    "application_name",
    "sslmode",
    "sslnegotiation",
    "host",
    "hostaddr",
    "port",
    "connect_timeout",
    "tcp_user_timeout",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_retries",
    "target_session_attrs",
    "channel_binding",
    "load_balance_hosts",
];

/// libpq's keys whose values are secrets. tokio-postgres reads only `password`, and refuses
/// the others by name, so ferry's message about that shows the string: hidden all the same.
const SECRETS: [&str; 5] = [
    "password",
    "sslpassword",
    "scram_client_key",
    "scram_server_key",
    "oauth_client_secret",
];

/// How a refusal tells what an unquoted secret with spaces (or a URL's with '&') looks like
/// to libpq: its words become settings.
const QUOTE: &str = "a password with spaces must be quoted (password='...'), and a '&' in a \
                     URL's percent-encoded (%26)";

/// Settings taken out of a connection string, by key.
pub type Taken = HashMap<&'static str, String>;

/// Splits `conninfo` (key=value pairs or a `postgres://` URL) into what tokio-postgres
/// parses and the [`TAKEN`] keys with their values (a URL's percent-decoded). A quoted
/// value left open is refused, as libpq refuses it: it would swallow the keys after it.
pub fn take(conninfo: &str) -> Result<(String, Taken)> {
    let all =
        pairs(conninfo).map_err(|bad| Error::Invalid(format!("connection string: {}", bad.why)))?;
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

/// A connection string libpq would refuse, or that libpq and tokio-postgres would read
/// differently: why (no value in it, and no key after a secret: that may be a word of it),
/// and where from the string may hold what a setting meant to keep apart (a message shows
/// nothing from there on, nor from the first secret's value on).
#[derive(Debug)]
pub struct Malformed {
    /// Why, naming the key (unless it follows a secret) but no value.
    pub why: String,
    /// Where the unread part starts.
    pub at: usize,
    /// The settings read before it.
    pub before: Vec<Pair>,
}

/// The settings of `conninfo`: a URL's query parameters, or key=value pairs (values plain
/// or single-quoted, backslash escaping in both). The one reading of a connection string,
/// for what ferry takes out of it and for what it hides in messages: a password found by
/// another reading could be shown where libpq sees one.
pub fn pairs(conninfo: &str) -> std::result::Result<Vec<Pair>, Malformed> {
    let all = match is_url(conninfo) {
        true => url_pairs(conninfo)?,
        false => key_value_pairs(conninfo)?,
    };
    after_secret(all)
}

/// True for a key whose value is a secret ([`SECRETS`], in any case: `PASSWORD` is hidden
/// too, though neither reader takes it).
pub fn is_secret(key: &str) -> bool {
    SECRETS.iter().any(|s| key.eq_ignore_ascii_case(s))
}

/// True for a key ferry accepts.
fn known(key: &str) -> bool {
    TAKEN.contains(&key) || TOKIO.contains(&key)
}

/// Refuses a key ferry does not accept after a secret: an unquoted password with spaces
/// ("password=correct horse=battery") makes settings of its words, which libpq refuses as
/// unknown and tokio-postgres names in its refusal. (An empty one, from a URL's last '&', is
/// nothing.)
fn after_secret(mut all: Vec<Pair>) -> std::result::Result<Vec<Pair>, Malformed> {
    let Some(first) = all.iter().position(|p| is_secret(&p.key)) else {
        return Ok(all);
    };
    let nothing = |p: &Pair| p.key.is_empty() && p.value.is_empty();
    let unknown = |p: &Pair| !known(&p.key) && !nothing(p);
    let after = first + 1;
    let Some(bad) = all[after..].iter().position(unknown).map(|i| after + i) else {
        return Ok(all);
    };
    let at = all[bad].span.start;
    all.truncate(bad);
    Err(Malformed {
        why: format!("a setting after the password is not one ferry reads: {QUOTE}"),
        at,
        before: all,
    })
}

/// The refusal of the setting `key`, read after `before`, for `what` is wrong with it
/// (its unread part starting `at`). The key is named unless a secret came before it: then it
/// may be a word of that secret.
fn refuse(key: &str, what: &str, at: usize, before: Vec<Pair>) -> Malformed {
    let why = match before.iter().any(|p| is_secret(&p.key)) {
        true => format!("a setting after the password {what}: {QUOTE}"),
        false => format!("'{key}' {what}"),
    };
    Malformed { why, at, before }
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

/// Where the password of a URL's `user:password@` is, under libpq's reading (the last `@`
/// before the first `/`) and tokio-postgres's (the first `@`, the first `:` before it):
/// ferry hides both. Empty for a URL with none.
pub fn url_passwords(url: &str) -> Vec<Range<usize>> {
    let Some(start) = url.find("://").map(|i| i + 3) else {
        return Vec::new();
    };
    let libpq = host_start(url).filter(|&h| h > start).map(|h| h - 1);
    let tokio = url[start..].find('@').map(|a| start + a);
    [libpq, tokio]
        .into_iter()
        .flatten()
        .filter_map(|at| url[start..at].find(':').map(|c| start + c + 1..at))
        .collect()
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

fn url_pairs(url: &str) -> std::result::Result<Vec<Pair>, Malformed> {
    let start = url.find("://").map_or(0, |i| i + 3);
    let first_at = url[start..].find('@').map(|a| start + a + 1);
    if first_at.is_some_and(|a| Some(a) != host_start(url)) {
        // libpq reads the user info up to the last '@' before the first '/', tokio-postgres
        // up to the first '@' anywhere (one in the query too): the host, the query, a
        // password would differ.
        return Err(Malformed {
            why: "libpq and tokio-postgres would read this URL differently (an '@' after the \
                  host, or a '/' before the user info's '@'): percent-encode them (%40, %2F)"
                .into(),
            at: start,
            before: Vec::new(),
        });
    }
    let Some(q) = query_start(url) else {
        return Ok(Vec::new());
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
            // Nothing (after a last '&').
            None if raw.is_empty() => (raw, span.end..span.end),
            // libpq and tokio-postgres refuse it, and it may be the rest of a password
            // with an '&' in it.
            None => return Err(refuse(&decode(raw), "has no '='", span.end, out)),
        };
        out.push(Pair {
            key: decode(k),
            value: decode(&url[value_span.clone()]),
            span,
            value_span,
        });
    }
    Ok(out)
}

fn key_value_pairs(s: &str) -> std::result::Result<Vec<Pair>, Malformed> {
    // Whitespace as either reader sees it: libpq's isspace() (with \v) and tokio-postgres's
    // char::is_whitespace (with U+00A0 and the other Unicode spaces); a string where they
    // differ splits where either splits, so a password never hides in a value.
    let ws = char::is_whitespace;
    let mut out = Vec::new();
    let mut it = s.char_indices().peekable();
    let skip_ws = |it: &mut std::iter::Peekable<std::str::CharIndices>| {
        while it.next_if(|&(_, c)| ws(c)).is_some() {}
    };
    loop {
        skip_ws(&mut it);
        let Some(&(start, _)) = it.peek() else { break };
        while it.next_if(|&(_, c)| c != '=' && !ws(c)).is_some() {}
        let kend = it.peek().map_or(s.len(), |&(i, _)| i);
        let key = s[start..kend].to_string();
        skip_ws(&mut it);
        // Exactly one '=', as libpq and tokio-postgres read it: "user= =x" sets user to '='.
        if it.next_if(|&(_, c)| c == '=').is_none() {
            return Err(refuse(&key, "has no '='", kend, out));
        }
        skip_ws(&mut it);
        let vstart = it.peek().map_or(s.len(), |&(i, _)| i);
        let quoted = it.next_if(|&(_, c)| c == '\'').is_some();
        let ends = |c: char| match quoted {
            true => c == '\'',
            false => ws(c),
        };
        let mut value = String::new();
        while let Some((_, c)) = it.next_if(|&(_, c)| !ends(c)) {
            // A backslash takes the next character as it is (a last one stands for itself).
            let escaped = (c == '\\').then(|| it.next()).flatten();
            value.push(escaped.map_or(c, |(_, e)| e));
        }
        if quoted && it.next_if(|&(_, c)| c == '\'').is_none() {
            let what = "has a quoted value with no closing quote";
            return Err(refuse(&key, what, vstart, out));
        }
        let end = it.peek().map_or(s.len(), |&(i, _)| i);
        out.push(Pair {
            key,
            value,
            span: start..end,
            value_span: vstart..end,
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
        // A URL read one way by libpq and another by tokio-postgres is refused: here the
        // sslmode would come out of a password.
        assert!(take("postgres://u:p/x?sslmode=disable&y@h/db").is_err());
        // tokio-postgres would connect to host 'b' as user 'h/db?application_name=a'.
        let e = take("postgres://h/db?application_name=a@b").unwrap_err();
        assert!(e.to_string().contains("%40"), "{e}");
        assert!(take("postgres://h/db?application_name=a%40b").is_ok());
        assert!(take("sslmode password=x").is_err(), "no '=' after a key");
        // A quote left open would swallow what follows it; the message holds no value.
        let e = take("password='se cret host=h").unwrap_err().to_string();
        assert!(
            e.contains("no closing quote") && !e.contains("se cret"),
            "{e}"
        );
    }

    #[test]
    fn a_refusal_names_nothing_after_a_password() {
        for given in [
            "password=a horse",
            "host=db password=correct horse battery",
            "host=db password=correct horse=battery",
            "postgres://h/db?password=a&horse",
        ] {
            let e = take(given).unwrap_err().to_string();
            let named = e.contains("horse") || e.contains("battery");
            assert!(!named && e.contains("password='...'"), "{e}");
        }
        // Before a password, or with none, what went wrong is named.
        for given in ["horse password=x", "postgres://h/db?horse"] {
            let e = take(given).unwrap_err().to_string();
            assert!(e.contains("'horse'"), "{e}");
        }
        // A URL's user info ends at its '@', spaces and all; a last '&' is nothing.
        assert!(take("postgres://u:pa ss@h/db?password=x&port=1&").is_ok());
    }
}
