//! `Bash` (`docs/profiles.md#codegen-sandbox-bash-and-scrubbing`): the command runs with `/bin/bash` in the sandbox (a
//! sandlot run of language bash through `Engine::run_as` for the session's tenant, the conversation at `/workspace`,
//! the working directory, stdin closed), stdout and stderr combined in arrival order and cut at 100 KiB, a non-zero
//! exit said by an `exit: N` trailer (not an error), a timeout by `bash: timed out after Ns` and exit 124 (the
//! sandbox, the whole process tree, is killed), denylisted commands refused before they run, `run_in_background`
//! handed to [`super::shells`]. Every text is scrubbed of secrets ([`sandlot_core::scrub_secrets`]).
//!
//! On a backend with live sandboxes the command runs in the workspace's persistent shell (the live sandbox's bash
//! interpreter, `SessionUse::Interpreter`), so `cd` and variables carry over to the next `Bash` as in Claude Code,
//! and a background command runs as a process of its own in the same sandbox (`SessionUse::Process`), so a server
//! it starts answers on the loopback of later commands. Elsewhere each command gets a fresh sandbox, as before.

use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use regex::Regex;
use rmcp::model::JsonObject;
use sandlot_core::{
    ConversationId, Engine, Layout, OutputChunk, OutputSink, RunRequest, SessionUse, Tenant, Termination,
};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::WORKSPACE_MOUNT;

/// Where the workspace is in the sandbox, and the working directory of every command.
pub const LAYOUT: Layout = Layout::Workspace { path: WORKSPACE_MOUNT };
/// The timeout when none is given, in seconds.
pub const DEFAULT_TIMEOUT_SECS: u64 = 120;
/// The longest timeout, in seconds; a longer one is cut to it.
pub const MAX_TIMEOUT_SECS: u64 = 600;
/// The combined output a result keeps; the rest is elided and counted.
pub const OUTPUT_CAP: usize = 100 * 1024;

/// A `Bash` call's arguments, checked as the product checks them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BashCall {
    pub command: String,
    pub timeout_secs: u64,
    /// The timeout the caller gave (cut to the maximum), if any.
    pub timeout_given: Option<u64>,
    pub background: bool,
}

impl BashCall {
    /// Reads the arguments as mcp-go does (no schema validation: a missing or mistyped argument is an error text,
    /// a bad timeout the default); `Err` is the text of an error result (denylist included).
    pub fn parse(arguments: &JsonObject) -> Result<BashCall, String> {
        let text = |name: &str| arguments.get(name).and_then(Value::as_str).filter(|s| !s.is_empty());
        let command = text("command").ok_or("command is required")?;
        text("description").ok_or("description is required")?;
        if let Some(token) = denied_token(command) {
            return Err(format!("command rejected: command uses denylisted token {token:?}"));
        }
        let timeout_given = arguments
            .get("timeout")
            .and_then(Value::as_f64)
            .map(|secs| secs.trunc())
            .filter(|secs| *secs >= 1.0)
            .map(|secs| (secs as u64).min(MAX_TIMEOUT_SECS));
        Ok(BashCall {
            command: command.to_owned(),
            timeout_secs: timeout_given.unwrap_or(DEFAULT_TIMEOUT_SECS),
            timeout_given,
            background: arguments.get("run_in_background").and_then(Value::as_bool).unwrap_or(false),
        })
    }
}

/// The product's denylist: `sudo su shutdown reboot halt poweroff chroot mount umount mkfs[.x]` at a plausible
/// command position (the start, or after whitespace, `;`, `&`, `|` or `(`, and followed by the end, whitespace or
/// one of `;&|)`). A first fence, not a boundary (`$(echo su)do` passes; the sandbox holds).
static DENIED: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(
        r"(?:^|[\s;&|(])\s*(sudo|su|shutdown|reboot|halt|poweroff|chroot|mount|umount|mkfs(?:\.(?-u:\w)+)?)(?:$|[\s;&|)])",
    )
    .ok()
});

/// The denylisted word `command` uses at a command position, if any.
pub fn denied_token(command: &str) -> Option<&str> {
    DENIED.as_ref()?.captures(command)?.get(1).map(|m| m.as_str())
}

/// Who runs a command and where: the caller's tenant (the owner of the workspace's conversation, recorded in the
/// history, and the owner of its background shells) and the workspace's conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Runner {
    pub tenant: Tenant,
    pub workspace: ConversationId,
}

/// The request of one command: language bash, the workspace layout, stdin closed; in the workspace's live sandbox
/// as `session` says (`Off` on a backend without live sandboxes: see [`session_use`]).
pub fn request(
    runner: &Runner,
    command: &str,
    timeout_secs: u64,
    session: SessionUse,
    cancel: CancellationToken,
) -> RunRequest {
    RunRequest {
        conversation_id: runner.workspace.as_str().to_owned(),
        language: "bash".into(),
        code: command.to_owned(),
        timeout: Some(Duration::from_secs(timeout_secs)),
        caller: runner.tenant.name().to_owned(),
        layout: LAYOUT,
        session,
        cancel,
        ..RunRequest::default()
    }
}

/// `wanted` when the engine's backend keeps live sandboxes, else `Off` (a fresh sandbox per command, as before).
pub fn session_use(engine: &Engine, wanted: SessionUse) -> SessionUse {
    if engine.supports_sessions() { wanted } else { SessionUse::Off }
}

/// Stdout and stderr in the order they arrived, the first [`OUTPUT_CAP`] bytes kept, all counted.
#[derive(Debug, Default)]
pub struct Combined(Mutex<(Vec<u8>, u64)>);

impl Combined {
    /// The kept bytes and the count of all.
    pub fn into_parts(self) -> (Vec<u8>, u64) {
        self.0.into_inner().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl OutputSink for Combined {
    fn output(&self, chunk: OutputChunk) {
        let mut held = self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let room = OUTPUT_CAP.saturating_sub(held.0.len());
        held.0.extend_from_slice(&chunk.data[..chunk.data.len().min(room)]);
        held.1 += chunk.data.len() as u64;
    }
}

/// The product's text of a finished command: the output (cut at [`OUTPUT_CAP`] with
/// `\n... (output truncated, N bytes elided)`), a newline if it lacks one, `bash: timed out after Ns` on a timeout
/// (sandlot's own diagnostic when the sandbox ended it otherwise: out of memory, the disk quota), and `exit: N` when
/// N is not 0. `total` counts what reached sandlot (at most the engine's per-stream cap of each stream).
pub fn render(kept: &[u8], total: u64, termination: &Termination, timeout_secs: u64) -> String {
    let mut text = String::from_utf8_lossy(kept).into_owned();
    let elided = total.saturating_sub(kept.len() as u64);
    if elided > 0 {
        text.push_str(&format!("\n... (output truncated, {elided} bytes elided)"));
    }
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    match termination {
        Termination::Exited { .. } => {}
        Termination::TimedOut => text.push_str(&format!("bash: timed out after {timeout_secs}s\n")),
        other => {
            if let Some(diagnostic) = other.diagnostic(Duration::from_secs(timeout_secs)) {
                text.push_str(&format!("bash: {diagnostic}\n"));
            }
        }
    }
    let code = termination.exit_code();
    if code != 0 {
        text.push_str(&format!("exit: {code}\n"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(value: Value) -> JsonObject {
        value.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn the_exit_trailer_only_for_a_non_zero_exit() {
        let exited = |code| Termination::Exited { code };
        assert_eq!(render(b"hi\n", 3, &exited(0), 120), "hi\n");
        assert_eq!(render(b"hi", 2, &exited(0), 120), "hi\n");
        assert_eq!(render(b"", 0, &exited(0), 120), "");
        assert_eq!(render(b"oops\n", 5, &exited(3), 120), "oops\nexit: 3\n");
        assert_eq!(render(b"", 0, &exited(1), 120), "exit: 1\n");
    }

    #[test]
    fn a_timeout_says_so_and_exits_124() {
        assert_eq!(render(b"started", 7, &Termination::TimedOut, 2), "started\nbash: timed out after 2s\nexit: 124\n");
        assert_eq!(render(b"", 0, &Termination::TimedOut, 600), "bash: timed out after 600s\nexit: 124\n");
        assert_eq!(
            render(b"", 0, &Termination::OutOfMemory, 5),
            "bash: out of memory: the run hit its memory limit and was killed\nexit: 137\n"
        );
    }

    #[test]
    fn output_past_the_cap_is_cut_and_counted() {
        let combined = Combined::default();
        for _ in 0..3 {
            combined.output(OutputChunk { stream: sandlot_core::Stream::Stdout, data: vec![b'a'; 60 * 1024] });
        }
        let (kept, total) = combined.into_parts();
        assert_eq!((kept.len(), total), (OUTPUT_CAP, 180 * 1024));
        let text = render(&kept, total, &Termination::Exited { code: 0 }, 120);
        let expected = format!("{}\n... (output truncated, {} bytes elided)\n", "a".repeat(OUTPUT_CAP), 80 * 1024);
        assert_eq!(text, expected);
    }

    #[test]
    fn chunks_are_combined_in_arrival_order() {
        let combined = Combined::default();
        for (stream, data) in [(sandlot_core::Stream::Stdout, "out1\n"), (sandlot_core::Stream::Stderr, "err\n")] {
            combined.output(OutputChunk { stream, data: data.into() });
        }
        combined.output(OutputChunk { stream: sandlot_core::Stream::Stdout, data: b"out2\n".to_vec() });
        assert_eq!(combined.into_parts(), (b"out1\nerr\nout2\n".to_vec(), 14));
    }

    #[test]
    fn denylisted_words_at_command_positions_are_rejected() {
        for command in [
            "sudo ls",
            "su",
            "ls; sudo rm -rf /",
            "true && reboot",
            "false || halt now",
            "echo x | sudo tee /etc/x",
            "(mount /dev/sda1 /mnt)",
            "  shutdown -h now",
            "mkfs.ext4 /dev/sda",
            "mkfs /dev/sda",
            "x &umount /mnt",
            "poweroff;",
            "chroot /x",
        ] {
            let word = denied_token(command);
            assert!(word.is_some(), "{command}");
            let parsed = BashCall::parse(&args(serde_json::json!({"command": command, "description": "d"})));
            assert_eq!(
                parsed,
                Err(format!("command rejected: command uses denylisted token {:?}", word.unwrap_or_default()))
            );
        }
        for command in [
            "echo sudo-less",
            "ls /mnt/mounted",
            "cat summary.txt",
            "git log --oneline",
            "grep -r halting .",
            "echo 'xsudo'",
            "./sudoku",
            "suite",
            "mkfsx",
            "echo subshell",
            "remount",
        ] {
            assert_eq!(denied_token(command), None, "{command}");
        }
        assert_eq!(denied_token("ls; sudo x"), Some("sudo"));
        assert_eq!(denied_token("mkfs.xfs /dev/x"), Some("mkfs.xfs"));
    }

    #[test]
    fn arguments_are_checked_as_the_product_checks_them() {
        let parse = |value| BashCall::parse(&args(value));
        assert_eq!(parse(serde_json::json!({"description": "d"})), Err("command is required".into()));
        assert_eq!(parse(serde_json::json!({"command": "", "description": "d"})), Err("command is required".into()));
        assert_eq!(parse(serde_json::json!({"command": "ls"})), Err("description is required".into()));
        assert_eq!(parse(serde_json::json!({"command": 3, "description": "d"})), Err("command is required".into()));
        let call = |timeout: Value| parse(serde_json::json!({"command": "ls", "description": "d", "timeout": timeout}));
        let secs = |value| call(value).map(|c| (c.timeout_secs, c.timeout_given));
        assert_eq!(secs(Value::Null), Ok((120, None)));
        assert_eq!(secs(serde_json::json!(5)), Ok((5, Some(5))));
        assert_eq!(secs(serde_json::json!(2.9)), Ok((2, Some(2))));
        assert_eq!(secs(serde_json::json!(0)), Ok((120, None)));
        assert_eq!(secs(serde_json::json!(-3)), Ok((120, None)));
        assert_eq!(secs(serde_json::json!(9999)), Ok((600, Some(600))));
        assert_eq!(secs(serde_json::json!("10")), Ok((120, None)));
        let background = parse(serde_json::json!({"command": "ls", "description": "d", "run_in_background": true}));
        assert_eq!(background.map(|c| c.background), Ok(true));
    }
}
