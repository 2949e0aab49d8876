//! `sandlot stdio --profile open-sandbox`: newline-delimited JSON-RPC on stdin and stdout, one answer line per
//! request line (none for a notification), in the workspace of the caller `stdio`; the seed's `shell.exec echo test`
//! and `code.exec` with Python and Node writing into the workspace, over the native jail (needs root, as
//! `scripts/test.sh` runs it); a profile without a stdio surface stops the start.

use crate::common;

use std::io::Write;
use std::process::{Command, Stdio};

use sandlot_server::surfaces::open_sandbox::{self, stdio::STDIO_CALLER};
use serde_json::{Value, json};

#[test]
fn stdio_serves_the_open_sandbox_profile() {
    let root = common::TempRoot::new();
    let workspace = open_sandbox::workspace_of(STDIO_CALLER).unwrap();
    let files = root.path().join(workspace.as_str()).join("files");
    std::fs::create_dir_all(&files).unwrap();
    std::fs::write(files.join("note.txt"), "from stdio").unwrap();

    let mut child = Command::new(env!("CARGO_BIN_EXE_sandlot"))
        .args(["stdio", "--profile", "open-sandbox"])
        .env("SANDBOX_ROOT", root.path())
        .env("SANDLOT_WARM_INITS", "0")
        .env("SANDLOT_SANDBOX_UID", (970_000 + std::process::id() % 20_000).to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let requests = [
        json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}),
        json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
        json!({"jsonrpc":"2.0","id":2,"method":"file.read","params":{"path":"note.txt"}}),
        json!({"jsonrpc":"2.0","id":3,"method":"nope"}),
        json!({"jsonrpc":"2.0","id":4,"method":"shell.exec","params":{"command":"echo","args":["test"]}}),
        json!({"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"code.exec","arguments":{
            "runtime":"python","args":["-c","open('py.txt','w').write('from python')"]}}}),
        json!({"jsonrpc":"2.0","id":6,"method":"code.exec","params":{
            "runtime":"node","args":["-e","require('fs').writeFileSync('node.txt','from node')"]}}),
        json!({"jsonrpc":"2.0","id":7,"method":"file.read","params":{"path":"py.txt"}}),
        json!({"jsonrpc":"2.0","id":8,"method":"file.read","params":{"path":"/workspace/node.txt"}}),
    ];
    let input: String = requests.iter().map(|r| format!("{r}\n")).collect();
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
    let lines: Vec<Value> =
        String::from_utf8(output.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 8, "{lines:?}");
    assert_eq!(
        lines[0],
        json!({"jsonrpc":"2.0","id":1,"result":{
            "protocolVersion":"2025-06-18",
            "capabilities":{"tools":{"listChanged":false}},
            "serverInfo":{"name":"open-sandbox","version":"dev"},
        }})
    );
    assert_eq!(lines[1], json!({"jsonrpc":"2.0","id":2,"result":{"content":"from stdio"}}));
    assert_eq!(lines[2]["error"]["code"], -32601);
    assert_eq!(lines[2]["error"]["data"]["kind"], "method_not_found");
    assert_eq!(lines[2]["error"]["data"]["trace_id"].as_str().unwrap().len(), 32);
    let ran = json!({"stdout":"", "stderr":"", "exit_code":0});
    assert_eq!(lines[3], json!({"jsonrpc":"2.0","id":4,"result":{"stdout":"test\n","stderr":"","exit_code":0}}));
    assert_eq!(
        lines[4],
        json!({"jsonrpc":"2.0","id":5,"result":{
            "content":[{"type":"text","text":ran.to_string()}],
            "structuredContent":ran, "result":ran,
        }})
    );
    assert_eq!(lines[5], json!({"jsonrpc":"2.0","id":6,"result":ran}));
    assert_eq!(lines[6], json!({"jsonrpc":"2.0","id":7,"result":{"content":"from python"}}));
    assert_eq!(lines[7], json!({"jsonrpc":"2.0","id":8,"result":{"content":"from node"}}));
}

#[test]
fn stdio_refuses_a_profile_without_a_stdio_surface() {
    let root = common::TempRoot::new();
    let output = Command::new(env!("CARGO_BIN_EXE_sandlot"))
        .args(["stdio", "--profile", "baponi"])
        .env("SANDBOX_ROOT", root.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("no stdio surface"), "{stderr}");
}
