//! Conversation ids: the names of the per-conversation `/data` directories.

use std::fmt;

use crate::Error;

/// A validated conversation id: `^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`. It is safe to use as one path component.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConversationId(String);

impl ConversationId {
    /// Validates `id`; the error says which rule it breaks.
    pub fn parse(id: &str) -> Result<Self, Error> {
        let invalid = |message: &str| Err(Error::invalid("conversationId", message));
        let Some(first) = id.chars().next() else {
            return invalid("must not be empty");
        };
        if id.len() > 128 {
            return invalid("must be at most 128 characters");
        }
        if !first.is_ascii_alphanumeric() {
            return invalid("must start with a letter or digit");
        }
        if let Some(bad) = id.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))) {
            return Err(Error::invalid(
                "conversationId",
                format!("must contain only letters, digits, '.', '_' and '-' (found {bad:?})"),
            ));
        }
        Ok(Self(id.to_owned()))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ConversationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ordinary_ids() {
        for id in ["a", "conv-1", "A.b_c-9", &"x".repeat(128)] {
            assert_eq!(ConversationId::parse(id).unwrap().as_str(), id);
        }
    }

    #[test]
    fn rejects_each_rule_with_its_message() {
        let cases = [
            ("", "invalid conversationId: must not be empty"),
            ("..", "invalid conversationId: must start with a letter or digit"),
            ("a/b", "invalid conversationId: must contain only letters, digits, '.', '_' and '-' (found '/')"),
            ("a b", "invalid conversationId: must contain only letters, digits, '.', '_' and '-' (found ' ')"),
            (".hidden", "invalid conversationId: must start with a letter or digit"),
        ];
        for (id, message) in cases {
            assert_eq!(ConversationId::parse(id).unwrap_err().to_string(), message, "{id:?}");
        }
        let long = "x".repeat(129);
        assert_eq!(
            ConversationId::parse(&long).unwrap_err().to_string(),
            "invalid conversationId: must be at most 128 characters"
        );
    }
}
