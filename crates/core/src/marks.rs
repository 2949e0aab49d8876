//! Timestamps at the steps of a run, compiled in only with the `phases` feature (`scripts/phases-jail.sh` builds
//! with it): with `SANDLOT_MARKS` set, [`open`] opens `/tmp/sandlot-marks.log` and each [`mark`] appends
//! `<label> <ns since the epoch>` to it, from whichever process of the run reaches it (the command, the init, pid 1,
//! the worker). Without the feature both are empty and compiled away.

#[cfg(feature = "phases")]
static FILE: std::sync::OnceLock<std::fs::File> = std::sync::OnceLock::new();

/// Opens the log when `SANDLOT_MARKS` is set (call once, early in `main`; forked processes inherit it).
#[inline(always)]
pub fn open() {
    #[cfg(feature = "phases")]
    if std::env::var_os("SANDLOT_MARKS").is_some()
        && let Ok(file) = std::fs::OpenOptions::new().append(true).create(true).open("/tmp/sandlot-marks.log")
        && let Ok(high) = rustix::io::fcntl_dupfd_cloexec(&file, HIGH_FD)
    {
        let _ = FILE.set(high.into());
    }
}

/// Where the log's descriptor is moved: clear of 0-3, which a forked init fills with its own pipes.
#[cfg(feature = "phases")]
const HIGH_FD: std::os::fd::RawFd = 100;

/// The log's descriptor, when it is open: a forked init keeps it when it closes every other descriptor.
#[inline(always)]
pub fn raw_fd() -> Option<std::os::fd::RawFd> {
    #[cfg(feature = "phases")]
    if let Some(file) = FILE.get() {
        return Some(std::os::fd::AsRawFd::as_raw_fd(file));
    }
    None
}

/// Appends `label` and the time now, in one write, without allocating (the sandbox side calls it too).
#[inline(always)]
pub fn mark(label: &str) {
    #[cfg(feature = "phases")]
    if let Some(mut file) = FILE.get() {
        use std::io::Write;
        let ns = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let mut line = [0u8; 96];
        let mut cursor = std::io::Cursor::new(&mut line[..]);
        let _ = writeln!(cursor, "{label} {ns}");
        let length = cursor.position() as usize;
        let _ = file.write_all(&line[..length]);
    }
    #[cfg(not(feature = "phases"))]
    let _ = label;
}
