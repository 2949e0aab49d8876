//! What operators' tools ask: `/readyz` (on the main listener too) and the metrics listener that `sandlot serve`
//! opens only when `SANDLOT_METRICS_ADDR` is set: `GET /metrics` (the Prometheus text format of
//! [`crate::kit::telemetry`]'s recorder), `/healthz` and `/readyz`. Anything else there is 404.
//!
//! None of these asks for a credential: probes and scrapers carry none. `/readyz` says only which checks pass
//! (names, states, counts), never a path, an image or an error of the host. The metrics tell how busy the server is
//! and how its runs end, which is why they have a listener of their own (off by default, meant for loopback or a
//! private network) instead of a public path on the MCP port. Its `Host` check refuses the names a DNS-rebinding page
//! would send (a name that is not one of the allowed hosts), but takes any IP literal: a rebinding attack always
//! arrives under a name, and a scraper addresses a target by IP as often as not.

use std::net::{Ipv4Addr, Ipv6Addr};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use metrics_exporter_prometheus::PrometheusHandle;

use super::origin::AllowedHosts;
use crate::AppState;

/// The media type of the Prometheus text exposition format.
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The answer to a path nobody serves: 404 `{"error":"not_found"}`, without asking for a credential.
pub async fn not_found() -> axum::response::Response {
    use axum::response::IntoResponse;
    (axum::http::StatusCode::NOT_FOUND, axum::Json(serde_json::json!({ "error": "not_found" }))).into_response()
}

/// `GET /readyz`: 200 when every readiness check passes, else 503; the body names each check either way:
/// `{"ready": bool, "backend": "native", "checks": [{"name", "ok", "detail"}]}`. Answered from the engine's cache
/// (at most one backend check a second).
pub async fn readyz(State(state): State<AppState>) -> Response {
    let readiness = state.engine.readiness().await;
    let status = if readiness.ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    let mut response = (status, axum::Json(readiness)).into_response();
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// The metrics listener's app: `/metrics` rendered from `metrics`, `/healthz`, `/readyz`; 404 otherwise.
pub fn ops_app(state: AppState, metrics: PrometheusHandle, allowed_hosts: AllowedHosts) -> Router {
    Router::new()
        .route("/metrics", get(move || async move { render(&metrics) }))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .fallback(not_found)
        .with_state(state)
        .layer(axum::middleware::from_fn_with_state(allowed_hosts, host_check))
}

fn render(metrics: &PrometheusHandle) -> Response {
    let mut response = metrics.render().into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(PROMETHEUS_TEXT));
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// Refuses (421) a `Host` that is neither an IP literal nor an allowed host.
async fn host_check(State(allowed): State<AllowedHosts>, request: Request, next: Next) -> Response {
    if let Some(host) = request.headers().get(header::HOST).and_then(|h| h.to_str().ok())
        && !is_ip_literal(host)
        && !allowed.allows_authority(host)
    {
        let body =
            serde_json::json!({ "error": "forbidden_host", "message": format!("host {host:?} is not served here") });
        return (StatusCode::MISDIRECTED_REQUEST, axum::Json(body)).into_response();
    }
    next.run(request).await
}

/// Whether an authority (`10.0.0.5:9464`, `[fd00::1]:9464`, `10.0.0.5`) names its host by IP address.
fn is_ip_literal(authority: &str) -> bool {
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split_once(']').is_some_and(|(host, _)| host.parse::<Ipv6Addr>().is_ok());
    }
    let host = authority.rsplit_once(':').map_or(authority, |(host, _port)| host);
    host.parse::<Ipv4Addr>().is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_literals_and_names() {
        for ip in ["10.0.0.5", "10.0.0.5:9464", "[fd00::1]:9464", "[::1]", "127.0.0.1:1"] {
            assert!(is_ip_literal(ip), "{ip}");
        }
        for name in ["evil.example.com", "evil.example.com:9464", "10.0.0.5.nip.io:9464", "localhost", "[evil]:1", ""] {
            assert!(!is_ip_literal(name), "{name}");
        }
    }
}
