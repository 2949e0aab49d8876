//! MCP over stdio: JSON-RPC lines on stdin and stdout. Nothing else may write to stdout (logs go to stderr).
//!
//! When the client closes stdin, the runs still going are cancelled at once (rmcp alone would first give them
//! 5 s to finish), and the server exits once their end is recorded.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use rmcp::ServiceExt;
use tokio::io::{AsyncRead, ReadBuf};
use tokio_util::sync::CancellationToken;

use sandlot_core::Engine;

/// How long, after stdin closed, the server waits for cancelled runs to be recorded.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// Serves the handler `make` returns on this process's stdin and stdout until the client closes stdin; the handler
/// is given the token cancelled at that moment (its runs end with it), and `engine`'s runs are awaited after.
pub async fn serve<H: rmcp::ServerHandler>(
    engine: &Engine,
    make: impl FnOnce(CancellationToken) -> H,
) -> std::io::Result<()> {
    let closed = CancellationToken::new();
    let stdin = EofSignal { inner: tokio::io::stdin(), closed: closed.clone() };
    let handler = make(closed);
    let service = handler
        .serve((stdin, tokio::io::stdout()))
        .await
        .map_err(|e| std::io::Error::other(format!("MCP stdio initialization failed: {e}")))?;
    let ended = service.waiting().await;
    let deadline = tokio::time::Instant::now() + CLOSE_GRACE;
    while engine.active_runs() + engine.queued_runs() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    ended.map_err(|e| std::io::Error::other(format!("MCP stdio session failed: {e}")))?;
    Ok(())
}

/// Standard input that cancels `closed` when it reaches end of file.
struct EofSignal<R> {
    inner: R,
    closed: CancellationToken,
}

impl<R: AsyncRead + Unpin> AsyncRead for EofSignal<R> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() == before && buf.remaining() > 0 {
            self.closed.cancel();
        }
        polled
    }
}
