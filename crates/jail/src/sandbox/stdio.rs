//! The program's standard streams as the init and pid 1 hold them: both start with copies of descriptors 0 to 2 (the
//! program's input and output pipes) and must drop them once the program has its own, so that the supervisor sees
//! the output end when the program's copies close. Its own module because both the init and pid 1 need it and
//! neither may import the other (the init starts pid 1).

/// Closes this process's copies of the program's standard streams: the supervisor sees the end of the program's
/// output when the program's own copies close, not when the init or pid 1 exits.
///
/// Allocates nothing and runs no destructor: the init calls it while pid 1 shares its memory (`init::watch_pid1`).
pub fn close_stdio() {
    for fd in 0..=2 {
        // SAFETY: closes descriptor numbers this process owns and no longer uses (nothing here reads or prints).
        unsafe { libc::close(fd) };
    }
}
