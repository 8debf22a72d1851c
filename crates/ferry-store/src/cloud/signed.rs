//! Requests `object_store` has no call for, signed by its own authorizers and sent by its
//! HTTP client; this module only maps the answers.

use bytes::Bytes;
use http::StatusCode;
use object_store::client::{HttpClient, HttpRequest};

use crate::error::one_line;
use crate::{Error, Result};

/// Sends a signed request and maps the status to what the caller can do about it.
pub(super) async fn send(http: &HttpClient, req: HttpRequest, what: &str) -> Result<()> {
    send_for_body(http, req, what).await.map(drop)
}

/// [`send`], returning the response body.
pub(super) async fn send_for_body(
    http: &HttpClient, req: HttpRequest, what: &str,
) -> Result<Bytes> {
    send_for_response(http, req, what)
        .await
        .map(|(_, body)| body)
}

/// [`send`], returning the response's headers and body.
pub(super) async fn send_for_response(
    http: &HttpClient, req: HttpRequest, what: &str,
) -> Result<(http::HeaderMap, Bytes)> {
    let resp = http
        .execute(req)
        .await
        .map_err(|e| Error::Transient(format!("{what}: {}", one_line(&e))))?;
    let status = resp.status();
    let headers = resp.headers().clone();
    let body = resp.into_body().bytes().await;
    if status.is_success() {
        return body
            .map(|b| (headers, b))
            .map_err(|e| Error::Transient(format!("{what}: {}", one_line(&e))));
    }
    Err(refusal(status, &body.unwrap_or_default(), what))
}

/// A failed answer as an error the caller can act on. The body is the server's: its code
/// or message is shown escaped (no control characters reach a terminal) and cut short.
fn refusal(status: StatusCode, body: &[u8], what: &str) -> Error {
    let text = String::from_utf8_lossy(body);
    // S3 and Azure answer XML with a <Code>; GCS's JSON API {"error": {"message": ...}}.
    let json_message = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_string));
    let code = text
        .split("<Code>")
        .nth(1)
        .and_then(|s| s.split("</Code>").next())
        .map(str::to_string)
        .or(json_message)
        .unwrap_or_else(|| status.canonical_reason().unwrap_or("").to_string());
    let code: String = code.escape_debug().take(200).collect();
    let msg = format!("{what}: {status} {code}");
    match status {
        StatusCode::NOT_FOUND => Error::NotFound(msg),
        StatusCode::CONFLICT => Error::AlreadyExists(msg),
        StatusCode::FORBIDDEN | StatusCode::UNAUTHORIZED => Error::Denied(msg),
        StatusCode::TOO_MANY_REQUESTS | StatusCode::REQUEST_TIMEOUT => Error::Transient(msg),
        s if s.is_server_error() => Error::Transient(msg),
        // A block whose Content-MD5 did not match arrived damaged: send it again.
        _ if code.contains("Md5Mismatch") || code.contains("BadDigest") => Error::Checksum(msg),
        _ => Error::Permanent(msg),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hostile_error_body_is_shown_escaped_and_short() {
        let body = format!(
            r#"{{"error": {{"message": "\u001b[2Jgone{}"}}}}"#,
            "x".repeat(5000)
        );
        let e = refusal(StatusCode::BAD_REQUEST, body.as_bytes(), "put k").to_string();
        assert!(!e.contains('\x1b') && e.contains("gone"), "{e}");
        assert!(e.len() < 400, "{}", e.len());
        let xml = b"<Error><Code>NoSuchKey\n\rx</Code></Error>";
        let e = refusal(StatusCode::NOT_FOUND, xml, "get k");
        assert!(
            matches!(&e, Error::NotFound(m) if !m.contains('\n')),
            "{e:?}"
        );
        assert!(matches!(
            refusal(StatusCode::BAD_REQUEST, b"<Code>BadDigest</Code>", "x"),
            Error::Checksum(_)
        ));
    }
}
