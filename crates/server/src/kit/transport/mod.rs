//! The MCP transports, each in one home, generic over the rmcp handler a surface brings: Streamable HTTP
//! ([`streamable_http`], with the calls in flight of each session in [`session_runs`]), the legacy HTTP+SSE of
//! 2024-11-05 ([`legacy_sse`], what its streams hold unread bounded by [`sse_outbox`]) and stdio ([`stdio`]).

pub mod legacy_sse;
pub mod session_runs;
pub mod sse_outbox;
pub mod stdio;
pub mod streamable_http;
