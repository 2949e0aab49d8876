//! Where sandlot's own lines go: stderr only (stdout is the wire for `stdio` and the program's output for `run`),
//! as text or, with `SANDLOT_LOG_FORMAT=json`, one JSON object per line (tracing-subscriber's JSON format: `timestamp`,
//! `level`, `fields` with the `message`, `target`, and the `span`/`spans` a line was logged in, such as a request's
//! with its `request_id`). `SANDLOT_LOG` sets the filter.
//!
//! Invariants: colour codes only when stderr is a terminal (and `NO_COLOR` is unset); in JSON mode every line sandlot
//! writes to stderr once logging is set up is JSON, the start banner and the messages of a failed start included
//! ([`say`], [`fail`]), so a log collector never gets a line it cannot parse. Usage errors of the command line itself
//! (an unknown flag, `--help`) stay clap's text: they are for the person typing the command.

use std::io::IsTerminal;
use std::sync::OnceLock;

/// Whether logs are JSON lines; set once, by [`init`].
static JSON: OnceLock<bool> = OnceLock::new();

/// Whether `SANDLOT_LOG_FORMAT=json` was asked for (and logging set up).
pub fn json() -> bool {
    JSON.get().copied().unwrap_or(false)
}

/// Sets up logging to stderr with `default_filter` unless `SANDLOT_LOG` says otherwise. The error is the line to print
/// (a bad `SANDLOT_LOG` or `SANDLOT_LOG_FORMAT`), for exit code 2.
pub fn init(default_filter: &str) -> Result<(), String> {
    let filter = match std::env::var("SANDLOT_LOG") {
        Err(_) => tracing_subscriber::EnvFilter::new(default_filter),
        Ok(directives) => tracing_subscriber::EnvFilter::try_new(&directives)
            .map_err(|e| format!("invalid SANDLOT_LOG={directives:?}: {e}"))?,
    };
    let json = match std::env::var("SANDLOT_LOG_FORMAT").as_deref() {
        Err(_) | Ok("text") => false,
        Ok("json") => true,
        Ok(other) => return Err(format!("invalid SANDLOT_LOG_FORMAT={other:?}: expected text or json")),
    };
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let logs = tracing_subscriber::fmt().with_writer(std::io::stderr).with_env_filter(filter).with_ansi(ansi);
    if json {
        logs.json().init();
        // A panic's message as a JSON line too (the default hook prints text).
        std::panic::set_hook(Box::new(|info| {
            let location = info.location().map(|l| format!("{}:{}", l.file(), l.line())).unwrap_or_default();
            tracing::error!(location, "panic: {}", panic_message(info));
        }));
    } else {
        logs.init();
    }
    let _ = JSON.set(json);
    Ok(())
}

fn panic_message(info: &std::panic::PanicHookInfo<'_>) -> String {
    let payload = info.payload();
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_owned())
}

/// A line for the operator: `sandlot: <text>` in text mode, an info event in JSON mode.
pub fn say(text: &str) {
    if json() {
        tracing::info!("{text}");
    } else {
        eprintln!("sandlot: {text}");
    }
}

/// The line of a failed command or start: `sandlot: <text>` in text mode, an error event in JSON mode.
pub fn fail(text: &str) {
    if json() {
        tracing::error!("{text}");
    } else {
        eprintln!("sandlot: {text}");
    }
}
