//! An attacker's test: a server in the store's place that answers with more than was asked
//! for, or vouches for what it did not store. ferry reads an answer up to what it asked for
//! (a range's length, or `bounded::MAX_GET` for a whole object) and stops there, instead of
//! holding whatever is sent in memory; and it takes an upload's part as stored only on a
//! checksum or ETag that matches what it sent. The server is the test's own listener: it is
//! the attacker.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use ferry_store::cloud::{CloudStore, S3Config};
use ferry_store::{BlockId, Error, Meta, Store, Upload};
use md5::{Digest, Md5};

/// What the server sends at most, per answer: enough that reading it all shows.
const FLOOD: u64 = 256 << 20;

/// A listener that answers every request with a flood; returns its port and the count of
/// bytes it managed to send.
fn flooding_server() -> (u16, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let sent = Arc::new(AtomicU64::new(0));
    let count = sent.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let count = count.clone();
            std::thread::spawn(move || answer(conn, &count));
        }
    });
    (port, sent)
}

fn answer(mut conn: TcpStream, sent: &AtomicU64) {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if conn.read(&mut b).unwrap_or(0) == 0 {
            return;
        }
        head.push(b[0]);
    }
    let head = String::from_utf8_lossy(&head).to_lowercase();
    // A range GET gets the range it asked for in words, and a body far longer; a whole GET
    // gets a length no memory holds.
    let start = match head.contains("\r\nrange:") {
        true => "HTTP/1.1 206 Partial Content\r\ncontent-range: bytes 0-1023/1024\r\n",
        false => "HTTP/1.1 200 OK\r\n",
    };
    let start = format!("{start}content-length: {}\r\n\r\n", 5u64 << 30);
    if conn.write_all(start.as_bytes()).is_err() {
        return;
    }
    let block = vec![b'x'; 64 << 10];
    while sent.load(Ordering::Relaxed) < FLOOD {
        if conn.write_all(&block).is_err() {
            return;
        }
        sent.fetch_add(block.len() as u64, Ordering::Relaxed);
    }
}

fn store(port: u16) -> CloudStore {
    let cfg = S3Config {
        endpoint: Some(format!("http://127.0.0.1:{port}")),
        region: Some("us-east-1".into()),
        access_key_id: Some("attacker".into()),
        secret_access_key: Some("attacker-secret".into()),
        ..Default::default()
    };
    CloudStore::s3(&cfg, "bucket").unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_longer_than_its_range_is_cut_at_the_range() {
    let (port, sent) = flooding_server();
    let e = store(port).get_range("k", 0..1024).await.unwrap_err();
    let sent = sent.load(Ordering::Relaxed);
    // The socket's buffers take a few MiB after ferry stops reading; not the whole flood.
    assert!(
        sent < 32 << 20,
        "{sent} bytes were read for a 1 KiB range ({e})"
    );
    assert!(e.to_string().contains("longer than 1024 bytes"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_object_longer_than_any_store_file_is_refused_unread() {
    let (port, sent) = flooding_server();
    let e = store(port).get("k").await.unwrap_err();
    let sent = sent.load(Ordering::Relaxed);
    assert!(
        sent < 32 << 20,
        "{sent} bytes were read of a 5 GiB answer ({e})"
    );
    assert!(e.to_string().contains("more than"), "{e}");
}

/// One request as the fake store saw it.
struct Req {
    method: String,
    /// Path and query.
    target: String,
    body: Vec<u8>,
}

/// An answer: status, headers, body.
type Answer = (u16, Vec<(&'static str, String)>, String);

/// A listener in S3's place that answers each request with `answer` (one request per
/// connection); returns its port and the requests seen, `METHOD TARGET` each.
fn fake_s3(
    answer: impl Fn(&Req) -> Answer + Send + Sync + 'static,
) -> (u16, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (log, answer) = (seen.clone(), Arc::new(answer));
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let (log, answer) = (log.clone(), answer.clone());
            std::thread::spawn(move || serve_one(conn, &log, &*answer));
        }
    });
    (port, seen)
}

fn serve_one(conn: TcpStream, log: &Mutex<Vec<String>>, answer: &dyn Fn(&Req) -> Answer) {
    let mut r = BufReader::new(conn);
    let mut line = String::new();
    if r.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut it = line.split_whitespace();
    let (method, target) = (
        it.next().unwrap_or("").to_string(),
        it.next().unwrap_or("").to_string(),
    );
    let mut len = 0usize;
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).unwrap_or(0) == 0 {
            return;
        }
        if h == "\r\n" {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                len = v.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0; len];
    if r.read_exact(&mut body).is_err() {
        return;
    }
    log.lock().unwrap().push(format!("{method} {target}"));
    let (status, headers, text) = answer(&Req {
        method,
        target,
        body,
    });
    let reason = match status {
        200 => "OK",
        403 => "Forbidden",
        _ => "Not Found",
    };
    let mut out = format!("HTTP/1.1 {status} {reason}\r\nconnection: close\r\n");
    // A HEAD's length is the object's, given by the answer; any other is the body's.
    if !headers.iter().any(|(k, _)| *k == "content-length") {
        out += &format!("content-length: {}\r\n", text.len());
    }
    for (k, v) in headers {
        out += &format!("{k}: {v}\r\n");
    }
    out += &format!("\r\n{text}");
    let _ = r.get_mut().write_all(out.as_bytes());
}

/// The answers common to every upload: a session opened, a part taken with `etag` (and
/// `checksum` as its SHA-256, if any), a removal refused; `complete` and `head` for the rest.
fn uploads(
    part: impl Fn(&[u8]) -> Vec<(&'static str, String)> + Send + Sync + 'static, complete: Answer,
    head_etag: String,
) -> impl Fn(&Req) -> Answer + Send + Sync + 'static {
    move |req: &Req| {
        match (req.method.as_str(), &req.target) {
        ("POST", t) if t.contains("?uploads") => (
            200,
            vec![],
            "<InitiateMultipartUploadResult><UploadId>u1</UploadId></InitiateMultipartUploadResult>"
                .into(),
        ),
        ("PUT", t) if t.contains("partNumber=") => (200, part(&req.body), String::new()),
        // A removal, one key or many (object_store deletes by `POST ?delete`), refused.
        ("DELETE", _) => denied(),
        ("POST", t) if t.ends_with("?delete") => denied(),
        ("POST", _) => complete.clone(),
        ("HEAD", _) => (
            200,
            vec![("content-length", "3".into()), ("etag", format!("\"{head_etag}\""))],
            String::new(),
        ),
        _ => (404, vec![], String::new()),
    }
    }
}

fn denied() -> Answer {
    (
        403,
        vec![],
        "<Error><Code>AccessDenied</Code><Message>no</Message></Error>".into(),
    )
}

fn md5_hex(data: &[u8]) -> String {
    hex::encode(Md5::digest(data))
}

/// The ETag S3 gives an object of one part holding `data`.
fn assembled_of(data: &[u8]) -> String {
    format!("{}-1", md5_hex(&Md5::digest(data)))
}

/// A store on `port`, an upload of `k` started in it and `abc` sent as its one part: the part's
/// result.
async fn one_part(port: u16) -> (CloudStore, Upload, ferry_store::Result<BlockId>) {
    let s = store(port);
    let up = s.start_upload("k", &Meta::new()).await.unwrap();
    let part = s.put_block(&up, 0, 0, Bytes::from_static(b"abc")).await;
    (s, up, part)
}

/// A part answered with an ETag that is not the MD5 of what was sent, and a "checksum" that
/// is no SHA-256: the forged checksum confirms nothing, the ETag is checked, the part refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_part_with_a_forged_checksum_is_checked_by_its_etag() {
    for forged in ["x", "AAAA"] {
        let part = move |_: &[u8]| {
            vec![
                ("etag", format!("\"{}\"", "0".repeat(32))),
                ("x-amz-checksum-sha256", forged.to_string()),
            ]
        };
        let (port, _) = fake_s3(uploads(part, (404, vec![], String::new()), String::new()));
        let e = one_part(port).await.2.unwrap_err();
        assert!(
            matches!(&e, Error::Checksum(m) if m.contains("part 1")),
            "{forged}: {e}"
        );
    }
}

/// Parts the store took as sent, then an object assembled of something else, whose removal
/// the store refuses: refused for good (a retry would find the upload gone and the object in
/// place with nothing to compare it with), not taken as stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_that_is_not_its_parts_fails_for_good() {
    let honest = |body: &[u8]| vec![("etag", format!("\"{}\"", md5_hex(body)))];
    let wrong = format!("{}-1", "f".repeat(32));
    let complete = (
        200,
        vec![],
        format!("<CompleteMultipartUploadResult><ETag>\"{wrong}\"</ETag></CompleteMultipartUploadResult>"),
    );
    let (port, seen) = fake_s3(uploads(honest, complete, wrong));
    let (s, up, id) = one_part(port).await;
    let id = id.unwrap();
    let e = s
        .complete_upload(&up, vec![id], &Meta::new())
        .await
        .unwrap_err();
    assert!(!e.is_transient(), "{e:?}");
    assert!(e.to_string().contains("checksum mismatch"), "{e}");
    let seen = seen.lock().unwrap().clone();
    let removal = |r: &String| r.starts_with("DELETE ") || r.ends_with("?delete");
    assert!(seen.iter().any(removal), "{seen:?}");
}

/// A completion sent again finds its upload gone (its first answer lost): the object under
/// the key counts only when it is the one its parts make.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_completion_checks_the_object_it_finds() {
    let gone = (
        404,
        vec![],
        "<Error><Code>NoSuchUpload</Code><Message>gone</Message></Error>".to_string(),
    );
    let good = assembled_of(b"abc");
    for (head_etag, ok) in [
        (good.clone(), true),
        (format!("{}-1", "f".repeat(32)), false),
    ] {
        let honest = |body: &[u8]| vec![("etag", format!("\"{}\"", md5_hex(body)))];
        let (port, _) = fake_s3(uploads(honest, gone.clone(), head_etag));
        let (s, up, id) = one_part(port).await;
        let id = id.unwrap();
        let r = s.complete_upload(&up, vec![id], &Meta::new()).await;
        match ok {
            true => assert_eq!(r.unwrap(), Some(good.clone())),
            false => {
                let e = r.unwrap_err();
                assert!(!e.is_transient(), "{e:?}");
                assert!(e.to_string().contains("not the one its parts make"), "{e}");
            }
        }
    }
}
