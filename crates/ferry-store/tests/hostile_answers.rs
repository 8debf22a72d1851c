//! An attacker's test: a server in the store's place that answers with more than was asked
//! for. ferry reads an answer up to what it asked for (a range's length, or
//! `bounded::MAX_GET` for a whole object) and stops there, instead of holding whatever is
//! sent in memory. The server is the test's own listener: it is the attacker.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ferry_store::cloud::{CloudStore, S3Config};
use ferry_store::Store;

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
