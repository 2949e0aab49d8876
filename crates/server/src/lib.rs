//! sandlot-server: the faces of sandlot. The MCP server ([`mcp`]: the tools, over stdio or Streamable HTTP) and the
//! HTTP app ([`http::app`]: `/mcp`, signed `/files` downloads, `/healthz`). Every face runs code through
//! [`sandlot_core::Engine::run`]; none talks to a backend.

pub mod http;
pub mod mcp;
mod state;
pub mod telemetry;

pub use mcp::{DEFAULT_RESOURCE_READ_BYTES, ToolNames};
pub use state::{AppState, FileUrls, unix_now};
