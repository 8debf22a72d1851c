//! The traced relay: the same copy as `copy_bidirectional`, with each message's times logged.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::TcpStream;

use super::{connect, CHUNK};

/// Where the lines go, and the next connection's number.
pub struct Trace {
    out: Mutex<BufWriter<File>>,
    next: AtomicU64,
}

impl Trace {
    /// A trace to the file named by `FERRY_CONNECT_DELAY_TRACE`, if it is set.
    pub fn from_env() -> std::io::Result<Option<Self>> {
        let Some(path) = std::env::var_os("FERRY_CONNECT_DELAY_TRACE") else {
            return Ok(None);
        };
        Ok(Some(Self {
            out: Mutex::new(BufWriter::new(File::create(path)?)),
            next: AtomicU64::new(1),
        }))
    }

    fn line(&self, line: std::fmt::Arguments) {
        let mut out = self.out.lock().unwrap();
        // Flushed per line: the bench kills the proxy, and a lost tail would hide the end.
        let _ = out.write_fmt(line).and_then(|_| out.flush());
    }
}

/// CLOCK_MONOTONIC in seconds, the clock of Python's `time.monotonic()` in the bench's drivers.
pub fn now() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a local struct.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// One message on the way: bytes one way since the other way last had any.
#[derive(Clone, Copy)]
struct Message {
    first_read: f64,
    last_read: f64,
    last_written: f64,
    bytes: u64,
}

/// A connection's two open messages, `[up, down]`.
struct Conn {
    trace: Arc<Trace>,
    id: u64,
    open: Mutex<[Option<Message>; 2]>,
}

const DIRS: [&str; 2] = ["up", "down"];

impl Conn {
    fn emit(&self, dir: usize, m: Message) {
        self.trace.line(format_args!(
            "msg {} {} {:.6} {:.6} {:.6} {}\n",
            self.id, DIRS[dir], m.first_read, m.last_read, m.last_written, m.bytes
        ));
    }

    /// `n` bytes read one way at `t`: the other way's message, if any, has ended.
    fn read(&self, dir: usize, t: f64, n: usize) {
        let mut open = self.open.lock().unwrap();
        if let Some(m) = open[1 - dir].take() {
            self.emit(1 - dir, m);
        }
        let m = open[dir].get_or_insert(Message {
            first_read: t,
            last_read: t,
            last_written: t,
            bytes: 0,
        });
        m.last_read = t;
        m.bytes += n as u64;
    }

    fn written(&self, dir: usize, t: f64) {
        if let Some(m) = self.open.lock().unwrap()[dir].as_mut() {
            m.last_written = t;
        }
    }

    fn close(&self) {
        let mut open = self.open.lock().unwrap();
        for dir in 0..2 {
            if let Some(m) = open[dir].take() {
                self.emit(dir, m);
            }
        }
    }
}

/// Relays `client` to `upstream` as the plain relay does, logging each message.
pub async fn relay(
    trace: Arc<Trace>, accepted: f64, client: TcpStream, upstream: SocketAddr,
) -> std::io::Result<()> {
    let relayed = now();
    let server = connect(&client, upstream).await?;
    let id = trace.next.fetch_add(1, Ordering::Relaxed);
    trace.line(format_args!(
        "open {id} {accepted:.6} {relayed:.6} {:.6}\n",
        now()
    ));
    let conn = Conn {
        trace,
        id,
        open: Mutex::new([None, None]),
    };
    let (mut client, mut server) = (client, server);
    // Borrowed halves: unlike owned ones they send no FIN when dropped, so an error below
    // leaves the sockets for the zero linger to reset.
    let copied = {
        let (mut client_r, mut client_w) = client.split();
        let (mut server_r, mut server_w) = server.split();
        let up = copy(&conn, 0, &mut client_r, &mut server_w);
        let down = copy(&conn, 1, &mut server_r, &mut client_w);
        // As copy_bidirectional: the first error ends both ways.
        tokio::try_join!(up, down)
    };
    conn.close();
    if let Err(e) = copied {
        // A reset must reach the other side as one (see the plain relay).
        let _ = client.set_zero_linger();
        let _ = server.set_zero_linger();
        return Err(e);
    }
    Ok(())
}

async fn copy(
    conn: &Conn, dir: usize, from: &mut ReadHalf<'_>, to: &mut WriteHalf<'_>,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            return to.shutdown().await;
        }
        conn.read(dir, now(), n);
        to.write_all(&buf[..n]).await?;
        conn.written(dir, now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    fn scratch(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("ferry-connect-delay-{name}-{}", std::process::id()))
    }

    fn trace_to(path: &std::path::Path) -> Arc<Trace> {
        Arc::new(Trace {
            out: Mutex::new(BufWriter::new(File::create(path).unwrap())),
            next: AtomicU64::new(1),
        })
    }

    fn lines(path: &std::path::Path) -> Vec<String> {
        let text = std::fs::read_to_string(path).unwrap();
        std::fs::remove_file(path).unwrap();
        text.lines().map(str::to_string).collect()
    }

    #[test]
    fn a_message_ends_when_bytes_come_the_other_way() {
        let path = scratch("unit");
        let conn = Conn {
            trace: trace_to(&path),
            id: 7,
            open: Mutex::new([None, None]),
        };
        conn.read(0, 1.0, 100);
        conn.written(0, 1.5);
        conn.read(0, 2.0, 50);
        conn.written(0, 2.5);
        conn.read(1, 3.0, 10);
        conn.written(1, 3.25);
        conn.read(0, 4.0, 5);
        conn.close();
        assert_eq!(
            lines(&path),
            [
                "msg 7 up 1.000000 2.000000 2.500000 150",
                "msg 7 down 3.000000 3.000000 3.250000 10",
                "msg 7 up 4.000000 4.000000 4.000000 5",
            ]
        );
    }

    type Task<T> = tokio::task::JoinHandle<T>;

    /// An upstream that reads a 5-byte request, then does `then` with its socket; a traced
    /// relay in front of it; and a client that has sent "hello" through both. Returns the
    /// client, the upstream's task and the relay's.
    async fn hello_through_relay<F, Fut>(
        path: &std::path::Path, then: F,
    ) -> (TcpStream, Task<()>, Task<std::io::Result<()>>)
    where
        F: FnOnce(TcpStream, [u8; 5]) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send,
    {
        let server = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let upstream = server.local_addr().unwrap();
        let answering = tokio::spawn(async move {
            let (mut s, _) = server.accept().await.unwrap();
            let mut req = [0u8; 5];
            s.read_exact(&mut req).await.unwrap();
            then(s, req).await;
        });
        let front = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = front.local_addr().unwrap();
        let trace = trace_to(path);
        let relaying = tokio::spawn(async move {
            let (c, _) = front.accept().await.unwrap();
            relay(trace, now(), c, upstream).await
        });
        let mut client = TcpStream::connect(addr).await.unwrap();
        client.write_all(b"hello").await.unwrap();
        (client, answering, relaying)
    }

    #[tokio::test]
    async fn the_traced_relay_passes_a_request_and_its_answer_and_logs_both() {
        let path = scratch("relay");
        let (mut client, answering, relaying) =
            hello_through_relay(&path, |mut s, req| async move {
                s.write_all(b"ok:").await.unwrap();
                s.write_all(&req).await.unwrap();
            })
            .await;
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).await.unwrap();
        assert_eq!(answer, b"ok:hello");
        answering.await.unwrap();
        drop(client);
        relaying.await.unwrap().unwrap();
        let lines = lines(&path);
        let fields: Vec<Vec<&str>> = lines.iter().map(|l| l.split(' ').collect()).collect();
        assert_eq!(fields.len(), 3, "{lines:?}");
        assert_eq!(fields[0][..2], ["open", "1"]);
        assert_eq!([fields[1][2], fields[1][6]], ["up", "5"]);
        assert_eq!([fields[2][2], fields[2][6]], ["down", "8"]);
    }

    #[tokio::test]
    async fn a_reset_from_upstream_reaches_the_client_as_a_reset() {
        let path = scratch("reset");
        let (mut client, resetting, relaying) = hello_through_relay(&path, |s, _| async move {
            s.set_zero_linger().unwrap();
        })
        .await;
        resetting.await.unwrap();
        // The client keeps its side open and waits for an answer: the relay must end both
        // ways on the upstream's reset, not wait for the client.
        let mut answer = Vec::new();
        let read = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            client.read_to_end(&mut answer),
        )
        .await
        .expect("the relay passed the reset on");
        assert_eq!(
            read.unwrap_err().kind(),
            std::io::ErrorKind::ConnectionReset
        );
        assert!(relaying.await.unwrap().is_err());
        lines(&path);
    }
}
