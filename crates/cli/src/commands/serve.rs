//! `sandlot serve`: the HTTP face (Streamable HTTP MCP at /mcp, signed downloads, health), until SIGINT/SIGTERM.

use std::process::ExitCode;

use anyhow::Context;
use sandlot_server::kit::{
    AllowedHosts, AuthLimits, Authenticator, ConnectionLimits, Credentials, DEFAULT_TOKEN_TENANT, JwtSettings,
    OAuthSettings, ResourceServer, ops_app, parse_named_tokens, raise_nofile_limit, serve as serve_http,
};
use sandlot_server::{HttpOptions, app};

use crate::cli::ServeArgs;
use crate::logs::say;

pub async fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let base = format!("http://{}", args.addr);
    // Every setting is checked before anything starts.
    let checked = super::check_file_url_args(&args.files).and_then(|()| authenticator(&args));
    let authenticator = match checked {
        Ok(authenticator) => authenticator,
        Err(message) => {
            crate::logs::fail(&message);
            return Ok(ExitCode::from(2));
        }
    };
    // Before anything opens descriptors or starts processes: systemd's default soft limit (1024) is far below its
    // hard one, and every connection and run takes descriptors.
    let nofile = raise_nofile_limit();
    let state = super::app_state(&args.sandbox, &args.service, &args.files, &base, args.warm_inits).await?;
    let max_connections = match args.max_connections {
        Some(max) => usize::try_from(max).unwrap_or(usize::MAX),
        None => ConnectionLimits::default_max_connections(nofile, state.engine.config().max_concurrent_runs),
    };
    let limits =
        ConnectionLimits { idle_timeout: std::time::Duration::from_secs(args.connection_idle_secs), max_connections };
    tracing::info!(nofile, max_connections, idle_secs = args.connection_idle_secs, "connection limits");
    // localhost, the loopback addresses, the listen address, and PUBLIC_BASE_URL's host.
    let mut allowed_hosts = vec!["localhost".to_owned(), "127.0.0.1".to_owned(), "::1".to_owned()];
    allowed_hosts.push(args.addr.ip().to_string());
    if let Some(authority) = state.files.public_base_url.split("://").nth(1).and_then(|rest| rest.split('/').next()) {
        allowed_hosts.push(authority.to_owned());
    }
    allowed_hosts.extend(args.allowed_hosts.iter().map(|h| h.trim().to_owned()).filter(|h| !h.is_empty()));
    let metrics = match args.metrics_addr {
        Some(addr) => Some(metrics_listener(addr, &state, allowed_hosts.clone())?),
        None => None,
    };
    let options = HttpOptions {
        allowed_hosts: AllowedHosts::new(allowed_hosts),
        session_idle: std::time::Duration::from_secs(args.session_idle_secs),
        max_sessions: usize::try_from(args.max_sessions).unwrap_or(usize::MAX),
        profiles: args.profiles.0.clone(),
        profile_settings: sandlot_server::surfaces::Settings { baponi_volumes: args.baponi_volumes.clone() },
        root_profile: args.root_profile.0,
        max_streams_per_caller: usize::try_from(args.max_streams_per_caller).unwrap_or(usize::MAX),
        ..HttpOptions::new(AllowedHosts::new(Vec::new()))
    };
    let listener = listen(args.addr).with_context(|| format!("cannot listen on {}", args.addr))?;
    let (authenticator, generated) = authenticator;
    // With a profile at the root, sandlot's own MCP endpoint is under /p/sandlot.
    let own_prefix = if args.root_profile.0.is_some() { sandlot_server::surfaces::SANDLOT_PREFIX } else { "" };
    let token_file = keep_token(&args.sandbox.root, generated.as_deref())?;
    if crate::logs::json() {
        // One structured start event; the generated token stays out of the logs (which are often shipped
        // elsewhere): it is in the token file, readable by the server's user only.
        tracing::info!(
            version = env!("CARGO_PKG_VERSION"),
            address = %args.addr,
            url = format!("{base}{own_prefix}/mcp"),
            profiles = args.profiles.0.iter().map(|p| p.name()).collect::<Vec<_>>().join(","),
            root_profile = args.root_profile.0.map(|p| p.name()),
            backend = state.engine.backend_name(),
            root = %args.sandbox.root.display(),
            runners = runner_names(&state, ","),
            token_file = token_file.as_ref().map(|path| path.display().to_string()),
            "sandlot started"
        );
    } else {
        say(&format!("serving MCP at {base}{own_prefix}/mcp (runners: {})", runner_names(&state, ", ")));
        for profile in &args.profiles.0 {
            say(&format!("{} profile at {base}{}{}", profile.name(), profile.prefix(), profile.endpoint()));
        }
        if let Some(profile) = args.root_profile.0 {
            say(&format!("{} profile at the root paths ({base}{})", profile.name(), profile.endpoint()));
        }
        if let Some(token) = generated {
            say(&format!("Authorization: Bearer {token}"));
        }
    }
    let (shutdown, engine) = (state.shutdown.clone(), state.engine.clone());
    if let Some(serve_metrics) = metrics {
        tokio::spawn(serve_metrics);
    }
    let last_engine = state.engine.clone();
    let router = app(state, authenticator, options);
    let stop = async move {
        shutdown_signal().await;
        // Stop accepting, end event streams and sessions, give in-flight runs the grace period, then remove what
        // outlives this process (the Docker backend's containers; the jail's sandboxes die with it: their inits
        // have a parent-death signal) and exit.
        shutdown.cancel();
        let active = engine.active_runs();
        tracing::info!(active_runs = active, "shutting down");
        if !crate::logs::json() {
            say(&format!("shutting down; {active} run(s) in flight, waiting up to {} s", SHUTDOWN_GRACE.as_secs()));
        }
        tokio::spawn(async move {
            tokio::time::sleep(SHUTDOWN_GRACE).await;
            let in_flight = engine.in_flight();
            for (run_id, conversation, language) in &in_flight {
                // A conversation id is validated (`[A-Za-z0-9._-]`), so its Display cannot break the line.
                tracing::warn!(run_id, conversation = %conversation, %language, "run killed at shutdown");
            }
            say(&format!("grace period over; killing {} run(s)", in_flight.len()));
            super::abort_all(&engine).await;
            std::process::exit(0);
        });
    };
    serve_http(listener, router, limits, stop).await.context("HTTP server failed")?;
    // Every connection ended within the grace period, but a run whose request went away may still be removing its
    // sandbox in a task of its own, which the runtime drops when this returns.
    super::abort_all(&last_engine).await;
    Ok(ExitCode::SUCCESS)
}

/// The metrics listener (`SANDLOT_METRICS_ADDR`): installs the Prometheus recorder, binds `addr` and returns the
/// future that serves `/metrics`, `/healthz` and `/readyz` there until shutdown. Its own connection limits: a scraper
/// and a few probes need few connections.
fn metrics_listener(
    addr: std::net::SocketAddr,
    state: &sandlot_server::AppState,
    mut allowed_hosts: Vec<String>,
) -> anyhow::Result<impl Future<Output = ()> + Send + 'static> {
    let listener = listen(addr).with_context(|| format!("cannot listen on {addr} (SANDLOT_METRICS_ADDR)"))?;
    let handle = sandlot_server::kit::telemetry::install_prometheus(state.engine.backend_name())
        .context("cannot install the metrics recorder")?;
    allowed_hosts.push(addr.ip().to_string());
    let router = ops_app(state.clone(), handle, AllowedHosts::new(allowed_hosts));
    let limits = ConnectionLimits { idle_timeout: std::time::Duration::from_secs(30), max_connections: 64 };
    let shutdown = state.shutdown.clone();
    say(&format!("metrics at http://{addr}/metrics"));
    Ok(async move {
        if let Err(e) = serve_http(listener, router, limits, shutdown.cancelled_owned()).await {
            tracing::error!("the metrics listener failed: {e}");
        }
    })
}

/// A listening socket with a queue of 1024 connections (the runtime's default is 128, which a burst of
/// connections fills before the accept loop drains it: the next client then waits a second for its SYN to be
/// sent again).
fn listen(addr: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

/// The credential check with its failure limit, and the token when one was generated (to print); an error names
/// the bad setting.
fn authenticator(args: &ServeArgs) -> Result<(Authenticator, Option<String>), String> {
    let limits = AuthLimits {
        failures_per_minute: args.auth_failures_per_minute,
        trusted_proxies: args.trusted_proxies.clone(),
        client_ip_header: args.client_ip_header,
    };
    let (authenticator, generated) = credentials(args)?;
    Ok((authenticator.with_limits(limits), generated))
}

/// The credential check the settings ask for: JWTs (MCP_AUTH_ENABLED) or the one token (MCP_API_TOKEN, generated
/// when unset), and the named tokens (MCP_API_TOKENS) beside either; with named tokens alone nothing is generated.
fn credentials(args: &ServeArgs) -> Result<(Authenticator, Option<String>), String> {
    let named = args.api_tokens.as_deref().map(parse_named_tokens).transpose()?;
    let (credentials, generated) = if args.auth_enabled {
        if args.api_token.is_some() {
            return Err("MCP_API_TOKEN is not used when MCP_AUTH_ENABLED is true (JWTs only): unset one of them".into());
        }
        let public_key_pem = match &args.jwt_public_key {
            Some(key) if key.trim_start().starts_with("-----BEGIN") => Some(key.clone()),
            Some(path) => Some(
                std::fs::read_to_string(path)
                    .map_err(|e| format!("MCP_AUTH_JWT_PUBLIC_KEY: cannot read {path}: {e}"))?,
            ),
            None => None,
        };
        let settings = JwtSettings {
            secret: args.jwt_secret.clone(),
            public_key_pem,
            audience: args.jwt_audience.clone(),
            issuer: args.jwt_issuer.clone(),
        };
        (Credentials::jwt(&settings)?, None)
    } else {
        match (&args.api_token, &named) {
            (Some(token), _) if token.is_empty() => return Err("MCP_API_TOKEN must not be empty".into()),
            (Some(token), _) => (Credentials::token(token.clone()), None),
            (None, Some(_)) => (Credentials::default(), None),
            (None, None) if args.oauth_issuer.is_some() => (Credentials::default(), None),
            (None, None) => {
                let token = super::random_token();
                (Credentials::token(token.clone()), Some(token))
            }
        }
    };
    let credentials = match &args.oauth_issuer {
        Some(issuer) => credentials.with_oauth(std::sync::Arc::new(resource_server(args, issuer)?)),
        None => credentials,
    };
    // One token and nothing else (the default) is one user, the operator: it sees everything, as before tenants
    // (the runs of `sandlot stdio` on the same root included).
    let single_token = !args.auth_enabled && named.is_none() && args.oauth_issuer.is_none();
    let credentials = match named {
        Some(named) => credentials.with_tokens(named).map_err(|e| format!("MCP_API_TOKENS: {e}"))?,
        None => credentials,
    };
    let mut admins: Vec<String> = args.admins.iter().map(|a| a.trim().to_owned()).filter(|a| !a.is_empty()).collect();
    if single_token {
        admins.push(DEFAULT_TOKEN_TENANT.to_owned());
    }
    Ok((Authenticator::new(credentials).with_admins(admins), generated))
}

/// The check of SANDLOT_OAUTH_ISSUER's access tokens: this server's MCP endpoint is the resource they must name.
fn resource_server(args: &ServeArgs, issuer: &str) -> Result<ResourceServer, String> {
    let resource = match &args.oauth_resource {
        Some(resource) => resource.clone(),
        None => {
            let base = args.files.public_base_url.clone().unwrap_or_else(|| format!("http://{}", args.addr));
            format!("{}/mcp", base.trim_end_matches('/'))
        }
    };
    ResourceServer::new(OAuthSettings { issuer: issuer.to_owned(), jwks_url: args.oauth_jwks_url.clone(), resource })
}

/// Keeps a generated token in `<root>/.sandlot/api-token` (mode 0600, replaced at each start) and returns its path,
/// so that an operator reading JSON logs, which never carry it, can find it; removes a file left by an earlier start
/// when the token was not generated, so the file never holds a token the server does not take.
fn keep_token(root: &std::path::Path, generated: Option<&str>) -> anyhow::Result<Option<std::path::PathBuf>> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = sandlot_core::StateDir::prepare(root)?.path().join("api-token");
    let _ = std::fs::remove_file(&path);
    let Some(token) = generated else { return Ok(None) };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("cannot write the generated token to {}", path.display()))?;
    writeln!(file, "{token}").with_context(|| format!("cannot write the generated token to {}", path.display()))?;
    Ok(Some(path))
}

fn runner_names(state: &sandlot_server::AppState, separator: &str) -> String {
    let names: Vec<String> = state.engine.runners().iter().map(|r| r.language.to_string()).collect();
    if names.is_empty() { "none".into() } else { names.join(separator) }
}

/// How long in-flight runs may go on after SIGINT or SIGTERM.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

async fn shutdown_signal() {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async { match terminate.as_mut() { Some(s) => { s.recv().await; } None => std::future::pending().await } } => {}
    }
}
