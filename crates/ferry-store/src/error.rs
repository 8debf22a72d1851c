//! Errors keyed by what the caller can do about them.

use std::fmt;

/// A store operation's failure, classified so that the engine knows whether to retry.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// The object, bucket or container does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// The destination already exists and the operation refuses to replace it.
    #[error("already exists: {0}")]
    AlreadyExists(String),
    /// Credentials were refused or lack permission.
    #[error("access denied: {0}")]
    Denied(String),
    /// The request was malformed or the input invalid; retrying will not help.
    #[error("{0}")]
    Invalid(String),
    /// Data did not match its checksum.
    #[error("checksum mismatch: {0}")]
    Checksum(String),
    /// A network fault, timeout, throttling or server error: worth retrying.
    #[error("{0}")]
    Transient(String),
    /// Anything else, not worth retrying.
    #[error("{0}")]
    Permanent(String),
    /// The server is shedding load and said when to come back (`503` with `Retry-After`):
    /// worth retrying, not before then.
    #[error("{0}")]
    Busy(String, std::time::Duration),
}

impl Error {
    /// True when the same request may succeed if tried again.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Error::Transient(_) | Error::Checksum(_) | Error::Busy(..)
        )
    }

    /// True when the server said it has too much to do: it shed load (`503` with
    /// `Retry-After`) or throttled (`429`, or `503`: S3's `SlowDown`, Azure's `ServerBusy`,
    /// GCS's rate limits). A client then sends fewer requests at once; a connection reset
    /// alone is no such word.
    pub fn is_overload(&self) -> bool {
        match self {
            Error::Busy(..) => true,
            // The status with its reason, as object_store and cloud::signed write it: an
            // object's name may hold "503" (a WAL segment) or "SlowDown".
            Error::Transient(m) => ["429 Too Many Requests", "503 Service Unavailable"]
                .iter()
                .any(|w| m.contains(w)),
            _ => false,
        }
    }

    /// An I/O error with what was being done, classified by its kind.
    pub fn io(context: impl fmt::Display, e: std::io::Error) -> Self {
        use std::io::ErrorKind as K;
        let msg = format!("{context}: {e}");
        match e.kind() {
            K::NotFound => Error::NotFound(msg),
            K::PermissionDenied => Error::Denied(msg),
            K::AlreadyExists => Error::AlreadyExists(msg),
            K::Interrupted | K::TimedOut | K::WouldBlock => Error::Transient(msg),
            _ => Error::Permanent(msg),
        }
    }
}

impl From<object_store::Error> for Error {
    fn from(e: object_store::Error) -> Self {
        use object_store::Error as E;
        let full = one_line(&e);
        // A credential chain's own message (cloud::explained): already one line, and no
        // retry finds credentials that are not there.
        if let Some(at) = full.find(crate::cloud::MISSING) {
            let start = full[..at].rfind("no ").unwrap_or(at);
            return Error::Denied(full[start..].to_string());
        }
        let msg = concise(&full);
        match &e {
            E::NotFound { .. } => Error::NotFound(msg),
            E::AlreadyExists { .. } => Error::AlreadyExists(msg),
            E::PermissionDenied { .. } | E::Unauthenticated { .. } => Error::Denied(msg),
            E::InvalidPath { .. } | E::NotSupported { .. } | E::NotImplemented { .. } => {
                Error::Invalid(msg)
            }
            E::Precondition { .. } | E::NotModified { .. } => Error::Permanent(msg),
            _ => classify_generic(msg),
        }
    }
}

/// object_store reports HTTP failures as `Generic` with the status in the text; map the
/// statuses a caller can act on.
fn classify_generic(msg: String) -> Error {
    let has = |s: &str| msg.contains(s);
    if has("certificate") || has("InvalidCertificate") {
        // TLS trust is configuration: retrying cannot fix it.
        Error::Invalid(format!(
            "{msg} (HINT: a private CA, or the server's own certificate, goes in --ca-cert or AWS_CA_BUNDLE)"
        ))
    } else if has("NoSuchBucket") || has("ContainerNotFound") || has("404 Not Found") {
        Error::NotFound(msg)
    } else if has("403 Forbidden")
        || has("401 Unauthorized")
        || has("InvalidAccessKeyId")
        || has("SignatureDoesNotMatch")
        || has("AuthenticationFailed")
    {
        Error::Denied(msg)
    } else if has("400 Bad Request") && !has("RequestTimeout") {
        Error::Permanent(msg)
    } else {
        Error::Transient(msg)
    }
}

/// The part of an HTTP error a person needs: the status, the service's code and message;
/// object_store's text carries the whole request and response body.
pub(crate) fn concise(full: &str) -> String {
    let between = |a: &str, b: &str| {
        full.split(a)
            .nth(1)
            .and_then(|s| s.split(b).next())
            .map(|s| s.trim().to_string())
    };
    let status = between("status code: ", ":").or_else(|| between("status code: ", " "));
    // The service's words are shown escaped: no control character reaches a terminal.
    let shown = |s: String| s.escape_debug().take(300).collect::<String>();
    let code = between("<Code>", "</Code>").map(shown);
    let message = between("<Message>", "</Message>")
        .map(|m| m.split(" RequestId:").next().unwrap_or(&m).to_string())
        .map(shown);
    match (status, code, message) {
        (Some(s), Some(c), Some(m)) => format!("{s} {c}: {m}"),
        (Some(s), Some(c), None) => format!("{s} {c}"),
        (None, None, _) if full.contains(" - ") => {
            // "Error performing PUT URL in 2ms - HTTP error: ..." -> "PUT URL: HTTP error: ..."
            let (head, tail) = full.split_once(" - ").unwrap_or((full, ""));
            let op = head
                .split("performing ")
                .nth(1)
                .and_then(|s| s.split(" in ").next());
            format!("{}{tail}", op.map(|o| format!("{o}: ")).unwrap_or_default())
        }
        (Some(s), None, _) => {
            let what = full
                .split(" in ")
                .next()
                .unwrap_or("")
                .rsplit(": ")
                .next()
                .unwrap_or("");
            format!("{s} ({what})")
        }
        _ => full.chars().take(300).collect(),
    }
}

/// Flatten an error chain into one line for the CLI.
pub(crate) fn one_line(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        let t = inner.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        src = inner.source();
    }
    s.replace('\n', " ")
}

/// Result of a store operation.
pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    /// A store's code and message are shown escaped: a hostile one cannot clear an
    /// operator's terminal or forge lines in a log.
    #[test]
    fn a_stores_words_are_shown_escaped() {
        let full = "status code: 400: <Error><Code>Bad\u{1b}[2J</Code><Message>x\ny\u{7}</Message></Error>";
        let shown = super::concise(full);
        assert!(!shown.chars().any(|c| c.is_control()), "{shown:?}");
        assert!(shown.contains("Bad"), "{shown}");
    }

    /// Only a server's word that it is overloaded makes a client send fewer requests.
    #[test]
    fn overload_is_the_servers_word_not_a_reset() {
        use super::Error;
        let slow = "Server returned non-2xx status code: 503 Service Unavailable: <Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>";
        assert!(Error::Transient(super::concise(slow)).is_overload());
        assert!(Error::Busy("shed".into(), std::time::Duration::from_secs(1)).is_overload());
        let reset =
            "GET http://127.0.0.1:9000/wal/000000010000000000000503: connection reset by peer";
        assert!(!Error::Transient(reset.into()).is_overload());
        assert!(!Error::Transient("stalled, no byte moved for 30s".into()).is_overload());
        let named = "PUT https://h/b/SlowDown.log: HTTP error: connection reset";
        assert!(!Error::Transient(named.into()).is_overload());
    }
}
