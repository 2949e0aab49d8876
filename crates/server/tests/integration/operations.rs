//! `/readyz` on the main app and the metrics listener's app (`ops_app`) without a network, over an engine with no
//! runner (so never ready). The real binary, with real runs and backends, is tested in `crates/cli/tests/integration/operations.rs`.

use crate::common;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use sandlot_server::kit::{AllowedHosts, Authenticator, ops_app};
use sandlot_server::{HttpOptions, app};
use tower::ServiceExt;

async fn send(router: &axum::Router, uri: &str, host: &str) -> (StatusCode, String, String) {
    let request = Request::get(uri).header(header::HOST, host).body(Body::empty()).unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let content_type =
        response.headers().get(header::CONTENT_TYPE).map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    let body = response.into_body().collect().await.unwrap().to_bytes().to_vec();
    (status, content_type, String::from_utf8(body).unwrap())
}

const NOT_READY: &str = r#"{"ready":false,"backend":"none","checks":[{"name":"runners","ok":false,"detail":"no runner: no language can run"}]}"#;

#[tokio::test]
async fn readyz_needs_no_token_and_is_503_without_runners() {
    let (_root, state) = common::state("secret", None);
    let router = app(state, Authenticator::token("tok"), HttpOptions::new(AllowedHosts::new(vec!["localhost".into()])));
    assert_eq!(
        send(&router, "/readyz", "localhost").await,
        (StatusCode::SERVICE_UNAVAILABLE, "application/json".to_owned(), NOT_READY.to_owned())
    );
}

#[tokio::test]
async fn the_metrics_app_serves_metrics_health_and_readiness_to_ip_literals_and_allowed_hosts_only() {
    let (_root, state) = common::state("secret", None);
    // A recorder of its own, not installed: this test renders what it holds (nothing), the format is the point.
    let handle = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder().handle();
    let router = ops_app(state, handle, AllowedHosts::new(vec!["localhost".into()]));
    let (status, content_type, _) = send(&router, "/metrics", "10.1.2.3:9464").await;
    assert_eq!((status, content_type.as_str()), (StatusCode::OK, "text/plain; version=0.0.4; charset=utf-8"));
    assert_eq!(send(&router, "/metrics", "[fd00::1]:9464").await.0, StatusCode::OK);
    assert_eq!(send(&router, "/metrics", "localhost:9464").await.0, StatusCode::OK);
    assert_eq!(
        send(&router, "/healthz", "localhost").await,
        (StatusCode::OK, "text/plain; charset=utf-8".into(), "ok\n".into())
    );
    assert_eq!(send(&router, "/readyz", "localhost").await.2, NOT_READY);
    assert_eq!(send(&router, "/mcp", "localhost").await.0, StatusCode::NOT_FOUND);
    for rebound in ["attacker.example.com", "attacker.example.com:9464", "10.1.2.3.nip.io:9464"] {
        let (status, _, body) = send(&router, "/metrics", rebound).await;
        assert_eq!(status, StatusCode::MISDIRECTED_REQUEST, "{rebound}: {body}");
    }
}
