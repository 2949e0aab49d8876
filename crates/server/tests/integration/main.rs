//! The server's integration tests, one binary (one link, one file on disk) with a module per subject.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod apps;
mod auth_first;
mod auth_limits;
mod baponi;
mod baponi_rest;
mod codegen_files;
mod common;
mod conversation_bounds;
mod file_resources;
mod file_tool_bounds;
mod http;
mod jwt;
mod layout;
mod model_facing;
mod open_sandbox;
mod open_sandbox_tools;
mod operations;
mod output_schemas;
mod scrub_secrets;
mod sessions;
mod tenants;
mod upload_bounds;
mod uploads;
