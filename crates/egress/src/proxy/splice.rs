//! Splicing a sandbox's connection to its host: bytes both ways, counted, under the sandbox's bandwidth cap.
//!
//! When the sandbox ends its side cleanly (EOF), the host's write half is shut down and the answer still comes back
//! (a client's half-close); when the host ends its side, or either side fails, the connection ends: a host that
//! has said all it will say is done, and a sandbox that keeps its end open must not hold one of its connections
//! (and a proxy task) for ever.

use crate::bandwidth::{Bandwidth, Direction};
use crate::intercept::Carried;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// Copies `client` to `upstream` and back until both are done; returns what went each way.
pub async fn splice(client: TcpStream, upstream: TcpStream, bandwidth: &Bandwidth) -> Carried {
    let (sent, received) = (AtomicU64::new(0), AtomicU64::new(0));
    let (client_read, client_write) = client.into_split();
    let (upstream_read, upstream_write) = upstream.into_split();
    let up = pump(client_read, upstream_write, bandwidth, Direction::Sent, &sent);
    let down = pump(upstream_read, client_write, bandwidth, Direction::Received, &received);
    tokio::pin!(up, down);
    tokio::select! {
        result = &mut up => if result.is_ok() { let _ = down.await; },
        _ = &mut down => {},
    }
    Carried { sent: sent.load(Ordering::Relaxed), received: received.load(Ordering::Relaxed) }
}

async fn pump(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    bandwidth: &Bandwidth,
    direction: Direction,
    count: &AtomicU64,
) -> std::io::Result<()> {
    let mut buffer = vec![0u8; bandwidth.chunk()];
    loop {
        let length = from.read(&mut buffer).await?;
        if length == 0 {
            return to.shutdown().await;
        }
        bandwidth.take(direction, length).await;
        to.write_all(&buffer[..length]).await?;
        count.fetch_add(length as u64, Ordering::Relaxed);
        let label = match direction {
            Direction::Sent => "sent",
            Direction::Received => "received",
        };
        metrics::counter!("sandlot_egress_bytes_total", "direction" => label).increment(length as u64);
    }
}
