//! One module per subcommand.

mod doctor;
mod run;
mod runners;

use std::process::ExitCode;
use std::sync::Arc;

use sandlot_jail::{JailBackend, JailConfig};

use crate::cli::{Cli, Command, SandboxArgs};

/// Runs the chosen subcommand.
/// Runs the chosen subcommand; `prefork` is an init started before the runtime, for `run`.
pub async fn dispatch(cli: Cli, prefork: Option<sandlot_jail::Prefork>) -> ExitCode {
    let result = match cli.command {
        Command::Run(args) => run::run(args, prefork).await,
        Command::Runners(args) => runners::runners(args),
        Command::Doctor(args) => doctor::doctor(args).await,
    };
    result.unwrap_or_else(|e| {
        eprintln!("sandlot: {e:#}");
        ExitCode::from(1)
    })
}

/// The native backend, for the given languages (all when empty), with versions probed or not.
pub fn jail_backend(
    sandbox: &SandboxArgs,
    languages: Option<Vec<sandlot_core::Language>>,
    probe_versions: bool,
) -> anyhow::Result<Arc<JailBackend>> {
    let exe = std::env::current_exe().map_err(|e| anyhow::anyhow!("cannot find the sandlot binary: {e}"))?;
    let mut config = JailConfig::new(exe);
    config.sandbox_host_uid = sandbox.sandbox_uid;
    config.sandbox_host_gid = sandbox.sandbox_uid;
    config.probe_versions = probe_versions;
    config.tune_cgroups = sandbox.tune_cgroups;
    if let Some(languages) = languages {
        config.languages = languages;
    }
    Ok(Arc::new(JailBackend::new(config)))
}
