//! The Docker backend's integration tests, one binary with a module per subject.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod docker;
mod live;
