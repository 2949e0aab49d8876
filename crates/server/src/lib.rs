//! sandlot-server: the faces of sandlot. [`kit`] is what every surface shares and none owns (authentication,
//! connection and body limits, Host/Origin/CORS, request logs, error rendering, metrics, the MCP transports);
//! [`surfaces`] are the faces that stand on it (sandlot's own, then the drop-in profiles), one folder each, and
//! [`app`] composes them into one router. Every face runs code through [`sandlot_core::Engine::run`]; none talks
//! to a backend, and no surface imports another.

mod app;
pub mod kit;
mod state;
pub mod surfaces;

pub use app::{HttpOptions, app};
pub use state::{AppState, FileUrls, ToolNames, unix_now};
pub use surfaces::sandlot::DEFAULT_RESOURCE_READ_BYTES;
