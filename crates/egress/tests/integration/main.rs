//! The egress crate's integration tests, one binary with a module per subject.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod audit;
mod caps;
mod clients;
mod common;
mod credentials;
mod dns;
mod metrics;
mod network;
mod proxy;
