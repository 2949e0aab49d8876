//! The HTTP kit: what every surface shares and none owns. The gate in front of every route that needs a credential
//! (authentication and its failure limits, checked from the headers before a body is read; the cap on streams per
//! caller and their end at the credential's expiry), the connection tracker, the pace every request body must
//! keep, Host/Origin/CORS, request ids and the request log, error rendering (REST and JSON-RPC), metrics, signed
//! file transfers, the MCP transports, the queue of a run's live output, and the helpers the workspace-style profiles share. Nothing here names a
//! surface.

mod auth;
mod body_pace;
mod client_addr;
mod connections;
pub mod conversation_access;
mod credentials;
pub mod file_limits;
mod gate;
pub mod jsonrpc;
pub mod live_chunks;
pub mod oauth;
mod ops;
mod origin;
mod request_log;
mod rest_error;
pub mod result_budget;
pub mod rpc_errors;
pub mod schema;
mod signed_files;
mod stream_cap;
mod stream_lease;
pub mod telemetry;
pub mod tenant_workspaces;
pub mod tool_walk;
pub mod transport;
pub mod workspace_paths;

pub use auth::{AuthLimits, Authenticator, Caller, FailureRendering, MAX_TRACKED as MAX_TRACKED_CLIENTS, Refusal};
pub use body_pace::{BodyError, BodyLimits, BodyPace, SlowBody, pace_bodies};
pub use client_addr::{ClientIpHeader, TrustedProxy};
pub use connections::{ConnectionLimits, InFlightSlot, raise_nofile_limit, serve};
pub use credentials::{Credentials, DEFAULT_TOKEN_TENANT, JwtSettings, Verified, parse_named_tokens};
pub use gate::{Classify, Denial, Gate, Opens, RenderDenial, render_denial, require_bearer};
pub use oauth::{OAuthSettings, ResourceServer};
pub use ops::{not_found, ops_app, readyz};
pub use origin::{AllowedHosts, check as check_origin, cors};
pub use request_log::{REQUEST_ID, RequestSpan, around as log_requests};
pub use rest_error::rest_error;
pub(crate) use signed_files::copy_body;
pub use signed_files::{MAX_UPLOAD_BYTES, UPLOAD_URL_TTL, download, serve_file, upload, upload_unread};
pub use stream_cap::{StreamCap, StreamPermit};
pub use stream_lease::{expired, expiry_of};
