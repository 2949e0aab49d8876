//! `sandlot doctor`: each isolation layer of the native jail on this host and a probe run, then the Docker engine
//! and its runner images. Exits 1 when the chosen backend (`--backend`) cannot run code.

use std::process::ExitCode;

use sandlot_core::Backend;
use sandlot_jail::{Check, CheckStatus};

use crate::cli::{BackendKind, SandboxArgs};

pub async fn doctor(args: SandboxArgs) -> anyhow::Result<ExitCode> {
    // A diagnosis does not change the host: no cgroup tuning here (doctor reports whether it is on).
    let args = SandboxArgs { tune_cgroups: false, ..args };
    let backend =
        super::jail_backend(&args, None, true, sandlot_jail::ProcessModel::Server { warm_inits: 0 }, false, None)?;
    let mut checks = sandlot_jail::diagnose(&backend).await;
    let native_failed = checks.iter().any(|c| c.status == CheckStatus::Failed);
    checks.push(disk_quota_check(&args));
    let docker = docker_check(&args).await;
    let docker_failed = docker.status == CheckStatus::Failed;
    checks.push(docker);
    for check in &checks {
        let status = match check.status {
            CheckStatus::Ok => "ok",
            CheckStatus::Missing => "MISSING",
            CheckStatus::Failed => "FAILED",
        };
        println!("{status:<8} {:<16} {}", check.layer, check.detail);
    }
    let failed = match args.backend {
        BackendKind::Native => native_failed,
        BackendKind::Docker => docker_failed,
    };
    Ok(if failed { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

/// Which disk quota is in force for `/data` (both backends): the kernel's, a disk image per conversation, where
/// this host allows it; else the watchdog alone.
fn disk_quota_check(args: &SandboxArgs) -> Check {
    let (disk_mb, inodes) = (args.disk_mb, args.disk_inodes);
    match sandlot_core::DiskImages::detect(disk_mb, inodes) {
        Ok(_) => Check {
            layer: "disk quota",
            status: CheckStatus::Ok,
            detail: format!(
                "kernel: each conversation's /data is an ext4 image of its own ({disk_mb} MiB, {inodes} inodes), \
                 loop-mounted nosuid,nodev; the watchdog reads its counters every 250 ms (docs/security.md, \
                 \"Disk quota\")"
            ),
        },
        Err(why) => Check {
            layer: "disk quota",
            status: CheckStatus::Missing,
            detail: format!(
                "watchdog only ({why}): allocated blocks of every inode and every entry of /data ({disk_mb} MiB, \
                 {inodes} inodes), walked every 250 ms to 5 s while a run goes on; no kernel-enforced bound \
                 (docs/security.md, \"Disk quota\")"
            ),
        },
    }
}

/// The Docker engine, its version and the runner images. Unreachable is a failure only for `--backend docker`.
async fn docker_check(args: &SandboxArgs) -> Check {
    let unusable = if args.backend == BackendKind::Docker { CheckStatus::Failed } else { CheckStatus::Missing };
    let owner = args.root.display().to_string();
    match sandlot_docker::DockerBackend::connect(sandlot_docker::DockerConfig::new(owner)).await {
        Err(e) => Check { layer: "docker", status: unusable, detail: format!("unreachable: {e}") },
        Ok(docker) => {
            let version = docker.engine_version().await.unwrap_or_else(|e| format!("version unknown: {e}"));
            let runners: Vec<String> = docker.runners().iter().map(|r| format!("{}={}", r.language, r.image)).collect();
            if runners.is_empty() {
                let detail = format!("engine {version}; no runner image (scripts/build-runners.sh)");
                Check { layer: "docker", status: unusable, detail }
            } else {
                Check {
                    layer: "docker",
                    status: CheckStatus::Ok,
                    detail: format!("engine {version}; {}", runners.join(", ")),
                }
            }
        }
    }
}
