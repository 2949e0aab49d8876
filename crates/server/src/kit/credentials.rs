//! What a bearer credential is checked against: the static `MCP_API_TOKEN` (constant-time comparison), or, in JWT
//! mode (`MCP_AUTH_ENABLED`), a JSON Web Token signed with `MCP_AUTH_JWT_SECRET` (HS256) or by the private half of
//! `MCP_AUTH_JWT_PUBLIC_KEY` (RS256 or ES256, PEM), with `exp` required and `aud`/`iss` checked when configured.

use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use subtle::ConstantTimeEq;

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

/// A credential check.
pub enum Credentials {
    /// One static token.
    Token(String),
    /// Signed, unexpired JWTs.
    Jwt { key: DecodingKey, validation: Box<Validation> },
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Token(_) => f.write_str("Credentials::Token(<redacted>)"),
            Self::Jwt { validation, .. } => write!(f, "Credentials::Jwt({:?})", validation.algorithms),
        }
    }
}

impl Credentials {
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
        Ok(Self::Jwt { key, validation: Box::new(validation) })
    }

    /// Checks a presented bearer credential and returns who presented it: `api-token` for the static token, the
    /// JWT's `sub` (or `jwt` without one). The error says why it was refused.
    pub fn verify(&self, presented: &str) -> Result<String, String> {
        match self {
            Self::Token(token) => {
                if bool::from(presented.as_bytes().ct_eq(token.as_bytes())) {
                    Ok("api-token".into())
                } else {
                    Err("invalid bearer token".into())
                }
            }
            Self::Jwt { key, validation } => jsonwebtoken::decode::<serde_json::Value>(presented, key, validation)
                .map(|data| match data.claims.get("sub") {
                    Some(serde_json::Value::String(subject)) if !subject.is_empty() => subject.clone(),
                    _ => "jwt".into(),
                })
                .map_err(|e| format!("invalid token: {e}")),
        }
    }
}
