//! HMAC-SHA256 signatures for file download URLs.
//!
//! The signed message is `conversationId + "/" + path`, and, when the URL expires, `+ "\n" + exp` (unix seconds).
//! Signatures are lowercase hex; verification is constant-time.

use hmac::{Hmac, Mac};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Characters left as they are in a URL path segment (RFC 3986 unreserved).
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// Signs and verifies file URLs with one secret.
#[derive(Clone)]
pub struct Signer {
    key: Vec<u8>,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Signer { key: <redacted> }")
    }
}

impl Signer {
    /// A signer with this secret.
    pub fn new(secret: impl AsRef<[u8]>) -> Self {
        Self { key: secret.as_ref().to_vec() }
    }

    fn mac(&self, conversation_id: &str, path: &str, expires: Option<u64>) -> HmacSha256 {
        // new_from_slice accepts keys of any length for HMAC.
        let mut mac = <HmacSha256 as Mac>::new_from_slice(&self.key).unwrap_or_else(|_| unreachable!());
        mac.update(conversation_id.as_bytes());
        mac.update(b"/");
        mac.update(path.as_bytes());
        if let Some(exp) = expires {
            mac.update(b"\n");
            mac.update(exp.to_string().as_bytes());
        }
        mac
    }

    /// The hex signature of `conversation_id/path`, bound to `expires` when given.
    pub fn sign(&self, conversation_id: &str, path: &str, expires: Option<u64>) -> String {
        hex::encode(self.mac(conversation_id, path, expires).finalize().into_bytes())
    }

    /// Whether `signature` is valid for these values and, when `expires` is given, `now` is not past it.
    pub fn verify(&self, conversation_id: &str, path: &str, expires: Option<u64>, signature: &str, now: u64) -> bool {
        if expires.is_some_and(|exp| now > exp) {
            return false;
        }
        let Ok(bytes) = hex::decode(signature) else {
            return false;
        };
        self.mac(conversation_id, path, expires).verify_slice(&bytes).is_ok()
    }

    /// A download URL: `{base}/files/{conversation_id}/{path}?[exp=..&]sig=..`, each path segment percent-encoded.
    pub fn url(&self, base: &str, conversation_id: &str, path: &str, expires: Option<u64>) -> String {
        let encoded: Vec<String> = path.split('/').map(|s| utf8_percent_encode(s, SEGMENT).to_string()).collect();
        let sig = self.sign(conversation_id, path, expires);
        let base = base.trim_end_matches('/');
        let query = match expires {
            Some(exp) => format!("exp={exp}&sig={sig}"),
            None => format!("sig={sig}"),
        };
        format!("{base}/files/{}/{}?{query}", utf8_percent_encode(conversation_id, SEGMENT), encoded.join("/"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_matches_an_independent_hmac() {
        // Computed with: printf 'conv/a.txt' | openssl dgst -sha256 -hmac secret
        let signer = Signer::new("secret");
        assert_eq!(
            signer.sign("conv", "a.txt", None),
            "05deea953946394c4d766b0f2e54b96963785cc557ce68971bfebd85a0bf36f0"
        );
    }

    #[test]
    fn verify_accepts_its_own_and_rejects_tampering_and_expiry() {
        let signer = Signer::new("k");
        let sig = signer.sign("c", "dir/f.bin", Some(100));
        assert!(signer.verify("c", "dir/f.bin", Some(100), &sig, 100));
        assert!(!signer.verify("c", "dir/f.bin", Some(100), &sig, 101), "expired");
        assert!(!signer.verify("c", "dir/g.bin", Some(100), &sig, 0), "other path");
        assert!(!signer.verify("d", "dir/f.bin", Some(100), &sig, 0), "other conversation");
        assert!(!signer.verify("c", "dir/f.bin", Some(200), &sig, 0), "other expiry");
        assert!(!signer.verify("c", "dir/f.bin", None, &sig, 0), "expiry dropped");
        assert!(!signer.verify("c", "dir/f.bin", Some(100), "zz", 0), "not hex");
        assert!(!Signer::new("other").verify("c", "dir/f.bin", Some(100), &sig, 0), "other key");
    }

    #[test]
    fn url_encodes_each_segment() {
        let signer = Signer::new("k");
        let sig = signer.sign("c", "my dir/é.txt", Some(5));
        assert_eq!(
            signer.url("http://h:1/", "c", "my dir/é.txt", Some(5)),
            format!("http://h:1/files/c/my%20dir/%C3%A9.txt?exp=5&sig={sig}")
        );
    }
}
