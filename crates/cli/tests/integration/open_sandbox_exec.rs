//! open-sandbox's `shell.exec` and `code.exec` (`crates/server/src/surfaces/open_sandbox/tools/exec.rs`) over
//! the native jail, the sandlot binary as its init: `echo test`, argv passed literally (no shell), a non-zero exit as
//! a result, the working directory, and Python and Node writing a file into the workspace that `file.read` reads.
//! Needs root (the jail), as `scripts/test.sh` runs it.

use crate::common;

use std::sync::Arc;

use sandlot_core::{ConversationId, Signer};
use sandlot_server::surfaces::open_sandbox::tools::{self, ToolError};
use sandlot_server::{AppState, FileUrls};
use serde_json::{Value, json};

struct Fixture {
    _root: common::TempRoot,
    state: AppState,
    workspace: ConversationId,
}

fn fixture() -> Fixture {
    let root = common::TempRoot::new();
    let engine = common::jail_engine(root.path(), 1_400_000);
    let files = FileUrls { signer: Signer::new("secret"), public_base_url: "http://test".into(), ttl: None };
    let state = AppState {
        engine: Arc::new(engine),
        files,
        shutdown: Default::default(),
        tool_names: Default::default(),
        resource_read_bytes: sandlot_server::DEFAULT_RESOURCE_READ_BYTES,
        scrub_secrets: false,
    };
    Fixture { _root: root, state, workspace: ConversationId::parse("tenant-exec").unwrap() }
}

impl Fixture {
    async fn call(&self, name: &str, arguments: Value) -> Result<Value, ToolError> {
        let tenant = sandlot_core::Tenant::new("caller-exec");
        tools::call(&self.state, &tenant, &self.workspace, name, arguments, Default::default()).await.map(|c| c.result)
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn shell_exec_echo_test() {
    let f = fixture();
    let result = f.call("shell.exec", json!({"command": "echo", "args": ["test"]})).await;
    assert_eq!(result, Ok(json!({"stdout": "test\n", "stderr": "", "exit_code": 0})));
}

#[tokio::test(flavor = "multi_thread")]
async fn arguments_are_passed_literally_not_to_a_shell() {
    let f = fixture();
    f.call("file.write", json!({"path": "x", "content": "still here"})).await.unwrap();
    let args = ["; rm -rf x", "$(rm x)", "`rm x`", "it's \"quoted\"", "*", "a\nb", "", "--", "-n"];
    let result = f.call("shell.exec", json!({"command": "printf", "args": ["[%s]", args[0], args[1], args[2], args[3], args[4], args[5], args[6], args[7], args[8]]})).await;
    let expected = "[; rm -rf x][$(rm x)][`rm x`][it's \"quoted\"][*][a\nb][][--][-n]";
    assert_eq!(result, Ok(json!({"stdout": expected, "stderr": "", "exit_code": 0})));
    assert_eq!(f.call("file.read", json!({"path": "x"})).await, Ok(json!({"content": "still here"})));
    // The command itself is one word too: no shell parses it.
    let result = f.call("shell.exec", json!({"command": "echo test; rm x"})).await.unwrap();
    assert_eq!(result["exit_code"], 127, "{result}");
    assert_eq!(f.call("file.read", json!({"path": "x"})).await, Ok(json!({"content": "still here"})));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_non_zero_exit_is_a_result_and_the_working_directory_is_used() {
    let f = fixture();
    let result = f.call("shell.exec", json!({"command": "sh", "args": ["-c", "echo out; echo err >&2; exit 3"]})).await;
    assert_eq!(result, Ok(json!({"stdout": "out\n", "stderr": "err\n", "exit_code": 3})));
    f.call("file.write", json!({"path": "sub/dir/in.txt", "content": "inside"})).await.unwrap();
    for working_dir in ["sub/dir", "/workspace/sub/dir", "sub/../sub/dir/"] {
        let result =
            f.call("shell.exec", json!({"command": "cat", "args": ["in.txt"], "working_dir": working_dir})).await;
        assert_eq!(result, Ok(json!({"stdout": "inside", "stderr": "", "exit_code": 0})), "{working_dir}");
    }
    let result = f.call("shell.exec", json!({"command": "pwd"})).await;
    assert_eq!(result, Ok(json!({"stdout": "/workspace\n", "stderr": "", "exit_code": 0})));
}

#[tokio::test(flavor = "multi_thread")]
async fn code_exec_with_python_and_node_writes_into_the_workspace() {
    let f = fixture();
    f.call("file.write", json!({"path": "in/data.txt", "content": "3\n4\n"})).await.unwrap();
    let python = "import os\nos.makedirs('out', exist_ok=True)\n\
                  total = sum(int(l) for l in open('in/data.txt'))\n\
                  open('out/py.txt', 'w').write(f'python {total}')\nprint('done')";
    let result = f.call("code.exec", json!({"runtime": "python", "args": ["-c", python]})).await;
    assert_eq!(result, Ok(json!({"stdout": "done\n", "stderr": "", "exit_code": 0})));
    assert_eq!(f.call("file.read", json!({"path": "/workspace/out/py.txt"})).await, Ok(json!({"content": "python 7"})));
    let node = "const fs = require('fs'); fs.writeFileSync('node.txt', 'node ' + process.argv[1]);";
    let result =
        f.call("code.exec", json!({"runtime": "node", "args": ["-e", node, "$(arg)"], "working_dir": "out"})).await;
    assert_eq!(result, Ok(json!({"stdout": "", "stderr": "", "exit_code": 0})));
    assert_eq!(f.call("file.read", json!({"path": "out/node.txt"})).await, Ok(json!({"content": "node $(arg)"})));
    let result = f.call("code.exec", json!({"runtime": "python", "args": ["-c", "import sys; sys.exit(5)"]})).await;
    assert_eq!(result, Ok(json!({"stdout": "", "stderr": "", "exit_code": 5})));
}
