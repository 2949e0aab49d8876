//! The sandbox side's voice: [`InitEvent`]s written to [`EVENTS_FD`], and [`SetupError`], a failed step carried
//! up to the top of the init, pid 1 or the worker, which reports it and exits. Nothing in the sandbox side ever
//! prints: stdout and stderr belong to the program.

use crate::protocol::{EVENTS_FD, InitEvent};

/// Sends one event. Errors are ignored: the supervisor treats a missing event as a failure anyway.
pub fn send(event: &InitEvent) {
    send_line(&event.to_line());
}

/// Sends a line already made (see `protocol::pid1_started_line`), without allocating.
pub fn send_line(line: &[u8]) {
    // SAFETY: writes a valid buffer to a descriptor; a closed or invalid fd only yields an error code.
    unsafe { libc::write(EVENTS_FD, line.as_ptr().cast(), line.len()) };
}

/// A failed setup step with the OS error.
#[derive(Debug)]
pub struct SetupError {
    pub step: String,
    pub error: String,
}

impl SetupError {
    /// A failure of `step` with the error's text.
    pub fn new(step: impl Into<String>, error: impl std::fmt::Display) -> Self {
        Self { step: step.into(), error: error.to_string() }
    }

    /// Reports the failure and ends the process.
    pub fn report_and_exit(self) -> ! {
        send(&InitEvent::SetupFailed { step: self.step, error: self.error });
        // SAFETY: _exit ends the process without running destructors, which is what a forked child must do.
        unsafe { libc::_exit(126) }
    }
}

/// Adds the step's name to an error.
pub trait Step<T> {
    fn step(self, step: impl FnOnce() -> String) -> Result<T, SetupError>;
}

impl<T, E: std::fmt::Display> Step<T> for Result<T, E> {
    fn step(self, step: impl FnOnce() -> String) -> Result<T, SetupError> {
        self.map_err(|e| SetupError::new(step(), e))
    }
}
