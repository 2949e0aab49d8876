//! The error type of sandlot-core. Each variant names what was wrong and where.

use std::path::PathBuf;

/// Result with the core [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// Everything that can stop the engine from producing a [`crate::RunOutcome`].
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An argument of the request is missing or invalid; `field` names it as the caller spelled it.
    #[error("invalid {field}: {message}")]
    InvalidArgument { field: &'static str, message: String },

    /// No runner is installed for the language.
    #[error("no runner for language {language}; available: {}", available.join(", "))]
    NoRunner { language: String, available: Vec<String> },

    /// A path inside a conversation is malformed, escapes it, or goes through a symlink.
    #[error("invalid path {path:?}: {message}")]
    InvalidPath { path: String, message: String },

    /// An upload would take the conversation's `/data` over its disk quota.
    #[error("{path}: {size} bytes would take /data over its quota ({used} of {quota} bytes used)")]
    QuotaExceeded { path: String, used: u64, size: u64, quota: u64 },

    /// The file does not exist in the conversation (or is not a regular file).
    #[error("file not found: {path}")]
    FileNotFound { path: String },

    /// A filesystem operation on the host failed.
    #[error("{action} {}: {source}", path.display())]
    Io { action: &'static str, path: PathBuf, source: std::io::Error },

    /// Too many runs are waiting (or this one waited too long): try again later.
    #[error("sandlot is busy: {reason}; retry in {} s", retry_after.as_secs())]
    Busy { reason: String, retry_after: std::time::Duration },

    /// The run history could not be read or written.
    #[error("run history: {message}")]
    History { message: String },

    /// The conversation has a run going or waiting for its turn, so it cannot be removed now.
    #[error("conversation {id} has a run in progress or queued")]
    ConversationBusy { id: String },

    /// No such conversation: neither a directory nor a run in the history.
    #[error("no conversation {id}")]
    ConversationNotFound { id: String },

    /// The conversation belongs to another tenant (see [`crate::Tenant`]). Its message is exactly
    /// [`Error::ConversationNotFound`]'s, and a face answers it exactly as it answers a missing conversation, so that
    /// another tenant's id cannot be told from one that does not exist.
    #[error("no conversation {id}")]
    ConversationHidden { id: String },

    /// A run (or an upload) into a conversation that another tenant owns: refused, where a missing id would simply
    /// be created. An invalid argument, field `conversationId` (see [`Error::argument_field`]).
    #[error("conversation \"{conversation}\" is not available to this caller; use another conversationId")]
    ConversationTaken { conversation: String },

    /// A new conversation would take its tenant or the server past a bound of [`crate::ConversationBounds`]:
    /// `spent` of `what` already, at most `limit` (the `setting` that sets it).
    #[error(
        "no new conversation: there are {spent} {what}, at most {limit} ({setting}); use or delete an existing \
         conversation"
    )]
    ConversationLimit { what: &'static str, setting: &'static str, spent: u64, limit: u64 },

    /// The backend could not run the job (not the code failing: that is a normal outcome).
    #[error("backend {backend}: {message}")]
    Backend { backend: &'static str, message: String },
}

impl Error {
    /// Builds an [`Error::InvalidArgument`].
    pub fn invalid(field: &'static str, message: impl Into<String>) -> Self {
        Self::InvalidArgument { field, message: message.into() }
    }

    /// Builds an [`Error::NoRunner`] for `language`, listing the `available` ones.
    pub fn no_runner(language: crate::Language, available: impl IntoIterator<Item = crate::Language>) -> Self {
        Self::NoRunner {
            language: language.to_string(),
            available: available.into_iter().map(|l| l.to_string()).collect(),
        }
    }

    /// The argument the caller must correct, as the caller spelled it, when the error is about one
    /// ([`Error::InvalidArgument`], [`Error::ConversationTaken`]); `None` otherwise.
    pub fn argument_field(&self) -> Option<&'static str> {
        match self {
            Self::InvalidArgument { field, .. } => Some(field),
            Self::ConversationTaken { .. } => Some("conversationId"),
            _ => None,
        }
    }

    /// Whether the error says the conversation does not exist, for the caller: [`Error::ConversationNotFound`], or
    /// [`Error::ConversationHidden`], which must be answered the same way.
    pub fn is_conversation_not_found(&self) -> bool {
        matches!(self, Self::ConversationNotFound { .. } | Self::ConversationHidden { .. })
    }

    /// Builds an [`Error::Io`] for `action` on `path`.
    pub fn io(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io { action, path: path.into(), source }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_tenants_conversation_reads_as_a_missing_one() {
        let hidden = Error::ConversationHidden { id: "c-1".into() };
        let missing = Error::ConversationNotFound { id: "c-1".into() };
        assert_eq!(hidden.to_string(), missing.to_string());
        assert_eq!((hidden.is_conversation_not_found(), missing.is_conversation_not_found()), (true, true));
        assert_eq!(hidden.argument_field(), None);
    }

    #[test]
    fn a_taken_conversation_is_an_invalid_conversation_id() {
        let taken = Error::ConversationTaken { conversation: "c-1".into() };
        assert_eq!(
            taken.to_string(),
            "conversation \"c-1\" is not available to this caller; use another conversationId"
        );
        assert_eq!(taken.argument_field(), Some("conversationId"));
        assert!(!taken.is_conversation_not_found());
        assert_eq!(Error::invalid("code", "must not be empty").argument_field(), Some("code"));
    }
}
