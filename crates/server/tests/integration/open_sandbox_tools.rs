//! open-sandbox's tools (`crates/server/src/surfaces/open_sandbox/tools`, `docs/profiles.md#open-sandbox-tools`) called
//! directly over an app state: the catalogue, the file tools' write → read → search → replace → read, the attacks
//! of docs/security.md (every path argument of every tool outside the workspace: absolute, `..`, planted symlinks to
//! outside files and directories), the argument checks of `shell.exec`/`code.exec` made before any run, and the
//! browser tools' argument checks and their tool error over a backend without live sandboxes. Runs in the jail are in
//! crates/cli/tests/integration/open_sandbox_exec.rs; the browser in the jail, in tests/e2e/python_v1/test_browser.py.

use crate::common;

use sandlot_core::ConversationId;
use sandlot_server::AppState;
use sandlot_server::surfaces::open_sandbox::tools::{self, Scope, ToolError};
use serde_json::{Value, json};

struct Fixture {
    root: tempfile::TempDir,
    state: AppState,
    workspace: ConversationId,
}

fn fixture() -> Fixture {
    let (root, state) = common::state("secret", None);
    Fixture { root, state, workspace: ConversationId::parse("tenant-a").unwrap() }
}

impl Fixture {
    async fn call(&self, name: &str, arguments: Value) -> Result<Value, ToolError> {
        let tenant = sandlot_core::Tenant::new("caller-a");
        tools::call(&self.state, &tenant, &self.workspace, name, arguments, Default::default()).await.map(|c| c.result)
    }

    /// The workspace's directory on the host.
    fn dir(&self) -> std::path::PathBuf {
        self.state.engine.workspaces().files_dir(&self.workspace)
    }
}

fn outside() -> ToolError {
    ToolError::InvalidParams("path must be within workspace".into())
}

#[tokio::test]
async fn write_read_search_replace_read() {
    let f = fixture();
    let written =
        f.call("file.write", json!({"path": "notes/a.txt", "content": "alpha\nbeta one\ngamma\nbeta two\n"})).await;
    assert_eq!(written, Ok(json!({"path": "/workspace/notes/a.txt"})));
    assert_eq!(
        f.call("file.read", json!({"path": "/workspace/notes/a.txt"})).await,
        Ok(json!({"content": "alpha\nbeta one\ngamma\nbeta two\n"}))
    );
    assert_eq!(
        f.call("file.search", json!({"path": "notes/a.txt", "query": "beta"})).await,
        Ok(json!({"matches": ["beta one", "beta two"]}))
    );
    assert_eq!(
        f.call("file.replace", json!({"path": "notes/a.txt", "search": "beta", "replace": "BETA"})).await,
        Ok(json!({"count": 2}))
    );
    assert_eq!(
        f.call("file.read", json!({"path": "notes/./a.txt"})).await,
        Ok(json!({"content": "alpha\nBETA one\ngamma\nBETA two\n"}))
    );
    assert_eq!(
        f.call("file.replace", json!({"path": "notes/a.txt", "search": "absent", "replace": "x"})).await,
        Ok(json!({"count": 0}))
    );
    f.call("file.write", json!({"path": "/workspace/top.txt", "content": ""})).await.unwrap();
    assert_eq!(f.call("file.list", json!({})).await, Ok(json!({"entries": ["notes", "top.txt"]})));
    assert_eq!(f.call("file.list", json!({"path": "/workspace"})).await, Ok(json!({"entries": ["notes", "top.txt"]})));
    assert_eq!(f.call("file.list", json!({"path": "notes"})).await, Ok(json!({"entries": ["a.txt"]})));
    // Written as the host sees it, mode 0644.
    let host = f.dir().join("notes/a.txt");
    assert_eq!(std::fs::read_to_string(&host).unwrap(), "alpha\nBETA one\ngamma\nBETA two\n");
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&host).unwrap().permissions()) & 0o777,
        0o644
    );
}

#[tokio::test]
async fn failures_are_tool_errors_and_bad_arguments_invalid_params() {
    let f = fixture();
    f.call("file.write", json!({"path": "d/f.txt", "content": "x"})).await.unwrap();
    let tool_error = |result: Result<Value, ToolError>| matches!(result, Err(ToolError::Tool(_)));
    assert!(tool_error(f.call("file.read", json!({"path": "missing.txt"})).await));
    assert!(tool_error(f.call("file.read", json!({"path": "d"})).await));
    assert!(tool_error(f.call("file.read", json!({"path": "/workspace"})).await));
    assert!(tool_error(f.call("file.list", json!({"path": "missing"})).await));
    assert!(tool_error(f.call("file.list", json!({"path": "d/f.txt"})).await));
    assert!(tool_error(f.call("file.search", json!({"path": "missing.txt", "query": "x"})).await));
    assert!(tool_error(f.call("file.replace", json!({"path": "missing.txt", "search": "x", "replace": "y"})).await));
    let invalid = |result: Result<Value, ToolError>| matches!(result, Err(ToolError::InvalidParams(_)));
    assert!(invalid(f.call("file.read", json!({})).await));
    assert!(invalid(f.call("file.read", json!({"path": 3})).await));
    assert!(invalid(f.call("file.write", json!({"path": "a.txt"})).await));
    assert!(invalid(f.call("file.search", json!({"path": "d/f.txt", "query": ""})).await));
    assert!(invalid(f.call("file.replace", json!({"path": "d/f.txt", "search": "", "replace": "y"})).await));
    assert!(invalid(f.call("shell.exec", json!({"args": ["x"]})).await));
    assert!(invalid(f.call("shell.exec", json!({"command": "echo", "args": "not a list"})).await));
    assert!(invalid(f.call("shell.exec", json!({"command": "echo", "args": ["a", 3]})).await));
    // As the product (Go's decoder), unknown fields are ignored.
    assert_eq!(f.call("file.read", json!({"path": "d/f.txt", "encoding": "utf-8"})).await, Ok(json!({"content": "x"})));
    assert_eq!(f.call("file.nope", json!({})).await, Err(ToolError::UnknownTool("file.nope".into())));
    assert_eq!(f.call("nope", json!({})).await, Err(ToolError::UnknownTool("nope".into())));
    // Checked before anything runs (this engine has no runner).
    assert!(matches!(
        f.call("code.exec", json!({"runtime": "ruby", "args": ["-e", "1"]})).await,
        Err(ToolError::Tool(message)) if message.contains("ruby")
    ));
    assert!(tool_error(f.call("shell.exec", json!({"command": "ls", "working_dir": "missing"})).await));
    assert!(tool_error(f.call("shell.exec", json!({"command": "ls", "working_dir": "d/f.txt"})).await));
}

/// Every path argument of every tool, with `path` in it.
fn path_calls(path: &str) -> Vec<(&'static str, Value)> {
    vec![
        ("file.read", json!({"path": path})),
        ("file.write", json!({"path": path, "content": "pwned"})),
        ("file.list", json!({"path": path})),
        ("file.search", json!({"path": path, "query": "root"})),
        ("file.replace", json!({"path": path, "search": "root", "replace": "pwned"})),
        ("shell.exec", json!({"command": "ls", "working_dir": path})),
        ("code.exec", json!({"runtime": "python", "args": ["-c", "1"], "working_dir": path})),
    ]
}

#[tokio::test]
async fn paths_outside_the_workspace_are_refused() {
    let f = fixture();
    f.call("file.write", json!({"path": "keep.txt", "content": "k"})).await.unwrap();
    for path in [
        "/etc/passwd",
        "/etc",
        "..",
        "../tenant-b/files/x",
        "a/../../x",
        "/workspace/../etc/passwd",
        "/workspacex/a",
        "/",
    ] {
        for (name, arguments) in path_calls(path) {
            assert_eq!(f.call(name, arguments).await, Err(outside()), "{name} {path}");
        }
    }
}

#[tokio::test]
async fn planted_symlinks_are_refused() {
    let f = fixture();
    f.call("file.write", json!({"path": "inside/keep.txt", "content": "k"})).await.unwrap();
    let secret_dir = tempfile::tempdir().unwrap();
    let secret = secret_dir.path().join("secret.txt");
    std::fs::write(&secret, "root:secret\n").unwrap();
    let dir = f.dir();
    std::os::unix::fs::symlink(&secret, dir.join("file-link")).unwrap();
    std::os::unix::fs::symlink(secret_dir.path(), dir.join("dir-link")).unwrap();
    std::os::unix::fs::symlink(secret_dir.path(), dir.join("inside/nested-link")).unwrap();
    // A link to a file inside is refused too: nothing is resolved.
    std::os::unix::fs::symlink(dir.join("inside/keep.txt"), dir.join("inner-link")).unwrap();
    for path in [
        "file-link",
        "/workspace/file-link",
        "dir-link",
        "dir-link/secret.txt",
        "/workspace/dir-link/secret.txt",
        "inside/nested-link/secret.txt",
        "inside/nested-link",
        "inner-link",
    ] {
        for (name, arguments) in path_calls(path) {
            match f.call(name, arguments).await {
                Err(ToolError::InvalidParams(message)) => {
                    assert!(message.starts_with("path must be within workspace"), "{name} {path}: {message}")
                }
                other => panic!("{name} {path}: {other:?}"),
            }
        }
    }
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "root:secret\n");
    assert_eq!(std::fs::read_dir(secret_dir.path()).unwrap().count(), 1);
    assert!(std::fs::symlink_metadata(dir.join("file-link")).unwrap().file_type().is_symlink());
    assert_eq!(std::fs::read_to_string(dir.join("inside/keep.txt")).unwrap(), "k");
    // Links are not listed.
    assert_eq!(f.call("file.list", json!({})).await, Ok(json!({"entries": ["inside"]})));
    assert_eq!(f.call("file.list", json!({"path": "inside"})).await, Ok(json!({"entries": ["keep.txt"]})));
    let _ = &f.root;
}

#[tokio::test]
async fn browser_tools_check_their_arguments_then_need_a_live_sandbox() {
    let f = fixture();
    let catalogue = tools::catalogue();
    let browser: Vec<_> = catalogue.iter().filter(|tool| tool.name.starts_with("browser")).collect();
    assert_eq!(browser.len(), 15);
    let arguments = json!({"url": "http://example.com", "path": "shot.png", "x": 1, "y": 2, "selector": "#a",
        "value": "v", "expression": "1", "index": 0, "keys": "Enter"});
    for tool in &browser {
        let error = f.call(tool.name, arguments.clone()).await;
        match (tool.name, error) {
            ("browser_get_download_list", Err(ToolError::Tool(message))) => {
                assert_eq!(message, "downloads are not kept by sandlot's browser yet");
                assert!(tool.reason.is_some());
            }
            // This engine's backend keeps no live sandbox, so there is no browser to drive.
            (_, Err(ToolError::Tool(message))) => {
                assert!(message.contains("cannot keep a sandbox, so it has no browser"), "{}: {message}", tool.name);
                assert!(tool.reason.is_none(), "{}", tool.name);
            }
            (name, other) => panic!("{name}: {other:?}"),
        }
    }
    let navigate = catalogue.iter().find(|tool| tool.name == "browser.navigate").unwrap();
    assert_eq!(navigate.scope, Scope::Network);
    assert_eq!(navigate.input_schema["required"], json!(["url"]));
    assert!(matches!(f.call("browser.navigate", json!({})).await, Err(ToolError::InvalidParams(_))));
    assert_eq!(f.call("browser.screenshot", json!({"path": "/etc/x.png"})).await, Err(outside()));
    assert_eq!(f.call("browser_screenshot", json!({"path": "../x.png"})).await, Err(outside()));
    assert!(!f.dir().join("shot.png").exists());
}

#[test]
fn the_catalogue_has_the_products_names_scopes_and_schemas() {
    let catalogue = tools::catalogue();
    let names: Vec<&str> = catalogue.iter().map(|tool| tool.name).collect();
    assert_eq!(
        names,
        [
            "browser.navigate",
            "browser.screenshot",
            "browser_click",
            "browser_close_tab",
            "browser_evaluate",
            "browser_form_input_fill",
            "browser_get_download_list",
            "browser_navigate",
            "browser_new_tab",
            "browser_press_key",
            "browser_screenshot",
            "browser_scroll",
            "browser_select",
            "browser_switch_tab",
            "browser_tab_list",
            "code.exec",
            "file.list",
            "file.read",
            "file.replace",
            "file.search",
            "file.write",
            "shell.exec",
        ]
    );
    let tool = |name: &str| catalogue.iter().find(|tool| tool.name == name).unwrap();
    assert_eq!(tool("shell.exec").scope, Scope::Exec);
    assert_eq!(tool("file.read").scope, Scope::Workspace);
    assert_eq!(tool("file.read").reason, None);
    assert_eq!(tool("shell.exec").input_schema["required"], json!(["command"]));
    assert_eq!(tool("code.exec").input_schema["required"], json!(["runtime"]));
    assert_eq!(tool("file.write").input_schema["required"], json!(["path", "content"]));
    assert_eq!(tool("file.replace").input_schema["required"], json!(["path", "search", "replace"]));
    assert_eq!(tool("file.list").input_schema.get("required"), None);
    let exec_output = &tool("code.exec").output_schema;
    assert_eq!(exec_output["required"], json!(["stdout", "stderr", "exit_code"]));
    assert_eq!(exec_output["properties"]["exit_code"]["type"], "integer");
    assert_eq!(tool("file.list").output_schema["properties"]["entries"]["type"], "array");
}
