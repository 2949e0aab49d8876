//! The MCP face: the tools (`tools/`), the rmcp handler that serves them, the mapping of engine errors to
//! JSON-RPC errors, and the stdio transport.

mod errors;
mod file_resources;
mod handler;
mod history;
mod live_output;
pub mod profiles;
mod session_runs;
mod stdio;
mod tools;

pub use file_resources::DEFAULT_RESOURCE_READ_BYTES;
pub use handler::SandlotMcp;
pub use history::not_kept as output_not_kept;
pub use session_runs::SessionRuns;
pub use stdio::serve_stdio;
pub use tools::ToolNames;
