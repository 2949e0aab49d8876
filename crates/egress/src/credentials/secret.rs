//! [`Secret`]: a credential's value, which never prints. Its `Debug` is a fixed mark, so a secret inside any
//! structure that is logged or put in an error shows as `Secret(..)`; the bytes leave only through
//! [`Secret::expose`], which the request rewriter alone calls.

use std::fmt;

/// A secret value: bytes that may go in an HTTP header value (checked when made).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl Secret {
    pub(crate) fn new(value: Vec<u8>) -> Self {
        Self(value)
    }

    /// The value, to put in a request to the host it is mapped to, and nowhere else.
    pub(crate) fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..)")
    }
}
