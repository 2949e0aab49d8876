//! The worker: the last steps before the interpreter runs, in the order that keeps each one possible. A new session
//! (no terminal to inject into), the run's cgroups joined (and a cgroup namespace rooted there), rlimits, the working
//! directory, every capability dropped, `no_new_privs`, Landlock, stray descriptors closed, seccomp last, `execve`.

use std::convert::Infallible;
use std::ffi::CString;
use std::fs::File;
use std::io::Write;
use std::path::Path;

use nix::sched::{CloneFlags, unshare};
use nix::unistd::{chdir, execve, setsid};

use super::events::{SetupError, Step};
use super::{capabilities, landlock, rlimits, seccomp};
use crate::protocol::{HomeMount, JailSpec};
use crate::sys::mount::cpath;

/// What the worker starts: the spec's program, in the run's cgroups (`cgroup.procs` files opened by the init as root).
pub struct ProgramToStart<'a> {
    pub spec: &'a JailSpec,
    pub cgroups: &'a [File],
}

/// Runs the worker; never returns (it becomes the program, or reports why not).
pub fn run(program: &ProgramToStart) -> ! {
    match prepare_and_exec(program) {
        Ok(never) => match never {},
        Err(error) => error.report_and_exit(),
    }
}

fn cstring(text: &str, what: &str) -> Result<CString, SetupError> {
    CString::new(text).step(|| format!("{what} contains a NUL byte"))
}

/// Moves this process into the run's cgroups, then gives it a cgroup namespace rooted there (the program sees
/// its own group as `/`).
fn join_cgroups(cgroups: &[File]) -> Result<(), SetupError> {
    for mut procs in cgroups {
        procs.write_all(b"0").step(|| "join the run's cgroup".into())?;
    }
    if !cgroups.is_empty() {
        unshare(CloneFlags::CLONE_NEWCGROUP).step(|| "unshare cgroup namespace".into())?;
    }
    Ok(())
}

fn prepare_and_exec(program: &ProgramToStart) -> Result<Infallible, SetupError> {
    let spec = program.spec;
    sandlot_core::marks::mark("w.start");
    setsid().step(|| "setsid".into())?;
    join_cgroups(program.cgroups)?;
    sandlot_core::marks::mark("w.cgroups");
    rlimits::apply(&spec.rlimits).step(|| "setrlimit".into())?;
    let workdir = match &spec.home {
        Some(HomeMount { path, scratch_mb: None }) => path.as_path(),
        _ => Path::new("/data"),
    };
    chdir(workdir).step(|| format!("chdir {}", workdir.display()))?;
    sandlot_core::marks::mark("w.chdir");
    capabilities::drop_all().step(|| "drop capabilities".into())?;
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } < 0 {
        return Err(SetupError::new("prctl(PR_SET_NO_NEW_PRIVS)", std::io::Error::last_os_error()));
    }
    sandlot_core::marks::mark("w.caps_nnp");
    if spec.landlock {
        landlock::apply(spec.home.as_ref().map(|home| home.path.as_path())).step(|| "landlock".into())?;
    }

    sandlot_core::marks::mark("w.landlock");
    let path = cpath(&spec.program).step(|| "program path".into())?;
    let mut argv = vec![cstring(&spec.program.to_string_lossy(), "program")?];
    for arg in &spec.args {
        argv.push(cstring(arg, "argument")?);
    }
    let env =
        spec.env.iter().map(|(k, v)| cstring(&format!("{k}={v}"), "environment")).collect::<Result<Vec<_>, _>>()?;

    // Every inherited descriptor but stdio (the events pipe, the mount sources) closes on exec.
    const CLOSE_RANGE_CLOEXEC: u32 = 1 << 2;
    // SAFETY: close_range on descriptor numbers; no memory is involved.
    if unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, CLOSE_RANGE_CLOEXEC) } < 0 {
        return Err(SetupError::new("close_range", std::io::Error::last_os_error()));
    }
    sandlot_core::marks::mark("w.closerange");
    seccomp::install().step(|| "seccomp".into())?;
    sandlot_core::marks::mark("w.seccomp");
    let Err(error) = execve(&path, &argv, &env);
    Err(SetupError::new(format!("exec {}", spec.program.display()), error))
}
