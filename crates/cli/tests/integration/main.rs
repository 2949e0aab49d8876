//! The sandlot binary's integration tests, one binary with a module per subject.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod cli;
mod codegen_bash;
mod common;
mod logs;
mod mcp_config;
mod memory_bound;
mod open_sandbox_exec;
mod open_sandbox_stdio;
mod operations;
mod retention;
mod serve;
