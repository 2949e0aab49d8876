//! Volumes (Baponi's): host directories bound beneath the Home layout's scratch `/data`, read-only unless
//! configured writable. Each test tries, from inside the sandbox, to break one promise (docs/security.md,
//! "Volumes"), and asserts it holds.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::{Sandbox, as_other_user, check, check_eq, describe};
use libtest_mimic::Failed;
use sandlot_core::{Error as CoreError, Language, Layout, Mount, RunReport, RunRequest, Termination};

const HOME: Layout = Layout::Home { path: "/home/baponi" };

pub fn trials() -> Vec<libtest_mimic::Trial> {
    common::trials(
        "volumes",
        vec![
            (
                "a_read_only_volume_cannot_be_written_a_writable_one_can",
                a_read_only_volume_cannot_be_written_a_writable_one_can,
            ),
            (
                "a_symlink_planted_in_a_volume_reaches_nothing_outside",
                a_symlink_planted_in_a_volume_reaches_nothing_outside,
            ),
            ("a_volume_path_that_shadows_a_system_dir_is_refused", a_volume_path_that_shadows_a_system_dir_is_refused),
            ("a_writable_volume_stops_at_its_quota", a_writable_volume_stops_at_its_quota),
            ("a_writable_volume_stays_out_of_other_users_reach", a_writable_volume_stays_out_of_other_users_reach),
        ],
    )
}

/// A directory the sandbox user may read (a volume's operator makes it so).
fn volume_dir() -> Result<tempfile::TempDir, Failed> {
    let dir = tempfile::tempdir()?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))?;
    Ok(dir)
}

fn mount(host: &Path, path: &str, read_only: bool) -> Mount {
    Mount { host: host.into(), path: path.into(), read_only, quota_mb: None }
}

fn run_with_volumes(sandbox: &Sandbox, language: Language, code: &str, mounts: Vec<Mount>) -> RunReport {
    sandbox.run_request(RunRequest {
        conversation_id: "volumes".into(),
        language: language.as_str().into(),
        code: code.into(),
        layout: HOME,
        mounts,
        ..RunRequest::default()
    })
}

fn a_read_only_volume_cannot_be_written_a_writable_one_can() -> Result<(), Failed> {
    let docs = volume_dir()?;
    std::fs::write(docs.path().join("readme.md"), "# docs\n")?;
    std::fs::set_permissions(docs.path().join("readme.md"), std::fs::Permissions::from_mode(0o666))?;
    let work = volume_dir()?;
    let sandbox = Sandbox::new(|_| {});
    let code = r#"
import os
print(open("/data/docs/readme.md").read(), end="")
print(open("docs/readme.md").read(), end="")
for action, target in [("write", "/data/docs/readme.md"), ("create", "/data/docs/new.txt"),
                       ("mkdir", "/data/docs/d"), ("chmod", "/data/docs/readme.md"),
                       ("remove", "/data/docs/readme.md"), ("create", "/data/work/out.txt")]:
    try:
        if action == "write" or action == "create":
            open(target, "w").write("x")
        elif action == "mkdir":
            os.mkdir(target)
        elif action == "chmod":
            os.chmod(target, 0o777)
        else:
            os.remove(target)
        print(action, target, "DONE")
    except OSError as e:
        print(action, target, e.strerror)
os.system("mount -o remount,rw /data/docs 2>/dev/null || echo remount refused")
"#;
    let mounts = vec![mount(docs.path(), "/data/docs", true), mount(work.path(), "/data/work", false)];
    let report = run_with_volumes(&sandbox, Language::Python, code, mounts);
    let expected = "# docs\n# docs\nwrite /data/docs/readme.md Read-only file system\n\
                    create /data/docs/new.txt Read-only file system\nmkdir /data/docs/d Read-only file system\n\
                    chmod /data/docs/readme.md Read-only file system\nremove /data/docs/readme.md Read-only file system\n\
                    create /data/work/out.txt DONE\nremount refused\n";
    check_eq(report.outcome.stdout.as_str(), expected, &describe(&report))?;
    check_eq(std::fs::read_to_string(docs.path().join("readme.md"))?.as_str(), "# docs\n", "the read-only file")?;
    check(!docs.path().join("new.txt").exists(), || "a file appeared in the read-only volume".into())?;
    check_eq(std::fs::read_to_string(work.path().join("out.txt"))?.as_str(), "x", "the writable volume's file")?;
    // Neither volume lands in the conversation's directory.
    let listed: Vec<&str> = report.files.files.iter().map(|f| f.path.as_str()).collect();
    check_eq(listed, Vec::<&str>::new(), "the conversation's files")
}

/// A run leaves symlinks to `/`, `/etc` and a host file outside the volume in a writable volume; the next run
/// follows them and lands in its own sandbox, and the server's reads beneath the volume never follow them.
fn a_symlink_planted_in_a_volume_reaches_nothing_outside() -> Result<(), Failed> {
    let secret_dir = tempfile::tempdir()?;
    let secret = secret_dir.path().join("secret.txt");
    std::fs::write(&secret, "host secret")?;
    let work = volume_dir()?;
    let sandbox = Sandbox::new(|_| {});
    let mounts = || vec![mount(work.path(), "/data/work", false)];
    let plant = format!(
        "ln -s / /data/work/root; ln -s /etc /data/work/etc; ln -s {} /data/work/leak; ln -s .. /data/work/up",
        secret.display()
    );
    let first = run_with_volumes(&sandbox, Language::Bash, &plant, mounts());
    check_eq(first.outcome.exit_code(), 0, &describe(&first))?;
    let follow = format!(
        r#"
for path in ["/data/work/leak", "/data/work/root{secret}", "/data/work/etc/shadow", "/data/work/up/up/etc/shadow"]:
    try:
        print(path, "READ", open(path).read())
    except OSError as e:
        print(path, type(e).__name__)
for path in ["/data/work/root/etc/pwned", "/data/work/etc/pwned", "/data/work/root/usr/pwned"]:
    try:
        open(path, "w").write("x")
        print(path, "WROTE")
    except OSError:
        print(path, "refused")
"#,
        secret = secret.display()
    );
    let second = run_with_volumes(&sandbox, Language::Python, &follow, mounts());
    let expected = format!(
        "/data/work/leak FileNotFoundError\n/data/work/root{secret} FileNotFoundError\n\
         /data/work/etc/shadow FileNotFoundError\n/data/work/up/up/etc/shadow FileNotFoundError\n\
         /data/work/root/etc/pwned refused\n/data/work/etc/pwned refused\n/data/work/root/usr/pwned refused\n",
        secret = secret.display()
    );
    check_eq(second.outcome.stdout.as_str(), expected.as_str(), &describe(&second))?;
    for path in ["leak", "root/etc/passwd", "etc/passwd", "up/up/etc/passwd"] {
        match sandlot_core::open_in_dir(work.path(), path) {
            Err(CoreError::InvalidPath { .. } | CoreError::FileNotFound { .. }) => {}
            Ok(_) => return Err(format!("{path} was readable by the server").into()),
            Err(other) => return Err(format!("{path}: unexpected {other}").into()),
        }
    }
    Ok(())
}

fn a_volume_path_that_shadows_a_system_dir_is_refused() -> Result<(), Failed> {
    let docs = volume_dir()?;
    let sandbox = Sandbox::new(|_| {});
    for (path, layout) in [
        ("/etc", HOME),
        ("/usr/bin", HOME),
        ("/proc/1", HOME),
        ("/tmp/x", HOME),
        ("/", HOME),
        ("/data", HOME),
        ("/data/../etc", HOME),
        ("/home/baponi", HOME),
        ("/home/baponi/docs", HOME),
        ("/data/docs", Layout::Data),
    ] {
        let request = RunRequest {
            conversation_id: "refused".into(),
            language: "bash".into(),
            code: "echo ran".into(),
            layout,
            mounts: vec![mount(docs.path(), path, true)],
            ..RunRequest::default()
        };
        match sandbox.runtime.block_on(sandbox.engine.run(request, &())) {
            Err(CoreError::InvalidArgument { field: "mounts", .. }) => {}
            other => return Err(format!("{path}: expected an invalid mount, got {other:?}").into()),
        }
    }
    check(!sandbox.data_dir("refused").exists(), || "a refused run created its conversation".into())
}

/// A writable volume had no quota: 42 MiB written under an 8 MiB one ended `ok`. Now the run is stopped as over its
/// quota (here at its end: the writes take less than the watchdog's first look), and so is the next run while the
/// volume stays over it.
fn a_writable_volume_stops_at_its_quota() -> Result<(), Failed> {
    let work = volume_dir()?;
    let sandbox = Sandbox::new(|_| {});
    let quota = || vec![Mount { quota_mb: Some(8), ..mount(work.path(), "/data/work", false) }];
    let code =
        "chunk = b'x' * (1 << 20)\nfor i in range(42):\n    open(f'/data/work/f{i}', 'wb').write(chunk)\nprint('done')";
    let report = run_with_volumes(&sandbox, Language::Python, code, quota());
    check_eq(report.outcome.termination.clone(), Termination::DiskQuotaExceeded, &describe(&report))?;
    let next = run_with_volumes(&sandbox, Language::Bash, "sleep 5; echo done", quota());
    check_eq(next.outcome.termination.clone(), Termination::DiskQuotaExceeded, &describe(&next))?;
    check_eq(next.outcome.stdout.as_str(), "", "the next run's output")
}

/// A run could `chmod 0777` a writable volume's directory, which it owned, so any local user could plant files that
/// every later run reads. The directory is root's, 0700, with an ACL for the run's uid: the run writes in it, but its
/// `chmod` is refused, and another host user can neither list it nor make a file in it.
fn a_writable_volume_stays_out_of_other_users_reach() -> Result<(), Failed> {
    let work = volume_dir()?;
    let sandbox = Sandbox::new(|_| {});
    let code = "echo mine > /data/work/mine.txt && cat /data/work/mine.txt; chmod 0777 /data/work 2>/dev/null || echo chmod refused";
    let report = run_with_volumes(&sandbox, Language::Bash, code, vec![mount(work.path(), "/data/work", false)]);
    check_eq(report.outcome.stdout.as_str(), "mine\nchmod refused\n", &describe(&report))?;
    let mode = std::fs::metadata(work.path())?.permissions().mode() & 0o777;
    check(mode & 0o007 == 0, || format!("the volume's directory is mode {mode:o}"))?;
    for command in [format!("ls {}", work.path().display()), format!("touch {}/planted", work.path().display())] {
        let (code, output) = as_other_user(&command);
        check(code != 0 && output.contains("Permission denied"), || {
            format!("another host user ran `{command}`: exit {code}\n{output}")
        })?;
    }
    check(!work.path().join("planted").exists(), || "another user planted a file".into())
}
