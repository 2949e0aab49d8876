//! The authorization server's signing keys (its JWKS), fetched over HTTP and kept: found from its metadata
//! (RFC 8414 `/.well-known/oauth-authorization-server`, else OpenID `/.well-known/openid-configuration`) unless the
//! operator names the JWKS URL. Fetched again when a token names a key id not in the set (the server rotated its
//! keys), at most once per [`REFETCH_EVERY`] so a stream of made-up key ids costs one fetch per interval, and when the
//! set is older than [`MAX_AGE`]. A failed fetch keeps the keys already known.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{Jwk, JwkSet};

/// The least time between two fetches triggered by unknown key ids.
pub const REFETCH_EVERY: Duration = Duration::from_secs(1);
/// How long a fetched set is trusted before it is fetched again.
pub const MAX_AGE: Duration = Duration::from_secs(3600);

/// The keys, and where they come from.
pub struct KeySet {
    issuer: String,
    jwks_url: Mutex<Option<String>>,
    client: reqwest::Client,
    keys: Mutex<Option<(JwkSet, Instant)>>,
    last_attempt: Mutex<Option<Instant>>,
    /// Held while fetching: concurrent requests with a new key id wait for one fetch.
    fetching: tokio::sync::Mutex<()>,
}

impl KeySet {
    pub fn new(issuer: String, jwks_url: Option<String>) -> Self {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        Self {
            issuer,
            jwks_url: Mutex::new(jwks_url),
            client,
            keys: Mutex::new(None),
            last_attempt: Mutex::new(None),
            fetching: tokio::sync::Mutex::new(()),
        }
    }

    /// The key a token's header names (`kid`; a set of one key serves a token without one).
    pub fn find(&self, kid: Option<&str>) -> Option<Jwk> {
        let keys = self.keys.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let (set, _) = keys.as_ref()?;
        match kid {
            Some(kid) => set.find(kid).cloned(),
            None if set.keys.len() == 1 => set.keys.first().cloned(),
            None => None,
        }
    }

    fn fresh(&self) -> bool {
        let keys = self.keys.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        keys.as_ref().is_some_and(|(_, fetched)| fetched.elapsed() < MAX_AGE)
    }

    /// Makes sure the key `kid` is known if the authorization server has it: fetches the set when the key is not
    /// in it (within the rate above) or the set is old.
    pub async fn ensure(&self, kid: Option<&str>) {
        if self.find(kid).is_some() && self.fresh() {
            return;
        }
        let _fetching = self.fetching.lock().await;
        if self.find(kid).is_some() && self.fresh() {
            return; // fetched while this one waited
        }
        {
            let mut last = self.last_attempt.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            if self.fresh() && last.is_some_and(|at| at.elapsed() < REFETCH_EVERY) {
                return;
            }
            *last = Some(Instant::now());
        }
        match self.fetch().await {
            Ok(set) => {
                tracing::info!(keys = set.keys.len(), issuer = %self.issuer, "authorization server keys fetched");
                *self.keys.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some((set, Instant::now()));
            }
            Err(error) => tracing::warn!(issuer = %self.issuer, %error, "cannot fetch the authorization server's keys"),
        }
    }

    async fn fetch(&self) -> Result<JwkSet, String> {
        let known = self.jwks_url.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone();
        let url = match known {
            Some(url) => url,
            None => {
                let url = self.discover().await?;
                *self.jwks_url.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(url.clone());
                url
            }
        };
        let response = self.client.get(&url).send().await.map_err(|e| format!("GET {url}: {e}"))?;
        if !response.status().is_success() {
            return Err(format!("GET {url}: HTTP {}", response.status()));
        }
        response.json::<JwkSet>().await.map_err(|e| format!("GET {url}: not a JWK set: {e}"))
    }

    /// The `jwks_uri` of the issuer's metadata.
    async fn discover(&self) -> Result<String, String> {
        let mut tried = Vec::new();
        for url in metadata_urls(&self.issuer) {
            let Ok(response) = self.client.get(&url).send().await else {
                tried.push(url);
                continue;
            };
            if !response.status().is_success() {
                tried.push(url);
                continue;
            }
            let metadata: serde_json::Value = response.json().await.map_err(|e| format!("GET {url}: {e}"))?;
            if metadata.get("issuer").and_then(serde_json::Value::as_str) != Some(self.issuer.as_str()) {
                return Err(format!("GET {url}: its issuer is not {}", self.issuer));
            }
            return match metadata.get("jwks_uri").and_then(serde_json::Value::as_str) {
                Some(jwks) => Ok(jwks.to_owned()),
                None => Err(format!("GET {url}: no jwks_uri")),
            };
        }
        Err(format!("no authorization server metadata at {}", tried.join(" or ")))
    }
}

/// Where an issuer's metadata may be: RFC 8414 (the well-known path inserted before the issuer's own path), then
/// OpenID Connect Discovery (appended).
fn metadata_urls(issuer: &str) -> Vec<String> {
    let issuer = issuer.trim_end_matches('/');
    let (origin, path) =
        match issuer.find("://").and_then(|scheme| issuer[scheme + 3..].find('/').map(|p| scheme + 3 + p)) {
            Some(split) => (&issuer[..split], &issuer[split..]),
            None => (issuer, ""),
        };
    vec![
        format!("{origin}/.well-known/oauth-authorization-server{path}"),
        format!("{issuer}/.well-known/openid-configuration"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_is_looked_for_where_the_rfcs_put_it() {
        assert_eq!(
            metadata_urls("https://auth.example.com"),
            [
                "https://auth.example.com/.well-known/oauth-authorization-server",
                "https://auth.example.com/.well-known/openid-configuration"
            ]
        );
        assert_eq!(
            metadata_urls("https://auth.example.com/tenant1/"),
            [
                "https://auth.example.com/.well-known/oauth-authorization-server/tenant1",
                "https://auth.example.com/tenant1/.well-known/openid-configuration"
            ]
        );
    }
}
