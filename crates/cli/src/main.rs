//! The `sandlot` binary: `serve`, `stdio`, `run`, `runners`, `doctor`, plus the hidden jail init
//! and zygote that the native backend starts by re-executing this binary.

mod cli;
mod commands;
mod logs;

use std::process::ExitCode;

/// musl's allocator is slow for a multi-threaded server (tools/list fell from ~14,500 to ~3,100 requests per second
/// with it); mimalloc keeps the musl build as fast as the glibc one (docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // The jail init and zygote must start before anything else (no runtime, no threads): check for them by hand.
    sandlot_jail::run_hidden_subcommand();
    // The TypeScript transform's helper, which a server runs per TypeScript run (sandlot_core::typescript).
    sandlot_core::typescript::run_helper_if_asked();
    // Before the init is forked, which inherits the log (a no-op without the `phases` feature).
    sandlot_core::marks::open();
    sandlot_core::marks::mark("c.main");
    // `run` forks the jail init of its one run first thing, while this process has a single thread (a server has its
    // zygote clone them instead) and has touched little memory (so neither process copies much of the other's).
    let forked_init = (std::env::args_os().nth(1).is_some_and(|command| command == "run"))
        .then(sandlot_jail::fork_init_for_one_shot)
        .and_then(Result::ok);
    sandlot_core::marks::mark("c.forked");
    // Logs go to stderr (stdout is the wire for `stdio` and the program's output for `run`); SANDLOT_LOG sets the
    // filter, SANDLOT_LOG_FORMAT=json makes them JSON lines. Set up before the command line is parsed, so that a bad
    // option value is reported in the format asked for.
    if let Err(message) = logs::init(logs::default_filter(std::env::args_os().nth(1).as_deref())) {
        logs::fail(&message);
        return ExitCode::from(2);
    }
    let cli = cli::parse();
    sandlot_core::marks::mark("c.parsed");
    // Only the native backend uses it; otherwise it is dropped, and it exits when it finds no spec.
    let forked_init = match &cli.command {
        cli::Command::Run(args) if args.sandbox.backend == cli::BackendKind::Native => forked_init,
        _ => None,
    };
    // `run` drives one sandbox: a single-threaded runtime starts faster; the other commands get the usual one.
    let mut builder = match &cli.command {
        cli::Command::Run(_) => tokio::runtime::Builder::new_current_thread(),
        _ => tokio::runtime::Builder::new_multi_thread(),
    };
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            logs::fail(&format!("cannot start the async runtime: {e}"));
            return ExitCode::from(1);
        }
    };
    sandlot_core::marks::mark("c.runtime");
    runtime.block_on(commands::dispatch(cli, forked_init))
}
