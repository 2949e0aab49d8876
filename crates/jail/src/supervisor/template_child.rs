//! A template's child as the supervisor sees it: what it is told (a [`ChildSpec`], as the JSON the child reads from its
//! memfd; a prepared sandbox's child is told its [`ChildSetup`] when forked and its [`ChildJob`] when its run comes)
//! and what the template says of it on its status pipe ([`Forked`]: `p <pid>`, then `e <code> <cpu>` or
//! `s <signal> <cpu>`; `f <why>` when its setup failed; `r` from the child just before the run's code may run; a
//! prepared child says `w` when it waits for its job).

use std::path::{Path, PathBuf};

use sandlot_core::Termination;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::unix::pipe;

use crate::protocol::{HomeMount, RlimitSpec};

/// What a child runs: a file of the sandbox, as `python <file>` does (`source`: the child writes it there first),
/// or code, as `python -c <code>` does.
pub enum Program<'a> {
    File { path: &'a Path, source: Option<&'a str> },
    Code(&'a str),
}

/// A child's whole run: who it is and what it runs.
pub struct ChildSpec<'a> {
    pub setup: ChildSetup,
    pub job: ChildJob<'a>,
}

/// Who a child is in its sandbox, known as soon as the sandbox is.
pub struct ChildSetup {
    /// The child says its program's end itself (`x <code>`, see [`Forked::ended`]): a run's child, whose end ends
    /// the run; not a live sandbox's process, whose end the template reports with its CPU.
    pub says_its_end: bool,
    /// The host uid and gid of the sandbox's pid 1, which the child takes.
    pub ids: (u32, u32),
    /// Landlock's scopes (no signal to, no abstract socket of, a process outside the child's domain): a run is
    /// alone in its sandbox; a live sandbox's processes must reach each other, and the others are in pid 1's domain.
    pub scoped: bool,
    /// The command line it shows (`/proc/<pid>/cmdline`): the exec'd equivalent's.
    pub command: Vec<String>,
}

/// What a child runs, and under which limits.
pub struct ChildJob<'a> {
    pub rlimits: &'a RlimitSpec,
    pub landlock: bool,
    pub home: Option<&'a HomeMount>,
    /// The whole environment.
    pub env: &'a [(String, String)],
    pub program: Program<'a>,
}

/// The run as the child reads it (see `python_template.py`), with the jail's seccomp program in hex.
pub fn run_json(child: &ChildSpec, seccomp_hex: &str) -> Vec<u8> {
    let mut run = setup_fields(&child.setup, seccomp_hex);
    run.extend(job_fields(&child.job));
    serde_json::Value::Object(run).to_string().into_bytes()
}

/// What a prepared child is told when it is forked.
pub fn setup_json(setup: &ChildSetup, seccomp_hex: &str) -> Vec<u8> {
    serde_json::Value::Object(setup_fields(setup, seccomp_hex)).to_string().into_bytes()
}

/// What a prepared child is told when its run comes.
pub fn job_json(job: &ChildJob) -> Vec<u8> {
    serde_json::Value::Object(job_fields(job)).to_string().into_bytes()
}

fn setup_fields(setup: &ChildSetup, seccomp_hex: &str) -> serde_json::Map<String, serde_json::Value> {
    let (uid, gid) = setup.ids;
    let fields = serde_json::json!({
        "uid": uid,
        "gid": gid,
        "scoped": setup.scoped,
        "says_its_end": setup.says_its_end,
        "command": setup.command,
        "seccomp": seccomp_hex,
    });
    match fields {
        serde_json::Value::Object(map) => map,
        _ => unreachable!("a JSON object literal"),
    }
}

fn job_fields(child: &ChildJob) -> serde_json::Map<String, serde_json::Value> {
    let home = child.home;
    let cwd = match home {
        Some(home) if home.scratch_mb.is_none() => home.path.clone(),
        _ => PathBuf::from("/data"),
    };
    let mut writable: Vec<PathBuf> = ["/data", "/tmp", "/dev/shm"].into_iter().map(PathBuf::from).collect();
    writable.extend(home.map(|home| home.path.clone()));
    let (program, argv, path0) = match child.program {
        Program::File { path, source } => {
            let dir = path.parent().unwrap_or(Path::new("/"));
            let program = match source {
                Some(source) => serde_json::json!({ "file": path, "source": source }),
                None => serde_json::json!({ "file": path }),
            };
            (program, vec![path.to_string_lossy().into_owned()], dir.to_owned())
        }
        Program::Code(code) => (serde_json::json!({ "code": code }), vec!["-c".to_owned()], PathBuf::new()),
    };
    let fields = serde_json::json!({
        "cwd": cwd,
        "rlimits": rlimits(child.rlimits),
        "landlock": child.landlock,
        "writable": writable,
        "env": child.env,
        "program": program,
        "argv": argv,
        "path0": path0,
    });
    match fields {
        serde_json::Value::Object(map) => map,
        _ => unreachable!("a JSON object literal"),
    }
}

/// The limits of `rlimits::apply`, by the names of Python's `resource` module (infinity is its -1).
fn rlimits(spec: &RlimitSpec) -> Vec<(&'static str, i64, i64)> {
    let value = |v: u64| if v == u64::MAX { -1 } else { v.min(i64::MAX as u64) as i64 };
    let mut limits = vec![
        ("RLIMIT_CORE", 0, 0),
        ("RLIMIT_NOFILE", value(spec.open_files), value(spec.open_files)),
        ("RLIMIT_FSIZE", value(spec.file_size_bytes), value(spec.file_size_bytes)),
        ("RLIMIT_CPU", value(spec.cpu_seconds), value(spec.cpu_seconds.saturating_add(1))),
    ];
    if let Some(processes) = spec.processes {
        limits.push(("RLIMIT_NPROC", value(processes), value(processes)));
    }
    if let Some(bytes) = spec.data_bytes {
        limits.push(("RLIMIT_DATA", value(bytes), value(bytes)));
    }
    limits
}

/// A run's child of a template, as the template reports it.
pub struct Forked {
    status: BufReader<pipe::Receiver>,
    /// The child said `r`: the run's code may have run.
    ran: bool,
    /// Words read while waiting for the template's `p` that are [`Forked::ended`]'s (see [`Forked::started`]).
    early: std::collections::VecDeque<(char, String)>,
}

impl Forked {
    /// The child whose word comes on `status`.
    pub fn new(status: pipe::Receiver) -> Self {
        Self { status: BufReader::new(status), ran: false, early: Default::default() }
    }

    /// Whether the run's code may have run (the child said so): a child that failed before cannot have run any.
    pub fn ran(&self) -> bool {
        self.ran
    }

    /// The child's host pid, once forked; `Err` with the template's reason if it could not be.
    ///
    /// The template says `p` after its fork returns, and its child may run its whole program before that on a busy
    /// machine: the child's words that come first (`r`, then its own end) are kept for [`Forked::ended`], and
    /// [`Forked::ran`] tells a caller whose `Err` comes after them that the program did run (it must not run it
    /// again). After `r` the program could write a `p` of its own: callers use the pid only for a child whose
    /// program cannot write to the pipe (a live sandbox's, `says_its_end` false), or not at all.
    pub async fn started(&mut self) -> Result<u32, String> {
        loop {
            match self.read().await {
                Some(('p', pid)) => return pid.parse().map_err(|_| format!("the Python template said {pid:?}")),
                Some(('f', why)) => return Err(why),
                Some(word) if self.ran => self.early.push_back(word),
                Some((_, line)) => return Err(format!("the Python template said {line:?}")),
                None => return Err("the Python template is gone".into()),
            }
        }
    }

    /// A prepared child's host pid, once it waits for its job (the template's `p` and the child's `w` may come in
    /// either order); `Err` with the reason if it could not be forked or set up.
    pub async fn waiting(&mut self) -> Result<u32, String> {
        let (mut pid, mut waiting) = (None, false);
        while pid.is_none() || !waiting {
            match self.next().await {
                Some(('p', number)) => {
                    pid = Some(number.parse().map_err(|_| format!("the Python template said {number:?}"))?)
                }
                Some(('w', _)) => waiting = true,
                Some(('f', why)) => return Err(why),
                Some((_, line)) => return Err(format!("the Python template said {line:?}")),
                None => return Err("the Python template is gone".into()),
            }
        }
        pid.ok_or_else(|| "the Python template said no pid".into())
    }

    /// How the child ended and the CPU seconds it used; `Err` with its reason if its setup failed.
    ///
    /// A run's child says its own end (`x <code>`) before it frees its memory, and the run need not wait for that
    /// (`ChildSetup::says_its_end`); after its `r` the run's code holds the pipe too and may write anything, so
    /// only `x` with an exit code, and the template's `e` and `s`, count (a program can only end its own run early).
    pub async fn ended(&mut self) -> Result<(Termination, f64), String> {
        let mut failure = None;
        loop {
            let end = self.next().await;
            let (number, cpu) = match &end {
                Some((_, rest)) => {
                    let mut fields = rest.split_whitespace();
                    (fields.next().and_then(|n| n.parse().ok()), fields.next().and_then(|c| c.parse().ok()))
                }
                None => (None, None),
            };
            let cpu = cpu.unwrap_or(0.0);
            let kind = end_kind(&end);
            match (end, number) {
                (Some(('x', _)), Some(code @ 0..=255)) if self.ran && failure.is_none() => {
                    return Ok((Termination::Exited { code }, 0.0));
                }
                (Some(_), _) if self.ran && !matches!(kind, Some('e' | 's')) => continue,
                (Some(('f', why)), _) => failure = Some(why),
                (Some(('e', _)), Some(code)) if failure.is_none() => return Ok((Termination::Exited { code }, cpu)),
                (Some(('s', _)), Some(signal)) if failure.is_none() => {
                    return Ok((Termination::Signaled { signal }, cpu));
                }
                (Some(_), _) => return Err(failure.unwrap_or_else(|| "the Python template said nonsense".into())),
                (None, _) => return Err(failure.unwrap_or_else(|| "the Python template is gone".into())),
            }
        }
    }

    /// The next word kept by [`Forked::started`], else on the status pipe.
    async fn next(&mut self) -> Option<(char, String)> {
        match self.early.pop_front() {
            Some(word) => Some(word),
            None => self.read().await,
        }
    }

    /// The next word on the status pipe but the child's `r`, which is noted.
    async fn read(&mut self) -> Option<(char, String)> {
        loop {
            let mut line = String::new();
            match self.status.read_line(&mut line).await {
                Ok(0) | Err(_) => return None,
                Ok(_) => {
                    let line = line.trim_end();
                    let kind = line.chars().next()?;
                    if kind == 'r' {
                        self.ran = true;
                        continue;
                    }
                    return Some((kind, line.get(2..).unwrap_or_default().to_owned()));
                }
            }
        }
    }
}

/// The kind of a status word, if any.
fn end_kind(end: &Option<(char, String)>) -> Option<char> {
    end.as_ref().map(|(kind, _)| *kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A [`Forked`] reading `words` as the status pipe's.
    fn forked_reading(words: &str) -> Forked {
        let (reader, writer) = nix::unistd::pipe().unwrap();
        nix::unistd::write(&writer, words.as_bytes()).unwrap();
        drop(writer);
        Forked::new(pipe::Receiver::from_owned_fd(reader).unwrap())
    }

    #[tokio::test]
    async fn a_child_that_ends_before_the_template_says_it_forked_ended_once() {
        let mut forked = forked_reading("r\nx 0\np 4242\ne 0 0.001\n");
        assert_eq!(forked.started().await, Ok(4242));
        assert!(forked.ran(), "the program ran: it must not be run again");
        assert_eq!(forked.ended().await, Ok((Termination::Exited { code: 0 }, 0.0)));
    }

    #[tokio::test]
    async fn a_template_gone_after_the_child_ran_says_the_program_ran() {
        let mut forked = forked_reading("r\n");
        assert!(forked.started().await.is_err());
        assert!(forked.ran(), "a run whose program ran is not retried");
        let mut unforked = forked_reading("0\n");
        assert!(unforked.started().await.is_err());
        assert!(!unforked.ran(), "nothing ran: the run may be tried again");
    }

    #[test]
    fn infinite_limits_are_pythons_minus_one() {
        let spec = RlimitSpec {
            open_files: 256,
            file_size_bytes: u64::MAX,
            cpu_seconds: u64::MAX,
            processes: Some(64),
            data_bytes: None,
        };
        let limits = rlimits(&spec);
        assert!(limits.contains(&("RLIMIT_FSIZE", -1, -1)));
        assert!(limits.contains(&("RLIMIT_CPU", -1, -1)));
        assert!(limits.contains(&("RLIMIT_NOFILE", 256, 256)));
        assert!(limits.contains(&("RLIMIT_NPROC", 64, 64)));
    }
}
