//! What can go wrong setting up credential injection. Messages name the credential (its index in the operator's
//! list, its host and variable) and never carry a secret, nor any text a secret was part of.

/// A credential the operator configured is unusable, or the machinery it needs could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    #[error("credential {index} ({host:?}): {reason}")]
    Spec { index: usize, host: String, reason: String },
    #[error("egress certificate authority: {0}")]
    Ca(#[from] rcgen::Error),
    #[error("egress TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
    #[error("extra upstream roots: {0}")]
    Roots(String),
    #[error("random placeholder: {0}")]
    Random(#[from] getrandom::Error),
}

pub type Result<T> = std::result::Result<T, CredentialError>;
