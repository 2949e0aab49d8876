//! Where sandlot's own lines go: stderr only (stdout is the wire for `stdio` and the program's output for `run`),
//! as text or, with `SANDLOT_LOG_FORMAT=json`, one JSON object per line (tracing-subscriber's JSON format: `timestamp`,
//! `level`, `fields` with the `message`, `target`, and the `span`/`spans` a line was logged in, such as a request's
//! with its `request_id`). `SANDLOT_LOG` sets the filter.
//!
//! Invariants: colour codes only when stderr is a terminal (and `NO_COLOR` is unset); in JSON mode every line sandlot
//! writes to stderr once the format is known is JSON, the start banner and the messages of a failed start included
//! ([`say`], [`warn`], [`fail`]; `main` sets logging up before it reads the command line, so a bad option value is
//! one too), so a log collector never gets a line it cannot parse. Only a bad `SANDLOT_LOG_FORMAT` itself and the
//! usage errors of the command line (an unknown flag, `--help`) stay text: the latter are clap's, for the person
//! typing the command. Every line of these functions is one line in either format: their text is
//! [`Escaped`], as caller-supplied values logged anywhere else must be (tracing's text format writes a `%` field's
//! newlines and escape sequences as they are).

use std::io::IsTerminal;
use std::sync::OnceLock;

use sandlot_core::Escaped;

/// Whether logs are JSON lines; set once, by [`init`].
static JSON: OnceLock<bool> = OnceLock::new();

/// Whether `SANDLOT_LOG_FORMAT=json` was asked for (and logging set up).
pub fn json() -> bool {
    JSON.get().copied().unwrap_or(false)
}

/// The default filter for the command named by the first argument: `info` for the servers (rmcp only from errors:
/// its warnings are the errors it answers a client with, which sandlot logs itself with a trace id, written as Rust
/// debug text and with a second `message` key), `warn` otherwise. Read from the raw arguments because logging is set
/// up before they are parsed.
pub fn default_filter(command: Option<&std::ffi::OsStr>) -> &'static str {
    match command.and_then(|c| c.to_str()) {
        Some("serve" | "stdio") => "info,rmcp=error",
        _ => "warn",
    }
}

/// Sets up logging to stderr with `default_filter` unless `SANDLOT_LOG` says otherwise. The error is the line to
/// print with [`fail`] (a bad `SANDLOT_LOG` or `SANDLOT_LOG_FORMAT`), for exit code 2; after a bad `SANDLOT_LOG`
/// logging is set up all the same, with `default_filter`, so that the line is in the format asked for.
pub fn init(default_filter: &str) -> Result<(), String> {
    let json = match std::env::var("SANDLOT_LOG_FORMAT").as_deref() {
        Err(_) | Ok("text") => false,
        Ok("json") => true,
        Ok(other) => return Err(format!("invalid SANDLOT_LOG_FORMAT={other:?}: expected text or json")),
    };
    let (filter, bad_filter) = match std::env::var("SANDLOT_LOG") {
        Err(_) => (tracing_subscriber::EnvFilter::new(default_filter), None),
        Ok(directives) => match tracing_subscriber::EnvFilter::try_new(&directives) {
            Ok(filter) => (filter, None),
            Err(e) => (
                tracing_subscriber::EnvFilter::new(default_filter),
                Some(format!("invalid SANDLOT_LOG={directives:?}: {e}")),
            ),
        },
    };
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    // A line that cannot be written (stderr closed, or a pipe nobody reads) is dropped: reporting the failure would
    // `eprint!` to the same stderr, which panics the thread that logged, and a server must keep serving.
    let logs = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter)
        .with_ansi(ansi)
        .log_internal_errors(false);
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
    bad_filter.map_or(Ok(()), Err)
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
        tracing::info!("{}", Escaped(text));
    } else {
        eprintln!("sandlot: {}", Escaped(text));
    }
}

/// A warning for the operator (how a run ended, what it lost): `sandlot: <text>` in text mode, a warn event in JSON
/// mode (which the commands' default filter, `warn`, lets through where it would drop [`say`]'s).
pub fn warn(text: &str) {
    if json() {
        tracing::warn!("{}", Escaped(text));
    } else {
        eprintln!("sandlot: {}", Escaped(text));
    }
}

/// The line of a failed command or start: `sandlot: <text>` in text mode, an error event in JSON mode.
pub fn fail(text: &str) {
    if json() {
        tracing::error!("{}", Escaped(text));
    } else {
        eprintln!("sandlot: {}", Escaped(text));
    }
}
