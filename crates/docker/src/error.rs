//! Errors of the Docker backend.

/// Result with the Docker [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// What can go wrong talking to the engine.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The engine could not be reached or refused a request.
    #[error("docker: {action}: {source}")]
    Engine { action: String, source: bollard::errors::Error },

    /// The server is exiting ([`sandlot_core::Backend::abort_all`] ran): no new container is made.
    #[error("sandlot is shutting down")]
    ShuttingDown,

    /// A host operation failed.
    #[error("{action}: {source}")]
    Io { action: String, source: std::io::Error },
}

impl Error {
    /// Builds an [`Error::Engine`].
    pub fn engine(action: impl Into<String>, source: bollard::errors::Error) -> Self {
        Self::Engine { action: action.into(), source }
    }
}

impl From<Error> for sandlot_core::Error {
    fn from(e: Error) -> Self {
        sandlot_core::Error::Backend { backend: "docker", message: e.to_string() }
    }
}
