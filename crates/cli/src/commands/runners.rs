//! `sandlot runners`: the interpreters the native backend found.

use std::process::ExitCode;

use sandlot_core::{Language, TypeScriptMode};

use crate::cli::RunnersArgs;

pub fn runners(args: RunnersArgs) -> anyhow::Result<ExitCode> {
    let mut runners =
        sandlot_jail::discover_runners(&sandlot_core::Language::ALL, &sandlot_jail::RunnerOverrides::from_env(), true);
    if args.typescript_mode == TypeScriptMode::Strip {
        // TypeScript is stripped in the server and run by JavaScript's node, as the engine lists it.
        runners.retain(|r| r.language != Language::TypeScript);
        if let Some(node) = runners.iter().find(|r| r.language == Language::JavaScript) {
            runners.push(sandlot_jail::HostRunner { language: Language::TypeScript, ..node.clone() });
            runners.sort_by_key(|r| r.language);
        }
    }
    if args.json {
        let list: Vec<_> = runners
            .iter()
            .map(|r| {
                serde_json::json!({
                    "language": r.language,
                    "image": r.program.display().to_string(),
                    "version": r.version,
                    "packages": r.packages,
                    "args": r.args,
                    "extraReadOnlyBinds": r.extra_ro_binds,
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "languages": list }))?);
    } else {
        for r in &runners {
            let args = if r.args.is_empty() { String::new() } else { format!(" {}", r.args.join(" ")) };
            let packages: Vec<String> = r.packages.iter().map(|(name, version)| format!("{name} {version}")).collect();
            let packages = if packages.is_empty() { String::new() } else { format!(" ({})", packages.join(", ")) };
            println!(
                "{:<11} {:<40} {}{packages}",
                r.language.as_str(),
                format!("{}{args}", r.program.display()),
                r.version
            );
        }
    }
    Ok(if runners.is_empty() { ExitCode::from(1) } else { ExitCode::SUCCESS })
}
