//! Errors of the jail's supervisor (the sandbox side reports its own failures as `InitEvent::SetupFailed`).

/// Result with the jail [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// What can go wrong on the supervisor's side.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A host operation failed.
    #[error("{action}: {source}")]
    Io { action: String, source: std::io::Error },

    /// The init could not build the sandbox.
    #[error("jail setup failed at {step}: {message}")]
    Setup { step: String, message: String },

    /// The init died without saying how the program ended.
    #[error("jail init ended without a report ({status})")]
    NoReport { status: String },
}

impl Error {
    /// Builds an [`Error::Io`].
    pub fn io(action: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io { action: action.into(), source }
    }
}

impl From<Error> for sandlot_core::Error {
    fn from(e: Error) -> Self {
        sandlot_core::Error::Backend { backend: "native", message: e.to_string() }
    }
}
