//! A TCP proxy whose connections open one round trip late, for bench/lib.sh's emulated links.
//!
//!   ferry-connect-delay LISTEN UPSTREAM DELAY_MS
//!
//! Toxiproxy accepts on loopback at once and its latency toxic delays data only, so a new
//! connection's handshake costs nothing there; on a real link TCP's costs a round trip (and
//! TLS's, which is data, is already delayed by the toxic). This proxy sits in front of
//! toxiproxy: a connection's bytes go on only `DELAY_MS` after it was accepted, so a client
//! that opens many connections pays for each as it would on a WAN.
//!
//! Its socket buffers are small (the link's shaping happens on the client's side of it, and
//! toxiproxy's bandwidth toxic behind it must still push back on the client at once).
//!
//! With `FERRY_CONNECT_DELAY_TRACE=FILE` it writes one line per message to FILE, so that a
//! request's time can be split between the hops (`bench/serve/hops.py` reads it): a message is
//! the bytes one way until bytes come the other way (an HTTP/1 request, then its answer).
//! Lines, times in CLOCK_MONOTONIC seconds:
//!   `open CONN ACCEPTED RELAYED CONNECTED`
//!   `msg CONN up|down FIRST_READ LAST_READ LAST_WRITTEN BYTES`

mod trace;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpSocket, TcpStream};

use trace::Trace;

/// Socket buffer on each side: at loopback delays it is far more than a connection's rate
/// needs, and far less than the megabytes autotuning would grant.
const BUFFER: u32 = 256 << 10;
/// Bytes copied per read.
const CHUNK: usize = 128 << 10;

fn usage() -> ! {
    eprintln!("usage: ferry-connect-delay LISTEN UPSTREAM DELAY_MS");
    std::process::exit(2);
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [listen, upstream, delay] = args.as_slice() else {
        usage()
    };
    let (Ok(listen), Ok(upstream), Ok(delay)) = (
        listen.parse::<SocketAddr>(),
        upstream.parse::<SocketAddr>(),
        delay.parse::<u64>(),
    ) else {
        usage()
    };
    let delay = Duration::from_millis(delay);
    raise_open_files();
    let socket = TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    // Accepted sockets inherit the listener's buffer sizes.
    socket.set_recv_buffer_size(BUFFER)?;
    socket.set_send_buffer_size(BUFFER)?;
    socket.bind(listen)?;
    let listener = socket.listen(1024)?;
    let trace = Trace::from_env()?.map(Arc::new);
    loop {
        // A refused or aborted accept (out of descriptors, a client gone) costs that client
        // only: the proxy stays up, or every later client would be refused and the tool
        // under test blamed.
        let client = match listener.accept().await {
            Ok((c, _)) => c,
            Err(e) => {
                eprintln!("ferry-connect-delay: accept: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let accepted = trace::now();
        let trace = trace.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let relayed = match trace {
                None => relay(client, upstream).await,
                Some(t) => trace::relay(t, accepted, client, upstream).await,
            };
            if let Err(e) = relayed {
                eprintln!("ferry-connect-delay: {e}");
            }
        });
    }
}

/// The upstream connection, with the same small buffers; both sides without Nagle.
async fn connect(client: &TcpStream, upstream: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.set_recv_buffer_size(BUFFER)?;
    socket.set_send_buffer_size(BUFFER)?;
    let server = socket.connect(upstream).await?;
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    Ok(server)
}

async fn relay(mut client: TcpStream, upstream: SocketAddr) -> std::io::Result<()> {
    let mut server = connect(&client, upstream).await?;
    if let Err(e) =
        tokio::io::copy_bidirectional_with_sizes(&mut client, &mut server, CHUNK, CHUNK).await
    {
        // A reset (toxiproxy's reset_peer on the lossy profile) must reach the other side as
        // one, not as a clean end of the stream.
        let _ = client.set_zero_linger();
        let _ = server.set_zero_linger();
        return Err(e);
    }
    Ok(())
}

/// Each relayed connection takes two descriptors: the soft limit (often 1024) would stop the
/// proxy at about 500 connections, which `bench/serve.sh`'s tenants reach.
fn raise_open_files() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain system calls on a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}
