//! Live sessions: a conversation's sandbox that outlives a call, and the persistent interpreters that run in it.
//!
//! `driver` holds the interpreter drivers and their wire protocol.

pub(crate) mod driver;
