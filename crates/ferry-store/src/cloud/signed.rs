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
    let body = body.unwrap_or_default();
    let text = String::from_utf8_lossy(&body);
    // S3 and Azure answer XML with a <Code>; GCS's JSON API {"error": {"message": ...}}.
    let json_message = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_string));
    let code = text
        .split("<Code>")
        .nth(1)
        .and_then(|s| s.split("</Code>").next())
        .map(str::to_string)
        .or(json_message)
        .unwrap_or_else(|| status.canonical_reason().unwrap_or("").to_string());
    let msg = format!("{what}: {status} {code}");
    Err(match status {
        StatusCode::NOT_FOUND => Error::NotFound(msg),
        StatusCode::CONFLICT => Error::AlreadyExists(msg),
        StatusCode::FORBIDDEN | StatusCode::UNAUTHORIZED => Error::Denied(msg),
        StatusCode::TOO_MANY_REQUESTS | StatusCode::REQUEST_TIMEOUT => Error::Transient(msg),
        s if s.is_server_error() => Error::Transient(msg),
        // A block whose Content-MD5 did not match arrived damaged: send it again.
        _ if code.contains("Md5Mismatch") || code.contains("BadDigest") => Error::Checksum(msg),
        _ => Error::Permanent(msg),
    })
}
