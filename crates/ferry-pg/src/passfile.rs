//! The password file as libpq reads it (the connection string's `passfile`, else
//! `PGPASSFILE`, else `~/.pgpass`): lines of
//! `hostname:port:database:username:password`, `*` matching anything, `\:` and `\\`
//! escaping, `#` starting a comment. The first line whose four fields match gives the
//! password. A file that others may read (or that is not a regular file) is ignored with a
//! warning, as libpq ignores it: a password there may already be known.

use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The socket directory libpq matches as `localhost` (Debian's build; ferry's default host).
const DEFAULT_SOCKET_DIR: &str = "/var/run/postgresql";

/// The most a password file is read: any real one is a few lines.
const MAX_LEN: u64 = 1 << 20;

/// Where the password file is: `PGPASSFILE`, else `~/.pgpass`; `None` without a home.
pub fn path() -> Option<PathBuf> {
    std::env::var_os("PGPASSFILE")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| crate::home::home().map(|h| h.join(".pgpass")))
}

/// The name a connection's host is matched by: the default socket directory is
/// `localhost`, as libpq has it.
fn host_name(host: &str) -> &str {
    match host.trim_end_matches('/') {
        DEFAULT_SOCKET_DIR | "" => "localhost",
        _ => host,
    }
}

/// The password for (host, port, database, user) in the file at `path`, if it has one.
/// A missing file is none; one others can read, or not a regular file, is ignored with a
/// warning.
pub fn lookup(path: &Path, host: &str, port: u16, db: &str, user: &str) -> Option<String> {
    use std::io::Read;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() {
        tracing::warn!(
            "password file {} is not a plain file: ignored",
            path.display()
        );
        return None;
    }
    if meta.mode() & 0o077 != 0 {
        tracing::warn!(
            "password file {} has group or world access: ignored (chmod 0600 it, as libpq wants)",
            path.display()
        );
        return None;
    }
    let mut text = String::new();
    file.take(MAX_LEN).read_to_string(&mut text).ok()?;
    let port = port.to_string();
    let want = [host_name(host), port.as_str(), db, user];
    text.lines().find_map(|line| {
        let (fields, password) = fields(line)?;
        want.iter()
            .zip(&fields)
            .all(|(w, f)| f.as_deref().is_none_or(|f| f == *w))
            .then_some(password)
    })
}

/// A line's four matched fields, unescaped (`None`: an unescaped `*`, matching anything),
/// and its password, up to the next unescaped `:` as libpq reads it; `None` for a comment,
/// a blank line or one with fewer than five fields.
fn fields(line: &str) -> Option<([Option<String>; 4], String)> {
    if line.starts_with('#') {
        return None;
    }
    let mut out: Vec<(String, bool)> = vec![(String::new(), false)];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            ':' if out.len() == 5 => break,
            ':' => out.push((String::new(), false)),
            '\\' => {
                let (field, escaped) = out.last_mut()?;
                field.extend(chars.next());
                *escaped = true;
            }
            c => out.last_mut()?.0.push(c),
        }
    }
    if out.len() != 5 {
        return None;
    }
    let password = out.pop()?.0;
    let matched: Vec<Option<String>> = out
        .into_iter()
        .map(|(f, escaped)| (escaped || f != "*").then_some(f))
        .collect();
    Some((matched.try_into().ok()?, password))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn file(text: &str, mode: u32) -> (PathBuf, PathBuf) {
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("ferry-pgpass-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("pgpass");
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        (dir, p)
    }

    #[test]
    fn the_first_matching_line_gives_the_password() {
        let text = "# comment\n\
                    db1.example:5432:*:alice:first\n\
                    *:5433:app:bob:p\\:w\\\\d:with:colons\n\
                    localhost:*:*:*:local\n\
                    *:*:*:*:fallback\n";
        let (dir, p) = file(text, 0o600);
        let get = |h, port, db, u| lookup(&p, h, port, db, u);
        assert_eq!(
            get("db1.example", 5432, "x", "alice").as_deref(),
            Some("first")
        );
        // libpq's password ends at the next unescaped colon.
        assert_eq!(get("any", 5433, "app", "bob").as_deref(), Some("p:w\\d"));
        assert_eq!(
            get("/var/run/postgresql", 5432, "x", "carol").as_deref(),
            Some("local")
        );
        assert_eq!(
            get("/tmp/sock", 5432, "x", "carol").as_deref(),
            Some("fallback")
        );
        assert_eq!(
            get("db1.example", 5433, "x", "alice").as_deref(),
            Some("fallback")
        );
        // An escaped star is a star, not "anything".
        std::fs::write(&p, "\\*:*:*:*:literal\n").unwrap();
        assert_eq!(get("*", 1, "d", "u").as_deref(), Some("literal"));
        assert_eq!(get("h", 1, "d", "u"), None);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_file_others_can_read_or_a_short_line_gives_nothing() {
        let (dir, p) = file("*:*:*:*:secret\n", 0o640);
        assert_eq!(lookup(&p, "h", 5432, "d", "u"), None);
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(lookup(&p, "h", 5432, "d", "u").as_deref(), Some("secret"));
        std::fs::write(&p, "h:5432:d:u\n").unwrap();
        assert_eq!(lookup(&p, "h", 5432, "d", "u"), None);
        assert_eq!(lookup(&dir.join("missing"), "h", 5432, "d", "u"), None);
        assert_eq!(lookup(&dir, "h", 5432, "d", "u"), None, "a directory");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
