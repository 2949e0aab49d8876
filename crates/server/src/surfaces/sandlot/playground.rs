//! The playground at `/`: a page to try sandlot from a browser (API key, language, editor, live output, files,
//! history). It is a client of the public API only (MCP over Streamable HTTP at `/mcp`, `/v1/runs`, signed file
//! URLs). Its three assets are embedded in the binary and served without authentication (they hold no secret; the
//! key is typed into the page), with a Content-Security-Policy that lets the page load nothing but itself and
//! the previews of the run's files.

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

use crate::AppState;

const INDEX_HTML: &str = include_str!("../../../assets/index.html");
const PLAYGROUND_CSS: &str = include_str!("../../../assets/playground.css");
const PLAYGROUND_JS: &str = include_str!("../../../assets/playground.js");

/// `GET /`.
/// The page's routes: `/`, `/assets/playground.css`, `/assets/playground.js`; no credential (the page asks for one).
pub fn router(state: AppState) -> axum::Router {
    use axum::routing::get;
    axum::Router::new()
        .route("/", get(index))
        .route("/assets/playground.css", get(css))
        .route("/assets/playground.js", get(js))
        .with_state(state)
}

async fn index(State(state): State<AppState>) -> Response {
    // File previews (images, and text and CSV read with fetch) come from PUBLIC_BASE_URL, which may be another
    // origin than the page's.
    let files_origin = origin(&state.files.public_base_url);
    let policy = format!(
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self' {files_origin}; img-src 'self' data: {files_origin}; \
         base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    );
    let mut response = asset("text/html; charset=utf-8", INDEX_HTML);
    if let Ok(policy) = HeaderValue::from_str(&policy) {
        response.headers_mut().insert(header::CONTENT_SECURITY_POLICY, policy);
    }
    response.headers_mut().insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    response
}

/// `GET /assets/playground.css`.
async fn css() -> Response {
    asset("text/css; charset=utf-8", PLAYGROUND_CSS)
}

/// `GET /assets/playground.js`.
async fn js() -> Response {
    asset("text/javascript; charset=utf-8", PLAYGROUND_JS)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let headers = [
        (header::CONTENT_TYPE, content_type),
        (header::CACHE_CONTROL, "no-cache"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    ];
    (headers, body).into_response()
}

/// `scheme://host[:port]` of a URL.
fn origin(url: &str) -> &str {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    match url[after_scheme..].find('/') {
        Some(slash) => &url[..after_scheme + slash],
        None => url,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn origins_drop_the_path() {
        assert_eq!(super::origin("https://sandlot.example.com/base"), "https://sandlot.example.com");
        assert_eq!(super::origin("http://127.0.0.1:8080"), "http://127.0.0.1:8080");
    }
}
