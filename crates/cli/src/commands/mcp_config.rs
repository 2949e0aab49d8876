//! `sandlot mcp-config <client>`: a ready configuration for an MCP client that connects to a running
//! `sandlot serve` over Streamable HTTP, printed on stdout.
//!
//! The token is a placeholder (`<token>`) unless `--with-token` asks for `MCP_API_TOKEN`'s value: a configuration
//! is often pasted into a file that is committed or shared. VS Code's form asks for the token once instead
//! (an `inputs` entry) and keeps it in its secret storage, so it never holds the token.

use std::process::ExitCode;

use serde_json::json;

use crate::cli::{McpClient, McpConfigArgs};

/// What stands for the token when the configuration does not hold it.
pub const TOKEN_PLACEHOLDER: &str = "<token>";

pub fn mcp_config(args: McpConfigArgs) -> anyhow::Result<ExitCode> {
    let url = match &args.url {
        Some(url) => url.trim().to_owned(),
        None => default_url(args.addr),
    };
    if let Err(message) = check_url(&url) {
        crate::logs::fail(&format!("invalid --url {url:?}: {message}"));
        return Ok(ExitCode::from(2));
    }
    if !valid_name(&args.name) {
        crate::logs::fail(&format!("invalid --name {:?}: letters, digits, '_' and '-' only", args.name));
        return Ok(ExitCode::from(2));
    }
    let token = match (args.with_token, &args.api_token) {
        (false, _) => TOKEN_PLACEHOLDER.to_owned(),
        (true, Some(token)) if !token.is_empty() => token.clone(),
        (true, _) => {
            crate::logs::fail("--with-token needs MCP_API_TOKEN");
            return Ok(ExitCode::from(2));
        }
    };
    println!("{}", render(args.client, &args.name, &url, &token));
    Ok(ExitCode::SUCCESS)
}

/// `http://<addr>/mcp`; a wildcard address (`0.0.0.0`, `::`) becomes the loopback address of its family.
fn default_url(addr: std::net::SocketAddr) -> String {
    let ip = match addr.ip() {
        std::net::IpAddr::V4(ip) if ip.is_unspecified() => std::net::Ipv4Addr::LOCALHOST.into(),
        std::net::IpAddr::V6(ip) if ip.is_unspecified() => std::net::Ipv6Addr::LOCALHOST.into(),
        ip => ip,
    };
    format!("http://{}/mcp", std::net::SocketAddr::new(ip, addr.port()))
}

fn check_url(url: &str) -> Result<(), &'static str> {
    let rest = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://"));
    match rest {
        Some(rest) if !rest.is_empty() && !rest.starts_with('/') && !rest.contains(char::is_whitespace) => Ok(()),
        _ => Err("expected http(s)://host[:port]/mcp"),
    }
}

/// A name every client takes as a key and on its command line.
fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 64 && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Whether `mcp-remote` accepts the URL without `--allow-http`: HTTPS, or plain HTTP to this machine.
fn mcp_remote_allows(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("http://") else { return true };
    let host = rest.split(['/', '?']).next().unwrap_or("");
    let host = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.split(':').next().unwrap_or(""),
    };
    matches!(host, "localhost" | "127.0.0.1" | "::1")
}

/// The configuration for `client`.
pub fn render(client: McpClient, name: &str, url: &str, token: &str) -> String {
    let bearer = format!("Bearer {token}");
    let value = match client {
        McpClient::ClaudeCode => {
            let header = format!("Authorization: {bearer}");
            return format!("claude mcp add --transport http {} {} --header {}", name, quote(url), quote(&header));
        }
        McpClient::ClaudeDesktop => {
            // Claude Desktop starts local commands only: `mcp-remote` bridges to HTTP. The header goes through an
            // environment variable and has no space in `args`, which Claude Desktop on Windows would split.
            let mut bridge = vec![json!("-y"), json!("mcp-remote"), json!(url)];
            if !mcp_remote_allows(url) {
                bridge.push(json!("--allow-http"));
            }
            bridge.extend([json!("--header"), json!("Authorization:${SANDLOT_AUTH_HEADER}")]);
            json!({ "mcpServers": { name: {
                "command": "npx",
                "args": bridge,
                "env": { "SANDLOT_AUTH_HEADER": bearer },
            } } })
        }
        McpClient::Cursor => json!({ "mcpServers": { name: {
            "url": url,
            "headers": { "Authorization": bearer },
        } } }),
        McpClient::Vscode => {
            let input = format!("{name}-token");
            let authorization = if token == TOKEN_PLACEHOLDER { format!("Bearer ${{input:{input}}}") } else { bearer };
            let mut config = json!({ "servers": { name: {
                "type": "http",
                "url": url,
                "headers": { "Authorization": authorization },
            } } });
            if token == TOKEN_PLACEHOLDER {
                config["inputs"] = json!([{
                    "type": "promptString",
                    "id": input,
                    "description": "sandlot bearer token (MCP_API_TOKEN, or the one `sandlot serve` printed)",
                    "password": true,
                }]);
            }
            config
        }
    };
    serde_json::to_string_pretty(&value).unwrap_or_default()
}

/// `text` quoted for a POSIX shell when it needs it.
fn quote(text: &str) -> String {
    let plain = !text.is_empty() && text.chars().all(|c| c.is_ascii_alphanumeric() || "-_./:@%+=,".contains(c));
    if plain { text.to_owned() } else { format!("'{}'", text.replace('\'', r"'\''")) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_url_names_a_reachable_address() {
        let url = |addr: &str| default_url(addr.parse().unwrap());
        assert_eq!(url("127.0.0.1:8080"), "http://127.0.0.1:8080/mcp");
        assert_eq!(url("0.0.0.0:9000"), "http://127.0.0.1:9000/mcp");
        assert_eq!(url("[::]:9000"), "http://[::1]:9000/mcp");
        assert_eq!(url("10.1.2.3:80"), "http://10.1.2.3:80/mcp");
    }

    #[test]
    fn mcp_remote_needs_allow_http_for_plain_http_elsewhere() {
        assert!(mcp_remote_allows("https://sandlot.example.com/mcp"));
        assert!(mcp_remote_allows("http://127.0.0.1:8080/mcp"));
        assert!(mcp_remote_allows("http://localhost:8080/mcp"));
        assert!(mcp_remote_allows("http://[::1]:8080/mcp"));
        assert!(!mcp_remote_allows("http://10.0.0.5:8080/mcp"));
    }

    #[test]
    fn shell_quoting_keeps_every_character() {
        assert_eq!(quote("http://127.0.0.1:8080/mcp"), "http://127.0.0.1:8080/mcp");
        assert_eq!(quote("Authorization: Bearer <token>"), "'Authorization: Bearer <token>'");
        assert_eq!(quote("it's"), r"'it'\''s'");
    }
}
