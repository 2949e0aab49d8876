//! The tenants of the tests that attack their separation (docs/security.md, "Tenants"): JWT subjects (HS256,
//! secret [`JWT_SECRET`]), the named static tokens `ci` and `qa`, and the admin `ops` (a named token too), all
//! accepted by one [`authenticator`].

use sandlot_server::kit::{Authenticator, Credentials, JwtSettings};

/// The HS256 secret of the JWTs.
pub const JWT_SECRET: &str = "jwt-secret";

/// One tenant as a test presents it: its name and its bearer credential.
#[derive(Debug, Clone)]
pub struct Who {
    pub name: &'static str,
    pub bearer: String,
}

/// A JWT of `subject`, valid for ten minutes.
pub fn jwt(subject: &'static str) -> Who {
    let exp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() + 600;
    let key = jsonwebtoken::EncodingKey::from_secret(JWT_SECRET.as_bytes());
    let claims = serde_json::json!({ "sub": subject, "exp": exp });
    Who { name: subject, bearer: jsonwebtoken::encode(&jsonwebtoken::Header::default(), &claims, &key).unwrap() }
}

/// The named static token `name` (one of `ci`, `qa`, `ops`).
pub fn token(name: &'static str) -> Who {
    Who { name, bearer: format!("{name}-token-0123456789abcdef") }
}

/// The admin.
pub fn admin() -> Who {
    token("ops")
}

/// The pairs (A, B) whose separation every face is checked for: two JWT subjects, and two named tokens.
pub fn pairs() -> [(Who, Who); 2] {
    [(jwt("alice"), jwt("bob")), (token("ci"), token("qa"))]
}

/// Accepts the JWTs and the named tokens; `ops` is an admin.
pub fn authenticator() -> Authenticator {
    let settings = JwtSettings { secret: Some(JWT_SECRET.into()), ..JwtSettings::default() };
    let tokens = ["ci", "qa", "ops"].map(|name| (name.to_owned(), token(name).bearer)).to_vec();
    let credentials = Credentials::jwt(&settings).unwrap().with_tokens(tokens).unwrap();
    Authenticator::new(credentials).with_admins(["ops".to_owned()])
}

/// The JSON text of `value` with every `id` written `<id>`: two answers about two ids compare equal when they
/// differ only in the id they name.
pub fn naming(value: &serde_json::Value, id: &str) -> String {
    value.to_string().replace(id, "<id>")
}

/// `POST /p/baponi<route>` of `body` through `router` as `who`: the status and the JSON body.
pub async fn baponi_as(
    router: &axum::Router,
    route: &str,
    body: serde_json::Value,
    who: &Who,
) -> (axum::http::StatusCode, serde_json::Value) {
    use tower::ServiceExt;
    let request = axum::http::Request::post(format!("/p/baponi{route}"))
        .header(axum::http::header::HOST, "localhost")
        .header(axum::http::header::AUTHORIZATION, format!("Bearer {}", who.bearer))
        .body(axum::body::Body::from(body.to_string()))
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    (status, serde_json::from_slice(&axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap()).unwrap())
}

/// Checks through Baponi's Files API, whose thread ids name any conversation, that the conversation `id`, where
/// another tenant wrote the one file `path`, is not `b`'s: `b` lists nothing there and gets no upload URL; the admin
/// lists `path`.
pub async fn hidden_through_baponi(router: &axum::Router, id: &str, path: &str, b: &Who) {
    use axum::http::StatusCode;
    use serde_json::json;
    let list = json!({ "source": "thread", "id": id });
    let (status, listed) = baponi_as(router, "/v1/files/list", list.clone(), b).await;
    assert_eq!((status, listed), (StatusCode::OK, json!({ "files": [], "truncated": false })), "{id}");
    let plant = json!({ "source": "thread", "id": id, "path": path, "content_length": 1 });
    let (status, refused) = baponi_as(router, "/v1/files/upload_url", plant, b).await;
    let message = format!("id: thread {id:?} is not available to this caller; use another id");
    assert_eq!(
        (status, refused),
        (StatusCode::BAD_REQUEST, json!({ "error": "validation_error", "message": message }))
    );
    let (status, listed) = baponi_as(router, "/v1/files/list", list, &admin()).await;
    assert_eq!(
        (status, &listed["files"][0]["path"], listed["files"].as_array().map(Vec::len)),
        (StatusCode::OK, &json!(path), Some(1))
    );
}
