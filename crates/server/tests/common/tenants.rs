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
