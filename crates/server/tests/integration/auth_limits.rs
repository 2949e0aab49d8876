//! Attacks on the front door, without a network (`app(state).oneshot(request)` with the peer address set as the
//! server sets it): unauthenticated requests must not lock a valid token out, wrong tokens past the limit get 429
//! while the right one still passes, unknown paths are 404, and forwarded-for headers count only from trusted proxies.
//! The same attacks against the real binary, with a real mcp-remote, are in tests/e2e/ts/mcp-remote.test.js.

use crate::common;

use std::net::{IpAddr, SocketAddr};

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use sandlot_server::kit::{AllowedHosts, AuthLimits, Authenticator, ClientIpHeader};
use sandlot_server::{HttpOptions, app};
use tower::ServiceExt;

const TOOLS_LIST: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;

fn router_with(authenticator: Authenticator) -> (tempfile::TempDir, axum::Router) {
    let (root, state) = common::state("secret", None);
    let router = app(state, authenticator, HttpOptions::new(AllowedHosts::new(vec!["localhost".into()])));
    (root, router)
}

fn router() -> (tempfile::TempDir, axum::Router) {
    router_with(Authenticator::token("tok"))
}

/// A request from `peer`, as the server's accept loop marks it.
fn from(peer: &str, method: &str, path: &str, authorization: Option<&str>) -> Request<Body> {
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .header(header::HOST, "localhost")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json, text/event-stream");
    if let Some(value) = authorization {
        request = request.header(header::AUTHORIZATION, value);
    }
    let body = if method == "POST" { Body::from(TOOLS_LIST) } else { Body::empty() };
    let mut request = request.body(body).unwrap();
    let addr = SocketAddr::new(peer.parse::<IpAddr>().unwrap(), 40000);
    request.extensions_mut().insert(axum::extract::ConnectInfo(addr));
    request
}

fn with_header(mut request: Request<Body>, name: &'static str, value: &str) -> Request<Body> {
    request.headers_mut().append(name, value.parse().unwrap());
    request
}

async fn status(router: &axum::Router, request: Request<Body>) -> StatusCode {
    router.clone().oneshot(request).await.unwrap().status()
}

/// The right token, from `peer`: tools/list.
async fn right_token(router: &axum::Router, peer: &str) -> StatusCode {
    status(router, from(peer, "POST", "/mcp", Some("Bearer tok"))).await
}

/// Wrong tokens from `peer` (each request built by `request`) until one gets 429; the 401s before it.
async fn failures_until_refused(router: &axum::Router, request: impl Fn(usize) -> Request<Body>) -> usize {
    for attempt in 0..1000 {
        match status(router, request(attempt)).await {
            StatusCode::UNAUTHORIZED => {}
            StatusCode::TOO_MANY_REQUESTS => return attempt,
            other => panic!("attempt {attempt}: {other}"),
        }
    }
    panic!("1000 wrong tokens and never a 429");
}

/// Attack: probes of paths sandlot does not serve, as health checkers, scrapers, browsers and mcp-remote send
/// them, answered 401 and counted as failed logins: three locked every client of the address out. Each is 404,
/// with no credential, a wrong one or the right one.
#[tokio::test]
async fn unknown_paths_are_404_with_or_without_a_credential() {
    let (_root, router) = router();
    let paths = [
        "/favicon.ico",
        "/readyz-not-a-route",
        "/robots.txt",
        "/mcp/.well-known/openid-configuration",
        "/mcp/.well-known/oauth-authorization-server",
        "/.well-known/oauth-protected-resource/mcp",
        "/mcp/nope",
        "/v1/nope",
        "/v1/runs/x/y",
        "/sse/x",
    ];
    for path in paths {
        for authorization in [None, Some("Bearer wrong"), Some("Bearer tok")] {
            for method in ["GET", "POST"] {
                let request = from("10.1.0.1", method, path, authorization);
                assert_eq!(status(&router, request).await, StatusCode::NOT_FOUND, "{method} {path} {authorization:?}");
            }
        }
    }
    assert_eq!(right_token(&router, "10.1.0.1").await, StatusCode::OK);
}

/// Attack: a client (or anyone on the same address) sends requests without a credential, as mcp-remote and some
/// clients do at every start (a header-less `GET /mcp`, OAuth discovery), and unknown paths. None counts as a
/// failed attempt: the right token still gets through at once.
#[tokio::test]
async fn header_less_and_unknown_path_requests_never_lock_out_a_valid_token() {
    let (_root, router) = router();
    let peer = "10.2.0.1";
    for round in 0..50 {
        assert_eq!(status(&router, from(peer, "GET", "/mcp", None)).await, StatusCode::UNAUTHORIZED, "{round}");
        assert_eq!(status(&router, from(peer, "POST", "/mcp", None)).await, StatusCode::UNAUTHORIZED, "{round}");
        assert_eq!(status(&router, from(peer, "GET", "/sse", None)).await, StatusCode::UNAUTHORIZED, "{round}");
        assert_eq!(status(&router, from(peer, "GET", "/v1/runs", None)).await, StatusCode::UNAUTHORIZED, "{round}");
        let probe = from(peer, "GET", "/mcp/.well-known/openid-configuration", None);
        assert_eq!(status(&router, probe).await, StatusCode::NOT_FOUND, "{round}");
        assert_eq!(status(&router, from(peer, "GET", "/metrics-nope", None)).await, StatusCode::NOT_FOUND, "{round}");
        // A scheme sandlot does not take is no guess at the token either.
        let basic = from(peer, "POST", "/mcp", Some("Basic dG9rOnRvaw=="));
        assert_eq!(status(&router, basic).await, StatusCode::UNAUTHORIZED, "{round}");
    }
    assert_eq!(right_token(&router, peer).await, StatusCode::OK);
}

/// Attack: an attacker on the same address (a shared NAT, a proxy) sends wrong tokens to lock the real client out.
/// Past the limit the wrong tokens get 429 with `Retry-After`, but the right token is checked first and is never
/// refused; other addresses are not affected.
#[tokio::test]
async fn wrong_tokens_past_the_limit_get_429_and_the_right_token_still_gets_through() {
    let (_root, router) = router();
    let peer = "10.3.0.1";
    let refused_after = failures_until_refused(&router, |_| from(peer, "POST", "/mcp", Some("Bearer wrong"))).await;
    assert!(refused_after >= 3, "refused after {refused_after} failures");
    let response = router.clone().oneshot(from(peer, "POST", "/mcp", Some("Bearer wrong"))).await.unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry_after: u64 = response.headers()[header::RETRY_AFTER].to_str().unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry_after), "{retry_after}");
    for _ in 0..5 {
        assert_eq!(right_token(&router, peer).await, StatusCode::OK, "the right token is never refused");
        assert_eq!(
            status(&router, from(peer, "POST", "/mcp", Some("Bearer wrong"))).await,
            StatusCode::TOO_MANY_REQUESTS
        );
    }
    // Another address is not affected.
    assert_eq!(status(&router, from("10.3.0.2", "POST", "/mcp", Some("Bearer wrong"))).await, StatusCode::UNAUTHORIZED);
}

/// Attack: a client not behind a configured proxy sends `X-Forwarded-For` and `Forwarded` with a new address on
/// every wrong guess, to get a fresh allowance each time (or to spend another client's). The headers are ignored:
/// its guesses are counted against its own address, and the spoofed addresses keep theirs.
#[tokio::test]
async fn a_spoofed_forwarded_header_from_an_untrusted_peer_does_not_change_the_key() {
    let (_root, router) = router();
    let peer = "10.4.0.1";
    let spoofed = |attempt: usize| {
        let request = from(peer, "POST", "/mcp", Some("Bearer wrong"));
        let request = with_header(request, "x-forwarded-for", &format!("192.0.2.{}", attempt % 250));
        with_header(request, "forwarded", &format!("for=198.51.100.{}", attempt % 250))
    };
    let refused_after = failures_until_refused(&router, spoofed).await;
    assert!(refused_after < 100, "refused after {refused_after} failures");
    // The addresses it claimed are untouched.
    let claimed = with_header(from("10.4.0.2", "POST", "/mcp", Some("Bearer wrong")), "x-forwarded-for", "10.4.0.1");
    assert_eq!(status(&router, claimed).await, StatusCode::UNAUTHORIZED);
}

fn limited(failures_per_minute: u32, trusted_proxies: &[&str], client_ip_header: ClientIpHeader) -> Authenticator {
    let trusted_proxies = trusted_proxies.iter().map(|p| p.parse().unwrap()).collect();
    Authenticator::token("tok").with_limits(AuthLimits { failures_per_minute, trusted_proxies, client_ip_header })
}

/// Behind a trusted reverse proxy every client has its own allowance, keyed by the address the proxy appended; a
/// client behind it that writes addresses of its own on the left of the header does not change its key.
#[tokio::test]
async fn behind_a_trusted_proxy_each_client_is_keyed_by_the_address_the_proxy_names() {
    let (_root, router) = router_with(limited(2, &["10.9.0.0/24"], ClientIpHeader::XForwardedFor));
    let via_proxy =
        |xff: &str| with_header(from("10.9.0.1", "POST", "/mcp", Some("Bearer wrong")), "x-forwarded-for", xff);
    assert_eq!(failures_until_refused(&router, |_| via_proxy("198.51.100.1")).await, 2);
    // Spoofed on the left, appended by the proxy on the right: still 198.51.100.1.
    assert_eq!(status(&router, via_proxy("203.0.113.9, 198.51.100.1")).await, StatusCode::TOO_MANY_REQUESTS);
    // Another client of the same proxy, and the proxy's own requests, are not affected.
    assert_eq!(status(&router, via_proxy("198.51.100.2")).await, StatusCode::UNAUTHORIZED);
    let own = from("10.9.0.1", "POST", "/mcp", Some("Bearer wrong"));
    assert_eq!(status(&router, own).await, StatusCode::UNAUTHORIZED);
    // The header the proxies are not configured to set is ignored.
    let forwarded =
        || with_header(from("10.9.0.1", "POST", "/mcp", Some("Bearer wrong")), "forwarded", "for=198.51.100.3");
    assert_eq!(status(&router, forwarded()).await, StatusCode::UNAUTHORIZED, "the proxy's second failure");
    assert_eq!(status(&router, forwarded()).await, StatusCode::TOO_MANY_REQUESTS, "keyed as the proxy, past 2");
    // With Forwarded configured, its `for=` names the client.
    let (_root, router) = router_with(limited(1, &["10.9.0.1"], ClientIpHeader::Forwarded));
    let via = |node: &str| with_header(from("10.9.0.1", "POST", "/mcp", Some("Bearer wrong")), "forwarded", node);
    assert_eq!(failures_until_refused(&router, |_| via("for=\"[2001:db8::1]:4711\";proto=https")).await, 1);
    assert_eq!(status(&router, via("for=192.0.2.1")).await, StatusCode::UNAUTHORIZED);
}

/// The limit is configurable: 1 per minute refuses the second wrong credential; 0 turns the limit off.
#[tokio::test]
async fn the_failure_limit_is_configurable_and_zero_turns_it_off() {
    let (_root, router) = router_with(limited(1, &[], ClientIpHeader::XForwardedFor));
    assert_eq!(failures_until_refused(&router, |_| from("10.5.0.1", "POST", "/mcp", Some("Bearer wrong"))).await, 1);
    let (_root, router) = router_with(limited(0, &[], ClientIpHeader::XForwardedFor));
    for attempt in 0..200 {
        let request = from("10.5.0.1", "POST", "/mcp", Some("Bearer wrong"));
        assert_eq!(status(&router, request).await, StatusCode::UNAUTHORIZED, "{attempt}");
    }
    assert_eq!(right_token(&router, "10.5.0.1").await, StatusCode::OK);
}

/// Attack: wrong credentials from more addresses than the limiter remembers, to grow the server's memory without
/// bound. Past the cap, new addresses share one allowance: they soon get 429 on their first wrong credential,
/// while the right token, from any address, still passes.
#[tokio::test]
async fn addresses_beyond_the_cap_share_one_allowance() {
    let (_root, router) = router_with(limited(1, &[], ClientIpHeader::XForwardedFor));
    let cap = sandlot_server::kit::MAX_TRACKED_CLIENTS;
    let address = |n: usize| format!("10.{}.{}.{}", 100 + n / 65_536, (n / 256) % 256, n % 256);
    for n in 0..cap {
        let request = from(&address(n), "POST", "/mcp", Some("Bearer wrong"));
        assert_eq!(status(&router, request).await, StatusCode::UNAUTHORIZED, "{}", address(n));
    }
    let mut refused = 0;
    for n in cap..cap + 10 {
        if status(&router, from(&address(n), "POST", "/mcp", Some("Bearer wrong"))).await
            == StatusCode::TOO_MANY_REQUESTS
        {
            refused += 1;
        }
    }
    assert!(refused >= 9, "only {refused} of 10 new addresses past the cap were refused");
    assert_eq!(right_token(&router, &address(cap + 20)).await, StatusCode::OK);
}
