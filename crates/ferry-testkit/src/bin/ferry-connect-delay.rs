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

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpSocket, TcpStream};

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
    let socket = TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    // Accepted sockets inherit the listener's buffer sizes.
    socket.set_recv_buffer_size(BUFFER)?;
    socket.set_send_buffer_size(BUFFER)?;
    socket.bind(listen)?;
    let listener = socket.listen(1024)?;
    loop {
        let (client, _) = listener.accept().await?;
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            if let Err(e) = relay(client, upstream).await {
                eprintln!("ferry-connect-delay: {e}");
            }
        });
    }
}

async fn relay(mut client: TcpStream, upstream: SocketAddr) -> std::io::Result<()> {
    let socket = TcpSocket::new_v4()?;
    socket.set_recv_buffer_size(BUFFER)?;
    socket.set_send_buffer_size(BUFFER)?;
    let mut server = socket.connect(upstream).await?;
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    tokio::io::copy_bidirectional_with_sizes(&mut client, &mut server, CHUNK, CHUNK).await?;
    Ok(())
}
