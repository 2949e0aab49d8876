//! Messages from the init to the supervisor, one JSON object a line on the report pipe (an inherited descriptor
//! whose number the supervisor passes on the init's command line).

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicI32, Ordering};

/// The descriptor the init reports on; its number comes on the init's command line.
static REPORT_FD: AtomicI32 = AtomicI32::new(-1);

/// Sets the report descriptor (once, at the start of the init).
pub fn set_report_fd(fd: RawFd) {
    REPORT_FD.store(fd, Ordering::Relaxed);
}

/// The report descriptor.
pub fn report_fd() -> RawFd {
    REPORT_FD.load(Ordering::Relaxed)
}

/// Longest report written without allocating (with its newline).
const SHORT_REPORT_BYTES: usize = 256;

/// One event of the init's life.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Report {
    /// The sandbox's pid 1 exists; this is its pid on the host (killing it kills the whole sandbox).
    Started { init_pid: i32 },
    /// The program exited with this code.
    Exited { code: i32 },
    /// The program was killed by this signal.
    Signaled { signal: i32 },
    /// Building the sandbox failed at this step.
    SetupFailed { step: String, error: String },
}

impl Report {
    /// Writes the report as one line to the report descriptor. Errors are ignored: the supervisor treats a
    /// missing report as a failure anyway. A report of up to [`SHORT_REPORT_BYTES`] is written from the stack,
    /// without allocating: the init sends [`Report::Started`] while pid 1 shares its memory (see [`crate::pid1`]).
    pub fn send(&self) {
        let mut short = [0u8; SHORT_REPORT_BYTES];
        let mut rest = &mut short[..];
        if serde_json::to_writer(&mut rest, self).is_ok() && !rest.is_empty() {
            let length = SHORT_REPORT_BYTES - rest.len();
            short[length] = b'\n';
            return write_line(&short[..=length]);
        }
        if let Ok(mut line) = serde_json::to_vec(self) {
            line.push(b'\n');
            write_line(&line);
        }
    }
}

/// A report as a log field shows it: words, not Rust's debug text.
impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Report::Started { init_pid } => write!(f, "started, init pid {init_pid}"),
            Report::Exited { code } => write!(f, "exited with code {code}"),
            Report::Signaled { signal } => write!(f, "killed by signal {signal}"),
            Report::SetupFailed { step, error } => write!(f, "setup failed at {step}: {error}"),
        }
    }
}

/// Writes one report line to the report descriptor.
fn write_line(line: &[u8]) {
    // SAFETY: writes a valid buffer to a descriptor; a closed or invalid fd only yields an error code.
    unsafe {
        libc::write(report_fd(), line.as_ptr().cast(), line.len());
    }
}

/// A failed setup step with the OS error, carried up to the init's top level.
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
        Report::SetupFailed { step: self.step, error: self.error }.send();
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
