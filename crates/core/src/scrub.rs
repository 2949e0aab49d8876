//! Secret scrubbing: replaces well-known secret shapes in a text with `[REDACTED:<name>]`, so a key a program
//! prints (an `env` dump, a config file it cats) does not reach the model. The patterns and their order are
//! codegen-sandbox's `scrub.go` (docs/profiles.md, "codegen-sandbox: Bash and scrubbing"); a face opts in by
//! passing its text results through [`scrub_secrets`]. Shape-based, not a boundary: the sandbox is.

use std::borrow::Cow;
use std::sync::LazyLock;

use regex::Regex;

/// The patterns, by name, in the order they are applied: the more specific first (an Anthropic key is not labelled
/// as an OpenAI one), and the catch-all `NAME=value` last, never re-matching a `[REDACTED:…]` already there.
pub const SECRET_PATTERNS: [(&str, &str); 13] = [
    ("aws-access-key", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    ("github-fine-grained-pat", r"\bgithub_pat_[A-Za-z0-9_]{82,}\b"),
    ("github-pat", r"\bghp_[A-Za-z0-9]{36,}\b"),
    ("github-oauth", r"\bgh[ousr]_[A-Za-z0-9]{36,}\b"),
    ("anthropic-api-key", r"\bsk-ant-[A-Za-z0-9_-]{20,}\b"),
    ("openai-api-key", r"\bsk-(?:proj-)?[A-Za-z0-9_-]{20,}\b"),
    ("google-api-key", r"\bAIza[0-9A-Za-z_-]{35}\b"),
    ("slack-token", r"\bxox[abpr]-[A-Za-z0-9-]{10,}\b"),
    ("stripe-live-key", r"\b(?:sk|rk)_live_[A-Za-z0-9]{24,}\b"),
    ("jwt", r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\b"),
    ("pem-private-key", r"-----BEGIN (?:[A-Z]+ )?PRIVATE KEY-----[\s\S]*?-----END (?:[A-Z]+ )?PRIVATE KEY-----"),
    ("basic-auth-url", r"[a-z][a-z0-9+.-]*://[^:\s/@]+:[^@\s]+@[\w.-]+"),
    ("secret-env-assignment", r"(?i)\b(?:API_KEY|TOKEN|SECRET|PASSWORD|PASSWD|PRIVATE_KEY)\s*=\s*[^\[\s]\S*"),
];

/// The compiled patterns with their replacements, built once. `\b` and `\w` are ASCII, as in the product's Go
/// regexps (RE2), so a match next to a non-ASCII letter is the same match.
static COMPILED: LazyLock<Vec<(Regex, String)>> = LazyLock::new(|| {
    SECRET_PATTERNS
        .iter()
        .filter_map(|(name, pattern)| {
            let ascii = pattern.replace(r"\b", r"(?-u:\b)").replace(r"\w", r"(?-u:\w)");
            // The patterns are constants a unit test compiles; one that did not would only scrub less.
            Regex::new(&ascii).ok().map(|regex| (regex, format!("[REDACTED:{name}]")))
        })
        .collect()
});

/// `text` with every match of every pattern replaced by `[REDACTED:<name>]`, in [`SECRET_PATTERNS`]' order.
pub fn scrub_secrets(text: &str) -> Cow<'_, str> {
    let mut text = Cow::Borrowed(text);
    for (regex, replacement) in COMPILED.iter() {
        if let Cow::Owned(replaced) = regex.replace_all(&text, regex::NoExpand(replacement)) {
            text = Cow::Owned(replaced);
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redacted(name: &str) -> String {
        format!("[REDACTED:{name}]")
    }

    #[test]
    fn every_pattern_compiles() {
        assert_eq!(COMPILED.len(), SECRET_PATTERNS.len());
    }

    #[test]
    fn each_pattern_redacts_its_secret_in_a_line() {
        let pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\nabc\n-----END RSA PRIVATE KEY-----";
        let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTYifQ.SflKxwRJSMeKKF2QT4fwpM";
        let cases: Vec<(&str, String)> = vec![
            ("aws-access-key", "AKIAIOSFODNN7EXAMPLE".into()),
            ("aws-access-key", "ASIAY34FZKBOKMUTVV7A".into()),
            ("github-fine-grained-pat", format!("github_pat_{}", "a1_B".repeat(21))),
            ("github-pat", format!("ghp_{}", "aB3".repeat(12))),
            ("github-oauth", format!("gho_{}", "aB3".repeat(12))),
            ("github-oauth", format!("ghs_{}", "Zz9".repeat(13))),
            ("anthropic-api-key", format!("sk-ant-api03-{}", "-x_Y".repeat(6))),
            ("openai-api-key", format!("sk-{}", "a-B3".repeat(6))),
            ("openai-api-key", format!("sk-proj-{}", "aB3_".repeat(6))),
            ("google-api-key", format!("AIza{}", "Sy_-1".repeat(7))),
            ("slack-token", "xoxb-1234567890-abcdef".into()),
            ("stripe-live-key", format!("sk_live_{}", "4eC39HqLyjWDarjtT1zdp7dc")),
            ("stripe-live-key", format!("rk_live_{}", "a".repeat(30))),
            ("jwt", jwt.into()),
            ("pem-private-key", pem.into()),
            ("basic-auth-url", "https://alice:s3cret@example.com".into()),
            ("secret-env-assignment", "API_KEY=abc123".into()),
            ("secret-env-assignment", "token = hunter2".into()),
            ("secret-env-assignment", "Password=p@ss".into()),
        ];
        for (name, secret) in cases {
            let line = format!("before {secret} after\n");
            assert_eq!(scrub_secrets(&line), format!("before {} after\n", redacted(name)), "{name}: {secret}");
        }
    }

    #[test]
    fn near_misses_are_left_alone() {
        let near_misses = [
            "AKIAIOSFODNN7EXAMPL",                     // 15 after the prefix
            "AKIAIOSFODNN7EXAMPLEX",                   // 17: no word boundary after 16
            "xAKIAIOSFODNN7EXAMPLE",                   // no word boundary before
            "AKIAiosfodnn7example",                    // lowercase
            &format!("github_pat_{}", "a".repeat(81)), // 81 < 82
            &format!("ghp_{}", "a".repeat(35)),        // 35 < 36
            &format!("ghx_{}", "a".repeat(36)),        // not [ousr]
            "sk-ant-short",
            &format!("sk-{}", "a".repeat(19)),
            "risk-assessment-of-the-whole-project", // `sk-` inside a word
            &format!("AIza{}", "a".repeat(34)),
            "xoxc-1234567890",
            "xoxb-12345",
            &format!("sk_test_{}", "a".repeat(30)),
            "eyJhbGciOiJIUzI1NiJ9.notajwtpayload.sig",
            "-----BEGIN PUBLIC KEY-----\nabc\n-----END PUBLIC KEY-----",
            "-----BEGIN PRIVATE KEY-----\nno end",
            "https://example.com:8080/path",
            "https://alice@example.com",
            "API_KEY=",
            "TOKENS=abc",
            "my_token_count = 3", // `TOKEN` not followed by `=`
            "PASSWORD = [REDACTED:x]",
            "GITHUB_TOKEN=plain", // `_` is a word character: no boundary before `TOKEN` (as in the product)
        ];
        for text in near_misses {
            assert_eq!(scrub_secrets(text), text, "{text}");
        }
    }

    #[test]
    fn the_order_names_the_most_specific_pattern_and_never_re_redacts() {
        let anthropic = format!("sk-ant-{}", "a".repeat(30));
        assert_eq!(scrub_secrets(&anthropic), redacted("anthropic-api-key"));
        let github = format!("ghp_{}", "a".repeat(36));
        assert_eq!(scrub_secrets(&github), redacted("github-pat"));
        // An assignment of a known secret keeps the specific name; the catch-all does not swallow its marker.
        assert_eq!(
            scrub_secrets("export AWS_SECRET=AKIAIOSFODNN7EXAMPLE"),
            format!("export AWS_SECRET={}", redacted("aws-access-key"))
        );
        assert_eq!(
            scrub_secrets("GITHUB_TOKEN=ghp_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\nok\n"),
            format!("GITHUB_TOKEN={}\nok\n", redacted("github-pat"))
        );
    }

    #[test]
    fn a_text_without_secrets_is_borrowed_and_unchanged() {
        let text = "total 0\nexit: 1\n";
        assert!(matches!(scrub_secrets(text), Cow::Borrowed(t) if t == text));
        assert_eq!(scrub_secrets("héllo AKIAIOSFODNN7EXAMPLE é"), format!("héllo {} é", redacted("aws-access-key")));
    }
}
