//! A conversation's live sandbox as the faces show it: `sandbox_session`'s result and `/v1/conversations`' `live`
//! field, one camelCase JSON shape built from the engine's [`SessionStatus`] (times as RFC 3339 with the seconds
//! left, usage against its limits), and the short text a model reads of it.

use std::time::SystemTime;

use sandlot_core::{Language, SessionStatus, rfc3339_seconds};
use schemars::JsonSchema;
use serde::Serialize;

/// A live sandbox now.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LiveView {
    /// The live sandbox's id (a session call's `session.id`).
    pub id: String,
    /// When it started (RFC 3339).
    pub started_at: String,
    /// When a call last used it (RFC 3339).
    pub last_used: String,
    /// Calls it has served.
    pub calls: u64,
    /// A call runs in it now.
    pub busy: bool,
    /// When it ends unless used before (the idle timeout, RFC 3339), and in how many seconds.
    pub idle_ends_at: String,
    pub idle_seconds_left: u64,
    /// When it ends at the latest (its maximum lifetime, RFC 3339), and in how many seconds.
    pub ends_at: String,
    pub seconds_left: u64,
    /// Its persistent interpreters, one per language used.
    pub interpreters: Vec<InterpreterView>,
    /// Its processes now, as `ps` would show them (the interpreters and what the calls left running).
    pub processes: Vec<ProcessView>,
    /// What it uses against its limits, all its processes together.
    pub usage: UsageView,
}

/// One persistent interpreter.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct InterpreterView {
    /// `python`, `javascript` (TypeScript's too) or `bash`.
    pub language: Language,
    /// Its pid in the sandbox.
    pub pid: u32,
    /// Cells it has run.
    pub calls: u64,
}

/// One process of the live sandbox.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProcessView {
    /// Its pid in the sandbox.
    pub pid: u32,
    /// Its command line (cut to 256 bytes).
    pub command: String,
    pub cpu_seconds: f64,
    /// Resident memory.
    pub memory_bytes: u64,
}

/// A live sandbox's usage against its limits.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UsageView {
    pub memory_bytes: u64,
    pub memory_limit_bytes: u64,
    /// Processes and threads.
    pub pids: u64,
    pub pids_limit: u64,
    /// CPU time since it started.
    pub cpu_seconds: f64,
    /// Processes the kernel's OOM killer ended in it.
    pub oom_kills: u64,
}

/// Seconds from now to `at`, 0 when it has passed.
fn seconds_until(at: SystemTime, now: SystemTime) -> u64 {
    at.duration_since(now).map(|left| left.as_secs()).unwrap_or(0)
}

impl LiveView {
    pub fn of(status: &SessionStatus) -> Self {
        let now = SystemTime::now();
        Self {
            id: status.id.clone(),
            started_at: rfc3339_seconds(status.started_at),
            last_used: rfc3339_seconds(status.last_used),
            calls: status.calls,
            busy: status.busy,
            idle_ends_at: rfc3339_seconds(status.idle_ends_at),
            idle_seconds_left: seconds_until(status.idle_ends_at, now),
            ends_at: rfc3339_seconds(status.ends_at),
            seconds_left: seconds_until(status.ends_at, now),
            interpreters: status
                .interpreters
                .iter()
                .map(|i| InterpreterView { language: i.language, pid: i.pid, calls: i.calls })
                .collect(),
            processes: status
                .processes
                .iter()
                .map(|p| ProcessView {
                    pid: p.pid,
                    command: p.command.clone(),
                    cpu_seconds: p.cpu_seconds,
                    memory_bytes: p.memory_bytes,
                })
                .collect(),
            usage: UsageView {
                memory_bytes: status.usage.memory_bytes,
                memory_limit_bytes: status.usage.memory_limit_bytes,
                pids: status.usage.pids,
                pids_limit: status.usage.pids_limit,
                cpu_seconds: status.usage.cpu_seconds,
                oom_kills: status.usage.oom_kills,
            },
        }
    }

    /// A few lines for a model: the sandbox, its interpreters, its processes, its usage.
    pub fn text(&self) -> String {
        // Whole MiB, but a tenth under 10 MiB, so an idle sandbox does not read as using nothing.
        let mib = |bytes: u64| {
            let mib = bytes as f64 / (1024.0 * 1024.0);
            if mib < 10.0 { format!("{mib:.1} MiB") } else { format!("{} MiB", mib.round()) }
        };
        let mut text = format!(
            "live sandbox {}: {} call{}, {}, started {}, ends after {} s idle (at the latest in {} s)\n",
            self.id,
            self.calls,
            if self.calls == 1 { "" } else { "s" },
            if self.busy { "a call is running" } else { "idle" },
            self.started_at,
            self.idle_seconds_left,
            self.seconds_left,
        );
        let interpreters: Vec<String> =
            self.interpreters.iter().map(|i| format!("{} (pid {}, {} cells)", i.language, i.pid, i.calls)).collect();
        let interpreters = if interpreters.is_empty() { "none".to_owned() } else { interpreters.join(", ") };
        text.push_str(&format!("interpreters: {interpreters}\n"));
        text.push_str(&format!("processes ({}):\n", self.processes.len()));
        for process in &self.processes {
            // An interpreter's command line is sandlot's driver program: its language says more.
            let command = match self.interpreters.iter().find(|i| i.pid == process.pid) {
                Some(interpreter) => format!("[{} interpreter]", interpreter.language),
                None => process.command.clone(),
            };
            text.push_str(&format!(
                "  {} {command} ({:.1} s CPU, {})\n",
                process.pid,
                process.cpu_seconds,
                mib(process.memory_bytes)
            ));
        }
        let usage = &self.usage;
        text.push_str(&format!(
            "memory {} of {}, {} of {} pids, {:.1} s CPU, {} OOM kill{}\n",
            mib(usage.memory_bytes),
            mib(usage.memory_limit_bytes),
            usage.pids,
            usage.pids_limit,
            usage.cpu_seconds,
            usage.oom_kills,
            if usage.oom_kills == 1 { "" } else { "s" },
        ));
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_view_counts_seconds_left_and_the_text_lists_what_runs() {
        let now = SystemTime::now();
        let status = SessionStatus {
            id: "s1".into(),
            conversation: sandlot_core::ConversationId::parse("c").unwrap(),
            started_at: now - Duration::from_secs(60),
            last_used: now,
            calls: 2,
            busy: false,
            idle_ends_at: now + Duration::from_secs(900),
            ends_at: now - Duration::from_secs(1),
            interpreters: vec![sandlot_core::InterpreterStatus { language: Language::Python, pid: 7, calls: 2 }],
            processes: vec![
                sandlot_core::SandboxProcess {
                    pid: 7,
                    command: "python3 -u -c # sandlot's Python driver...".into(),
                    cpu_seconds: 0.0,
                    memory_bytes: 12 << 20,
                },
                sandlot_core::SandboxProcess {
                    pid: 9,
                    command: "python3 -m http.server 8000".into(),
                    cpu_seconds: 0.5,
                    memory_bytes: 20 << 20,
                },
            ],
            usage: sandlot_core::SandboxUsage {
                memory_bytes: 40 << 20,
                memory_limit_bytes: 512 << 20,
                pids: 3,
                pids_limit: 128,
                cpu_seconds: 1.0,
                oom_kills: 0,
            },
        };
        let view = LiveView::of(&status);
        assert!((898..=900).contains(&view.idle_seconds_left), "{}", view.idle_seconds_left);
        assert_eq!(view.seconds_left, 0);
        let json = serde_json::to_value(&view).unwrap();
        assert_eq!(json["processes"][1]["memoryBytes"], 20 << 20);
        assert_eq!(json["usage"]["memoryLimitBytes"], 512 << 20);
        assert_eq!(json["interpreters"][0]["language"], "python");
        let text = view.text();
        assert!(text.contains("interpreters: python (pid 7, 2 cells)"), "{text}");
        assert!(text.contains("processes (2):\n  7 [python interpreter] (0.0 s CPU, 12 MiB)\n"), "{text}");
        assert!(text.contains("  9 python3 -m http.server 8000 (0.5 s CPU, 20 MiB)"), "{text}");
        assert!(text.ends_with("memory 40 MiB of 512 MiB, 3 of 128 pids, 1.0 s CPU, 0 OOM kills\n"), "{text}");
        let small = LiveView::of(&SessionStatus {
            usage: sandlot_core::SandboxUsage { memory_bytes: 557_056, ..status.usage.clone() },
            ..status.clone()
        });
        assert!(small.text().contains("memory 0.5 MiB of 512 MiB"), "{}", small.text());
    }
}
