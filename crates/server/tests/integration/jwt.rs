//! JWT mode: tokens signed with the configured HS256 secret, RS256 or ES256 key are accepted; a wrong key, audience
//! or issuer, an expired token, or one without `exp` gets 401. Keys are made with the `openssl` command.

use crate::common;

use std::process::Command;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use sandlot_server::kit::{AllowedHosts, Authenticator, Credentials, JwtSettings};
use sandlot_server::{HttpOptions, app};
use serde_json::json;
use tower::ServiceExt;

fn router(settings: JwtSettings) -> (tempfile::TempDir, axum::Router) {
    let (root, state) = common::state("s", None);
    let auth = Authenticator::new(Credentials::jwt(&settings).unwrap());
    (root, app(state, auth, HttpOptions::new(AllowedHosts::new(vec!["localhost".into()]))))
}

async fn call(router: &axum::Router, token: &str) -> (StatusCode, String) {
    let request = Request::post("/mcp")
        .header(header::HOST, "localhost")
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json, text/event-stream")
        .body(Body::from(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#))
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
}

fn claims(aud: &str, iss: &str, exp: i64) -> serde_json::Value {
    json!({ "sub": "agent", "aud": aud, "iss": iss, "exp": now() as i64 + exp })
}

fn message(body: &str) -> String {
    serde_json::from_str::<serde_json::Value>(body).unwrap()["message"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn hs256_tokens_are_checked_for_key_audience_issuer_and_expiry() {
    let settings = JwtSettings {
        secret: Some("shared-secret".into()),
        audience: Some("sandlot".into()),
        issuer: Some("https://issuer.example".into()),
        ..JwtSettings::default()
    };
    let (_root, router) = router(settings);
    let sign = |claims: &serde_json::Value, secret: &str| {
        encode(&Header::new(Algorithm::HS256), claims, &EncodingKey::from_secret(secret.as_bytes())).unwrap()
    };
    let good = sign(&claims("sandlot", "https://issuer.example", 300), "shared-secret");
    assert_eq!(call(&router, &good).await.0, StatusCode::OK);
    let cases = [
        (sign(&claims("sandlot", "https://issuer.example", 300), "other-secret"), "invalid token: InvalidSignature"),
        (
            sign(&claims("someone-else", "https://issuer.example", 300), "shared-secret"),
            "invalid token: InvalidAudience",
        ),
        (sign(&claims("sandlot", "https://evil.example", 300), "shared-secret"), "invalid token: InvalidIssuer"),
        (sign(&claims("sandlot", "https://issuer.example", -600), "shared-secret"), "invalid token: ExpiredSignature"),
        (
            sign(&json!({ "aud": "sandlot", "iss": "https://issuer.example" }), "shared-secret"),
            "invalid token: Missing required claim: exp",
        ),
        ("not-a-jwt".into(), "invalid token: InvalidToken"),
        (
            sign(
                &json!({ "aud": "sandlot", "iss": "https://issuer.example", "exp": now() + 600, "nbf": now() + 300 }),
                "shared-secret",
            ),
            "invalid token: ImmatureSignature",
        ),
    ];
    for (token, expected) in cases {
        let (status, body) = call(&router, &token).await;
        assert_eq!((status, message(&body)), (StatusCode::UNAUTHORIZED, expected.to_owned()));
    }
}

fn openssl(args: &[&str], input: Option<&[u8]>) -> Vec<u8> {
    use std::io::Write;
    let mut child = Command::new("openssl")
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("openssl");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.unwrap_or_default()).unwrap();
    drop(stdin);
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "openssl {args:?}");
    output.stdout
}

#[tokio::test]
async fn rs256_and_es256_tokens_verify_against_the_public_key() {
    let rsa_private = openssl(&["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"], None);
    let rsa_public = openssl(&["pkey", "-pubout"], Some(&rsa_private));
    let ec_private = openssl(&["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"], None);
    let ec_public = openssl(&["pkey", "-pubout"], Some(&ec_private));
    let cases = [
        (Algorithm::RS256, EncodingKey::from_rsa_pem(&rsa_private).unwrap(), rsa_public.clone(), ec_public.clone()),
        (Algorithm::ES256, EncodingKey::from_ec_pem(&ec_private).unwrap(), ec_public, rsa_public),
    ];
    for (algorithm, signing_key, public, other_public) in cases {
        let token =
            encode(&Header::new(algorithm), &json!({ "sub": "agent", "exp": now() + 300 }), &signing_key).unwrap();
        let settings = |pem: &[u8]| JwtSettings {
            public_key_pem: Some(String::from_utf8(pem.to_vec()).unwrap()),
            ..JwtSettings::default()
        };
        let (_root, accepting) = router(settings(&public));
        assert_eq!(call(&accepting, &token).await.0, StatusCode::OK, "{algorithm:?}");
        let (_root, other) = router(settings(&other_public));
        assert_eq!(call(&other, &token).await.0, StatusCode::UNAUTHORIZED, "{algorithm:?} with the other key");
    }
}

#[test]
fn bad_settings_name_the_variable() {
    let cases = [
        (JwtSettings::default(), "MCP_AUTH_ENABLED needs MCP_AUTH_JWT_SECRET or MCP_AUTH_JWT_PUBLIC_KEY"),
        (
            JwtSettings { secret: Some(String::new()), ..JwtSettings::default() },
            "MCP_AUTH_JWT_SECRET must not be empty",
        ),
        (
            JwtSettings { secret: Some("a".into()), public_key_pem: Some("b".into()), ..JwtSettings::default() },
            "set only one of MCP_AUTH_JWT_SECRET and MCP_AUTH_JWT_PUBLIC_KEY",
        ),
    ];
    for (settings, expected) in cases {
        assert_eq!(Credentials::jwt(&settings).unwrap_err(), expected);
    }
    let error =
        Credentials::jwt(&JwtSettings { public_key_pem: Some("nope".into()), ..JwtSettings::default() }).unwrap_err();
    assert!(error.starts_with("MCP_AUTH_JWT_PUBLIC_KEY is not an RSA or EC public key in PEM"), "{error}");
}
