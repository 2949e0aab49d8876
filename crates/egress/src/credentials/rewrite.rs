//! The rewriting of one request to a mapped host and of its response: the only place a secret's bytes are read.
//!
//! A request's header values get each placeholder replaced by its secret, also inside `Authorization: Basic`
//! (base64 of `user:password`, how git and pip send a token), and each credential's configured header set,
//! replacing whatever the sandbox sent; its target (path and query, for APIs that take `?key=`) gets each
//! placeholder replaced by its secret percent-encoded. Bodies are not rewritten. A response's header values get any secret the host echoed replaced by its
//! placeholder (a host that echoes it in a body is not scrubbed: see docs/security.md). Only the credentials mapped
//! to the connection's host are given here, so another host's placeholder goes through as it is.

use super::spec::Credential;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use http::uri::PathAndQuery;
use http::{HeaderMap, HeaderValue, Uri, header};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

/// What stays as it is when a secret goes in a target: RFC 3986's unreserved characters.
const UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// A request's target with every placeholder of `credentials` replaced by its secret, or `None` when it holds none.
pub fn target(uri: &Uri, credentials: &[&Credential]) -> Option<Uri> {
    let path_and_query = uri.path_and_query()?;
    let mut current: Option<String> = None;
    for credential in credentials {
        let text = current.as_deref().unwrap_or(path_and_query.as_str());
        if text.contains(&credential.placeholder) {
            let secret = String::from_utf8_lossy(credential.secret.expose());
            let encoded = utf8_percent_encode(&secret, UNRESERVED).to_string();
            current = Some(text.replace(&credential.placeholder, &encoded));
        }
    }
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(PathAndQuery::try_from(current?).ok()?);
    Uri::from_parts(parts).ok()
}

/// Puts the secrets of `credentials` into a request's `headers`; returns how many headers now carry one.
pub fn request(headers: &mut HeaderMap, credentials: &[&Credential]) -> usize {
    let mut injected = 0;
    for (name, value) in headers.iter_mut() {
        let basic = *name == header::AUTHORIZATION;
        if let Some(new) = substitute(value.as_bytes(), credentials, basic)
            && let Ok(mut new) = HeaderValue::from_bytes(&new)
        {
            new.set_sensitive(true);
            *value = new;
            injected += 1;
        }
    }
    for (name, value) in credentials.iter().filter_map(|credential| credential.header.as_ref()) {
        headers.insert(name.clone(), value.clone());
        injected += 1;
    }
    injected
}

/// Takes the secrets of `credentials` out of a response's `headers`, putting their placeholders back.
pub fn response(headers: &mut HeaderMap, credentials: &[&Credential]) {
    for value in headers.values_mut() {
        let mut bytes = value.as_bytes().to_vec();
        let mut changed = false;
        for credential in credentials {
            if let Some(new) = replace(&bytes, credential.secret.expose(), credential.placeholder.as_bytes()) {
                bytes = new;
                changed = true;
            }
        }
        if changed {
            // The placeholder is plain ASCII: replacing a valid value's bytes with it keeps it valid.
            if let Ok(new) = HeaderValue::from_bytes(&bytes) {
                *value = new;
            }
        }
    }
}

/// `value` with every placeholder replaced by its secret (looking inside `Basic` credentials when `basic`), or
/// `None` when it holds no placeholder.
fn substitute(value: &[u8], credentials: &[&Credential], basic: bool) -> Option<Vec<u8>> {
    let plain = replace_all(value, credentials);
    if plain.is_some() || !basic {
        return plain;
    }
    let encoded = value.strip_prefix(b"Basic ").or_else(|| value.strip_prefix(b"basic "))?;
    let decoded = STANDARD.decode(encoded.trim_ascii()).ok()?;
    let replaced = replace_all(&decoded, credentials)?;
    Some([b"Basic ".as_slice(), STANDARD.encode(replaced).as_bytes()].concat())
}

fn replace_all(value: &[u8], credentials: &[&Credential]) -> Option<Vec<u8>> {
    let mut current: Option<Vec<u8>> = None;
    for credential in credentials {
        let haystack = current.as_deref().unwrap_or(value);
        if let Some(new) = replace(haystack, credential.placeholder.as_bytes(), credential.secret.expose()) {
            current = Some(new);
        }
    }
    current
}

/// `haystack` with every `needle` replaced by `with`, or `None` when there is none.
fn replace(haystack: &[u8], needle: &[u8], with: &[u8]) -> Option<Vec<u8>> {
    if needle.is_empty() || haystack.len() < needle.len() {
        return None;
    }
    let mut out = Vec::with_capacity(haystack.len() + with.len());
    let mut rest = haystack;
    let mut found = false;
    while let Some(at) = rest.windows(needle.len()).position(|window| window == needle) {
        out.extend_from_slice(&rest[..at]);
        out.extend_from_slice(with);
        rest = &rest[at + needle.len()..];
        found = true;
    }
    out.extend_from_slice(rest);
    found.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credentials::spec::CredentialSpec;

    fn credential(header: Option<&str>, format: Option<&str>) -> Credential {
        let spec = CredentialSpec {
            host: "api.example.com".into(),
            placeholder_env: "TOKEN".into(),
            secret: Some("s3cret".into()),
            secret_env: None,
            header: header.map(Into::into),
            format: format.map(Into::into),
        };
        Credential::resolve(0, &spec, &|_| None).unwrap()
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        pairs.iter().map(|(name, value)| (name.parse().unwrap(), HeaderValue::from_str(value).unwrap())).collect()
    }

    #[test]
    fn placeholders_become_the_secret_everywhere_in_header_values() {
        let credential = credential(None, None);
        let p = credential.placeholder.clone();
        let mut map = headers(&[
            ("authorization", &format!("token {p}")),
            ("x-both", &format!("{p},{p}")),
            ("x-none", "nothing here"),
        ]);
        assert_eq!(request(&mut map, &[&credential]), 2);
        assert_eq!(
            map,
            headers(&[("authorization", "token s3cret"), ("x-both", "s3cret,s3cret"), ("x-none", "nothing here")])
        );
        assert!(map["authorization"].is_sensitive());
    }

    #[test]
    fn basic_credentials_are_looked_into() {
        let credential = credential(None, None);
        let encoded = STANDARD.encode(format!("x-access-token:{}", credential.placeholder));
        let mut map = headers(&[("authorization", &format!("Basic {encoded}"))]);
        request(&mut map, &[&credential]);
        let expected = format!("Basic {}", STANDARD.encode("x-access-token:s3cret"));
        assert_eq!(map, headers(&[("authorization", &expected)]));
    }

    #[test]
    fn the_configured_header_replaces_what_the_sandbox_sent() {
        let credential = credential(Some("Authorization"), Some("Bearer {secret}"));
        let mut map = headers(&[("authorization", "Bearer forged"), ("accept", "*/*")]);
        request(&mut map, &[&credential]);
        assert_eq!(map, headers(&[("authorization", "Bearer s3cret"), ("accept", "*/*")]));
    }

    #[test]
    fn no_credentials_no_change() {
        let credential = credential(None, None);
        let sent = headers(&[("authorization", &format!("token {}", credential.placeholder))]);
        let mut map = sent.clone();
        assert_eq!(request(&mut map, &[]), 0);
        assert_eq!(map, sent);
    }

    #[test]
    fn placeholders_in_the_target_become_the_secret_percent_encoded() {
        let mut credential = credential(None, None);
        credential.secret = crate::credentials::secret::Secret::new(b"a b&c=d/e~".to_vec());
        let p = credential.placeholder.clone();
        let uri: Uri = format!("/v1/{p}/x?key={p}&q=1").parse().unwrap();
        let expected: Uri = "/v1/a%20b%26c%3Dd%2Fe~/x?key=a%20b%26c%3Dd%2Fe~&q=1".parse().unwrap();
        assert_eq!(target(&uri, &[&credential]), Some(expected));
        let absolute: Uri = format!("https://api.example.com/?key={p}").parse().unwrap();
        let expected: Uri = "https://api.example.com/?key=a%20b%26c%3Dd%2Fe~".parse().unwrap();
        assert_eq!(target(&absolute, &[&credential]), Some(expected));
        assert_eq!(target(&"/plain?q=1".parse().unwrap(), &[&credential]), None);
        assert_eq!(target(&uri, &[]), None);
    }

    #[test]
    fn an_echoed_secret_goes_back_to_its_placeholder() {
        let credential = credential(None, None);
        let mut map = headers(&[("x-echo", "you sent s3cret"), ("x-other", "fine")]);
        response(&mut map, &[&credential]);
        let expected = format!("you sent {}", credential.placeholder);
        assert_eq!(map, headers(&[("x-echo", &expected), ("x-other", "fine")]));
    }
}
