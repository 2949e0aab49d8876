//! What the proxy answers a sandbox's HTTP client itself: a refusal (403), a failure to reach the host (502), a
//! request it cannot serve (400), each with a one-line text body that names the host, the port and the reason, and
//! the [`VERDICT_HEADER`] a client that shows pages (the browser) tells such an answer from the host's by.

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// The header of every answer the proxy gives itself: `refused` (403) or `failed`. A host could send it too; a
/// client that believes it can only report a failure, which is all such a host achieves.
pub const VERDICT_HEADER: &str = "X-Sandlot-Egress";

/// Writes the status and the line, and closes the connection.
pub async fn error(stream: &mut TcpStream, status: u16, host: &str, port: u16, reason: &str) {
    let title = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        _ => "Bad Gateway",
    };
    let verb = if status == 403 { "refused" } else { "failed" };
    let body = format!("sandlot egress {verb} {host}:{port}: {reason}\n");
    let response = format!(
        "HTTP/1.1 {status} {title}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n\
         {VERDICT_HEADER}: {verb}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}
