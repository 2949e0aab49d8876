//! The `sandlot` binary end to end: `run` (whose jail init is forked by the command, unlike the library tests'
//! zygote clones), `runners` and `doctor`. Needs root, like every test that starts sandboxes.

use crate::common;

use std::io::Write;
use std::process::{Command, Output, Stdio};

fn sandlot(args: &[&str], stdin: &str, root: &std::path::Path) -> Output {
    sandlot_with_env(args, stdin, root, &[])
}

fn sandlot_with_env(args: &[&str], stdin: &str, root: &std::path::Path, env: &[(&str, &str)]) -> Output {
    let mut command = command_for_runs(env!("CARGO_BIN_EXE_sandlot"), root);
    command.args(args).envs(env.iter().copied());
    output_with_stdin(command, stdin)
}

/// `program` (sandlot, or a wrapper that starts it) with the environment of the runs: conversations under `root`,
/// sandboxes as a host uid of this test process's own.
fn command_for_runs(program: &str, root: &std::path::Path) -> Command {
    assert!(nix_is_root(), "the CLI tests start sandboxes and need root (run scripts/test.sh as root)");
    let mut command = Command::new(program);
    command.env("SANDBOX_ROOT", root).env("SANDLOT_SANDBOX_UID", (920_000 + std::process::id() % 70_000).to_string());
    command
}

/// Runs `command` with `stdin` as its standard input; its output.
fn output_with_stdin(mut command: Command, stdin: &str) -> Output {
    let mut child =
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start sandlot");
    child.stdin.take().expect("stdin").write_all(stdin.as_bytes()).expect("write code");
    child.wait_with_output().expect("wait for sandlot")
}

fn nix_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("Uid:").map(|v| v.split_whitespace().nth(1) == Some("0"))))
        .unwrap_or(false)
}

fn text(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).expect("utf-8")
}

#[test]
fn run_streams_output_and_passes_the_exit_code_on() {
    let root = common::TempRoot::new();
    let out = sandlot(
        &["run", "-l", "python"],
        "import sys\nprint('to stdout')\nprint('to stderr', file=sys.stderr)\nsys.exit(5)",
        root.path(),
    );
    assert_eq!((out.status.code(), text(&out.stdout), text(&out.stderr)), (Some(5), "to stdout\n", "to stderr\n"));
}

/// `sandlot` as the unprivileged `nobody` (65534), in a directory of its own that is also its `HOME`, without
/// `SANDBOX_ROOT`, with `env` added.
fn unprivileged_without_root(args: &[&str], env: &[(&str, &str)], stdin: &str) -> (Output, common::TempRoot) {
    use std::os::unix::process::CommandExt;
    assert!(nix_is_root(), "the CLI tests need root to start a process as another user");
    let home = common::TempRoot::new();
    std::os::unix::fs::chown(home.path(), Some(65534), Some(65534)).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_sandlot"));
    command
        .args(args)
        .env_remove("SANDBOX_ROOT")
        .env_remove("XDG_DATA_HOME")
        .env("HOME", home.path())
        .envs(env.iter().copied())
        .current_dir(home.path())
        .uid(65534)
        .gid(65534);
    (output_with_stdin(command, stdin), home)
}

/// Without `--root` or `SANDBOX_ROOT`, an ordinary user's conversations live under `$XDG_DATA_HOME/sandlot`, or
/// `~/.local/share/sandlot`; never in the directory sandlot starts in (an IDE starts `stdio` in the user's project).
#[test]
fn run_keeps_conversations_under_the_users_data_directory_by_default() {
    let code = "echo kept > /data/out.txt && cat /data/out.txt";
    let (out, home) = unprivileged_without_root(&["run", "-l", "bash", "-c", "c1"], &[], code);
    assert_eq!((out.status.code(), text(&out.stdout), text(&out.stderr)), (Some(0), "kept\n", ""));
    let kept = std::fs::read_to_string(home.path().join(".local/share/sandlot/c1/files/out.txt")).unwrap();
    assert_eq!(kept, "kept\n");
    assert!(!home.path().join("sandlot-data").exists());

    let data_home = common::TempRoot::new();
    std::os::unix::fs::chown(data_home.path(), Some(65534), Some(65534)).unwrap();
    let xdg = data_home.path().to_str().unwrap();
    let (out, home) = unprivileged_without_root(&["run", "-l", "bash", "-c", "c2"], &[("XDG_DATA_HOME", xdg)], code);
    assert_eq!((out.status.code(), text(&out.stderr)), (Some(0), ""));
    assert!(data_home.path().join("sandlot/c2/files/out.txt").is_file());
    assert!(!home.path().join(".local").exists());

    // A relative XDG_DATA_HOME is ignored (the XDG rules); no HOME at all is a usage error naming the fix.
    let (out, home) = unprivileged_without_root(&["run", "-l", "bash", "-c", "c3"], &[("XDG_DATA_HOME", "rel")], code);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(home.path().join(".local/share/sandlot/c3/files/out.txt").is_file());
    // No code on stdin: sandlot exits before it reads it, and writing it could fail with a broken pipe.
    let (out, _home) = unprivileged_without_root(&["run", "-l", "bash"], &[("HOME", "")], "");
    assert_eq!(
        (out.status.code(), text(&out.stderr)),
        (Some(2), "sandlot: no data root: HOME is not set (or not absolute); set SANDBOX_ROOT or --root\n")
    );
}

/// `stdio` says where its data is on stderr, and writes nothing but protocol on stdout.
#[test]
fn stdio_prints_its_data_root_on_stderr_and_only_protocol_on_stdout() {
    let initialize = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let (out, home) = unprivileged_without_root(&["stdio"], &[("SANDLOT_WARM_INITS", "0")], &format!("{initialize}\n"));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let root = home.path().join(".local/share/sandlot");
    let expected = format!("sandlot: data root {}\n", root.display());
    assert!(text(&out.stderr).contains(&expected), "{}", text(&out.stderr));
    let lines: Vec<&str> = text(&out.stdout).lines().collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    let reply: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!((reply["id"].clone(), reply["result"]["serverInfo"].is_object()), (1.into(), true), "{reply}");
    assert!(root.join(".sandlot/history.db").is_file());
}

/// A bad `--timeout` and a code file that cannot be read are usage errors: exit code 2 (README, "Exit codes of
/// `sandlot run`"), one line on stderr, and nothing run.
#[test]
fn run_refuses_a_bad_timeout_and_an_unreadable_file_with_exit_code_2() {
    let root = common::TempRoot::new();
    let missing = root.path().join("missing.py");
    let cases: [(&[&str], String); 4] = [
        (
            &["run", "-l", "python", "-t", "0"],
            "sandlot: invalid --timeout: must be a positive number of seconds\n".into(),
        ),
        (
            &["run", "-l", "python", "-t", "0", missing.to_str().unwrap()],
            format!("sandlot: cannot read {}: No such file or directory (os error 2)\n", missing.display()),
        ),
        (
            &["run", "-l", "python", missing.to_str().unwrap()],
            format!("sandlot: cannot read {}: No such file or directory (os error 2)\n", missing.display()),
        ),
        (
            &["run", "-l", "python", root.path().to_str().unwrap()],
            format!("sandlot: cannot read {}: Is a directory (os error 21)\n", root.path().display()),
        ),
    ];
    for (args, expected) in cases {
        // Code on stdin only where sandlot reads it: it exits without reading it when a FILE is given, and writing
        // it could then fail with a broken pipe.
        let stdin = if args.len() == 5 { "print('ran')" } else { "" };
        let out = sandlot(args, stdin, root.path());
        assert_eq!(
            (out.status.code(), text(&out.stdout), text(&out.stderr)),
            (Some(2), "", expected.as_str()),
            "{args:?}"
        );
    }
}

/// A one-shot run's skeleton of the root (the one its init caches ahead, as root) is read-only down to its two
/// superblocks, as a server's cached one is: the same assembler and seal make both.
#[test]
fn run_gets_a_skeleton_read_only_at_its_superblocks() {
    let root = common::TempRoot::new();
    let out = sandlot(
        &["run", "-l", "bash"],
        r#"awk '$5 == "/" || $5 == "/dev" { print $5, $NF ~ /^ro(,|$)/ ? "ro" : $NF }' /proc/self/mountinfo"#,
        root.path(),
    );
    assert_eq!((out.status.code(), text(&out.stdout)), (Some(0), "/ ro\n/dev ro\n"), "{}", text(&out.stderr));
}

/// `run` exits as soon as it has the program's status, while pid 1 is still unmounting the run's /tmp and /dev/shm
/// (whose pages are charged to the run's cgroup slot, and the init dies with the command): the slot must stay taken
/// until they are gone, so right after each run no free slot holds tmpfs pages.
#[test]
fn run_never_leaves_a_free_cgroup_slot_holding_its_tmpfs() {
    let root = common::TempRoot::new();
    let code = "for path, mb in (('/tmp/fill', 8), ('/dev/shm/fill', 56)):
    with open(path, 'wb') as f:
        f.write(b'x' * (mb << 20))
print('filled')";
    for _ in 0..5 {
        let out = sandlot(&["run", "-l", "python"], code, root.path());
        assert_eq!((out.status.code(), text(&out.stdout)), (Some(0), "filled\n"), "{}", text(&out.stderr));
        for (slot, shmem) in sandlot_jail::CgroupSupport::detect(false).shmem_of_free_slots() {
            assert!(shmem < 4 << 20, "free slot {} still holds {shmem} bytes of tmpfs pages", slot.display());
        }
    }
}

/// The program may use exactly the CPUs the command may (all of them, or those `taskset` gave it): the init `run`
/// forks inherits the command's, and nothing narrows them on the way.
#[test]
fn run_gives_the_program_the_cpus_of_the_command() {
    let root = common::TempRoot::new();
    let allowed = |status: &str| {
        status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).map(|v| v.trim().to_owned()).unwrap()
    };
    let ours = allowed(&std::fs::read_to_string("/proc/self/status").unwrap());
    let out = sandlot(&["run", "-l", "bash"], "cat /proc/self/status", root.path());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(allowed(text(&out.stdout)), ours, "the program's CPUs without taskset");
    let first = ours.split([',', '-']).next().unwrap().to_owned();
    let mut taskset = command_for_runs("taskset", root.path());
    taskset.args(["-c", &first, env!("CARGO_BIN_EXE_sandlot"), "run", "-l", "bash", "-"]);
    let out = output_with_stdin(taskset, "cat /proc/self/status");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(allowed(text(&out.stdout)), first, "the program's CPUs under taskset -c {first}");
}

/// `run`'s init makes the network and IPC namespaces before the run comes, as root: the program is in namespaces of
/// its own all the same, none of them the host's.
#[test]
fn run_gets_namespaces_of_its_own() {
    let root = common::TempRoot::new();
    let kinds = ["ipc", "net", "mnt", "pid", "uts", "user", "cgroup"];
    let script: String = kinds.iter().map(|kind| format!("readlink /proc/self/ns/{kind}\n")).collect();
    let out = sandlot(&["run", "-l", "bash"], &script, root.path());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let inside: Vec<&str> = text(&out.stdout).lines().collect();
    assert_eq!(inside.len(), kinds.len(), "{}", text(&out.stdout));
    for (kind, theirs) in kinds.iter().zip(inside) {
        let ours = std::fs::read_link(format!("/proc/self/ns/{kind}")).unwrap();
        assert_ne!(theirs, ours.to_str().unwrap(), "the sandbox shares the host's {kind} namespace");
    }
}

/// `run` keeps nothing on the host between runs: every run of a conversation gets a network namespace of its own,
/// and no run leaves a mount behind (a one-shot command used to pin namespaces under /run/sandlot/netns). Two runs
/// of one conversation at the same time show two namespaces (one after the other could show the same number: the
/// kernel reuses a freed namespace's inode number).
#[test]
fn run_leaves_no_network_namespace_or_mount_on_the_host() {
    let root = common::TempRoot::new();
    let netns_of = |conversation: &str| {
        let args = ["run", "-l", "bash", "-c", conversation];
        let out = sandlot_with_env(&args, "readlink /proc/self/ns/net; sleep 2", root.path(), &[]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        text(&out.stdout).trim().to_owned()
    };
    let ours = std::fs::read_link("/proc/self/ns/net").unwrap();
    // The conversation's first run makes and mounts its disk image, which stays: the mounts are counted after it.
    netns_of("a");
    // Only this test's: what other tests running meanwhile mount and unmount is not this one's to count.
    let ours_only = |line: &&str| line.contains(root.path().to_str().unwrap()) || line.contains("/run/sandlot/netns");
    let mounts_of_this_test =
        || std::fs::read_to_string("/proc/self/mountinfo").unwrap().lines().filter(ours_only).count();
    let mounts = mounts_of_this_test();
    let (first, second) = std::thread::scope(|scope| {
        let first = scope.spawn(|| netns_of("a"));
        let second = scope.spawn(|| netns_of("a"));
        (first.join().unwrap(), second.join().unwrap())
    });
    assert!(first.starts_with("net:[") && first != ours.to_str().unwrap(), "{first}");
    assert_ne!(second, first, "two runs shared a network namespace");
    assert!(mounts_of_this_test() <= mounts, "a run left a mount on the host");
}

/// The host's cgroup2 mount: its mount point and its super options.
fn cgroup2_mount() -> (String, String) {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let line = mountinfo.lines().find(|line| line.contains(" - cgroup2 ")).expect("a cgroup2 mount");
    let fields: Vec<&str> = line.split(' ').collect();
    (fields[4].to_owned(), fields.last().unwrap().to_string())
}

/// `run` leaves the host's cgroup2 mount as it is unless the operator asks (`SANDLOT_TUNE_CGROUPS=true`), and then
/// turns `favordynmods` on. No other test asks for it.
#[test]
fn run_turns_on_favordynmods_only_when_asked() {
    let (mount_point, options) = cgroup2_mount();
    let without: Vec<&str> = options.split(',').filter(|o| !["rw", "ro", "favordynmods"].contains(o)).collect();
    let data = without.join(",");
    let remount = nix::mount::MsFlags::MS_REMOUNT;
    nix::mount::mount(None::<&str>, mount_point.as_str(), None::<&str>, remount, Some(data.as_str())).unwrap();
    assert!(!cgroup2_mount().1.split(',').any(|o| o == "favordynmods"), "favordynmods is still on");
    let root = common::TempRoot::new();
    let out = sandlot(&["run", "-l", "bash"], "true", root.path());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(!cgroup2_mount().1.split(',').any(|o| o == "favordynmods"), "run changed the host unasked");
    let out = sandlot_with_env(&["run", "-l", "bash"], "true", root.path(), &[("SANDLOT_TUNE_CGROUPS", "true")]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(cgroup2_mount().1.split(',').any(|o| o == "favordynmods"), "run left favordynmods off");
}

/// Run from a terminal, the program still has no controlling terminal (its session is not the command's), so it
/// cannot inject input into the user's terminal (`TIOCSTI`) or read from it. `script` gives the command a terminal.
#[test]
fn run_from_a_terminal_leaves_the_program_without_one() {
    let root = common::TempRoot::new();
    let code = root.path().join("tty.sh");
    std::fs::write(&code, "read -r _ _ _ _ _ _ tty _ < /proc/self/stat; echo \"tty_nr=$tty\"\n").unwrap();
    let command = format!("{} run -l bash {}", env!("CARGO_BIN_EXE_sandlot"), code.display());
    let out = command_for_runs("script", root.path())
        .args(["-qec", &command, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .expect("run sandlot under script (util-linux)");
    assert_eq!(out.status.code(), Some(0), "{}{}", text(&out.stdout), text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "tty_nr=0", "the program has a controlling terminal");
}

/// The init that `run` forks assembles the standard skeleton before it knows the run; an interpreter outside the
/// system dirs needs its install prefix bound as well, so that run's pid 1 assembles a skeleton of its own.
#[test]
fn run_binds_the_prefix_of_an_interpreter_outside_the_system_dirs() {
    use std::os::unix::fs::PermissionsExt;
    let root = common::TempRoot::new();
    // Not under /tmp (where a checkout, and so the target dir, may be): the sandbox's own /tmp would cover the bind.
    std::fs::create_dir_all("/var/tmp").unwrap();
    let prefix = tempfile::tempdir_in("/var/tmp").unwrap();
    std::fs::set_permissions(prefix.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::create_dir(prefix.path().join("bin")).unwrap();
    let bash = prefix.path().join("bin/bash");
    std::fs::copy("/bin/bash", &bash).unwrap();
    let out = sandlot_with_env(
        &["run", "-l", "bash"],
        "readlink /proc/$$/exe",
        root.path(),
        &[("SANDLOT_BASH", bash.to_str().unwrap())],
    );
    assert_eq!(
        (out.status.code(), text(&out.stdout)),
        (Some(0), format!("{}\n", bash.display()).as_str()),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn run_reports_a_timeout_with_exit_code_124() {
    let root = common::TempRoot::new();
    let out = sandlot(&["run", "-l", "bash", "--timeout", "1"], "echo started; sleep 30", root.path());
    assert_eq!(out.status.code(), Some(124));
    assert_eq!(text(&out.stdout), "started\n");
    assert_eq!(text(&out.stderr), "sandlot: timed out after 1 s; the run was killed\n");
}

#[test]
fn run_json_prints_the_outcome_and_the_files() {
    let root = common::TempRoot::new();
    let code = "open('/data/result.txt', 'w').write('42')\nprint('done')";
    let out = sandlot(&["run", "-l", "py", "--conversation", "c1", "--json"], code, root.path());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(json["success"], true);
    assert_eq!(json["exitCode"], 0);
    assert_eq!(json["stdout"], "done\n");
    assert_eq!(json["conversationId"], "c1");
    assert_eq!(json["files"], serde_json::json!([{ "path": "result.txt", "size": 2 }]));
    assert_eq!(std::fs::read_to_string(root.path().join("c1/files/result.txt")).unwrap(), "42");
}

#[test]
fn run_refuses_bad_requests_with_exit_code_2() {
    let root = common::TempRoot::new();
    let out = sandlot(&["run", "-l", "python", "--conversation", "../x"], "print(1)", root.path());
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(text(&out.stderr), "sandlot: invalid conversationId: must start with a letter or digit\n");
    let out = sandlot(&["run", "-l", "cobol"], "x", root.path());
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        "sandlot: invalid language: unknown language \"cobol\"; expected one of python, typescript, javascript, bash\n"
    );
    // Attack: --timeout 1e300 panicked the command (a float of seconds that no Duration holds).
    let positive = "sandlot: invalid --timeout: must be a positive number of seconds\n";
    for (timeout, message) in [
        ("1e300", "sandlot: invalid --timeout: is 1e300 s; the limit is 3600 s\n"),
        ("inf", positive),
        ("NaN", positive),
        ("-1", positive),
        ("0", positive),
        ("3601", "sandlot: invalid --timeout: is 3601 s; the limit is 3600 s\n"),
    ] {
        let out = sandlot(&["run", "-l", "python", &format!("--timeout={timeout}")], "print(1)", root.path());
        assert_eq!((out.status.code(), text(&out.stderr)), (Some(2), message), "--timeout {timeout}");
    }
}

#[test]
fn runners_lists_every_language_with_a_version() {
    let root = common::TempRoot::new();
    let out = sandlot(&["runners", "--json"], "", root.path());
    assert_eq!(out.status.code(), Some(0));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let languages: Vec<&str> =
        json["languages"].as_array().unwrap().iter().map(|l| l["language"].as_str().unwrap()).collect();
    assert_eq!(languages, ["python", "typescript", "javascript", "bash"]);
    for runner in json["languages"].as_array().unwrap() {
        assert!(!runner["version"].as_str().unwrap().is_empty(), "{runner}");
    }
}

/// `sandlot run` strips TypeScript and runs it on node: with the TypeScript runner pinned to a tsx that does not
/// exist, a typed ES module runs, and a syntax error is the program's failure (exit 1, the line on stderr). `sandlot
/// runners` lists TypeScript on node.
#[test]
fn typescript_runs_on_node_without_tsx() {
    let root = common::TempRoot::new();
    let no_tsx = [("SANDLOT_TYPESCRIPT", "/nonexistent/tsx")];
    let code = "import { basename } from 'node:path';\nenum E { A = 41 }\nconst n: number = await Promise.resolve(E.A + 1);\nconsole.log(n, basename(import.meta.url));\n";
    let out = sandlot_with_env(&["run", "-l", "typescript"], code, root.path(), &no_tsx);
    assert_eq!((out.status.code(), text(&out.stdout)), (Some(0), "42 main.mjs\n"), "{}", text(&out.stderr));
    let out = sandlot_with_env(&["run", "-l", "ts"], "let a: number = 1;\nlet b: = 2;\n", root.path(), &no_tsx);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("main.ts:2:"), "{}", text(&out.stderr));
    let out = sandlot_with_env(&["runners", "--json"], "", root.path(), &no_tsx);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let image = |language: &str| {
        json["languages"].as_array().unwrap().iter().find(|l| l["language"] == language).map(|l| l["image"].clone())
    };
    assert_eq!(image("typescript"), image("javascript"));
}

#[test]
fn doctor_passes_on_this_host() {
    let root = common::TempRoot::new();
    let out = sandlot(&["doctor"], "", root.path());
    let report = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{report}");
    for layer in ["privileges", "user namespaces", "cgroups", "seccomp", "landlock", "runners", "jail"] {
        let line =
            report.lines().find(|l| l[9..].starts_with(layer)).unwrap_or_else(|| panic!("{layer} missing:\n{report}"));
        assert!(line.starts_with("ok "), "{line}");
    }
}

/// Runs the binary as the unprivileged `nobody` (65534) with a root directory it owns.
fn sandlot_unprivileged(args: &[&str], stdin: &str) -> (Output, common::TempRoot) {
    use std::os::unix::process::CommandExt;
    assert!(nix_is_root(), "the CLI tests need root to start a process as another user");
    let root = common::TempRoot::new();
    std::os::unix::fs::chown(root.path(), Some(65534), Some(65534)).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sandlot"))
        .args(args)
        .env("SANDBOX_ROOT", root.path().join("conversations"))
        .uid(65534)
        .gid(65534)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start sandlot as nobody");
    child.stdin.take().expect("stdin").write_all(stdin.as_bytes()).expect("write code");
    (child.wait_with_output().expect("wait for sandlot"), root)
}

#[test]
fn without_root_the_jail_runs_as_the_callers_uid() {
    let code =
        "import os\nprint(os.getuid(), open('/proc/self/uid_map').read().split())\nopen('/data/made', 'w').write('x')";
    let (out, root) = sandlot_unprivileged(&["run", "-l", "python", "-c", "u"], code);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "1000 ['1000', '65534', '1']\n");
    let meta = std::fs::metadata(root.path().join("conversations/u/files/made")).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&meta), 65534);
}

#[test]
fn without_root_rlimits_stand_in_for_cgroups() {
    let (out, _root) = sandlot_unprivileged(
        &["run", "-l", "python", "--memory-mb", "64"],
        "try:\n    hog = bytearray(512 * 1024 * 1024)\n    print('allocated')\nexcept MemoryError:\n    print('refused')",
    );
    assert_eq!((out.status.code(), text(&out.stdout)), (Some(0), "refused\n"), "{}", text(&out.stderr));
    let (out, _root) = sandlot_unprivileged(
        &["run", "-l", "bash", "--pids", "16", "--timeout", "2"],
        "bomb() { bomb | bomb & }; bomb; sleep 30",
    );
    assert_eq!(out.status.code(), Some(124), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("Resource temporarily unavailable"), "{}", text(&out.stderr));
}

#[test]
fn without_root_doctor_names_the_missing_layers() {
    let (out, _root) = sandlot_unprivileged(&["doctor"], "");
    let report = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{report}");
    let status = |layer: &str| report.lines().find(|l| l[9..].starts_with(layer)).map(|l| l[..8].trim().to_owned());
    assert_eq!(status("privileges").as_deref(), Some("MISSING"), "{report}");
    assert_eq!(status("cgroups").as_deref(), Some("MISSING"), "{report}");
    assert_eq!(status("seccomp").as_deref(), Some("ok"), "{report}");
    assert_eq!(status("jail").as_deref(), Some("ok"), "{report}");
}

fn serve_with(env: &[(&str, &str)]) -> Output {
    let root = common::TempRoot::new();
    let mut command = Command::new(env!("CARGO_BIN_EXE_sandlot"));
    command.arg("serve").env("SANDBOX_ROOT", root.path()).env("MCP_HTTP_ADDR", "127.0.0.1:0");
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().expect("run sandlot serve")
}

#[test]
fn bad_configuration_stops_the_start_with_one_line_naming_the_variable() {
    let cases: [(&[(&str, &str)], &str); 20] = [
        (
            &[("SANDLOT_SANDBOX_UIDS", "0-999")],
            "sandlot: invalid SANDLOT_SANDBOX_UIDS=\"0-999\": the sandbox uids must not include 0 (root)\n",
        ),
        (
            &[("SANDLOT_SANDBOX_UIDS", "4294967290-4294967295")],
            "sandlot: invalid SANDLOT_SANDBOX_UIDS=\"4294967290-4294967295\": 4294967295 is not a valid uid\n",
        ),
        (
            &[("SANDLOT_MEMORY_MB", "lots")],
            "sandlot: invalid SANDLOT_MEMORY_MB=\"lots\": invalid digit found in string\n",
        ),
        (
            &[("SANDLOT_CPUS", "-1")],
            "sandlot: invalid SANDLOT_CPUS=\"-1\": \"-1\" is not a number of cores between 0.01 and 1024\n",
        ),
        (
            &[("MCP_HTTP_ADDR", "nowhere")],
            "sandlot: invalid MCP_HTTP_ADDR=\"nowhere\": invalid socket address syntax\n",
        ),
        (
            &[("MCP_AUTH_ENABLED", "true")],
            "sandlot: MCP_AUTH_ENABLED needs MCP_AUTH_JWT_SECRET or MCP_AUTH_JWT_PUBLIC_KEY\n",
        ),
        (&[("MCP_API_TOKEN", "")], "sandlot: MCP_API_TOKEN must not be empty\n"),
        (&[("FILE_SECRET", "")], "sandlot: FILE_SECRET must not be empty\n"),
        (&[("SANDBOX_ROOT", "")], "sandlot: invalid SANDBOX_ROOT=\"\": must not be empty\n"),
        (
            &[("PUBLIC_BASE_URL", "ftp://x")],
            "sandlot: invalid PUBLIC_BASE_URL=\"ftp://x\": expected http(s)://host[:port][/path]\n",
        ),
        (
            &[("SANDLOT_CONVERSATION_TTL", "soon")],
            "sandlot: invalid SANDLOT_CONVERSATION_TTL=\"soon\": expected number at 0: expected off or a duration such as 90s, 12h, 30d\n",
        ),
        (
            &[("SANDLOT_TRUSTED_PROXIES", "10.0.0.0/8,proxy.example")],
            "sandlot: invalid SANDLOT_TRUSTED_PROXIES=\"proxy.example\": \"proxy.example\" is not an IP address or a \
             network in CIDR notation (10.0.0.0/8)\n",
        ),
        (
            &[("SANDLOT_CLIENT_IP_HEADER", "x-real-ip")],
            "sandlot: invalid SANDLOT_CLIENT_IP_HEADER=\"x-real-ip\": \"x-real-ip\" is neither x-forwarded-for nor forwarded\n",
        ),
        (
            &[("SANDLOT_AUTH_FAILURES_PER_MINUTE", "-1")],
            "sandlot: invalid SANDLOT_AUTH_FAILURES_PER_MINUTE=\"-1\": -1 is not in 0..=1000000\n",
        ),
        (&[("SANDLOT_LOG_FORMAT", "xml")], "sandlot: invalid SANDLOT_LOG_FORMAT=\"xml\": expected text or json\n"),
        (
            &[("SANDLOT_PROFILES", "baponi,e2b")],
            "sandlot: invalid SANDLOT_PROFILES=\"baponi,e2b\": unknown profile \"e2b\"; known: {profiles}, or all, none\n",
        ),
        (
            &[("SANDLOT_ROOT_PROFILE", "e2b")],
            "sandlot: invalid SANDLOT_ROOT_PROFILE=\"e2b\": unknown profile \"e2b\"; known: sandlot, {profiles}\n",
        ),
        (
            &[("SANDLOT_BAPONI_VOLUMES", "docs=/nonexistent/dir")],
            "sandlot: invalid SANDLOT_BAPONI_VOLUMES=\"docs=/nonexistent/dir\": volume docs: \"/nonexistent/dir\" is not a \
             directory\n",
        ),
        (&[("SANDLOT_LOG", "info,=")], "sandlot: invalid SANDLOT_LOG=\"info,=\": invalid filter directive\n"),
        (
            &[("MCP_AUTH_ENABLED", "true"), ("MCP_AUTH_JWT_SECRET", "s"), ("MCP_API_TOKEN", "t")],
            "sandlot: MCP_API_TOKEN is not used when MCP_AUTH_ENABLED is true (JWTs only): unset one of them\n",
        ),
    ];
    // The profiles sandlot has, as the messages list them.
    let profiles = sandlot_server::surfaces::Profile::ALL.map(|p| p.name()).join(", ");
    for (env, expected) in cases {
        let out = serve_with(env);
        let expected = expected.replace("{profiles}", &profiles);
        assert_eq!((out.status.code(), text(&out.stderr)), (Some(2), expected.as_str()), "{env:?}");
    }
}

/// Starts `sandlot serve` on `root` and waits for it to serve or exit; its stderr up to then, and whether it serves.
fn start_server(root: &std::path::Path) -> (bool, String) {
    use std::io::BufRead;
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut child = command_for_runs(env!("CARGO_BIN_EXE_sandlot"), root)
        .arg("serve")
        .env("MCP_HTTP_ADDR", format!("127.0.0.1:{port}"))
        .env("MCP_API_TOKEN", "t")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start sandlot serve");
    let mut stderr = String::new();
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let serving = loop {
        match lines.next() {
            Some(Ok(line)) => {
                stderr.push_str(&line);
                stderr.push('\n');
                if line.contains("serving MCP at") {
                    break true;
                }
            }
            _ => break false,
        }
    };
    child.kill().ok();
    child.wait().ok();
    (serving, stderr)
}

/// A conversation id cannot reach the server's own state: runs in conversations named like the history's files
/// (which lived at the root before) do not stop the next start. An older root's state files are moved.
#[test]
fn conversations_named_like_the_servers_state_do_not_stop_its_start() {
    let root = common::TempRoot::new();
    std::fs::write(root.path().join(".file-secret"), "kept-secret").unwrap();
    let (serving, stderr) = start_server(root.path());
    assert!(serving, "{stderr}");
    assert_eq!(std::fs::read_to_string(root.path().join(".sandlot/file-secret")).unwrap(), "kept-secret");
    for conversation in ["sandlot.db", "sandlot.db-journal", "sandlot.db-wal", "sandlot.db-shm", "history.db-wal"] {
        let out = sandlot(&["run", "-l", "bash", "-c", conversation], "echo hi > /data/x", root.path());
        assert_eq!(out.status.code(), Some(0), "{conversation}: {}", text(&out.stderr));
    }
    let (serving, stderr) = start_server(root.path());
    assert!(serving, "{stderr}");
    assert!(root.path().join(".sandlot/history.db").is_file());
}

/// From inside a `sandlot run` (its pid 1 is a clone of the forked init, so of the command: its command line,
/// environment, memory map, executable and cgroup are the command's), `/proc` names neither the conversation root
/// on the host, nor the command's cgroup, nor its command line; the one exception, the root field of `/data`'s line
/// in `mountinfo` (the conversation's path on its host filesystem), is documented in docs/security.md.
#[test]
fn run_shows_nothing_of_the_host_layout_in_proc() {
    let root = common::TempRoot::new();
    let script = "for f in /proc/self/mountinfo /proc/self/mounts /proc/self/mountstats /proc/self/cgroup \
        /proc/1/cgroup /proc/1/cmdline /proc/1/environ /proc/1/maps /proc/1/mountinfo /proc/1/status; do \
        echo \"== $f\"; tr '\\0' ' ' < $f 2>&1; echo; done; echo '== /proc/1/exe'; readlink /proc/1/exe 2>&1; true";
    let out = sandlot(&["run", "-l", "bash", "-c", "layout"], script, root.path());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let output = text(&out.stdout);
    assert!(output.contains("== /proc/1/exe"), "{output}");
    let canonical_root = std::fs::canonicalize(root.path()).unwrap();
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let mut needles: Vec<&str> =
        cgroups.lines().filter_map(|line| line.splitn(3, ':').nth(2)).filter(|path| *path != "/").collect();
    needles.extend([canonical_root.to_str().unwrap(), env!("CARGO_BIN_EXE_sandlot"), "run -l bash -c layout"]);
    let mut section = "";
    for line in output.lines() {
        if let Some(name) = line.strip_prefix("== ") {
            section = name;
        } else {
            // `/data` too: on its disk image its mount's root is `/`, not its host path.
            let leak = needles.iter().find(|needle| line.contains(**needle));
            assert!(leak.is_none(), "{section} shows {leak:?}: {line}\n--- all ---\n{output}");
        }
    }
}
