//! `sandlot serve`: the HTTP face (Streamable HTTP MCP at /mcp, signed downloads, health), until SIGINT/SIGTERM.

use std::process::ExitCode;

use anyhow::Context;
use sandlot_server::http::{AllowedHosts, BearerToken, app};

use crate::cli::ServeArgs;

pub async fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let base = format!("http://{}", args.addr);
    let state = super::app_state(&args.sandbox, &args.files, &base)?;
    let (token, generated) = match args.api_token.clone() {
        Some(token) if !token.is_empty() => (token, false),
        Some(_) => anyhow::bail!("MCP_API_TOKEN must not be empty"),
        None => (super::random_token(), true),
    };
    // localhost, the loopback addresses, the listen address, and PUBLIC_BASE_URL's host.
    let mut allowed_hosts = vec!["localhost".to_owned(), "127.0.0.1".to_owned(), "::1".to_owned()];
    allowed_hosts.push(args.addr.ip().to_string());
    if let Some(authority) = state.files.public_base_url.split("://").nth(1).and_then(|rest| rest.split('/').next()) {
        allowed_hosts.push(authority.to_owned());
    }
    let allowed_hosts = AllowedHosts::new(allowed_hosts);
    let listener =
        tokio::net::TcpListener::bind(args.addr).await.with_context(|| format!("cannot listen on {}", args.addr))?;
    eprintln!("sandlot: serving MCP at {base}/mcp (runners: {})", runner_names(&state));
    if generated {
        eprintln!("sandlot: Authorization: Bearer {token}");
    }
    let router = app(state, BearerToken::new(token), allowed_hosts);
    let service = router.into_make_service_with_connect_info::<std::net::SocketAddr>();
    axum::serve(listener, service).with_graceful_shutdown(shutdown_signal()).await.context("HTTP server failed")?;
    Ok(ExitCode::SUCCESS)
}

fn runner_names(state: &sandlot_server::AppState) -> String {
    let names: Vec<String> = state.engine.runners().iter().map(|r| r.language.to_string()).collect();
    if names.is_empty() { "none".into() } else { names.join(", ") }
}

async fn shutdown_signal() {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async { match terminate.as_mut() { Some(s) => { s.recv().await; } None => std::future::pending().await } } => {}
    }
    eprintln!("sandlot: shutting down");
}
