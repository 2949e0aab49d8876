//! MCP over stdio: JSON-RPC lines on stdin and stdout. Nothing else may write to stdout (logs go to stderr).

use rmcp::ServiceExt;

use super::SandlotMcp;
use crate::AppState;

/// Serves the tools on this process's stdin and stdout until the client closes stdin.
pub async fn serve_stdio(state: AppState) -> std::io::Result<()> {
    let service = SandlotMcp::new(state)
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| std::io::Error::other(format!("MCP stdio initialization failed: {e}")))?;
    service.waiting().await.map_err(|e| std::io::Error::other(format!("MCP stdio session failed: {e}")))?;
    Ok(())
}
