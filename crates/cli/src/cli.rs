//! The command line: every option also reads an environment variable (docs/configuration.md lists them all with
//! their defaults).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, CommandFactory, Parser, Subcommand};
use sandlot_core::{EngineConfig, Limits};
use sandlot_server::surfaces::Profile;

/// Run untrusted code for AI agents in a Linux-namespace sandbox.
#[derive(Debug, Parser)]
#[command(name = "sandlot", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run code from a file or standard input in the sandbox; exits with the program's exit code
    /// (124 on timeout, 128+N on signal N, 137 out of memory, 125 disk quota exceeded, 2 request refused).
    Run(RunArgs),
    /// List the languages this host can run, with the interpreter and its version.
    Runners(RunnersArgs),
    /// Report each isolation layer on this host and run a probe; exits non-zero when the jail cannot run.
    Doctor(SandboxArgs),
    /// Serve MCP over HTTP: Streamable HTTP at /mcp, signed downloads at /files, /healthz.
    Serve(Box<ServeArgs>),
    /// Serve MCP over stdin and stdout (for clients that start the server themselves).
    Stdio(Box<StdioArgs>),
    /// Print a ready configuration for an MCP client (Claude Code, Claude Desktop, Cursor, VS Code) that connects
    /// to a running `sandlot serve`.
    McpConfig(McpConfigArgs),
}

/// The MCP clients `mcp-config` writes a configuration for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum McpClient {
    /// The command line that adds the server: `claude mcp add --transport http ...`.
    ClaudeCode,
    /// `claude_desktop_config.json`, through the `mcp-remote` bridge (Claude Desktop's file names only local
    /// commands).
    ClaudeDesktop,
    /// `.cursor/mcp.json` (or `~/.cursor/mcp.json`).
    Cursor,
    /// `.vscode/mcp.json`, the token asked for once and kept by VS Code.
    Vscode,
}

#[derive(Debug, Args)]
pub struct McpConfigArgs {
    /// The client.
    #[arg(value_enum)]
    pub client: McpClient,
    /// The server's MCP endpoint, as the client reaches it (default: http://<MCP_HTTP_ADDR>/mcp).
    #[arg(long)]
    pub url: Option<String>,
    /// The address `sandlot serve` listens on, used when there is no --url.
    #[arg(long = "addr", env = "MCP_HTTP_ADDR", default_value = "127.0.0.1:8080")]
    pub addr: std::net::SocketAddr,
    /// The server's name in the client's configuration.
    #[arg(long, default_value = "sandlot")]
    pub name: String,
    /// Write the value of MCP_API_TOKEN into the configuration instead of a placeholder (the file then holds a
    /// secret).
    #[arg(long)]
    pub with_token: bool,
    #[arg(long, env = "MCP_API_TOKEN", hide = true, hide_env_values = true)]
    pub api_token: Option<String>,
}

/// How file download URLs are made.
#[derive(Debug, Clone, Args)]
pub struct FileUrlArgs {
    /// HMAC key for file URLs (default: random, kept in <root>/.sandlot/file-secret).
    #[arg(long, env = "FILE_SECRET", hide_env_values = true)]
    pub file_secret: Option<String>,
    /// Base of file URLs (default: http://<listen address>).
    #[arg(long, env = "PUBLIC_BASE_URL")]
    pub public_base_url: Option<String>,
    /// Lifetime of a file URL in seconds; 0 makes URLs that never expire.
    #[arg(long, env = "SANDLOT_FILE_URL_TTL_SECS", default_value_t = 86_400)]
    pub file_url_ttl_secs: u64,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long = "addr", env = "MCP_HTTP_ADDR", default_value = "127.0.0.1:8080")]
    pub addr: std::net::SocketAddr,
    /// Bearer token for /mcp (default: random, printed at start).
    #[arg(long, env = "MCP_API_TOKEN", hide_env_values = true)]
    pub api_token: Option<String>,
    /// Named static tokens, `name:token,...`: each name is a tenant of its own (default: none).
    #[arg(long, env = "MCP_API_TOKENS", hide_env_values = true)]
    pub api_tokens: Option<String>,
    /// Tenants (token names or JWT subjects) that see every tenant's conversations and runs, comma-separated.
    #[arg(long, env = "SANDLOT_ADMINS", value_delimiter = ',')]
    pub admins: Vec<String>,
    /// Require JWTs instead of the static token.
    #[arg(long, env = "MCP_AUTH_ENABLED", default_value_t = false, action = clap::ArgAction::Set)]
    pub auth_enabled: bool,
    /// HS256 secret of the JWTs.
    #[arg(long, env = "MCP_AUTH_JWT_SECRET", hide_env_values = true)]
    pub jwt_secret: Option<String>,
    /// RS256 or ES256 public key of the JWTs: PEM text, or the path of a PEM file.
    #[arg(long, env = "MCP_AUTH_JWT_PUBLIC_KEY")]
    pub jwt_public_key: Option<String>,
    /// Required `aud` of the JWTs.
    #[arg(long, env = "MCP_AUTH_AUDIENCE")]
    pub jwt_audience: Option<String>,
    /// Required `iss` of the JWTs.
    #[arg(long, env = "MCP_AUTH_ISSUER")]
    pub jwt_issuer: Option<String>,
    /// Accept OAuth 2.1 access tokens of this authorization server (its issuer URL: https, or http to a loopback
    /// host): sandlot serves its Protected Resource Metadata and checks each token's signature (the server's JWKS),
    /// issuer, audience (SANDLOT_OAUTH_RESOURCE), expiry and scopes; the tenant is the token's `sub`.
    #[arg(long, env = "SANDLOT_OAUTH_ISSUER")]
    pub oauth_issuer: Option<String>,
    /// The authorization server's JWKS URL (default: its metadata's `jwks_uri`).
    #[arg(long, env = "SANDLOT_OAUTH_JWKS_URL")]
    pub oauth_jwks_url: Option<String>,
    /// This server's MCP endpoint as clients reach it, which access tokens must name as their audience (default:
    /// PUBLIC_BASE_URL, else http://<listen address>, with /mcp).
    #[arg(long, env = "SANDLOT_OAUTH_RESOURCE")]
    pub oauth_resource: Option<String>,
    /// Wrong bearer credentials one client address may send per minute (a burst, refilled evenly over the minute);
    /// past it a wrong credential gets 429. A valid credential is never refused, and a request without one never
    /// counts. 0 turns the limit off.
    #[arg(long, env = "SANDLOT_AUTH_FAILURES_PER_MINUTE", default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
    pub auth_failures_per_minute: u32,
    /// Reverse proxies (addresses or CIDR networks, comma-separated) whose forwarded-for header names the client;
    /// from any other peer that header is ignored. Default: none (the TCP peer is the client).
    #[arg(long, env = "SANDLOT_TRUSTED_PROXIES", value_delimiter = ',')]
    pub trusted_proxies: Vec<sandlot_server::kit::TrustedProxy>,
    /// The header those proxies name the client in: x-forwarded-for or forwarded (RFC 7239).
    #[arg(long, env = "SANDLOT_CLIENT_IP_HEADER", default_value = "x-forwarded-for")]
    pub client_ip_header: sandlot_server::kit::ClientIpHeader,
    /// More host names requests may address (comma-separated), besides localhost, the loopback addresses, the
    /// listen address and PUBLIC_BASE_URL's host.
    #[arg(long, env = "SANDLOT_ALLOWED_HOSTS", value_delimiter = ',')]
    pub allowed_hosts: Vec<String>,
    /// Seconds after which an unused Streamable HTTP session is closed.
    #[arg(long, env = "SANDLOT_SESSION_IDLE_SECS", default_value_t = 1800, value_parser = clap::value_parser!(u64).range(1..))]
    pub session_idle_secs: u64,
    /// Jail inits kept started and waiting, so a call does not wait for one to start (0 turns this off).
    #[arg(long, env = "SANDLOT_WARM_INITS", default_value_t = 2)]
    pub warm_inits: usize,
    /// Drop-in profiles served under /p/<name> (comma-separated: baponi, codegen, open-sandbox; `all` or `none`).
    #[arg(long, env = "SANDLOT_PROFILES", default_value = "all", value_parser = parse_profiles)]
    pub profiles: Profiles,
    /// A profile served at the root paths (/mcp, /v1/...) for clients whose URLs are fixed; sandlot's own MCP and
    /// REST routes are then under /p/sandlot only. `sandlot` (the default) keeps sandlot's own at the root.
    #[arg(long, env = "SANDLOT_ROOT_PROFILE", default_value = "sandlot", value_parser = parse_root_profile)]
    pub root_profile: RootProfile,
    /// Baponi's named volumes, mounted into its runs at /data/<slug> and served by files_download and the Files
    /// API: `slug=/host/dir[:ro|:rw[:<MiB>]],...` (read-only by default; a writable one's quota, else --disk-mb).
    #[arg(long, env = "SANDLOT_BAPONI_VOLUMES", default_value = "", value_parser = parse_baponi_volumes)]
    pub baponi_volumes: sandlot_server::surfaces::baponi::Volumes,
    /// Most Streamable HTTP sessions open at once.
    #[arg(long, env = "SANDLOT_MAX_SESSIONS", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_sessions: u64,
    /// Seconds a connection with no request in flight stays open; also the time a client has to send a request's
    /// headers.
    #[arg(long, env = "SANDLOT_CONNECTION_IDLE_SECS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub connection_idle_secs: u64,
    /// Most connections open at once (default: the open-file limit minus a reserve for runs); at the cap, the
    /// oldest idle connection is closed to make room.
    #[arg(long, env = "SANDLOT_MAX_CONNECTIONS", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_connections: Option<u64>,
    /// Most long-lived streams (SSE and NDJSON) one caller (one token, or one JWT subject) may hold at once, across
    /// every surface; one more gets 429 until one ends.
    #[arg(long, env = "SANDLOT_MAX_STREAMS_PER_CALLER", default_value_t = sandlot_server::kit::StreamCap::DEFAULT_PER_CALLER as u64, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_streams_per_caller: u64,
    /// Serve /metrics (Prometheus), /healthz and /readyz on this address, without authentication (default: no
    /// metrics). Keep it on loopback or a private network: the metrics show how the server is used.
    #[arg(long, env = "SANDLOT_METRICS_ADDR")]
    pub metrics_addr: Option<std::net::SocketAddr>,
    #[command(flatten)]
    pub files: FileUrlArgs,
    #[command(flatten)]
    pub service: ServiceArgs,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

#[derive(Debug, Args)]
pub struct StdioArgs {
    /// The surface served: sandlot's own MCP tools (`sandlot`, the default) or a profile's (`open-sandbox`).
    #[arg(long, env = "SANDLOT_STDIO_PROFILE", default_value = "sandlot", value_parser = parse_root_profile)]
    pub profile: RootProfile,
    #[command(flatten)]
    pub files: FileUrlArgs,
    #[command(flatten)]
    pub service: ServiceArgs,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

/// What a server's runs may reach beyond their loopback (docs/configuration.md, "Egress"). Off by default.
#[derive(Debug, Clone, Args)]
pub struct EgressArgs {
    /// The server's egress policy: JSON `{"allow": [...], "deny": [...]}` (rules such as `pypi.org`,
    /// `*.pythonhosted.org:443`, `203.0.113.0/24:5432`), or `@<path>` of a file holding it. Every run is on this
    /// leash (a run may narrow it with its `network` argument, never widen it). Unset: loopback only. Native
    /// backend as root only.
    #[arg(long, env = "SANDLOT_EGRESS_POLICY")]
    pub egress_policy: Option<String>,
    /// Tenants' narrowings of the server's policy: a JSON object mapping a tenant (a token's name, a JWT's
    /// subject) to `{"allow": [...], "deny": [...]}`, or `@<path>` of a file holding it. A tenant's runs must pass
    /// both; a tenant not named has the server's policy.
    #[arg(long, env = "SANDLOT_EGRESS_TENANT_POLICIES")]
    pub egress_tenant_policies: Option<String>,
    /// Name servers (`ip:port`, comma-separated) the egress proxy resolves allowed names with, on the host
    /// (default: the host's /etc/resolv.conf). Sandboxes never reach a name server.
    #[arg(long, env = "SANDLOT_EGRESS_NAMESERVERS", value_delimiter = ',')]
    pub egress_nameservers: Vec<std::net::SocketAddr>,
    /// Connections one sandbox may have open through the proxy at once; more are refused (and recorded).
    #[arg(long, env = "SANDLOT_EGRESS_MAX_CONNECTIONS", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=65_536))]
    pub egress_max_connections: u64,
    /// Bytes per second one sandbox's connections may carry each way, all together; 0: no cap.
    #[arg(long, env = "SANDLOT_EGRESS_BYTES_PER_SECOND", default_value_t = 10 * 1024 * 1024)]
    pub egress_bytes_per_second: u64,
    /// Hosts mapped to secrets the sandbox never sees: a JSON array of `{"host", "placeholder_env", "secret" or
    /// "secret_env", "header"?, "format"?}`, or `@<path>` of a file holding it (docs/configuration.md, "Egress").
    #[arg(long, env = "SANDLOT_EGRESS_CREDENTIALS")]
    pub egress_credentials: Option<String>,
    /// A PEM file of authorities the proxy trusts, besides the system's, for the servers of hosts it injects
    /// credentials into (an internal API's own CA).
    #[arg(long, env = "SANDLOT_EGRESS_UPSTREAM_CA")]
    pub egress_upstream_ca: Option<std::path::PathBuf>,
}

/// How a server shares itself among callers, and what it remembers of their runs.
#[derive(Debug, Clone, Args)]
pub struct ServiceArgs {
    #[command(flatten)]
    pub egress: EgressArgs,
    /// Runs executing at once (default: 2 × the cores); more wait in a FIFO queue.
    #[arg(long, env = "SANDLOT_MAX_CONCURRENT_RUNS", value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub max_concurrent_runs: Option<u64>,
    /// Runs that may wait for their turn; beyond, a call gets a busy result with a retry hint at once.
    #[arg(long, env = "SANDLOT_MAX_QUEUED", default_value_t = 256)]
    pub max_queued: usize,
    /// Seconds a run may wait for its turn before it gets the busy result.
    #[arg(long, env = "SANDLOT_QUEUE_WAIT_SECS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    pub queue_wait_secs: u64,
    /// Keep the run history in this PostgreSQL database (`postgres://user:password@host:port/dbname`), shared by
    /// every server given it, instead of <root>/.sandlot/history.db (SQLite); its tables are made and migrated at
    /// start.
    #[arg(long, env = "SANDLOT_HISTORY_URL", hide_env_values = true)]
    pub history_url: Option<String>,
    /// Keep each run's code in the history (<root>/.sandlot/history.db); its size and SHA-256 are always kept.
    #[arg(long, env = "SANDLOT_STORE_CODE", default_value_t = false, action = clap::ArgAction::Set)]
    pub store_code: bool,
    /// Remove a conversation (its files and its runs in the history) once unused for this long, e.g. `30d`,
    /// `12h`; `off` (the default) keeps conversations until deleted (DELETE /v1/conversations/{id}).
    #[arg(long, env = "SANDLOT_CONVERSATION_TTL", default_value = "off", value_parser = parse_ttl)]
    pub conversation_ttl: Ttl,
    /// Days finished runs stay in the history; 0 keeps them forever.
    #[arg(long, env = "SANDLOT_HISTORY_DAYS", default_value_t = 90, value_parser = clap::value_parser!(u64).range(0..=36_500))]
    pub history_days: u64,
    /// Bytes of output a tool result shows a model (as JSON; its head and tail, the cut said); the whole output
    /// stays readable as `sandlot://runs/{runId}/output` and `GET /v1/runs/{runId}/output`.
    #[arg(long, env = "SANDLOT_RESULT_TEXT_BYTES", default_value_t = sandlot_core::DEFAULT_RESULT_TEXT_BYTES as u64, value_parser = clap::value_parser!(u64).range(1024..=16 * 1024 * 1024))]
    pub result_text_bytes: u64,
    /// MiB of run output the history keeps, all runs together (the newest; each run's up to
    /// SANDLOT_MAX_OUTPUT_BYTES per stream), for `sandlot://runs/{runId}/output`; 0 keeps none.
    #[arg(long, env = "SANDLOT_HISTORY_OUTPUT_MB", default_value_t = sandlot_core::DEFAULT_OUTPUT_BUDGET / (1024 * 1024), value_parser = clap::value_parser!(u64).range(0..=1024 * 1024))]
    pub history_output_mb: u64,
    /// Most finished runs the history keeps (the newest); 0: no limit.
    #[arg(long, env = "SANDLOT_HISTORY_MAX_RUNS", default_value_t = 1_000_000)]
    pub history_max_runs: u64,
    /// Which names tools/list shows: `underscore` (sandbox_run_code, accepted by every model API) or `dotted`
    /// (sandbox.run_code, the original spec's); the other form stays callable.
    #[arg(long, env = "SANDLOT_TOOL_NAMES", value_enum, default_value_t = ToolNamesArg::Underscore)]
    pub tool_names: ToolNamesArg,
    /// Bytes one `resources/read` of a file in /data returns at most; a larger file is refused with a signed URL
    /// that downloads it whole.
    #[arg(long, env = "SANDLOT_RESOURCE_READ_BYTES", default_value_t = sandlot_server::DEFAULT_RESOURCE_READ_BYTES, value_parser = clap::value_parser!(u64).range(1024..=64 * 1024 * 1024))]
    pub resource_read_bytes: u64,
    /// Replace secret shapes (AWS and GitHub keys, API keys, JWTs, private keys, `PASSWORD=...`; the 13 patterns of
    /// codegen-sandbox) with `[REDACTED:<name>]` in `sandbox_run_code` results and `sandlot://runs/{runId}/output`.
    #[arg(long, env = "SANDLOT_SCRUB_SECRETS", default_value_t = false, action = clap::ArgAction::Set)]
    pub scrub_secrets: bool,
    /// Conversations the root may hold, every tenant's; a new one beyond is refused.
    #[arg(long, env = "SANDLOT_MAX_CONVERSATIONS", default_value_t = sandlot_core::DEFAULT_MAX_CONVERSATIONS, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_conversations: u64,
    /// Conversations one tenant may own; a new one beyond is refused.
    #[arg(long, env = "SANDLOT_TENANT_MAX_CONVERSATIONS", default_value_t = sandlot_core::DEFAULT_TENANT_MAX_CONVERSATIONS, value_parser = clap::value_parser!(u64).range(1..))]
    pub tenant_max_conversations: u64,
    /// MiB of disk all conversations may hold before no new one is made (default: what they hold at start plus 90 %
    /// of the root filesystem's free space then).
    #[arg(long, env = "SANDLOT_CONVERSATIONS_MAX_MB", value_parser = clap::value_parser!(u64).range(1..))]
    pub conversations_max_mb: Option<u64>,
    /// MiB of disk one tenant's conversations may hold before it gets no new one (default: half of
    /// SANDLOT_CONVERSATIONS_MAX_MB's).
    #[arg(long, env = "SANDLOT_TENANT_CONVERSATIONS_MAX_MB", value_parser = clap::value_parser!(u64).range(1..))]
    pub tenant_conversations_max_mb: Option<u64>,
}

/// `--tool-names`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ToolNamesArg {
    Underscore,
    Dotted,
}

impl From<ToolNamesArg> for sandlot_server::ToolNames {
    fn from(names: ToolNamesArg) -> Self {
        match names {
            ToolNamesArg::Underscore => sandlot_server::ToolNames::Underscore,
            ToolNamesArg::Dotted => sandlot_server::ToolNames::Dotted,
        }
    }
}

/// A time to live; `None` is "off".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ttl(pub Option<Duration>);

/// The profiles `SANDLOT_PROFILES` enables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profiles(pub Vec<Profile>);

/// The profile `SANDLOT_ROOT_PROFILE` puts at the root; `None`: sandlot's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RootProfile(pub Option<Profile>);

fn profile_names() -> String {
    Profile::ALL.map(Profile::name).join(", ")
}

/// `all`, `none`, or names of profiles, comma-separated, each once.
fn parse_profiles(text: &str) -> Result<Profiles, String> {
    match text.trim() {
        "all" => return Ok(Profiles(Profile::ALL.to_vec())),
        "none" | "" => return Ok(Profiles(Vec::new())),
        _ => {}
    }
    let mut profiles = Vec::new();
    for name in text.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let profile = Profile::from_name(name)
            .ok_or_else(|| format!("unknown profile {name:?}; known: {}, or all, none", profile_names()))?;
        if !profiles.contains(&profile) {
            profiles.push(profile);
        }
    }
    Ok(Profiles(profiles))
}

/// `sandlot` or the name of a profile.
fn parse_root_profile(text: &str) -> Result<RootProfile, String> {
    match text.trim() {
        "sandlot" | "" => Ok(RootProfile(None)),
        name => Profile::from_name(name)
            .map(|p| RootProfile(Some(p)))
            .ok_or_else(|| format!("unknown profile {name:?}; known: sandlot, {}", profile_names())),
    }
}

fn parse_baponi_volumes(text: &str) -> Result<sandlot_server::surfaces::baponi::Volumes, String> {
    sandlot_server::surfaces::baponi::Volumes::parse(text)
}

/// `off` (or `0`), or a duration of at least a second and at most ten years: `90s`, `12h`, `30d`, `1w 2d`.
fn parse_ttl(text: &str) -> Result<Ttl, String> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("off") || text == "0" {
        return Ok(Ttl(None));
    }
    let ttl = humantime::parse_duration(text)
        .map_err(|e| format!("{e}: expected off or a duration such as 90s, 12h, 30d"))?;
    if !(Duration::from_secs(1)..=Duration::from_secs(10 * 365 * 24 * 3600)).contains(&ttl) {
        return Err("must be from 1s to 10 years, or off".into());
    }
    Ok(Ttl(Some(ttl)))
}

impl ServiceArgs {
    /// `config` with this queue.
    pub fn apply(&self, mut config: EngineConfig) -> EngineConfig {
        if let Some(runs) = self.max_concurrent_runs {
            config.max_concurrent_runs = usize::try_from(runs).unwrap_or(usize::MAX);
        }
        config.max_queued = self.max_queued;
        config.queue_wait_limit = Duration::from_secs(self.queue_wait_secs);
        config.result_text_bytes = usize::try_from(self.result_text_bytes).unwrap_or(usize::MAX);
        config
    }

    /// How many conversations, and bytes in them, the root and each tenant may have.
    pub fn conversation_bounds(&self) -> sandlot_core::ConversationBounds {
        sandlot_core::ConversationBounds {
            max_conversations: self.max_conversations,
            tenant_max_conversations: self.tenant_max_conversations,
            max_bytes: self.conversations_max_mb.map(|mb| mb.saturating_mul(1024 * 1024)),
            tenant_max_bytes: self.tenant_conversations_max_mb.map(|mb| mb.saturating_mul(1024 * 1024)),
        }
    }

    /// What the server keeps, and for how long.
    pub fn retention(&self) -> sandlot_core::Retention {
        sandlot_core::Retention {
            conversation_ttl: self.conversation_ttl.0,
            history_max_age: (self.history_days > 0).then(|| Duration::from_secs(self.history_days * 24 * 3600)),
            history_max_runs: (self.history_max_runs > 0).then_some(self.history_max_runs),
        }
    }
}

/// Which isolation technology runs the code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendKind {
    /// The Linux-namespace jail built into this binary.
    Native,
    /// One Docker container per run (runner images labelled `sandbox.runner=true`; `DOCKER_HOST` is honoured).
    Docker,
}

/// Options shared by every command that runs code.
#[derive(Debug, Clone, Args)]
pub struct SandboxArgs {
    /// The backend: native (the built-in jail) or docker.
    #[arg(long, env = "SANDLOT_BACKEND", value_enum, default_value_t = BackendKind::Native)]
    pub backend: BackendKind,
    /// Directory holding the conversations (`<root>/<id>/files` is `/data`) and the server's state
    /// (`<root>/.sandlot`) [default: /var/lib/sandlot as root, else $XDG_DATA_HOME/sandlot or
    /// ~/.local/share/sandlot].
    #[arg(long = "root", value_name = "ROOT", env = "SANDBOX_ROOT", value_parser = absolute_path)]
    pub root_option: Option<PathBuf>,
    /// The data root: `--root`, or the default [`parse`] puts here.
    #[arg(skip)]
    pub root: PathBuf,
    /// Default deadline of a run, in seconds.
    #[arg(long, env = "SANDLOT_TIMEOUT_SECS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=MAX_TIMEOUT_SECS))]
    pub timeout_secs: u64,
    /// Longest deadline a run may ask for, in seconds.
    #[arg(long, env = "SANDLOT_MAX_TIMEOUT_SECS", default_value_t = 3600, value_parser = clap::value_parser!(u64).range(1..=MAX_TIMEOUT_SECS))]
    pub max_timeout_secs: u64,
    /// Memory per run, in MiB (no swap).
    #[arg(long, env = "SANDLOT_MEMORY_MB", default_value_t = 256, value_parser = clap::value_parser!(u64).range(16..))]
    pub memory_mb: u64,
    /// A hard CPU cap per run, in cores [default: none: runs share the cores by equal weights, and a run alone
    /// has them all].
    #[arg(long, env = "SANDLOT_CPUS", value_parser = parse_cpus)]
    pub cpus: Option<f64>,
    /// Processes and threads per run.
    #[arg(long, env = "SANDLOT_PIDS", default_value_t = 64, value_parser = clap::value_parser!(u64).range(4..))]
    pub pids: u64,
    /// Bytes kept per output stream; the rest is dropped and the result marked truncated.
    #[arg(long, env = "SANDLOT_MAX_OUTPUT_BYTES", default_value_t = 1024 * 1024, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_output_bytes: u64,
    /// Size of each run's private /tmp, in MiB.
    #[arg(long, env = "SANDLOT_TMP_MB", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..))]
    pub tmp_mb: u64,
    /// Space a conversation's /data may hold, in MiB.
    #[arg(long, env = "SANDLOT_DISK_MB", default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..))]
    pub disk_mb: u64,
    /// Files, directories and symlinks a conversation's /data may hold.
    #[arg(long, env = "SANDLOT_DISK_INODES", default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub disk_inodes: u64,
    /// This node's name on a root several machines share (docs/scaling.md): a conversation's disk image is mounted
    /// by one node at a time, and another node's calls for it are refused as busy, naming it. Default: the host's
    /// name (a pod's on Kubernetes).
    #[arg(long, env = "SANDLOT_NODE_NAME")]
    pub node_name: Option<String>,
    /// Host uids (and gids) sandboxes run as when sandlot runs as root, FIRST-LAST: FIRST owns the conversation
    /// directories on disk, each run at the same time gets one of the others. Neither 0 nor a host account.
    #[arg(long, env = "SANDLOT_SANDBOX_UIDS", default_value = "900000-900999", value_parser = parse_uid_range)]
    pub sandbox_uids: sandlot_jail::UidRange,
    /// The first of 1000 sandbox uids (the former single uid; use --sandbox-uids).
    #[arg(long, env = "SANDLOT_SANDBOX_UID", conflicts_with = "sandbox_uids", value_parser = parse_first_uid)]
    pub sandbox_uid: Option<sandlot_jail::UidRange>,
    /// Remount the host's cgroup2 mount with `favordynmods`, which makes entering a run's cgroup ~6 ms faster. It
    /// changes the host (until its next boot), so it is off unless asked for; `sandlot doctor` reports it.
    #[arg(long, env = "SANDLOT_TUNE_CGROUPS", default_value_t = false, action = clap::ArgAction::Set)]
    pub tune_cgroups: bool,
    /// Servers running as root: keep a conversation's network namespace (loopback only) from one run to its next,
    /// instead of creating one per run (about a millisecond of CPU less per run). `false`: a new one every run.
    #[arg(long, env = "SANDLOT_KEEP_NETNS", default_value_t = true, action = clap::ArgAction::Set)]
    pub keep_netns: bool,
    /// Servers running as root: fork each Python run from an interpreter started once (a template), into the run's
    /// own fresh sandbox, instead of starting an interpreter per run. `false`: every run starts its own.
    #[arg(long, env = "SANDLOT_PYTHON_TEMPLATE", default_value_t = true, action = clap::ArgAction::Set)]
    pub python_template: bool,
    /// Modules a second Python template imports before any code arrives (comma-separated); a run whose code names
    /// one of them is forked from it. Modules the interpreter lacks are skipped. Empty: no second template.
    #[arg(
        long,
        env = "SANDLOT_PYTHON_PRELOAD",
        default_value = "numpy,pandas,matplotlib.pyplot",
        value_delimiter = ','
    )]
    pub python_preload: Vec<String>,
    /// Sandboxes a server (as root, with Python templates) keeps built ahead per Python template, each with a child
    /// of the template already in it, waiting for one stateless Python run (see docs/security.md). 0: none.
    #[arg(long, env = "SANDLOT_PREPARED_SANDBOXES", default_value_t = 2, value_parser = clap::value_parser!(u64).range(0..=64))]
    pub prepared_sandboxes: u64,
    /// Live sandboxes a server (as root, with Python templates) keeps built ahead for conversations' first `session`
    /// calls, each with its Python driver already forked and waiting (see docs/security.md). 0: none.
    #[arg(long, env = "SANDLOT_PREPARED_LIVE_SANDBOXES", default_value_t = 1, value_parser = clap::value_parser!(u64).range(0..=64))]
    pub prepared_live_sandboxes: u64,
    /// Sandboxes a server (as root) keeps built for conversations' next JavaScript and TypeScript runs, Node already
    /// started in each: built once such a run's sandbox is gone, kept 30 s (see docs/security.md). 0: none.
    #[arg(long, env = "SANDLOT_AHEAD_SANDBOXES", default_value_t = 4, value_parser = clap::value_parser!(u64).range(0..=64))]
    pub ahead_sandboxes: u64,
    /// A conversation's live sandbox (its `session: true` calls') ends after this many seconds without a call.
    #[arg(long, env = "SANDLOT_SANDBOX_IDLE_SECS", default_value_t = sandlot_core::DEFAULT_SANDBOX_IDLE.as_secs(), value_parser = clap::value_parser!(u64).range(1..=MAX_TIMEOUT_SECS))]
    pub sandbox_idle_secs: u64,
    /// A live sandbox ends this many seconds after it started (after the call then running).
    #[arg(long, env = "SANDLOT_SANDBOX_MAX_LIFETIME_SECS", default_value_t = sandlot_core::DEFAULT_SANDBOX_LIFETIME.as_secs(), value_parser = clap::value_parser!(u64).range(1..=MAX_TIMEOUT_SECS))]
    pub sandbox_max_lifetime_secs: u64,
    /// Live sandboxes at once (default: twice what the host's memory holds at --memory-mb each, 4 to 1024, and at
    /// most half the run uids); a new one ends the least recently used idle one of the tenant that holds the most.
    #[arg(long, env = "SANDLOT_MAX_LIVE_SANDBOXES", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_live_sandboxes: Option<u64>,
    /// Idle live sandboxes end, least recently used first, while the host has less memory available than this (MiB).
    #[arg(long, env = "SANDLOT_SANDBOX_MIN_FREE_MB", default_value_t = 512)]
    pub sandbox_min_free_mb: u64,
    /// Whether `sandbox_run_code` runs in the conversation's live sandbox when the call does not say `session`.
    #[arg(long, env = "SANDLOT_SESSION_DEFAULT", default_value_t = false, action = clap::ArgAction::Set)]
    pub session_default: bool,
    /// Where TypeScript becomes JavaScript: `strip` (in the server; node runs it as JavaScript, no tsx needed) or
    /// `runner` (the backend's TypeScript runner: tsx, deno or bun; the Docker backend's runner-typescript).
    #[arg(long, env = "SANDLOT_TYPESCRIPT_MODE", default_value = "strip", value_parser = parse_typescript_mode)]
    pub typescript_mode: sandlot_core::TypeScriptMode,
}

/// The longest deadline a server may be configured with: a year. Deadlines are added to clocks and to grace
/// periods, which must not overflow.
const MAX_TIMEOUT_SECS: u64 = 365 * 24 * 3600;

fn parse_uid_range(text: &str) -> Result<sandlot_jail::UidRange, String> {
    checked_uid_range(sandlot_jail::UidRange::parse(text)?)
}

fn parse_first_uid(text: &str) -> Result<sandlot_jail::UidRange, String> {
    let first = text.parse::<u32>().map_err(|e| e.to_string())?;
    checked_uid_range(sandlot_jail::UidRange::starting_at(first)?)
}

fn checked_uid_range(range: sandlot_jail::UidRange) -> Result<sandlot_jail::UidRange, String> {
    match range.host_account_inside() {
        Some(account) => Err(format!("{range} includes the host's {account}")),
        None => Ok(range),
    }
}

fn parse_typescript_mode(text: &str) -> Result<sandlot_core::TypeScriptMode, String> {
    text.parse().map_err(|e: sandlot_core::Error| e.to_string())
}

fn parse_cpus(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(cpus) if cpus.is_finite() && (0.01..=1024.0).contains(&cpus) => Ok(cpus),
        _ => Err(format!("{text:?} is not a number of cores between 0.01 and 1024")),
    }
}

impl SandboxArgs {
    /// The sandbox uids: `--sandbox-uids`, or the 1000 from the former `--sandbox-uid`.
    pub fn sandbox_uid_range(&self) -> sandlot_jail::UidRange {
        self.sandbox_uid.unwrap_or(self.sandbox_uids)
    }

    /// The limits of a run these options describe.
    pub fn limits(&self) -> Limits {
        Limits {
            timeout: Duration::from_secs(self.timeout_secs),
            memory_mb: self.memory_mb,
            cpus: self.cpus,
            pids: self.pids,
            max_output_bytes: self.max_output_bytes as usize,
            tmp_mb: self.tmp_mb,
            disk_mb: self.disk_mb,
            disk_inodes: self.disk_inodes,
            ..Limits::default()
        }
    }

    /// The engine configuration of `sandlot run`: its one run's limits, without the probes of the host that only
    /// a server's places and live sandboxes need (see `EngineConfig::for_one_run`).
    pub fn one_run_engine_config(&self) -> EngineConfig {
        EngineConfig {
            limits: self.limits(),
            max_timeout: Duration::from_secs(self.max_timeout_secs),
            ..EngineConfig::for_one_run()
        }
    }

    /// The engine configuration these options describe.
    pub fn engine_config(&self) -> EngineConfig {
        EngineConfig {
            limits: self.limits(),
            max_timeout: Duration::from_secs(self.max_timeout_secs),
            sessions: sandlot_core::SessionConfig {
                idle: Duration::from_secs(self.sandbox_idle_secs),
                max_lifetime: Duration::from_secs(self.sandbox_max_lifetime_secs),
                // Each live sandbox holds a run uid for its whole life: by default at most half of them, so runs
                // always find one.
                max_live: self.max_live_sandboxes.map_or_else(
                    || {
                        let half_the_uids = (self.sandbox_uid_range().run_uids().count() / 2).max(1);
                        sandlot_core::default_max_live(self.memory_mb).min(half_the_uids)
                    },
                    |max| usize::try_from(max).unwrap_or(usize::MAX),
                ),
                min_free_mb: self.sandbox_min_free_mb,
                session_default: self.session_default,
            },
            typescript: self.typescript_mode,
            // This binary: `main` answers as the transform's helper first thing.
            typescript_helper: std::env::current_exe().ok(),
            ..EngineConfig::default()
        }
    }
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// python, typescript, javascript (node) or bash (shell).
    #[arg(long, short)]
    pub language: String,
    /// Conversation whose /data the run sees.
    #[arg(long, short, default_value = "default")]
    pub conversation: String,
    /// Deadline of this run, in seconds (default: --timeout-secs).
    #[arg(long, short)]
    pub timeout: Option<f64>,
    /// Print the whole outcome and the file list as JSON instead of streaming the output.
    #[arg(long)]
    pub json: bool,
    /// File holding the code; `-` or nothing reads standard input.
    pub file: Option<PathBuf>,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

#[derive(Debug, Args)]
pub struct RunnersArgs {
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Where TypeScript becomes JavaScript (as `serve`'s option): with `strip`, TypeScript's runner is node's.
    #[arg(long, env = "SANDLOT_TYPESCRIPT_MODE", default_value = "strip", value_parser = parse_typescript_mode)]
    pub typescript_mode: sandlot_core::TypeScriptMode,
}

/// Parses the command line and fills in the default data root. A bad value stops the start with one line naming
/// the variable (or flag) it came from, and exit code 2; other mistakes get clap's usual message.
pub fn parse() -> Cli {
    let mut cli = parse_arguments();
    let sandbox = match &mut cli.command {
        Command::Run(args) => &mut args.sandbox,
        Command::Doctor(args) => args,
        Command::Serve(args) => &mut args.sandbox,
        Command::Stdio(args) => &mut args.sandbox,
        Command::Runners(_) | Command::McpConfig(_) => return cli,
    };
    let is_root = rustix::process::geteuid().is_root();
    let root = match sandbox.root_option.clone() {
        Some(root) => Ok(root),
        None => default_root(is_root, std::env::var_os("XDG_DATA_HOME"), std::env::var_os("HOME")),
    };
    match root {
        Ok(root) => sandbox.root = root,
        Err(message) => {
            crate::logs::fail(&message);
            std::process::exit(2)
        }
    }
    cli
}

/// The data root when none is given: `/var/lib/sandlot` for root (the Filesystem Hierarchy Standard's place for a
/// service's state), else `$XDG_DATA_HOME/sandlot`, or `$HOME/.local/share/sandlot` when that is unset (the XDG Base
/// Directory rules: a relative `XDG_DATA_HOME` is ignored). Never the current directory: a client that starts
/// `sandlot stdio` starts it in the user's project, where the history and the file-URL secret do not belong.
pub fn default_root(
    is_root: bool,
    xdg_data_home: Option<std::ffi::OsString>,
    home: Option<std::ffi::OsString>,
) -> Result<PathBuf, String> {
    if is_root {
        return Ok(PathBuf::from("/var/lib/sandlot"));
    }
    let absolute = |dir: Option<std::ffi::OsString>| dir.map(PathBuf::from).filter(|dir| dir.is_absolute());
    if let Some(data_home) = absolute(xdg_data_home) {
        return Ok(data_home.join("sandlot"));
    }
    match absolute(home) {
        Some(home) => Ok(home.join(".local/share/sandlot")),
        None => Err("no data root: HOME is not set (or not absolute); set SANDBOX_ROOT or --root".into()),
    }
}

fn parse_arguments() -> Cli {
    if let Some(cli) = parse_run_only() {
        return cli;
    }
    let error = match Cli::try_parse() {
        Ok(cli) => return cli,
        Err(error) => error,
    };
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if !matches!(error.kind(), ErrorKind::ValueValidation | ErrorKind::InvalidValue) {
        error.exit();
    }
    let flag = match error.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(flag)) => flag.split_whitespace().next().unwrap_or("").to_owned(),
        _ => error.exit(),
    };
    let value = match error.get(ContextKind::InvalidValue) {
        Some(ContextValue::String(value)) => value.clone(),
        _ => String::new(),
    };
    let env = env_of_flag(&Cli::command(), flag.trim_start_matches('-'))
        .filter(|env| std::env::var(env).is_ok_and(|v| v == value || v.split(',').any(|item| item == value)));
    let reason = std::error::Error::source(&error).map(|s| s.to_string()).unwrap_or_else(|| "invalid value".into());
    match env {
        Some(env) => crate::logs::fail(&format!("invalid {env}={value:?}: {reason}")),
        None => crate::logs::fail(&format!("invalid {flag} {value:?}: {reason}")),
    }
    std::process::exit(2)
}

/// `sandlot run ...` parsed with only `run`'s arguments built: building every subcommand's costs ~0.3 ms, on the
/// path of every `sandlot run`. `None` for another command, and for any error or request for help, which the full
/// parse then reports as usual.
fn parse_run_only() -> Option<Cli> {
    let mut args = std::env::args_os();
    if args.nth(1)? != "run" {
        return None;
    }
    let matches =
        RunArgs::augment_args(clap::Command::new("run").no_binary_name(true)).try_get_matches_from(args).ok()?;
    let run = <RunArgs as clap::FromArgMatches>::from_arg_matches(&matches).ok()?;
    Some(Cli { command: Command::Run(run) })
}

/// The environment variable of a long flag, searched in every subcommand.
fn env_of_flag(command: &clap::Command, long: &str) -> Option<String> {
    command
        .get_arguments()
        .find(|arg| arg.get_long() == Some(long))
        .and_then(|arg| arg.get_env().map(|env| env.to_string_lossy().into_owned()))
        .or_else(|| command.get_subcommands().find_map(|sub| env_of_flag(sub, long)))
}

/// `path` made absolute against the current directory: the jail's init, Docker and the server's template of the root
/// all resolve it from elsewhere.
fn absolute_path(path: &str) -> Result<PathBuf, String> {
    if path.is_empty() {
        return Err("must not be empty".into());
    }
    std::path::absolute(path).map_err(|e| format!("cannot resolve it against the current directory: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_root_is_the_system_one_for_root_and_the_users_data_directory_otherwise() {
        let some = |s: &str| Some(std::ffi::OsString::from(s));
        let root = |is_root, xdg: Option<std::ffi::OsString>, home| default_root(is_root, xdg, home);
        assert_eq!(root(true, some("/x"), some("/root")), Ok(PathBuf::from("/var/lib/sandlot")));
        assert_eq!(root(false, some("/data/me"), some("/home/me")), Ok(PathBuf::from("/data/me/sandlot")));
        assert_eq!(root(false, None, some("/home/me")), Ok(PathBuf::from("/home/me/.local/share/sandlot")));
        assert_eq!(root(false, some("relative"), some("/home/me")), Ok(PathBuf::from("/home/me/.local/share/sandlot")));
        assert_eq!(root(false, some(""), some("/home/me")), Ok(PathBuf::from("/home/me/.local/share/sandlot")));
        assert!(root(false, None, None).is_err());
        assert!(root(false, None, some("")).is_err());
    }

    #[test]
    fn profiles_are_all_none_or_names_and_the_root_one_sandlot_or_a_name() {
        assert_eq!(parse_profiles("all").unwrap(), Profiles(Profile::ALL.to_vec()));
        assert_eq!(parse_profiles("none").unwrap(), Profiles(Vec::new()));
        assert_eq!(parse_profiles(" baponi, baponi").unwrap(), Profiles(vec![Profile::Baponi]));
        let names = Profile::ALL.map(Profile::name).join(", ");
        assert_eq!(
            parse_profiles("e2b").unwrap_err(),
            format!("unknown profile \"e2b\"; known: {names}, or all, none")
        );
        assert_eq!(parse_root_profile("sandlot").unwrap(), RootProfile(None));
        assert_eq!(parse_root_profile("baponi").unwrap(), RootProfile(Some(Profile::Baponi)));
        assert_eq!(parse_root_profile("open-sandbox").unwrap(), RootProfile(Some(Profile::OpenSandbox)));
        assert_eq!(parse_root_profile("x").unwrap_err(), format!("unknown profile \"x\"; known: sandlot, {names}"));
    }

    #[test]
    fn a_ttl_is_off_or_a_duration_within_bounds() {
        let ttl = |text: &str| parse_ttl(text).map(|ttl| ttl.0);
        assert_eq!(ttl("off"), Ok(None));
        assert_eq!(ttl("0"), Ok(None));
        assert_eq!(ttl("90s"), Ok(Some(Duration::from_secs(90))));
        assert_eq!(ttl("30d"), Ok(Some(Duration::from_secs(30 * 24 * 3600))));
        assert_eq!(ttl("1w 2d"), Ok(Some(Duration::from_secs(9 * 24 * 3600))));
        assert!(ttl("500ms").is_err());
        assert!(ttl("20y").is_err());
        assert!(ttl("soon").is_err());
    }
}
