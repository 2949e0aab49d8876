//! `sandlot stdio`: the MCP tools over stdin and stdout, or with `--profile open-sandbox` that profile's
//! newline-delimited JSON-RPC. Nothing but protocol goes to stdout.

use std::process::ExitCode;

use sandlot_server::surfaces::{Profile, open_sandbox};

use crate::cli::StdioArgs;

pub async fn stdio(args: StdioArgs) -> anyhow::Result<ExitCode> {
    if let Err(message) = super::check_file_url_args(&args.files) {
        crate::logs::fail(&message);
        return Ok(ExitCode::from(2));
    }
    let profile = args.profile.0;
    if let Some(profile) = profile.filter(|p| *p != Profile::OpenSandbox) {
        crate::logs::fail(&format!("profile {} has no stdio surface (only open-sandbox has one)", profile.name()));
        return Ok(ExitCode::from(2));
    }
    let state = super::app_state(&args.sandbox, &args.service, &args.files, "http://127.0.0.1:8080", 1).await?;
    let engine = state.engine.clone();
    let served = match profile {
        Some(_) => {
            let input = tokio::io::BufReader::new(tokio::io::stdin());
            open_sandbox::stdio::serve(state, input, tokio::io::stdout()).await
        }
        None => sandlot_server::surfaces::sandlot::serve_stdio(state).await,
    };
    // Runs still going when stdin closed are cancelled; what outlives this process (containers) goes first.
    super::abort_all(&engine).await;
    served?;
    Ok(ExitCode::SUCCESS)
}
