//! Protection against DNS rebinding and cross-site use from browsers: a request whose `Host` is not an allowed host
//! gets 421, and one whose `Origin` is not an allowed origin gets 403 (MCP 2025-11-25: "MUST"). Requests without an
//! `Origin` (every non-browser client) pass the Origin check. Allowed hosts: `localhost`, `127.0.0.1`, `[::1]` and
//! the host of `PUBLIC_BASE_URL` (with any port).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The host names a request may address.
#[derive(Clone, Debug)]
pub struct AllowedHosts(Arc<Vec<String>>);

impl AllowedHosts {
    /// Host names, or authorities whose port is ignored (`example.com:8443` allows `example.com` on any port).
    pub fn new(hosts: Vec<String>) -> Self {
        Self(Arc::new(hosts.iter().map(|h| host_of(&h.to_ascii_lowercase()).to_owned()).collect()))
    }

    /// The list, for rmcp's own Host check.
    pub fn to_vec(&self) -> Vec<String> {
        self.0.iter().cloned().collect()
    }

    /// Whether an authority (`host`, `host:port`, `[::1]:port`) names an allowed host.
    pub fn allows_authority(&self, authority: &str) -> bool {
        let authority = authority.to_ascii_lowercase();
        let host = host_of(&authority);
        self.0.iter().any(|allowed| allowed == host)
    }

    /// Whether an `Origin` header value is allowed (`null` never is).
    pub fn allows_origin(&self, origin: &str) -> bool {
        let Some((scheme, authority)) = origin.split_once("://") else { return false };
        matches!(scheme, "http" | "https") && self.allows_authority(authority.trim_end_matches('/'))
    }
}

/// The host of an authority: `[::1]:80` → `::1`, `example.com:80` → `example.com`, `::1` → `::1`.
fn host_of(authority: &str) -> &str {
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split(']').next().unwrap_or("");
    }
    match authority.rsplit_once(':') {
        // One colon followed by digits is a port; more colons is a bare IPv6 address.
        Some((host, port)) if !host.contains(':') && port.chars().all(|c| c.is_ascii_digit()) => host,
        _ => authority,
    }
}

/// Refuses requests for a foreign host or from a foreign origin.
pub async fn check(State(allowed): State<AllowedHosts>, request: Request, next: Next) -> Response {
    if let Some(host) = request.headers().get(header::HOST).and_then(|h| h.to_str().ok())
        && !allowed.allows_authority(host)
    {
        return (
            StatusCode::MISDIRECTED_REQUEST,
            axum::Json(serde_json::json!({
                "error": "forbidden_host", "message": format!("host {host:?} is not served here"),
            })),
        )
            .into_response();
    }
    if let Some(origin) = request.headers().get(header::ORIGIN).and_then(|o| o.to_str().ok())
        && !allowed.allows_origin(origin)
    {
        return (
            StatusCode::FORBIDDEN,
            axum::Json(serde_json::json!({
                "error": "forbidden_origin", "message": format!("origin {origin:?} is not allowed"),
            })),
        )
            .into_response();
    }
    next.run(request).await
}

/// CORS for browser clients (the playground, the MCP Inspector) on allowed origins, on errors too.
pub fn cors(allowed: AllowedHosts) -> tower_http::cors::CorsLayer {
    use axum::http::{HeaderName, Method};
    use tower_http::cors::{AllowOrigin, CorsLayer};
    let headers = [
        "authorization",
        "content-type",
        "mcp-session-id",
        "mcp-protocol-version",
        "last-event-id",
        "mcp-method",
        "mcp-name",
        "x-request-id",
    ];
    CorsLayer::new()
        .allow_origin(AllowOrigin::predicate(move |origin, _| origin.to_str().is_ok_and(|o| allowed.allows_origin(o))))
        .allow_methods([Method::GET, Method::POST, Method::DELETE, Method::OPTIONS])
        .allow_headers(headers.map(HeaderName::from_static))
        .expose_headers([HeaderName::from_static("mcp-session-id"), super::REQUEST_ID])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_and_origins() {
        let allowed = AllowedHosts::new(vec![
            "localhost".into(),
            "127.0.0.1".into(),
            "[::1]".into(),
            "sandbox.example.com:8443".into(),
        ]);
        for ok in ["localhost", "localhost:8080", "127.0.0.1:1", "[::1]:8080", "Sandbox.Example.com"] {
            assert!(allowed.allows_authority(ok), "{ok}");
        }
        for bad in ["evil.example.com", "localhost.evil.com", "127.0.0.2:80", "sandbox.example.com.evil.com"] {
            assert!(!allowed.allows_authority(bad), "{bad}");
        }
        assert!(allowed.allows_origin("http://localhost:5173"));
        assert!(allowed.allows_origin("https://sandbox.example.com"));
        assert!(allowed.allows_origin("https://sandbox.example.com:9000"), "the port of PUBLIC_BASE_URL does not bind");
        assert!(!allowed.allows_origin("https://evil.example.com"));
        assert!(!allowed.allows_origin("null"));
        assert!(!allowed.allows_origin("file://localhost"));
    }
}
