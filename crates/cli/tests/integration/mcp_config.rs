//! `sandlot mcp-config <client>`: each printed configuration has the shape its client reads (checked as parsed
//! JSON, or as the words of Claude Code's command line), with the server's URL and a token placeholder unless the
//! token is asked for. Needs no root and starts no sandbox.

use std::process::Command;

use serde_json::json;

/// `sandlot mcp-config args...` with `env` and no MCP_HTTP_ADDR or MCP_API_TOKEN of the caller's: (exit code,
/// stdout, stderr).
fn mcp_config(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sandlot"))
        .arg("mcp-config")
        .args(args)
        .env_remove("MCP_HTTP_ADDR")
        .env_remove("MCP_API_TOKEN")
        .envs(env.iter().copied())
        .output()
        .expect("run sandlot mcp-config");
    (out.status.code(), String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
}

fn json_of(args: &[&str], env: &[(&str, &str)]) -> serde_json::Value {
    let (code, stdout, stderr) = mcp_config(args, env);
    assert_eq!((code, stderr.as_str()), (Some(0), ""), "{args:?}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {stdout}"))
}

#[test]
fn cursor_gets_its_url_and_headers_form() {
    assert_eq!(
        json_of(&["cursor"], &[]),
        json!({ "mcpServers": { "sandlot": {
            "url": "http://127.0.0.1:8080/mcp",
            "headers": { "Authorization": "Bearer <token>" },
        } } })
    );
}

#[test]
fn vscode_gets_an_http_server_and_asks_for_the_token() {
    assert_eq!(
        json_of(&["vscode", "--url", "https://sandlot.example.com/mcp"], &[]),
        json!({
            "servers": { "sandlot": {
                "type": "http",
                "url": "https://sandlot.example.com/mcp",
                "headers": { "Authorization": "Bearer ${input:sandlot-token}" },
            } },
            "inputs": [{
                "type": "promptString",
                "id": "sandlot-token",
                "description": "sandlot bearer token (MCP_API_TOKEN, or the one `sandlot serve` printed)",
                "password": true,
            }],
        })
    );
}

#[test]
fn claude_desktop_bridges_with_mcp_remote_and_allows_plain_http_only_where_needed() {
    let bridge = |url: &str, allow_http: bool| {
        let mut args = vec![json!("-y"), json!("mcp-remote"), json!(url)];
        if allow_http {
            args.push(json!("--allow-http"));
        }
        args.extend([json!("--header"), json!("Authorization:${SANDLOT_AUTH_HEADER}")]);
        json!({ "mcpServers": { "sandlot": {
            "command": "npx",
            "args": args,
            "env": { "SANDLOT_AUTH_HEADER": "Bearer <token>" },
        } } })
    };
    assert_eq!(json_of(&["claude-desktop"], &[]), bridge("http://127.0.0.1:8080/mcp", false));
    assert_eq!(
        json_of(&["claude-desktop"], &[("MCP_HTTP_ADDR", "10.0.0.5:9000")]),
        bridge("http://10.0.0.5:9000/mcp", true)
    );
    assert_eq!(
        json_of(&["claude-desktop", "--url", "https://sandlot.example.com/mcp"], &[]),
        bridge("https://sandlot.example.com/mcp", false)
    );
}

#[test]
fn claude_code_gets_the_command_that_adds_the_server() {
    let (code, stdout, stderr) = mcp_config(&["claude-code"], &[("MCP_HTTP_ADDR", "0.0.0.0:8080")]);
    assert_eq!((code, stderr.as_str()), (Some(0), ""));
    assert_eq!(
        stdout,
        "claude mcp add --transport http sandlot http://127.0.0.1:8080/mcp --header 'Authorization: Bearer <token>'\n"
    );
}

/// The token goes into the configuration only when asked for, from MCP_API_TOKEN; the default is a placeholder,
/// even when MCP_API_TOKEN is set (a configuration is often committed or shared).
#[test]
fn the_token_is_a_placeholder_unless_asked_for() {
    let token = [("MCP_API_TOKEN", "s3cret")];
    let (_, stdout, _) = mcp_config(&["cursor"], &token);
    assert!(!stdout.contains("s3cret"), "{stdout}");
    assert_eq!(
        json_of(&["cursor", "--with-token", "--name", "box"], &token),
        json!({ "mcpServers": { "box": {
            "url": "http://127.0.0.1:8080/mcp",
            "headers": { "Authorization": "Bearer s3cret" },
        } } })
    );
    assert_eq!(
        json_of(&["vscode", "--with-token"], &token),
        json!({ "servers": { "sandlot": {
            "type": "http",
            "url": "http://127.0.0.1:8080/mcp",
            "headers": { "Authorization": "Bearer s3cret" },
        } } })
    );
    assert_eq!(mcp_config(&["cursor", "--with-token"], &[]).0, Some(2));
}

#[test]
fn bad_arguments_exit_2() {
    for args in [
        &["cursor", "--url", "ftp://x/mcp"][..],
        &["cursor", "--url", "http:///mcp"],
        &["cursor", "--name", "a b"],
        &["emacs"],
    ] {
        let (code, stdout, _) = mcp_config(args, &[]);
        assert_eq!((code, stdout.as_str()), (Some(2), ""), "{args:?}");
    }
}
