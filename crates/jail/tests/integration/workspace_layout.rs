//! The Workspace layout (codegen-sandbox's): the conversation's directory at `/workspace`, which is also the working
//! directory, and no scratch (`/data` is the read-only root's empty directory). Each test tries, from inside the
//! sandbox, to break one promise of that layout, and asserts it holds (docs/security.md, "The Workspace layout").

use crate::common;

use std::time::Duration;

use common::{Sandbox, check, check_eq, check_not_on_host, describe};
use libtest_mimic::Failed;
use sandlot_core::{Error as CoreError, Language, Layout, RunReport, RunRequest, Termination};

const WORKSPACE: Layout = Layout::Workspace { path: "/workspace" };

pub fn trials() -> Vec<libtest_mimic::Trial> {
    common::trials(
        "workspace_layout",
        vec![
            (
                "the_workspace_is_the_working_directory_and_persists",
                the_workspace_is_the_working_directory_and_persists,
            ),
            ("a_workspace_run_writes_only_workspace_tmp_and_shm", a_workspace_run_writes_only_workspace_tmp_and_shm),
            ("a_symlink_planted_in_the_workspace_reaches_nothing", a_symlink_planted_in_the_workspace_reaches_nothing),
            ("a_timed_out_workspace_run_leaves_no_process", a_timed_out_workspace_run_leaves_no_process),
            ("a_workspace_path_under_a_system_dir_is_refused", a_workspace_path_under_a_system_dir_is_refused),
        ],
    )
}

fn run_workspace(sandbox: &Sandbox, conversation: &str, language: Language, code: &str) -> RunReport {
    sandbox.run_in(WORKSPACE, conversation, language, code)
}

fn the_workspace_is_the_working_directory_and_persists() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|_| {});
    let code = "pwd; echo $HOME; ls -A /data; (echo x > /data/x) 2>/dev/null || echo data-refused; \
                mkdir -p src; echo kept > src/kept.txt; printf '#!/bin/sh\\necho ran\\n' > s.sh; chmod +x s.sh; ./s.sh";
    let first = run_workspace(&sandbox, "ws", Language::Bash, code);
    check_eq(first.outcome.stdout.as_str(), "/workspace\n/workspace\ndata-refused\nran\n", &describe(&first))?;
    let second = run_workspace(&sandbox, "ws", Language::Bash, "cat /workspace/src/kept.txt; ls -A");
    check_eq(second.outcome.stdout.as_str(), "kept\ns.sh\nsrc\n", &describe(&second))?;
    let host = sandbox.data_dir("ws");
    check_eq(std::fs::read_to_string(host.join("src/kept.txt"))?.as_str(), "kept\n", "the host's copy")
}

fn a_workspace_run_writes_only_workspace_tmp_and_shm() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|_| {});
    let marker = format!("sandlot-workspace-attack-{}", std::process::id());
    let dirs = ["/", "/etc", "/usr/bin", "/root", "/home", "/dev", "/proc/sys/kernel", "/data", "/workspace", "/tmp"];
    let code = format!(
        r#"{probe}
import os
for d in ["/workspace2", "/opt"]:
    try:
        os.mkdir(d)
        print(d, "MADE")
    except OSError:
        print(d, "refused")
"#,
        probe = common::write_probe(&dirs, &marker)
    );
    let report = run_workspace(&sandbox, "ws", Language::Python, &code);
    let expected = "/ refused\n/etc refused\n/usr/bin refused\n/root refused\n/home refused\n/dev refused\n\
                    /proc/sys/kernel refused\n/data refused\n/workspace WROTE\n/tmp WROTE\n\
                    /workspace2 refused\n/opt refused\n";
    check_eq(report.outcome.stdout.as_str(), expected, &describe(&report))?;
    check_not_on_host(&marker, &["/", "/etc", "/usr/bin", "/root", "/home"])?;
    check(sandbox.data_dir("ws").join(&marker).exists(), || "the /workspace write did not reach the host".into())
}

/// A run leaves symlinks to `/`, `/etc` and a host file in the workspace; the next run follows them and lands in
/// its own sandbox (read-only, the host's files absent), and the server never follows them.
fn a_symlink_planted_in_the_workspace_reaches_nothing() -> Result<(), Failed> {
    let secret_dir = tempfile::tempdir()?;
    let secret = secret_dir.path().join("secret.txt");
    std::fs::write(&secret, "host secret")?;
    let sandbox = Sandbox::new(|_| {});
    let plant = format!("ln -s / root; ln -s /etc etc; ln -s {} leak; echo real > real.txt", secret.display());
    let first = run_workspace(&sandbox, "ws", Language::Bash, &plant);
    check_eq(first.outcome.termination.clone(), Termination::Exited { code: 0 }, &describe(&first))?;
    let follow = format!(
        "for p in leak root{secret} root/etc/shadow etc/shadow; do cat $p >/dev/null 2>&1 && echo $p READ || echo $p no; done; \
         for p in root/etc/pwned etc/pwned root/pwned root/usr/pwned; do (echo x > $p) 2>/dev/null && echo $p WROTE || echo $p refused; done",
        secret = secret.display()
    );
    let second = run_workspace(&sandbox, "ws", Language::Bash, &follow);
    let expected = format!(
        "leak no\nroot{secret} no\nroot/etc/shadow no\netc/shadow no\n\
         root/etc/pwned refused\netc/pwned refused\nroot/pwned refused\nroot/usr/pwned refused\n",
        secret = secret.display()
    );
    check_eq(second.outcome.stdout.as_str(), expected.as_str(), &describe(&second))?;
    common::check_server_refuses(&sandbox, "ws", &["leak", "root/etc/passwd", "etc/passwd"])
}

/// codegen-sandbox's Bash timeout kills the whole process group: here a background `sleep` of the timed-out
/// command, and one that left the group, die with it.
fn a_timed_out_workspace_run_leaves_no_process() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|limits| limits.timeout = Duration::from_secs(1));
    let report =
        run_workspace(&sandbox, "ws", Language::Bash, "sleep 1000 &\n( setsid sleep 999 & )\necho started; sleep 1000");
    check_eq(report.outcome.termination.clone(), Termination::TimedOut, &describe(&report))?;
    check_eq(report.outcome.stdout.as_str(), "started\n", "stdout")?;
    let left = common::program_processes();
    check(left.is_empty(), || format!("processes of the program left after the deadline: {left:?}"))
}

fn a_workspace_path_under_a_system_dir_is_refused() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|_| {});
    for path in ["/etc/ws", "/data", "/", "workspace", "/tmp/x", "/proc/1"] {
        let request = RunRequest {
            conversation_id: "refused".into(),
            language: "bash".into(),
            code: "echo ran".into(),
            layout: Layout::Workspace { path },
            ..RunRequest::default()
        };
        match sandbox.runtime.block_on(sandbox.engine.run(request, &())) {
            Err(CoreError::InvalidArgument { field: "layout", .. }) => {}
            other => return Err(format!("{path}: expected an invalid layout, got {other:?}").into()),
        }
    }
    check(!sandbox.data_dir("refused").exists(), || "a refused run created its conversation".into())
}
