//! `sandlot doctor`: each isolation layer on this host, and a probe run.

use std::process::ExitCode;

use sandlot_jail::CheckStatus;

use crate::cli::SandboxArgs;

pub async fn doctor(args: SandboxArgs) -> anyhow::Result<ExitCode> {
    // A diagnosis does not change the host: no cgroup tuning here (doctor reports whether it is on).
    let args = SandboxArgs { tune_cgroups: false, ..args };
    let backend = super::jail_backend(&args, None, true, 0)?;
    let checks = sandlot_jail::diagnose(&backend).await;
    for check in &checks {
        let status = match check.status {
            CheckStatus::Ok => "ok",
            CheckStatus::Missing => "MISSING",
            CheckStatus::Failed => "FAILED",
        };
        println!("{status:<8} {:<16} {}", check.layer, check.detail);
    }
    let failed = checks.iter().any(|c| c.status == CheckStatus::Failed);
    Ok(if failed { ExitCode::from(1) } else { ExitCode::SUCCESS })
}
