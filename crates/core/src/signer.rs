//! HMAC-SHA256 signatures for file download URLs.
//!
//! A URL that never expires signs the seed's message, `conversationId + "/" + path`. A URL that expires signs
//! [`EXPIRING_TAG`], then the conversation id, the path and `exp` (unix seconds), each of the first two preceded by
//! its length as 8 big-endian bytes and `exp` as 8 big-endian bytes: one message, one reading. (The seed's
//! expiring form, `conversationId/path\nexp`, was also the message of the non-expiring URL of the path
//! `path\nexp`, so a file with that name made an expired URL valid forever.) The tag holds a NUL byte, and no
//! accepted conversation id or path holds a control character, so no non-expiring message equals an expiring one.
//! Signatures are lowercase hex; verification is constant-time.
//!
//! Upload URLs (`PUT`) sign [`UPLOAD_TAG`] and then the same fields as an expiring download: they always expire,
//! and their tag differs from [`EXPIRING_TAG`] (and holds a NUL, which no conversation id does), so a download
//! signature never authorizes an upload, nor an upload signature a download.
//!
//! Scoped URLs (a profile's own file routes, such as Baponi's volumes) sign [`SCOPED_TAG`], then the scope, the id
//! and the path, each preceded by its length as 8 big-endian bytes, and `exp`: a signature of one scope never
//! verifies in another, nor as a download or upload of a conversation (their tags differ), nor the reverse.

use hmac::{Hmac, Mac};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Characters left as they are in a URL path segment (RFC 3986 unreserved).
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// The first bytes of the message an expiring URL signs (see the module's doc).
pub const EXPIRING_TAG: &[u8] = b"sandlot-file-url-v2\0";

/// The first bytes of the message an upload URL signs (see the module's doc).
pub const UPLOAD_TAG: &[u8] = b"sandlot-upload-url-v1\0";

/// The first bytes of the message a scoped URL signs (see the module's doc).
pub const SCOPED_TAG: &[u8] = b"sandlot-scoped-url-v1\0";

/// Whether `text` holds a control character (C0, DEL or C1), which no served path or conversation id may hold.
pub fn has_control(text: &str) -> bool {
    text.chars().any(char::is_control)
}

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

    /// The MAC of an upload URL: [`UPLOAD_TAG`], then the fields as an expiring download signs them.
    fn upload_mac(&self, conversation_id: &str, path: &str, expires: u64) -> HmacSha256 {
        let mut mac = <HmacSha256 as Mac>::new_from_slice(&self.key).unwrap_or_else(|_| unreachable!());
        mac.update(UPLOAD_TAG);
        for part in [conversation_id, path] {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part.as_bytes());
        }
        mac.update(&expires.to_be_bytes());
        mac
    }

    /// The hex signature that lets `PUT` write `conversation_id/path` until `expires`.
    pub fn sign_upload(&self, conversation_id: &str, path: &str, expires: u64) -> String {
        hex::encode(self.upload_mac(conversation_id, path, expires).finalize().into_bytes())
    }

    /// Whether `signature` is a valid upload signature for these values and `now` is not past `expires`.
    pub fn verify_upload(&self, conversation_id: &str, path: &str, expires: u64, signature: &str, now: u64) -> bool {
        if now > expires || has_control(conversation_id) || has_control(path) {
            return false;
        }
        let Ok(bytes) = hex::decode(signature) else {
            return false;
        };
        self.upload_mac(conversation_id, path, expires).verify_slice(&bytes).is_ok()
    }

    /// An upload URL: `{base}/files/{conversation_id}/{path}?exp=..&sig=..&op=put`, for `PUT`.
    pub fn upload_url(&self, base: &str, conversation_id: &str, path: &str, expires: u64) -> String {
        let encoded: Vec<String> = path.split('/').map(|s| utf8_percent_encode(s, SEGMENT).to_string()).collect();
        let sig = self.sign_upload(conversation_id, path, expires);
        format!(
            "{}/files/{}/{}?exp={expires}&sig={sig}&op=put",
            base.trim_end_matches('/'),
            utf8_percent_encode(conversation_id, SEGMENT),
            encoded.join("/")
        )
    }

    /// The MAC of a scoped URL: [`SCOPED_TAG`], then `scope`, `id` and `path` with their lengths, and `expires`.
    fn scoped_mac(&self, scope: &str, id: &str, path: &str, expires: u64) -> HmacSha256 {
        let mut mac = <HmacSha256 as Mac>::new_from_slice(&self.key).unwrap_or_else(|_| unreachable!());
        mac.update(SCOPED_TAG);
        for part in [scope, id, path] {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part.as_bytes());
        }
        mac.update(&expires.to_be_bytes());
        mac
    }

    /// The hex signature that lets a URL of `scope` reach `id/path` until `expires`.
    pub fn sign_scoped(&self, scope: &str, id: &str, path: &str, expires: u64) -> String {
        hex::encode(self.scoped_mac(scope, id, path, expires).finalize().into_bytes())
    }

    /// Whether `signature` is valid for a URL of `scope` to `id/path` and `now` is not past `expires`.
    pub fn verify_scoped(&self, scope: &str, id: &str, path: &str, expires: u64, signature: &str, now: u64) -> bool {
        if now > expires || has_control(id) || has_control(path) {
            return false;
        }
        let Ok(bytes) = hex::decode(signature) else {
            return false;
        };
        self.scoped_mac(scope, id, path, expires).verify_slice(&bytes).is_ok()
    }

    /// A scoped URL: `{route}/{id}/{path}?exp=..&sig=..` (`route` an absolute URL of the scope's route), each
    /// path segment percent-encoded.
    pub fn scoped_url(&self, route: &str, scope: &str, id: &str, path: &str, expires: u64) -> String {
        let encoded: Vec<String> = path.split('/').map(|s| utf8_percent_encode(s, SEGMENT).to_string()).collect();
        let sig = self.sign_scoped(scope, id, path, expires);
        let id = utf8_percent_encode(id, SEGMENT);
        format!("{}/{id}/{}?exp={expires}&sig={sig}", route.trim_end_matches('/'), encoded.join("/"))
    }

    fn mac(&self, conversation_id: &str, path: &str, expires: Option<u64>) -> HmacSha256 {
        // new_from_slice accepts keys of any length for HMAC.
        let mut mac = <HmacSha256 as Mac>::new_from_slice(&self.key).unwrap_or_else(|_| unreachable!());
        match expires {
            None => {
                mac.update(conversation_id.as_bytes());
                mac.update(b"/");
                mac.update(path.as_bytes());
            }
            Some(exp) => {
                mac.update(EXPIRING_TAG);
                for part in [conversation_id, path] {
                    mac.update(&(part.len() as u64).to_be_bytes());
                    mac.update(part.as_bytes());
                }
                mac.update(&exp.to_be_bytes());
            }
        }
        mac
    }

    /// The hex signature of `conversation_id/path`, bound to `expires` when given.
    pub fn sign(&self, conversation_id: &str, path: &str, expires: Option<u64>) -> String {
        hex::encode(self.mac(conversation_id, path, expires).finalize().into_bytes())
    }

    /// Whether `signature` is valid for these values and, when `expires` is given, `now` is not past it.
    /// A conversation id or path with a control character is never valid: none is signed or served.
    pub fn verify(&self, conversation_id: &str, path: &str, expires: Option<u64>, signature: &str, now: u64) -> bool {
        if expires.is_some_and(|exp| now > exp) || has_control(conversation_id) || has_control(path) {
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
    fn expiring_signature_matches_an_independent_hmac() {
        // Computed with Python's hmac over the documented message (docs/http-api.md, "File downloads").
        assert_eq!(
            Signer::new("secret").sign("demo", "hello.txt", Some(1_764_100_000)),
            "e87b3e1557671572233fa74b429499b3cb83dfb37b23a5fb771db556be4012bd"
        );
    }

    #[test]
    fn expiring_and_non_expiring_messages_never_meet() {
        let signer = Signer::new("k");
        // The seed's ambiguity: the expiring URL of "P" signed "c/P\n100", the non-expiring one of "P\n100" too.
        let expiring = signer.sign("c", "P", Some(100));
        assert_ne!(expiring, signer.sign("c", "P\n100", None));
        assert!(!signer.verify("c", "P\n100", None, &expiring, 0));
        // A control character is refused even with its own valid signature.
        let own = signer.sign("c", "P\n100", None);
        assert!(!signer.verify("c", "P\n100", None, &own, 0));
        assert!(!signer.verify("c\u{7f}", "P", None, &signer.sign("c\u{7f}", "P", None), 0));
        // Lengths keep the id/path split unique: ("ab", "c") and ("a", "bc") differ.
        assert_ne!(signer.sign("ab", "c", Some(1)), signer.sign("a", "bc", Some(1)));
        // The non-expiring form is still the seed's (see signature_matches_an_independent_hmac).
    }

    #[test]
    fn a_scoped_signature_is_valid_in_its_scope_only() {
        let signer = Signer::new("k");
        let get = signer.sign_scoped("volume-get", "docs", "a.txt", 100);
        assert!(signer.verify_scoped("volume-get", "docs", "a.txt", 100, &get, 100));
        assert!(!signer.verify_scoped("volume-get", "docs", "a.txt", 100, &get, 101), "expired");
        assert!(!signer.verify_scoped("volume-put", "docs", "a.txt", 100, &get, 0), "other scope");
        assert!(!signer.verify_scoped("volume-get", "other", "a.txt", 100, &get, 0), "other id");
        assert!(!signer.verify_scoped("volume-get", "docs", "b.txt", 100, &get, 0), "other path");
        // A thread's download or upload URL never reaches a volume of the same name, nor the reverse.
        let download = signer.sign("docs", "a.txt", Some(100));
        let upload = signer.sign_upload("docs", "a.txt", 100);
        assert!(!signer.verify_scoped("volume-get", "docs", "a.txt", 100, &download, 0));
        assert!(!signer.verify_scoped("volume-put", "docs", "a.txt", 100, &upload, 0));
        assert!(!signer.verify("docs", "a.txt", Some(100), &get, 0));
        assert!(!signer.verify_upload(
            "docs",
            "a.txt",
            100,
            &signer.sign_scoped("volume-put", "docs", "a.txt", 100),
            0
        ));
        // Lengths keep the scope/id split unique.
        assert_ne!(signer.sign_scoped("ab", "c", "p", 1), signer.sign_scoped("a", "bc", "p", 1));
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

    #[test]
    fn upload_and_download_signatures_never_stand_for_each_other() {
        let signer = Signer::new("k");
        let upload = signer.sign_upload("c", "in.csv", 100);
        assert!(signer.verify_upload("c", "in.csv", 100, &upload, 100));
        assert!(!signer.verify_upload("c", "in.csv", 100, &upload, 101), "expired");
        assert!(!signer.verify_upload("c", "other.csv", 100, &upload, 0), "other path");
        assert!(!signer.verify("c", "in.csv", Some(100), &upload, 0), "an upload signature as a download");
        assert!(!signer.verify("c", "in.csv", None, &upload, 0));
        for download in [signer.sign("c", "in.csv", Some(100)), signer.sign("c", "in.csv", None)] {
            assert!(!signer.verify_upload("c", "in.csv", 100, &download, 0), "a download signature as an upload");
        }
        assert_eq!(
            signer.upload_url("http://h/", "c", "a b.csv", 100),
            format!("http://h/files/c/a%20b.csv?exp=100&sig={}&op=put", signer.sign_upload("c", "a b.csv", 100))
        );
    }
}
