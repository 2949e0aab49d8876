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

    /// No image is labelled `sandbox.live=true` (scripts/build-runners.sh builds runner-live).
    #[error("no live sandbox image (an image labelled sandbox.live=true): run scripts/build-runners.sh")]
    NoLiveImage,

    /// A live sandbox's container is no longer running.
    #[error("live sandbox {sandbox} has ended")]
    SandboxEnded { sandbox: String },

    /// sandlot does not see the processes of a live sandbox's container among its pids.
    #[error(
        "live sandbox {container}: its processes are not among sandlot's pids (run sandlot in the host's pid namespace)"
    )]
    NoHostPids { container: String },

    /// A `docker exec` did not go as the engine promises.
    #[error("docker: exec {exec}: {reason}")]
    Exec { exec: String, reason: String },

    /// What this backend does not do (a leashed network).
    #[error("{0}")]
    Unsupported(&'static str),

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
