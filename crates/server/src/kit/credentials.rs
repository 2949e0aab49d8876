//! What a bearer credential is checked against, and which tenant it names: static tokens (`MCP_API_TOKEN`, whose
//! tenant is `api-token`, and the named tokens of `MCP_API_TOKENS=name:token,...`, whose tenant is their name), and,
//! in JWT mode (`MCP_AUTH_ENABLED`), JSON Web Tokens signed with `MCP_AUTH_JWT_SECRET` (HS256) or by the private half
//! of `MCP_AUTH_JWT_PUBLIC_KEY` (RS256 or ES256, PEM), with `exp` required and `aud`/`iss` checked when configured;
//! a JWT's tenant is its `sub`; and OAuth access tokens of an authorization server ([`crate::kit::oauth`]), whose
//! tenant is their `sub` too and whose scopes bound what they may do. Every static token is compared in constant
//! time, all of them on every check, and a JWT or access token whose subject is a static token's tenant is refused,
//! so no issuer can mint a token's tenant.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use subtle::ConstantTimeEq;

/// The tenant of the one token of `MCP_API_TOKEN`.
pub const DEFAULT_TOKEN_TENANT: &str = "api-token";

/// JWT mode's settings.
#[derive(Debug, Clone, Default)]
pub struct JwtSettings {
    /// HS256 shared secret.
    pub secret: Option<String>,
    /// RS256 or ES256 public key, PEM.
    pub public_key_pem: Option<String>,
    pub audience: Option<String>,
    pub issuer: Option<String>,
}

/// Who a credential that passed names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The tenant: a static token's name, or a JWT's subject (`jwt` without one).
    pub tenant: String,
    /// When the credential stops being valid (a JWT's `exp`); static tokens do not expire.
    pub expires_at: Option<SystemTime>,
    /// What an OAuth access token grants (its `scope`); `None`: a static token or a self-issued JWT, which may do
    /// everything its tenant may.
    pub scopes: Option<Vec<String>>,
}

/// The credential checks of a server: static tokens, JWTs, or both.
#[derive(Default)]
pub struct Credentials {
    /// Each static token with its tenant.
    tokens: Vec<(String, String)>,
    jwt: Option<(DecodingKey, Box<Validation>)>,
    oauth: Option<Arc<crate::kit::ResourceServer>>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tenants: Vec<&str> = self.tokens.iter().map(|(tenant, _)| tenant.as_str()).collect();
        let algorithms = self.jwt.as_ref().map(|(_, validation)| &validation.algorithms);
        let oauth = self.oauth.as_ref().map(|oauth| oauth.metadata());
        f.debug_struct("Credentials")
            .field("tokens", &tenants)
            .field("jwt", &algorithms)
            .field("oauth", &oauth)
            .finish()
    }
}

/// Parses `MCP_API_TOKENS`: `name:token` pairs separated by commas; a name is 1 to 64 letters, digits, `.`, `_` or
/// `-`, a token at least 16 characters without a comma; names and tokens are each unique.
pub fn parse_named_tokens(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut tokens: Vec<(String, String)> = Vec::new();
    for (index, entry) in text.split(',').map(str::trim).filter(|e| !e.is_empty()).enumerate() {
        let Some((name, token)) = entry.split_once(':') else {
            return Err(format!("MCP_API_TOKENS: entry {} is not name:token", index + 1));
        };
        let valid_name = !name.is_empty()
            && name.len() <= 64
            && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        if !valid_name {
            return Err(format!(
                "MCP_API_TOKENS: entry {}: the name must be 1 to 64 letters, digits, '.', '_' or '-'",
                index + 1
            ));
        }
        if token.len() < 16 {
            return Err(format!("MCP_API_TOKENS: the token of {name:?} is shorter than 16 characters"));
        }
        if tokens.iter().any(|(other, _)| other == name) {
            return Err(format!("MCP_API_TOKENS: the name {name:?} is given twice"));
        }
        if tokens.iter().any(|(_, other)| other == token) {
            return Err(format!("MCP_API_TOKENS: the token of {name:?} is also another name's"));
        }
        tokens.push((name.to_owned(), token.to_owned()));
    }
    if tokens.is_empty() {
        return Err("MCP_API_TOKENS: no name:token entry".into());
    }
    Ok(tokens)
}

impl Credentials {
    /// One static token, of tenant [`DEFAULT_TOKEN_TENANT`].
    pub fn token(token: impl Into<String>) -> Self {
        Self { tokens: vec![(DEFAULT_TOKEN_TENANT.to_owned(), token.into())], jwt: None, oauth: None }
    }

    /// These static tokens too (`(tenant, token)`); an error when a tenant or a token is already taken.
    pub fn with_tokens(mut self, tokens: Vec<(String, String)>) -> Result<Self, String> {
        for (tenant, token) in tokens {
            if self.tokens.iter().any(|(other, _)| *other == tenant) {
                return Err(format!(
                    "the token name {tenant:?} is taken (MCP_API_TOKEN's tenant is {DEFAULT_TOKEN_TENANT:?})"
                ));
            }
            if self.tokens.iter().any(|(_, other)| *other == token) {
                return Err(format!("the token of {tenant:?} is also another token"));
            }
            self.tokens.push((tenant, token));
        }
        Ok(self)
    }

    /// JWT mode; the error names the setting that is wrong.
    pub fn jwt(settings: &JwtSettings) -> Result<Self, String> {
        let (key, algorithm) = match (&settings.secret, &settings.public_key_pem) {
            (Some(_), Some(_)) => {
                return Err("set only one of MCP_AUTH_JWT_SECRET and MCP_AUTH_JWT_PUBLIC_KEY".into());
            }
            (None, None) => {
                return Err("MCP_AUTH_ENABLED needs MCP_AUTH_JWT_SECRET or MCP_AUTH_JWT_PUBLIC_KEY".into());
            }
            (Some(secret), None) if secret.is_empty() => return Err("MCP_AUTH_JWT_SECRET must not be empty".into()),
            (Some(secret), None) => (DecodingKey::from_secret(secret.as_bytes()), Algorithm::HS256),
            (None, Some(pem)) => match DecodingKey::from_rsa_pem(pem.as_bytes()) {
                Ok(key) => (key, Algorithm::RS256),
                Err(_) => match DecodingKey::from_ec_pem(pem.as_bytes()) {
                    Ok(key) => (key, Algorithm::ES256),
                    Err(e) => {
                        return Err(format!("MCP_AUTH_JWT_PUBLIC_KEY is not an RSA or EC public key in PEM: {e}"));
                    }
                },
            },
        };
        let mut validation = Validation::new(algorithm);
        let mut required = vec!["exp"];
        match &settings.audience {
            Some(audience) => {
                validation.set_audience(&[audience]);
                required.push("aud");
            }
            None => validation.validate_aud = false,
        }
        if let Some(issuer) = &settings.issuer {
            validation.set_issuer(&[issuer]);
            required.push("iss");
        }
        validation.set_required_spec_claims(&required);
        validation.leeway = 30;
        validation.validate_nbf = true;
        Ok(Self { tokens: Vec::new(), jwt: Some((key, Box::new(validation))), oauth: None })
    }

    /// These credentials, and the access tokens of an authorization server too.
    pub fn with_oauth(self, oauth: Arc<crate::kit::ResourceServer>) -> Self {
        Self { oauth: Some(oauth), ..self }
    }

    /// The authorization server's check, when there is one.
    pub fn oauth(&self) -> Option<&Arc<crate::kit::ResourceServer>> {
        self.oauth.as_ref()
    }

    /// Checks a presented bearer credential and returns who presented it. The error says why it was refused.
    pub fn verify(&self, presented: &str) -> Result<Verified, String> {
        // Every token is compared, whichever matches, so the time taken does not tell which one (or whether one) did.
        let mut matched: Option<&str> = None;
        for (tenant, token) in &self.tokens {
            if bool::from(presented.as_bytes().ct_eq(token.as_bytes())) {
                matched = Some(tenant);
            }
        }
        if let Some(tenant) = matched {
            return Ok(Verified { tenant: tenant.to_owned(), expires_at: None, scopes: None });
        }
        let verified = match (&self.jwt, &self.oauth) {
            (None, None) => return Err("invalid bearer token".into()),
            (Some(jwt), None) => verify_jwt(jwt, presented)?,
            (None, Some(oauth)) => oauth.verify(presented)?,
            // Both: the self-issued JWT first; when neither takes it, the access token's reason.
            (Some(jwt), Some(oauth)) => match verify_jwt(jwt, presented) {
                Ok(verified) => verified,
                Err(_) => oauth.verify(presented)?,
            },
        };
        if self.tokens.iter().any(|(name, _)| *name == verified.tenant) {
            return Err(format!("invalid token: the subject {:?} is a static token's tenant", verified.tenant));
        }
        Ok(verified)
    }
}

/// A self-issued JWT's check.
fn verify_jwt((key, validation): &(DecodingKey, Box<Validation>), presented: &str) -> Result<Verified, String> {
    let data = jsonwebtoken::decode::<serde_json::Value>(presented, key, validation)
        .map_err(|e| format!("invalid token: {e}"))?;
    let tenant = match data.claims.get("sub") {
        Some(serde_json::Value::String(subject)) if !subject.is_empty() => subject.clone(),
        _ => "jwt".to_owned(),
    };
    let expires_at =
        data.claims.get("exp").and_then(serde_json::Value::as_u64).map(|exp| UNIX_EPOCH + Duration::from_secs(exp));
    Ok(Verified { tenant, expires_at, scopes: None })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_tokens_parse_and_refuse_what_is_ambiguous() {
        assert_eq!(
            parse_named_tokens("ci:0123456789abcdef, ops:fedcba9876543210").unwrap(),
            vec![("ci".to_owned(), "0123456789abcdef".to_owned()), ("ops".to_owned(), "fedcba9876543210".to_owned())]
        );
        for (text, error) in [
            ("ci", "MCP_API_TOKENS: entry 1 is not name:token"),
            (
                "c i:0123456789abcdef",
                "MCP_API_TOKENS: entry 1: the name must be 1 to 64 letters, digits, '.', '_' or '-'",
            ),
            ("ci:short", "MCP_API_TOKENS: the token of \"ci\" is shorter than 16 characters"),
            ("ci:0123456789abcdef,ci:fedcba9876543210", "MCP_API_TOKENS: the name \"ci\" is given twice"),
            ("a:0123456789abcdef,b:0123456789abcdef", "MCP_API_TOKENS: the token of \"b\" is also another name's"),
            (" , ", "MCP_API_TOKENS: no name:token entry"),
        ] {
            assert_eq!(parse_named_tokens(text).unwrap_err(), error, "{text:?}");
        }
    }

    #[test]
    fn each_token_names_its_tenant() {
        let credentials = Credentials::token("default-token-value")
            .with_tokens(vec![("ci".into(), "0123456789abcdef".into()), ("ops".into(), "fedcba9876543210".into())])
            .unwrap();
        let tenant = |presented: &str| credentials.verify(presented).map(|v| v.tenant);
        assert_eq!(tenant("default-token-value"), Ok(DEFAULT_TOKEN_TENANT.to_owned()));
        assert_eq!(tenant("0123456789abcdef"), Ok("ci".to_owned()));
        assert_eq!(tenant("fedcba9876543210"), Ok("ops".to_owned()));
        assert_eq!(tenant("0123456789abcdeX"), Err("invalid bearer token".to_owned()));
        let taken = Credentials::token("x").with_tokens(vec![(DEFAULT_TOKEN_TENANT.into(), "0123456789abcdef".into())]);
        assert!(taken.is_err());
    }

    #[test]
    fn a_jwt_cannot_name_a_static_tokens_tenant() {
        let settings = JwtSettings { secret: Some("s3cret".into()), ..JwtSettings::default() };
        let credentials =
            Credentials::jwt(&settings).unwrap().with_tokens(vec![("ci".into(), "0123456789abcdef".into())]).unwrap();
        let exp = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() + 600;
        let mint = |sub: &str| {
            let claims = serde_json::json!({ "sub": sub, "exp": exp });
            jsonwebtoken::encode(
                &jsonwebtoken::Header::default(),
                &claims,
                &jsonwebtoken::EncodingKey::from_secret(b"s3cret"),
            )
            .unwrap()
        };
        assert_eq!(
            credentials.verify(&mint("alice")),
            Ok(Verified {
                tenant: "alice".into(),
                expires_at: Some(UNIX_EPOCH + Duration::from_secs(exp)),
                scopes: None
            })
        );
        assert_eq!(
            credentials.verify(&mint("ci")),
            Err("invalid token: the subject \"ci\" is a static token's tenant".to_owned())
        );
        assert_eq!(credentials.verify("0123456789abcdef").map(|v| v.tenant), Ok("ci".to_owned()));
    }
}
