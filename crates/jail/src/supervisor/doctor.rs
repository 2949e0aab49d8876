//! `sandlot doctor`: what this host gives the jail, layer by layer, and a real run to prove it works.

use std::collections::BTreeMap;

use sandlot_core::{Backend, Job, Language, Limits};

use super::JailBackend;
use super::check::{Check, CheckStatus, check};

fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok().map(|s| s.trim().to_owned())
}

/// The Landlock ABI version the kernel offers, or why there is none.
pub fn landlock_abi() -> Result<i64, String> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a null attr and size 0 and the VERSION flag, the syscall only returns a number.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if abi >= 0 {
        return Ok(abi);
    }
    Err(match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::ENOSYS) => "kernel built without Landlock".into(),
        Some(libc::EOPNOTSUPP) => "Landlock disabled at boot (add it to lsm=)".into(),
        other => format!("unavailable (errno {other:?})"),
    })
}

fn probe_code(language: Language) -> &'static str {
    match language {
        Language::Python => "print('ok')",
        Language::TypeScript | Language::JavaScript => "console.log('ok')",
        Language::Bash => "echo ok",
    }
}

/// Checks every layer and runs one program in the jail.
pub async fn diagnose(backend: &JailBackend) -> Vec<Check> {
    let mut checks = Vec::new();
    let root = nix::unistd::geteuid().is_root();
    checks.push(if root {
        check("privileges", CheckStatus::Ok, "root: each sandbox runs as an unprivileged host uid, never root")
    } else {
        check("privileges", CheckStatus::Missing, "not root: no cgroups; the sandbox runs as your own uid with rlimits")
    });
    if root {
        checks.push(uid_check(backend));
    }
    let userns = read_trimmed("/proc/sys/user/max_user_namespaces").and_then(|v| v.parse::<u64>().ok());
    let apparmor = read_trimmed("/proc/sys/kernel/apparmor_restrict_unprivileged_userns");
    checks.push(match (userns, apparmor.as_deref()) {
        (Some(0), _) => check("user namespaces", CheckStatus::Failed, "user.max_user_namespaces is 0"),
        (_, Some("1")) if !root => check(
            "user namespaces",
            CheckStatus::Failed,
            "AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns=1)",
        ),
        (Some(n), _) => check("user namespaces", CheckStatus::Ok, format!("available (max {n})")),
        (None, _) => check("user namespaces", CheckStatus::Failed, "kernel without user namespaces"),
    });
    checks.push(match backend.cgroups() {
        super::CgroupSupport::Unavailable { .. } => check(
            "cgroups",
            CheckStatus::Missing,
            format!(
                "{}; memory falls back to RLIMIT_DATA, processes to RLIMIT_NPROC, no CPU quota",
                backend.cgroups().describe()
            ),
        ),
        supported => check("cgroups", CheckStatus::Ok, supported.describe()),
    });
    if let Some(enabled) = super::cgroup::favordynmods_enabled() {
        checks.push(if enabled {
            check("cgroup tuning", CheckStatus::Ok, "favordynmods on: moving a run into its cgroup costs ~0.1 ms")
        } else {
            check(
                "cgroup tuning",
                CheckStatus::Missing,
                "favordynmods off: each run waits ~6 ms to enter its cgroup; SANDLOT_TUNE_CGROUPS=true turns it on \
                 (it remounts the host's cgroup2 mount)",
            )
        });
    }
    let seccomp = read_trimmed("/proc/sys/kernel/seccomp/actions_avail");
    checks.push(match seccomp {
        Some(actions) if actions.contains("kill_process") && actions.contains("errno") => {
            check("seccomp", CheckStatus::Ok, "filter mode (dangerous syscalls denied, x32 killed)")
        }
        _ => check("seccomp", CheckStatus::Failed, "seccomp filters are not available"),
    });
    checks.push(match landlock_abi() {
        Ok(abi) => check("landlock", CheckStatus::Ok, format!("ABI {abi}")),
        Err(why) => check("landlock", CheckStatus::Missing, why),
    });
    let runners = backend.host_runners();
    checks.push(if runners.is_empty() {
        check("runners", CheckStatus::Failed, "no interpreter found (python3, node, tsx/deno/bun, bash)")
    } else {
        let names: Vec<String> = runners.iter().map(|r| format!("{}={}", r.language, r.program.display())).collect();
        check("runners", CheckStatus::Ok, names.join(", "))
    });
    let refused = backend.refused_runners();
    let binds: Vec<String> = runners
        .iter()
        .flat_map(|r| r.extra_ro_binds.iter().map(move |b| format!("{}={}", r.language, b.display())))
        .collect();
    if !refused.is_empty() {
        let reasons: Vec<String> = refused.iter().map(ToString::to_string).collect();
        checks.push(check("runner binds", CheckStatus::Missing, reasons.join("; ")));
    } else if !binds.is_empty() {
        checks.push(check("runner binds", CheckStatus::Ok, format!("each in its own runs only: {}", binds.join(", "))));
    }
    if let Some(runner) = runners.first() {
        checks.push(probe_run(backend, runner.language).await);
    }
    let jail_ok = checks.iter().any(|c| c.layer == "jail" && c.status == CheckStatus::Ok);
    checks.extend(super::container::container_check(jail_ok));
    checks
}

/// The sandbox uids, and whether conversations' `/data` can be idmapped (else every run uses the storage uid).
fn uid_check(backend: &JailBackend) -> Check {
    let uids = backend.sandbox_uids();
    let (storage, runs) = (uids.storage(), uids.run_uids());
    if let Some(account) = uids.host_account_inside() {
        return check("sandbox uids", CheckStatus::Failed, format!("{uids} includes the host's {account}"));
    }
    // The nearest existing directory of the conversation root: the filesystem that will hold conversations.
    let root = backend.data_root().map(std::path::Path::to_path_buf).unwrap_or_else(std::env::temp_dir);
    let existing = root.ancestors().find(|dir| dir.is_dir()).unwrap_or(std::path::Path::new("/")).to_path_buf();
    match crate::sys::idmap::probe(&existing, storage, *runs.start()) {
        Ok(()) => check(
            "sandbox uids",
            CheckStatus::Ok,
            format!(
                "{uids}: each concurrent run its own uid of {}, /data idmapped from the storage uid {storage}",
                runs.count()
            ),
        ),
        Err(e) => check(
            "sandbox uids",
            CheckStatus::Missing,
            format!(
                "no idmapped mounts on {} ({e}): every run uses the storage uid {storage}, so concurrent runs share \
                 one uid's limits (inotify instances)",
                existing.display()
            ),
        ),
    }
}

async fn probe_run(backend: &JailBackend, language: Language) -> Check {
    let dir = std::env::temp_dir().join(format!("sandlot-doctor-{}", std::process::id()));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        return check("jail", CheckStatus::Failed, format!("cannot create {}: {e}", dir.display()));
    }
    let job = Job {
        run_id: format!("doctor-{}", std::process::id()),
        language,
        code: probe_code(language).into(),
        es_module: false,
        stdin: Vec::new(),
        env: BTreeMap::new(),
        limits: Limits::default(),
        workspace: dir.clone(),
        layout: Default::default(),
        mounts: Vec::new(),
        network: None,
        cancel: Default::default(),
    };
    let result = backend.run(job, &()).await;
    let _ = std::fs::remove_dir_all(&dir);
    match result {
        Ok(outcome) if outcome.success() && outcome.stdout == "ok\n" => check(
            "jail",
            CheckStatus::Ok,
            format!("ran {language} in the sandbox in {} ms", outcome.duration.as_millis()),
        ),
        Ok(outcome) => check(
            "jail",
            CheckStatus::Failed,
            format!("{language} probe ended with {:?}: {}{}", outcome.termination, outcome.stdout, outcome.stderr),
        ),
        Err(e) => check("jail", CheckStatus::Failed, e.to_string()),
    }
}
