//! codegen-sandbox's `Bash`, `BashOutput` and `KillShell` (`crates/server/src/surfaces/codegen`) over the
//! native jail, the sandlot binary as its init: the product's texts, the timeout ending the command,
//! background shells read twice and killed, the registry's bound, secrets printed by code scrubbed.
//! Needs root (the jail), as `scripts/test.sh` runs it.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use sandlot_core::ConversationId;
use sandlot_core::Engine;
use sandlot_server::surfaces::codegen::bash::Runner;
use sandlot_server::surfaces::codegen::command;
use sandlot_server::surfaces::codegen::shells::{MAX_SHELLS_PER_TENANT, Shells};
use serde_json::{Value, json};

struct Fixture {
    _root: common::TempRoot,
    engine: Arc<Engine>,
    shells: Shells,
}

fn fixture() -> Fixture {
    let root = common::TempRoot::new();
    let engine = Arc::new(common::jail_engine(root.path(), 1_600_000));
    let shells = Shells::new(engine.clone(), Default::default());
    Fixture { _root: root, engine, shells }
}

/// A caller working in a workspace (the conversation of the same name).
fn tenant(name: &str) -> Runner {
    Runner {
        tenant: sandlot_core::Tenant::new(format!("caller-{name}")),
        workspace: ConversationId::parse(name).unwrap(),
    }
}

impl Fixture {
    /// `Bash` with `arguments` (plus a description): the text and whether it is an error.
    /// (`Bash`'s text is scrubbed by the profile's handler, as every tool's reply.)
    async fn bash(&self, tenant: &Runner, mut arguments: Value) -> (String, bool) {
        arguments["description"] = json!("a test command");
        let arguments = arguments.as_object().unwrap();
        match command::call(&self.engine, &self.shells, tenant, arguments, Default::default()).await {
            Ok(text) => (sandlot_core::scrub_secrets(&text).into_owned(), false),
            Err(text) => (sandlot_core::scrub_secrets(&text).into_owned(), true),
        }
    }
}

/// Pids of host processes whose command line is exactly `command` (with spaces for NULs).
fn processes(command: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|entry| {
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            String::from_utf8_lossy(&cmdline).replace('\0', " ").trim_end() == command
        })
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect()
}

async fn eventually(mut done: impl FnMut() -> bool) -> bool {
    for _ in 0..300 {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    done()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_output_is_combined_with_an_exit_trailer_in_the_workspace() {
    let f = fixture();
    let ws = tenant("ws");
    let command = "pwd; echo out; sleep 0.2; echo err >&2; sleep 0.2; echo out2; exit 3";
    assert_eq!(f.bash(&ws, json!({"command": command})).await, ("/workspace\nout\nerr\nout2\nexit: 3\n".into(), false));
    assert_eq!(f.bash(&ws, json!({"command": "echo kept > k.txt"})).await, (String::new(), false));
    assert_eq!(f.bash(&ws, json!({"command": "cat /workspace/k.txt"})).await, ("kept\n".into(), false));
    let (text, error) = f.bash(&ws, json!({"command": "true && sudo id"})).await;
    assert_eq!((text.as_str(), error), ("command rejected: command uses denylisted token \"sudo\"", true));
}

#[tokio::test(flavor = "multi_thread")]
async fn output_past_100_kib_is_cut_with_the_elided_count() {
    let f = fixture();
    let (text, error) = f.bash(&tenant("big"), json!({"command": "head -c 150000 /dev/zero | tr '\\0' a"})).await;
    let expected = format!("{}\n... (output truncated, {} bytes elided)\n", "a".repeat(102_400), 150_000 - 102_400);
    assert!(!error);
    assert!(text == expected, "{} bytes, ending {:?}", text.len(), &text[text.len().saturating_sub(60)..]);
}

/// A timed-out command ends with the product's texts and the workspace's next command runs. In the workspace's
/// persistent shell (a backend with live sandboxes) the timeout interrupts the command, and what it put in the
/// background with `&` stays, as in Claude Code's shell, until the live sandbox ends; in a fresh sandbox per command
/// the whole process tree dies with it.
#[tokio::test(flavor = "multi_thread")]
async fn a_timeout_exits_124_and_ends_the_command() {
    let f = fixture();
    let ws = tenant("slow");
    let command = "sleep 987651 & echo started; sleep 987650";
    let (text, error) = f.bash(&ws, json!({"command": command, "timeout": 1})).await;
    assert_eq!((text.as_str(), error), ("started\nbash: timed out after 1s\nexit: 124\n", false));
    assert!(eventually(|| processes("sleep 987650").is_empty()).await, "{:?}", processes("sleep 987650"));
    if f.engine.supports_sessions() {
        assert_eq!(processes("sleep 987651").len(), 1, "the background child stays in the live sandbox");
        assert!(f.engine.sessions().close(&ws.workspace, "the test ends").await);
    }
    assert!(eventually(|| processes("sleep 987651").is_empty()).await, "{:?}", processes("sleep 987651"));
    assert_eq!(f.bash(&ws, json!({"command": "echo after"})).await, ("after\n".into(), false));
}

#[tokio::test(flavor = "multi_thread")]
async fn secrets_printed_by_code_are_scrubbed() {
    let f = fixture();
    // The command has no secret in it: the program builds them.
    let command = "printf 'aws AKIA%s\\n' IOSFODNN7EXAMPLE; printf 'gh ghp_%s\\n' $(printf 'a%.0s' $(seq 36))";
    let (text, error) = f.bash(&tenant("secrets"), json!({"command": command})).await;
    assert_eq!((text.as_str(), error), ("aws [REDACTED:aws-access-key]\ngh [REDACTED:github-pat]\n", false));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_background_shell_is_read_twice_then_killed_with_its_processes() {
    let f = fixture();
    let ws = tenant("bg");
    let command = "echo first; echo warn >&2; sleep 987649";
    let (text, error) = f.bash(&ws, json!({"command": command, "run_in_background": true})).await;
    let id = text.strip_prefix("shell_id: ").and_then(|rest| rest.split_once('\n')).map(|(id, _)| id.to_owned());
    let id = id.unwrap_or_else(|| panic!("{text}"));
    assert_eq!((text, error), (format!("shell_id: {id}\nstarted in background: {command}\n"), false));
    assert!(eventually(|| !processes("sleep 987649").is_empty()).await, "the background command never ran");
    let printed =
        || f.shells.output(&ws.tenant, &id).is_ok_and(|o| o.ends_with("\nfirst\n--- stderr (5 bytes) ---\nwarn\n"));
    assert!(eventually(printed).await, "{:?}", f.shells.output(&ws.tenant, &id));
    for _ in 0..2 {
        let output = f.shells.output(&ws.tenant, &id).unwrap();
        let (head, rest) = output.split_once("started: ").unwrap();
        assert_eq!(head, format!("command: {command}\nstatus: running\n"));
        let (started, rest) = rest.split_once("\n\n").unwrap();
        assert!(humantime::parse_rfc3339(started).is_ok(), "{started}");
        assert_eq!(rest, "--- stdout (6 bytes) ---\nfirst\n--- stderr (5 bytes) ---\nwarn\n");
    }
    // Another tenant does not see it, and cannot kill it.
    assert_eq!(f.shells.output(&tenant("other").tenant, &id), Err(format!("unknown shell_id: {id}")));
    assert_eq!(f.shells.kill(&tenant("other").tenant, &id).await, Err(format!("unknown shell_id: {id}")));
    assert_eq!(f.shells.kill(&ws.tenant, &id).await, Ok(format!("killed: {id}\n")));
    assert!(processes("sleep 987649").is_empty(), "{:?}", processes("sleep 987649"));
    assert_eq!(f.shells.output(&ws.tenant, &id), Err(format!("unknown shell_id: {id}")));
    assert!(f.shells.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_finished_background_shell_says_its_exit_and_a_timeout_ends_one() {
    let f = fixture();
    let ws = tenant("done");
    let start = |command: &str, timeout: Option<u64>| {
        let mut arguments = json!({"command": command, "run_in_background": true});
        if let Some(secs) = timeout {
            arguments["timeout"] = json!(secs);
        }
        arguments
    };
    let (text, _) = f.bash(&ws, start("printf 'no newline'; exit 2", None)).await;
    let done = text.lines().next().and_then(|l| l.strip_prefix("shell_id: ")).unwrap().to_owned();
    let (text, _) = f.bash(&ws, start("echo begun; sleep 987648", Some(1))).await;
    let timed = text.lines().next().and_then(|l| l.strip_prefix("shell_id: ")).unwrap().to_owned();
    let status = |id: &str| f.shells.output(&ws.tenant, id).unwrap();
    assert!(eventually(|| status(&done).contains("status: completed")).await);
    assert!(eventually(|| status(&timed).contains("status: completed")).await);
    let output = status(&done);
    assert!(output.contains("status: completed (exit 2)\n"), "{output}");
    assert!(output.ends_with("--- stdout (10 bytes) ---\nno newline\n--- stderr (0 bytes) ---\n"), "{output}");
    assert!(status(&timed).contains("status: completed (exit 124)\n"), "{}", status(&timed));
    assert!(processes("sleep 987648").is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_holds_at_most_eight_running_shells() {
    let f = fixture();
    let (ws, other) = (tenant("many"), tenant("few"));
    let mut ids = Vec::new();
    for _ in 0..MAX_SHELLS_PER_TENANT {
        let (text, error) = f.bash(&ws, json!({"command": "sleep 987647", "run_in_background": true})).await;
        assert!(!error, "{text}");
        ids.push(text.lines().next().and_then(|l| l.strip_prefix("shell_id: ")).unwrap().to_owned());
    }
    let refused = f.bash(&ws, json!({"command": "sleep 987647", "run_in_background": true})).await;
    let message = "too many background shells: 8 are running; KillShell one first";
    assert_eq!(refused, (message.into(), true));
    let (text, error) = f.bash(&other, json!({"command": "echo hi", "run_in_background": true})).await;
    assert!(!error, "{text}");
    // One killed makes room.
    f.shells.kill(&ws.tenant, &ids.remove(0)).await.unwrap();
    let (text, error) = f.bash(&ws, json!({"command": "sleep 987647", "run_in_background": true})).await;
    assert!(!error, "{text}");
    ids.push(text.lines().next().and_then(|l| l.strip_prefix("shell_id: ")).unwrap().to_owned());
    for id in ids {
        f.shells.kill(&ws.tenant, &id).await.unwrap();
    }
    assert!(processes("sleep 987647").is_empty(), "{:?}", processes("sleep 987647"));
}
