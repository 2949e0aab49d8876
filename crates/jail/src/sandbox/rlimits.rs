//! Per-process resource limits, applied to the program on every host (cgroups are applied when available too).

use nix::errno::Errno;
use nix::sys::resource::{Resource, setrlimit};

use crate::protocol::RlimitSpec;

/// Sets every limit of `spec` (soft = hard, so the program cannot raise them).
pub fn apply(spec: &RlimitSpec) -> Result<(), Errno> {
    setrlimit(Resource::RLIMIT_CORE, 0, 0)?;
    setrlimit(Resource::RLIMIT_NOFILE, spec.open_files, spec.open_files)?;
    setrlimit(Resource::RLIMIT_FSIZE, spec.file_size_bytes, spec.file_size_bytes)?;
    // The CPU limit sends SIGXCPU at the soft limit and SIGKILL one second later (none at all when infinite, as in
    // a live sandbox: saturating keeps RLIM_INFINITY as it is).
    setrlimit(Resource::RLIMIT_CPU, spec.cpu_seconds, spec.cpu_seconds.saturating_add(1))?;
    if let Some(processes) = spec.processes {
        setrlimit(Resource::RLIMIT_NPROC, processes, processes)?;
    }
    if let Some(bytes) = spec.data_bytes {
        setrlimit(Resource::RLIMIT_DATA, bytes, bytes)?;
    }
    Ok(())
}
