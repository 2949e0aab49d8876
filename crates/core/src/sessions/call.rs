//! One call in a live sandbox: a cell through a language's driver, or a command as a process of its own.
//!
//! A cell ends at its driver's end markers. Its deadline or cancellation sends SIGINT (to the shell's process group
//! for Bash, whose foreground command must get it; to the interpreter alone otherwise) and waits
//! [`INTERRUPT_GRACE`] for the markers: an interpreter that survives keeps its state; one that does not stop is
//! killed. Output is kept within the run's caps and forwarded live, as a run's is.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::InterpreterStatus;
use super::config::INTERRUPT_GRACE;
use super::driver::{self, DriverOutput};
use crate::{
    CapturedStream, Error, Job, Language, LiveSandbox, OutputChunk, OutputSink, ProcessHandle, Result, RunOutcome,
    Spawn, Stream, Termination,
};

const SIGINT: i32 = 2;
const SIGKILL: i32 = 9;
/// How long a command's output is still read after it exited: what its last writes left in the pipes (a process
/// it left in the background may hold them open for ever).
const DRAIN: Duration = Duration::from_millis(200);

/// A language's persistent interpreter in a live sandbox.
pub(crate) struct Driver {
    stdin: std::pin::Pin<Box<dyn AsyncWrite + Send>>,
    output: DriverOutput,
    handle: Arc<dyn ProcessHandle>,
    calls: u64,
}

impl Driver {
    /// Starts the driver of `key` (a `driver::driver_language`). The JavaScript driver also runs TypeScript cells,
    /// so it is started as TypeScript's (`node` with esbuild) when the backend can, else as JavaScript's.
    pub async fn start(sandbox: &dyn LiveSandbox, key: Language) -> Result<Self> {
        let spawn = driver::spawn_for(key);
        let process = if key == Language::JavaScript {
            let typescript = Spawn { language: Language::TypeScript, ..spawn.clone() };
            match sandbox.spawn(typescript).await {
                Ok(process) => process,
                Err(_) => sandbox.spawn(spawn).await?,
            }
        } else {
            sandbox.spawn(spawn).await?
        };
        Ok(Self {
            stdin: process.stdin,
            output: DriverOutput::new(process.stdout, process.stderr),
            handle: process.handle,
            calls: 0,
        })
    }

    pub fn status(&self, language: Language) -> InterpreterStatus {
        InterpreterStatus { language, pid: self.handle.pid(), calls: self.calls }
    }

    /// Kills the interpreter alone: what it started in the background stays.
    pub async fn kill(self) {
        let _ = self.handle.signal(SIGKILL, false).await;
    }
}

/// How a cell went.
pub(crate) struct Cell {
    pub termination: Termination,
    pub stdout: CapturedStream,
    pub stderr: CapturedStream,
    pub duration: Duration,
    /// Set when the interpreter is gone: the caller drops it, and its state with it.
    pub gone: Option<Gone>,
}

/// An interpreter that ended during a cell.
pub(crate) struct Gone {
    /// The cell had been interrupted (its deadline or cancellation).
    pub interrupted: bool,
    /// sandlot killed it: it did not stop within the grace after the interrupt.
    pub killed: bool,
    /// How it ended.
    pub exit: Termination,
}

impl Gone {
    /// What happened, in a sentence for the model.
    pub fn cause(&self, language: Language, out_of_memory: bool, memory_mb: u64, termination: &Termination) -> String {
        let _ = termination;
        if self.killed {
            format!(
                "the {language} interpreter did not stop within {} s of the interrupt and was killed",
                INTERRUPT_GRACE.as_secs()
            )
        } else if out_of_memory {
            format!(
                "the {language} interpreter was killed: out of memory (the session's sandbox has {memory_mb} MiB for \
                 everything it runs)"
            )
        } else {
            match self.exit {
                Termination::Exited { code } => format!("the {language} interpreter exited (code {code})"),
                Termination::Signaled { signal } => format!("the {language} interpreter was killed by signal {signal}"),
                ref other => format!("the {language} interpreter ended ({})", other.kind()),
            }
        }
    }
}

enum Ending {
    Cell(driver::CellEnd),
    Gone,
    Interrupted { stop: Termination, survived: bool },
    Killed { stop: Termination },
}

/// Runs the job's code as one cell of `driver`.
pub(crate) async fn run_cell(driver: &mut Driver, job: &Job, sink: &dyn OutputSink) -> Cell {
    let started = Instant::now();
    let cap = job.limits.max_output_bytes;
    let (mut stdout, mut stderr) = (CapturedStream::new(cap), CapturedStream::new(cap));
    let nonce = driver::new_nonce();
    let group = job.language == Language::Bash;
    let Driver { stdin, output, handle, calls } = driver;
    *calls += 1;
    let request = driver::encode_request(&nonce, job.language, &job.code);
    let sent = async {
        stdin.write_all(&request).await?;
        stdin.flush().await
    };
    let ending = if sent.await.is_err() {
        Ending::Gone
    } else {
        let mut forward = |stream: Stream, bytes: &[u8]| {
            let kept = match stream {
                Stream::Stdout => stdout.push(bytes),
                Stream::Stderr => stderr.push(bytes),
            };
            if !kept.is_empty() {
                sink.output(OutputChunk { stream, data: kept.to_vec() });
            }
        };
        drive(output, handle.as_ref(), &nonce, group, job, &mut forward).await
    };
    let (termination, gone) = match ending {
        Ending::Cell(end) if end.exiting => {
            let exit = ended(handle.as_ref()).await;
            (Termination::Exited { code: end.exit_code }, Some(Gone { interrupted: false, killed: false, exit }))
        }
        Ending::Cell(end) => (Termination::Exited { code: end.exit_code }, None),
        Ending::Interrupted { stop, survived: true } => (stop, None),
        Ending::Gone => {
            let exit = ended(handle.as_ref()).await;
            (exit.clone(), Some(Gone { interrupted: false, killed: false, exit }))
        }
        Ending::Interrupted { stop, survived: false } => {
            let exit = ended(handle.as_ref()).await;
            (stop, Some(Gone { interrupted: true, killed: false, exit }))
        }
        Ending::Killed { stop } => {
            let exit = ended(handle.as_ref()).await;
            (stop, Some(Gone { interrupted: true, killed: true, exit }))
        }
    };
    flush_rest(&stdout, &stderr, sink);
    Cell { termination, stdout, stderr, duration: started.elapsed(), gone }
}

/// Reads the cell to its end, its deadline or its cancellation, then interrupts it.
async fn drive(
    output: &mut DriverOutput,
    handle: &dyn ProcessHandle,
    nonce: &str,
    group: bool,
    job: &Job,
    forward: &mut (dyn FnMut(Stream, &[u8]) + Send),
) -> Ending {
    let read = output.read_cell(nonce, forward);
    tokio::pin!(read);
    let stop = tokio::select! {
        end = &mut read => return match end {
            Ok(end) => Ending::Cell(end),
            Err(_) => Ending::Gone,
        },
        () = tokio::time::sleep(job.limits.timeout) => Termination::TimedOut,
        () = job.cancel.cancelled() => Termination::Cancelled,
    };
    // SIGINT again every second of the grace: one can be lost (a Bash cell's child forked as it arrives does not
    // get it and the shell waits for the child; node can miss one between two checks).
    let grace = tokio::time::sleep(INTERRUPT_GRACE);
    let mut again = tokio::time::interval(Duration::from_secs(1));
    tokio::pin!(grace);
    loop {
        tokio::select! {
            end = &mut read => return Ending::Interrupted { stop, survived: end.is_ok() },
            _ = again.tick() => { let _ = handle.signal(SIGINT, group).await; }
            () = &mut grace => {
                let _ = handle.signal(SIGKILL, group).await;
                return Ending::Killed { stop };
            }
        }
    }
}

/// How an interpreter whose streams closed ended (bounded: a process that closed its streams and lingers is
/// killed).
async fn ended(handle: &dyn ProcessHandle) -> Termination {
    match tokio::time::timeout(INTERRUPT_GRACE, handle.wait()).await {
        Ok(termination) => termination,
        Err(_) => {
            let _ = handle.signal(SIGKILL, false).await;
            handle.wait().await
        }
    }
}

/// What the caps kept past their heads (the tail, after a cut marker) goes to the live listeners at the end, as a
/// run's does.
fn flush_rest(stdout: &CapturedStream, stderr: &CapturedStream, sink: &dyn OutputSink) {
    for (stream, captured) in [(Stream::Stdout, stdout), (Stream::Stderr, stderr)] {
        let rest = captured.rest();
        if !rest.is_empty() {
            sink.output(OutputChunk { stream, data: rest });
        }
    }
}

/// Runs the job's code as a process of its own in the sandbox: `python3 -c`, `node -e` or `bash -c`.
pub(crate) async fn run_process(sandbox: &dyn LiveSandbox, job: &Job, sink: &dyn OutputSink) -> Result<RunOutcome> {
    let flag = match job.language {
        Language::Python | Language::Bash => "-c",
        Language::JavaScript => "-e",
        Language::TypeScript => {
            return Err(Error::invalid(
                "language",
                "a command of its own in a live sandbox runs Python, JavaScript or Bash, not TypeScript",
            ));
        }
    };
    let started = Instant::now();
    let spawn = Spawn { language: job.language, args: vec![flag.into(), job.code.clone()], env: job.env.clone() };
    let mut process = sandbox.spawn(spawn).await?;
    if !job.stdin.is_empty() {
        let _ = process.stdin.write_all(&job.stdin).await;
    }
    drop(process.stdin);
    let cap = job.limits.max_output_bytes;
    let (mut stdout, mut stderr) = (CapturedStream::new(cap), CapturedStream::new(cap));
    let termination =
        pump((process.stdout.as_mut(), process.stderr.as_mut()), process.handle.as_ref(), job, &mut |stream, bytes| {
            let kept = match stream {
                Stream::Stdout => stdout.push(bytes),
                Stream::Stderr => stderr.push(bytes),
            };
            if !kept.is_empty() {
                sink.output(OutputChunk { stream, data: kept.to_vec() });
            }
        })
        .await;
    flush_rest(&stdout, &stderr, sink);
    Ok(RunOutcome::from_streams(termination, stdout, stderr, started.elapsed()))
}

type Streams<'a> = (std::pin::Pin<&'a mut (dyn AsyncRead + Send)>, std::pin::Pin<&'a mut (dyn AsyncRead + Send)>);

/// Reads a command's two streams until it ended (and [`DRAIN`] after), killing its process group at the deadline
/// or on cancellation.
async fn pump(
    (mut stdout, mut stderr): Streams<'_>,
    handle: &dyn ProcessHandle,
    job: &Job,
    forward: &mut (dyn FnMut(Stream, &[u8]) + Send),
) -> Termination {
    let (mut out_buf, mut err_buf) = (vec![0u8; 16 * 1024], vec![0u8; 16 * 1024]);
    let (mut out_open, mut err_open) = (true, true);
    let mut forced = None;
    let mut exit = None;
    let deadline = tokio::time::sleep(job.limits.timeout);
    let drain = tokio::time::sleep(Duration::from_secs(365 * 86400));
    let wait = handle.wait();
    tokio::pin!(deadline, drain, wait);
    while out_open || err_open {
        tokio::select! {
            read = stdout.read(&mut out_buf), if out_open => match read {
                Ok(n) if n > 0 => forward(Stream::Stdout, &out_buf[..n]),
                _ => out_open = false,
            },
            read = stderr.read(&mut err_buf), if err_open => match read {
                Ok(n) if n > 0 => forward(Stream::Stderr, &err_buf[..n]),
                _ => err_open = false,
            },
            termination = &mut wait, if exit.is_none() => {
                exit = Some(termination);
                drain.as_mut().reset(tokio::time::Instant::now() + DRAIN);
            }
            () = &mut drain, if exit.is_some() => break,
            () = &mut deadline, if forced.is_none() && exit.is_none() => {
                forced = Some(Termination::TimedOut);
                let _ = handle.signal(SIGKILL, true).await;
            }
            () = job.cancel.cancelled(), if forced.is_none() && exit.is_none() => {
                forced = Some(Termination::Cancelled);
                let _ = handle.signal(SIGKILL, true).await;
            }
        }
    }
    let exit = match exit {
        Some(exit) => exit,
        None => wait.await,
    };
    forced.unwrap_or(exit)
}
