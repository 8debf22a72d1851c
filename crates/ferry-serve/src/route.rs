//! Requests as operations on a tenant's objects: restic's REST protocol (v2) and ferry's own,
//! both mapped onto keys inside the tenant's prefix.

use http::Method;

use crate::keys;
use crate::sched::Class;

/// What a request asks of the store; every `key` and `prefix` is relative to the tenant's
/// prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)] // the fields are named for what they hold: see the enum's doc
pub enum Op {
    /// An object's bytes, whole or a range.
    Get { key: String },
    /// An object's size.
    Head { key: String },
    /// Writes an object whole.
    Put { key: String },
    /// Deletes an object.
    Delete { key: String },
    /// Objects under a prefix: restic's names when `restic` (last segment, with sizes), or
    /// ferry's keys.
    List { prefix: String, restic: bool },
    /// restic's `POST /?create=true`: nothing to do on an object store.
    Create,
    /// Block `part` of upload session `upload` for `key` (an object too large for one
    /// request), kept under the tenant's [`UPLOADS`] until the session completes.
    PutPart {
        key: String,
        upload: String,
        part: u32,
    },
    /// Makes `key` of the session's blocks `0..parts`, in order, and removes them.
    Compose {
        key: String,
        upload: String,
        parts: u32,
    },
    /// Removes a session's blocks.
    Abort { key: String, upload: String },
}

impl Op {
    /// The operation's name in metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Get { .. } => "get",
            Op::Head { .. } => "head",
            Op::Put { .. } => "put",
            Op::Delete { .. } => "delete",
            Op::List { .. } => "list",
            Op::Create => "create",
            Op::PutPart { .. } => "put_part",
            Op::Compose { .. } => "compose",
            Op::Abort { .. } => "abort",
        }
    }
}

/// Most blocks one upload session may have (ferry's client uses at most this many).
pub const MAX_PARTS: u32 = 10_000;

/// Where a tenant's upload sessions keep their blocks; no request may name it.
pub const UPLOADS: &str = ".ferry-uploads";

/// The value of `name=` in `query`.
fn param<'a>(query: Option<&'a str>, name: &str) -> Option<&'a str> {
    query?
        .split('&')
        .find_map(|p| p.strip_prefix(name)?.strip_prefix('='))
}

/// Whether `id` is an upload session id: 32 lowercase hex digits (the client's random pick).
pub fn is_session(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The query's upload session id, checked.
fn session(query: Option<&str>) -> Result<Option<String>, String> {
    match param(query, "upload") {
        None => Ok(None),
        Some(id) if is_session(id) => Ok(Some(id.to_string())),
        Some(_) => Err("an upload id is 32 lowercase hex digits".into()),
    }
}

/// One request, parsed: whose, what, and in which class it waits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The tenant the path names.
    pub tenant: String,
    /// The operation.
    pub op: Op,
    /// The class it is scheduled in.
    pub class: Class,
    /// A restic lock: append-only tenants may delete it (a client removes its own lock).
    pub lock: bool,
}

const RESTIC_TYPES: &[&str] = &["data", "keys", "locks", "snapshots", "index"];

/// Parses `path?query` of a `method` request, or says why it is bad (a 400).
pub fn parse(method: &Method, path: &str, query: Option<&str>) -> Result<Route, String> {
    let (segs, dir) = keys::segments(path)?;
    let Some(first) = segs.first() else {
        return Err("no tenant in the path".into());
    };
    if segs.iter().any(|s| s == UPLOADS) {
        return Err(format!("{UPLOADS} is the server's"));
    }
    if first == "v1" {
        ferry(method, &segs[1..], dir, query)
    } else {
        restic(method, &segs, dir, query)
    }
}

/// `/v1/TENANT/KEY`: GET (with Range), HEAD, PUT, DELETE; `GET /v1/TENANT/PREFIX/?list`.
fn ferry(
    method: &Method, segs: &[String], dir: bool, query: Option<&str>,
) -> Result<Route, String> {
    let Some((tenant, rest)) = segs.split_first() else {
        return Err("no tenant in the path".into());
    };
    let key = rest.join("/");
    // Urgent: the WAL archive (ferry keeps it under a `wal` segment); a client may lower the
    // class of its requests, never raise it (the header is read by the server, below).
    let wal = rest.iter().any(|s| s == "wal");
    let by_method = |m: &Method| match *m {
        Method::GET | Method::HEAD => Class::Restore,
        Method::DELETE => Class::Maintenance,
        _ => Class::Backup,
    };
    let class = if wal {
        Class::Urgent
    } else {
        by_method(method)
    };
    let op = match (method, dir || key.is_empty()) {
        (&Method::GET, true) if query.is_some_and(|q| q.split('&').any(|p| p == "list")) => {
            Op::List {
                prefix: if key.is_empty() {
                    key
                } else {
                    format!("{key}/")
                },
                restic: false,
            }
        }
        (_, true) => return Err("a key is needed".into()),
        (&Method::GET, false) => Op::Get { key },
        (&Method::HEAD, false) => Op::Head { key },
        (&Method::PUT, false) => match (session(query)?, param(query, "part")) {
            (None, _) => Op::Put { key },
            (Some(upload), Some(n)) => Op::PutPart {
                key,
                upload,
                part: n
                    .parse()
                    .ok()
                    .filter(|n| *n < MAX_PARTS)
                    .ok_or(format!("part=N: a block number below {MAX_PARTS}"))?,
            },
            (Some(_), None) => return Err("part=N is needed with upload=".into()),
        },
        (&Method::POST, false) => match (session(query)?, param(query, "parts")) {
            (Some(upload), Some(n)) => Op::Compose {
                key,
                upload,
                parts: n
                    .parse()
                    .ok()
                    .filter(|n| (1..=MAX_PARTS).contains(n))
                    .ok_or(format!("parts=N: a block count, 1 to {MAX_PARTS}"))?,
            },
            _ => return Err("POST needs upload=ID&parts=N".into()),
        },
        (&Method::DELETE, false) => match session(query)? {
            Some(upload) => Op::Abort { key, upload },
            None => Op::Delete { key },
        },
        _ => return Err(format!("{method} is not served")),
    };
    Ok(Route {
        tenant: tenant.clone(),
        op,
        class,
        lock: false,
    })
}

/// restic's REST backend: `/TENANT/REPO.../config`, `/TENANT/REPO.../TYPE/` (list),
/// `/TENANT/REPO.../TYPE/NAME`, `POST /TENANT/REPO.../?create=true`.
fn restic(
    method: &Method, segs: &[String], dir: bool, query: Option<&str>,
) -> Result<Route, String> {
    let tenant = segs[0].clone();
    let n = segs.len();
    // A repository with a `wal` segment in its path holds a WAL archive: urgent, as ferry's
    // own WAL keys are (the other segments are restic's types and hex names, never `wal`).
    let wal = segs[1..].iter().any(|s| s == "wal");
    let route = |op, class, lock| {
        Ok(Route {
            tenant: tenant.clone(),
            op,
            class: if wal { Class::Urgent } else { class },
            lock,
        })
    };
    let repo = |upto: usize| {
        segs[1..upto]
            .iter()
            .map(|s| format!("{s}/"))
            .collect::<String>()
    };
    if dir
        && *method == Method::POST
        && query.is_some_and(|q| q.split('&').any(|p| p == "create=true"))
    {
        return route(Op::Create, Class::Backup, false);
    }
    if dir {
        let t = &segs[n - 1];
        if n < 2 || !RESTIC_TYPES.contains(&t.as_str()) || *method != Method::GET {
            return Err("not a restic listing".into());
        }
        return route(
            Op::List {
                prefix: format!("{}{t}/", repo(n - 1)),
                restic: true,
            },
            Class::Backup,
            false,
        );
    }
    let (key, lock) = if segs[n - 1] == "config" && n >= 2 {
        (format!("{}config", repo(n - 1)), false)
    } else if n >= 3 && RESTIC_TYPES.contains(&segs[n - 2].as_str()) {
        let (t, name) = (&segs[n - 2], &segs[n - 1]);
        if name.len() != 64
            || !name
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        {
            return Err("a restic file name is 64 lowercase hex digits".into());
        }
        // Data files fan out by their first two digits, as restic lays out a local repository.
        let key = match t.as_str() {
            "data" => format!("{}data/{}/{name}", repo(n - 2), &name[..2]),
            _ => format!("{}{t}/{name}", repo(n - 2)),
        };
        (key, t == "locks")
    } else {
        return Err("not a restic path".into());
    };
    let (op, class) = match *method {
        Method::GET => (Op::Get { key }, Class::Restore),
        Method::HEAD => (Op::Head { key }, Class::Restore),
        Method::POST => (Op::Put { key }, Class::Backup),
        Method::DELETE => (Op::Delete { key }, Class::Maintenance),
        _ => return Err(format!("{method} is not served")),
    };
    route(op, class, lock)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn restic_paths_map_into_the_tenant() {
        let r = parse(&Method::POST, &format!("/alice/repo/data/{ID}"), None).unwrap();
        assert_eq!(r.tenant, "alice");
        assert_eq!(
            r.op,
            Op::Put {
                key: format!("repo/data/01/{ID}")
            }
        );
        assert_eq!(r.class, Class::Backup);
        let r = parse(&Method::GET, "/alice/config", None).unwrap();
        assert_eq!(
            r.op,
            Op::Get {
                key: "config".into()
            }
        );
        let r = parse(&Method::GET, "/alice/a/b/snapshots/", None).unwrap();
        assert_eq!(
            r.op,
            Op::List {
                prefix: "a/b/snapshots/".into(),
                restic: true
            }
        );
        let r = parse(&Method::DELETE, &format!("/alice/r/locks/{ID}"), None).unwrap();
        assert!(r.lock);
        assert_eq!(
            parse(&Method::POST, "/alice/r/", Some("create=true"))
                .unwrap()
                .op,
            Op::Create
        );
        assert!(parse(&Method::GET, "/alice/r/data/../x", None).is_err());
        assert!(parse(&Method::GET, "/alice/r/data/ABC", None).is_err());
        assert!(parse(&Method::GET, "/alice/r/other/", None).is_err());
        // A repository named wal (at any depth) is the WAL archive: urgent, whatever the method.
        for (m, p) in [
            (Method::POST, format!("/alice/wal/data/{ID}")),
            (Method::GET, "/alice/pg1/wal/snapshots/".to_string()),
            (Method::DELETE, format!("/alice/wal/locks/{ID}")),
        ] {
            assert_eq!(parse(&m, &p, None).unwrap().class, Class::Urgent, "{p}");
        }
        let r = parse(&Method::POST, &format!("/alice/walrus/data/{ID}"), None).unwrap();
        assert_eq!(r.class, Class::Backup);
    }

    #[test]
    fn ferry_paths_and_classes() {
        let r = parse(
            &Method::PUT,
            "/v1/bob/pg/wal/000000010000000000000001",
            None,
        )
        .unwrap();
        assert_eq!(r.tenant, "bob");
        assert_eq!(r.class, Class::Urgent);
        let r = parse(&Method::GET, "/v1/bob/repo/", Some("list")).unwrap();
        assert_eq!(
            r.op,
            Op::List {
                prefix: "repo/".into(),
                restic: false
            }
        );
        assert_eq!(
            parse(&Method::DELETE, "/v1/bob/x", None).unwrap().class,
            Class::Maintenance
        );
        assert!(parse(&Method::PUT, "/v1/bob/", None).is_err());
        let id = "0123456789abcdef0123456789abcdef";
        let r = parse(
            &Method::PUT,
            "/v1/bob/big",
            Some(&format!("upload={id}&part=3")),
        )
        .unwrap();
        assert_eq!(
            r.op,
            Op::PutPart {
                key: "big".into(),
                upload: id.into(),
                part: 3
            }
        );
        let r = parse(
            &Method::POST,
            "/v1/bob/big",
            Some(&format!("upload={id}&parts=4")),
        )
        .unwrap();
        assert_eq!(
            r.op,
            Op::Compose {
                key: "big".into(),
                upload: id.into(),
                parts: 4
            }
        );
        assert!(parse(&Method::PUT, "/v1/bob/big", Some("upload=../x&part=1")).is_err());
        let huge = format!("upload={id}&parts=4294967295");
        assert!(parse(&Method::POST, "/v1/bob/big", Some(&huge)).is_err());
        assert!(parse(
            &Method::POST,
            "/v1/bob/big",
            Some(&format!("upload={id}&parts=0"))
        )
        .is_err());
        assert!(parse(&Method::GET, "/v1/bob/.ferry-uploads/x/0", None).is_err());
        assert!(parse(&Method::GET, "/bob/.ferry-uploads/config", None).is_err());
        assert!(parse(&Method::PUT, "/v1/", None).is_err());
    }
}
