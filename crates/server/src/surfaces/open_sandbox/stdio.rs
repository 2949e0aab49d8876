//! open-sandbox over stdio (`sandlot stdio --profile open-sandbox`): newline-delimited JSON-RPC, one answer line per
//! request line, in order. No auth (the caller is whoever started the process), so every request works in the
//! workspace of the caller [`STDIO_CALLER`], an ordinary tenant (not an admin) like any other.

use serde_json::Value;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};

use super::dispatch::{Identity, Session, dispatch_text};
use super::errors::{Kind, RpcError};

/// The caller of every stdio request.
pub const STDIO_CALLER: &str = "stdio";

/// Answers the requests of `input` on `output` until `input` ends or the server shuts down.
pub async fn serve(
    app: crate::AppState,
    input: impl AsyncBufRead + Unpin,
    mut output: impl AsyncWrite + Unpin,
) -> std::io::Result<()> {
    let cancel = app.shutdown.child_token();
    let _guard = cancel.clone().drop_guard();
    let identity = Identity::of(sandlot_core::Tenant::new(STDIO_CALLER));
    let session = Session { app, identity, cancel: cancel.clone() };
    let mut lines = input.lines();
    loop {
        let line = tokio::select! {
            line = lines.next_line() => line,
            () = cancel.cancelled() => return Ok(()),
        };
        let line = match line {
            Ok(Some(line)) => line,
            Ok(None) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                let error = RpcError::new(Kind::InvalidRequest, "request line is not UTF-8").response(Value::Null);
                output.write_all(format!("{error}\n").as_bytes()).await?;
                output.flush().await?;
                continue;
            }
            Err(e) => return Err(e),
        };
        if line.trim().is_empty() {
            continue;
        }
        if let Some(answer) = dispatch_text(&session, line.trim()).await {
            output.write_all(format!("{answer}\n").as_bytes()).await?;
            output.flush().await?;
        }
    }
}
