//! A live process's stdin: the exec's hijacked connection, closed (half-closed, which Docker passes on to the process
//! as end of file) by `shutdown` or, as a pipe is, when it is dropped. Dropping the bare connection's write half
//! would close nothing while the output half stays open, so a process reading its input to the end would wait
//! forever; the drop hands the shutdown to a task.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncWrite, AsyncWriteExt};

/// The exec's input, shut down when dropped.
pub(crate) struct ExecStdin {
    /// `None` once dropped.
    inner: Option<Pin<Box<dyn AsyncWrite + Send>>>,
}

impl ExecStdin {
    pub(crate) fn new(inner: Pin<Box<dyn AsyncWrite + Send>>) -> Self {
        Self { inner: Some(inner) }
    }

    /// The connection; `BrokenPipe` once dropped (never seen: only `Drop` takes it).
    fn inner(&mut self) -> std::io::Result<&mut Pin<Box<dyn AsyncWrite + Send>>> {
        self.inner.as_mut().ok_or_else(|| std::io::ErrorKind::BrokenPipe.into())
    }
}

impl AsyncWrite for ExecStdin {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        self.inner()?.as_mut().poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.inner()?.as_mut().poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.inner()?.as_mut().poll_shutdown(cx)
    }
}

impl Drop for ExecStdin {
    fn drop(&mut self) {
        let Some(mut inner) = self.inner.take() else { return };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            // A second shutdown after an explicit one is harmless (the socket is already half-closed).
            runtime.spawn(async move {
                let _ = inner.shutdown().await;
            });
        }
    }
}
