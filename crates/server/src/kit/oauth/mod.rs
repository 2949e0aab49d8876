//! sandlot as an OAuth 2.1 resource server (MCP authorization, 2025-11-25 and later): access tokens issued by an
//! authorization server the operator names (`SANDLOT_OAUTH_ISSUER`), beside static tokens and self-issued JWTs.
//!
//! - Protected Resource Metadata (RFC 9728) at `/.well-known/oauth-protected-resource` (and with the resource's
//!   path appended): the resource, its authorization server, the scopes ([`scopes`]).
//! - A request refused for its credential gets `WWW-Authenticate: Bearer resource_metadata="...", scope="..."`, and
//!   one whose token lacks a scope 403 with `error="insufficient_scope"`, so a client can find where to get one.
//! - A token is a JWT signed by one of the issuer's keys ([`keys`]), with `iss` the issuer, `aud` this resource
//!   (RFC 8707: a token minted for another server is refused), `exp` in the future, and a `sub`, which is its tenant.
//!   Only asymmetric algorithms: a key set never holds a secret the server could be made to verify with.

pub mod keys;
pub mod scopes;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, DecodingKey, Validation};

use crate::kit::credentials::Verified;
use keys::KeySet;
use scopes::Scope;

/// What the operator sets.
#[derive(Debug, Clone)]
pub struct OAuthSettings {
    /// The authorization server's issuer identifier (an `https` URL; `http` on a loopback host only).
    pub issuer: String,
    /// Its JWKS URL, when its metadata does not say or should not be asked.
    pub jwks_url: Option<String>,
    /// This server's MCP endpoint as clients address it (`<PUBLIC_BASE_URL>/mcp`): the resource, and the audience
    /// tokens must name.
    pub resource: String,
}

/// The check of OAuth access tokens, and what clients are told about it.
pub struct ResourceServer {
    settings: OAuthSettings,
    keys: KeySet,
}

/// Signature algorithms an access token may use.
const ALGORITHMS: [Algorithm; 8] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
];

impl ResourceServer {
    /// The check for `settings`; the error names the setting that is wrong.
    pub fn new(settings: OAuthSettings) -> Result<Self, String> {
        check_url("SANDLOT_OAUTH_ISSUER", &settings.issuer)?;
        if let Some(url) = &settings.jwks_url {
            check_url("SANDLOT_OAUTH_JWKS_URL", url)?;
        }
        let keys = KeySet::new(settings.issuer.clone(), settings.jwks_url.clone());
        Ok(Self { settings, keys })
    }

    /// The Protected Resource Metadata document (RFC 9728).
    pub fn metadata(&self) -> serde_json::Value {
        serde_json::json!({
            "resource": self.settings.resource,
            "authorization_servers": [self.settings.issuer],
            "scopes_supported": Scope::ALL.iter().map(|scope| scope.name()).collect::<Vec<_>>(),
            "bearer_methods_supported": ["header"],
            "resource_name": "sandlot",
        })
    }

    /// Where the metadata is: the well-known path before the resource's own path (RFC 9728 section 3.1).
    pub fn metadata_url(&self) -> String {
        let resource = &self.settings.resource;
        match resource.find("://").and_then(|scheme| resource[scheme + 3..].find('/').map(|p| scheme + 3 + p)) {
            Some(split) => format!(
                "{}/.well-known/oauth-protected-resource{}",
                &resource[..split],
                resource[split..].trim_end_matches('/')
            ),
            None => format!("{resource}/.well-known/oauth-protected-resource"),
        }
    }

    /// The `WWW-Authenticate` value of a refusal: a missing or bad token (`None`), or one without `needed`.
    pub fn challenge(&self, needed: Option<Scope>) -> String {
        match needed {
            None => format!(
                r#"Bearer resource_metadata="{}", scope="{} {}""#,
                self.metadata_url(),
                Scope::Read.name(),
                Scope::Run.name()
            ),
            Some(scope) => format!(
                r#"Bearer error="insufficient_scope", scope="{}", resource_metadata="{}", error_description="this needs the scope {}""#,
                scope.name(),
                self.metadata_url(),
                scope.name()
            ),
        }
    }

    /// Makes sure the key `token` names is known (the authorization server may have rotated its keys), before the
    /// credential check, which does not wait.
    pub async fn prepare(&self, token: &str) {
        if let Ok(header) = jsonwebtoken::decode_header(token) {
            self.keys.ensure(header.kid.as_deref()).await;
        }
    }

    /// Checks an access token: who it names and what it grants.
    pub fn verify(&self, token: &str) -> Result<Verified, String> {
        let header = jsonwebtoken::decode_header(token).map_err(|e| format!("invalid token: {e}"))?;
        if !ALGORITHMS.contains(&header.alg) {
            return Err(format!("invalid token: algorithm {:?} is not accepted", header.alg));
        }
        let jwk = self.keys.find(header.kid.as_deref()).ok_or_else(|| {
            format!("invalid token: the authorization server has no key {:?}", header.kid.as_deref().unwrap_or(""))
        })?;
        let key = DecodingKey::from_jwk(&jwk).map_err(|e| format!("invalid token: its key is unusable: {e}"))?;
        let mut validation = Validation::new(header.alg);
        validation.set_audience(&[&self.settings.resource]);
        validation.set_issuer(&[&self.settings.issuer]);
        validation.set_required_spec_claims(&["exp", "aud", "iss", "sub"]);
        validation.leeway = 30;
        validation.validate_nbf = true;
        let data = jsonwebtoken::decode::<serde_json::Value>(token, &key, &validation)
            .map_err(|e| format!("invalid token: {e}"))?;
        let tenant = match data.claims.get("sub") {
            Some(serde_json::Value::String(subject)) if !subject.is_empty() => subject.clone(),
            _ => return Err("invalid token: no subject".into()),
        };
        let scopes = match (data.claims.get("scope"), data.claims.get("scp")) {
            (Some(serde_json::Value::String(scope)), _) => scope.split_whitespace().map(str::to_owned).collect(),
            (_, Some(serde_json::Value::Array(scopes))) => {
                scopes.iter().filter_map(serde_json::Value::as_str).map(str::to_owned).collect()
            }
            _ => Vec::new(),
        };
        let expires_at =
            data.claims.get("exp").and_then(serde_json::Value::as_u64).map(|exp| UNIX_EPOCH + Duration::from_secs(exp));
        Ok(Verified { tenant, expires_at, scopes: Some(scopes) })
    }
}

/// The 403 of a token without `scope`: `WWW-Authenticate` with `error="insufficient_scope"` (so a client may ask
/// for more), and a body naming the scope: JSON-RPC when the request was one (`id`), else the kit's JSON.
pub fn insufficient(oauth: &ResourceServer, scope: Scope, id: Option<serde_json::Value>) -> axum::response::Response {
    use axum::response::IntoResponse;
    let message = format!("insufficient scope: this needs {}", scope.name());
    let body = match id {
        Some(id) => serde_json::json!({ "jsonrpc": "2.0", "id": id, "error": {
            "code": -32600, "message": message, "data": { "kind": "insufficient_scope", "scope": scope.name() } } }),
        None => serde_json::json!({ "error": "insufficient_scope", "message": message }),
    };
    let mut response = (axum::http::StatusCode::FORBIDDEN, axum::Json(body)).into_response();
    if let Ok(challenge) = axum::http::HeaderValue::from_str(&oauth.challenge(Some(scope))) {
        response.headers_mut().insert(axum::http::header::WWW_AUTHENTICATE, challenge);
    }
    response
}

/// The 403 of a JSON-RPC request (`method`, `id`) whose caller's token lacks the scope it needs, when the request
/// came through a gate with an authorization server; `None` lets it through.
pub fn refuse_message(
    extensions: &axum::http::Extensions,
    method: Option<&str>,
    id: &serde_json::Value,
) -> Option<axum::response::Response> {
    let oauth = extensions.get::<std::sync::Arc<ResourceServer>>()?;
    let scope = scopes::for_message(method?)?;
    let caller = crate::kit::Caller::of(extensions);
    (!caller.allows(scope)).then(|| insufficient(oauth, scope, Some(id.clone())))
}

/// An `https` URL, or `http` to a loopback host (a local authorization server, tests).
fn check_url(setting: &str, url: &str) -> Result<(), String> {
    let loopback = ["http://127.0.0.1", "http://localhost", "http://[::1]"]
        .iter()
        .any(|prefix| url.strip_prefix(prefix).is_some_and(|rest| rest.is_empty() || rest.starts_with([':', '/'])));
    if url.starts_with("https://") || loopback {
        Ok(())
    } else {
        Err(format!("{setting} must be an https URL (http only to a loopback host): {url:?}"))
    }
}

/// Seconds since the epoch, for tests that mint tokens.
pub fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(resource: &str) -> ResourceServer {
        let settings =
            OAuthSettings { issuer: "https://auth.example.com".into(), jwks_url: None, resource: resource.into() };
        ResourceServer::new(settings).expect("valid")
    }

    #[test]
    fn the_metadata_says_where_to_get_a_token_and_the_challenge_points_at_it() {
        let server = server("https://sandlot.example.com/mcp");
        assert_eq!(server.metadata_url(), "https://sandlot.example.com/.well-known/oauth-protected-resource/mcp");
        let metadata = server.metadata();
        assert_eq!(metadata["resource"], "https://sandlot.example.com/mcp");
        assert_eq!(metadata["authorization_servers"][0], "https://auth.example.com");
        assert!(server.challenge(None).contains(r#"resource_metadata="https://sandlot.example.com/.well-known/"#));
        assert!(
            server.challenge(Some(Scope::Run)).starts_with(r#"Bearer error="insufficient_scope", scope="sandlot:run""#)
        );
    }

    #[test]
    fn urls_are_https_or_loopback_http() {
        let settings = |issuer: &str| OAuthSettings { issuer: issuer.into(), jwks_url: None, resource: "x".into() };
        assert!(ResourceServer::new(settings("http://127.0.0.1:9000")).is_ok());
        assert!(ResourceServer::new(settings("http://localhost/")).is_ok());
        let error = ResourceServer::new(settings("http://localhost.evil.com")).err().expect("refused");
        assert!(error.contains("SANDLOT_OAUTH_ISSUER"), "{error}");
        assert!(ResourceServer::new(settings("http://auth.example.com")).is_err());
    }

    #[test]
    fn a_token_without_a_known_key_or_with_a_symmetric_algorithm_is_refused() {
        let server = server("https://sandlot.example.com/mcp");
        let claims = serde_json::json!({ "sub": "a", "exp": now_secs() + 60 });
        let hs = jsonwebtoken::encode(
            &jsonwebtoken::Header::default(),
            &claims,
            &jsonwebtoken::EncodingKey::from_secret(b"k"),
        )
        .expect("token");
        assert!(server.verify(&hs).unwrap_err().contains("HS256"));
        assert!(server.verify("not.a.token").is_err());
    }
}
