//! Starting `sandlot run`'s preforked init on another CPU than the command's.
//!
//! The kernel often queues a forked child on its parent's CPU, where it waits until that CPU's load balancer moves it
//! to an idle one: 0.8–1.1 ms on our 2-CPU machines, in about half the runs (measured with the `sched_wakeup_new`
//! and `sched_switch` tracepoints; a child queued on the other CPU started within ~50 µs). The parent does not
//! block, it goes on parsing and preparing the run, so the init's head start (docs/benchmarks.md) was lost in those
//! runs. So the command narrows the init's CPUs to all it may use but its own, which moves the init at once, and
//! the init widens them again to the command's own set once its spec has come (necessarily after the narrowing):
//! pid 1 and the program get the same CPUs as without this.

/// A set of CPUs (`cpu_set_t`).
#[derive(Clone, Copy)]
pub struct CpuSet(libc::cpu_set_t);

impl CpuSet {
    /// The CPUs this process may run on; `None` if the kernel does not say.
    pub fn allowed() -> Option<Self> {
        // SAFETY: an all-zero cpu_set_t is the empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` is a valid cpu_set_t of the size passed.
        let rc = unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) };
        (rc == 0).then_some(Self(set))
    }

    /// Confines `pid` to this set; errors are ignored (the process then runs where the kernel puts it).
    pub fn apply_to(&self, pid: libc::pid_t) {
        // SAFETY: a valid cpu_set_t of the size passed; the kernel only reads it.
        unsafe { libc::sched_setaffinity(pid, size_of::<libc::cpu_set_t>(), &self.0) };
    }
}

/// Moves `child`, just forked and likely queued on this process's CPU, to the CPUs of `allowed` other than the one
/// this process runs on now, if there are any. The child widens its set again with [`CpuSet::apply_to`].
pub fn move_off_this_cpu(child: libc::pid_t, allowed: &CpuSet) {
    // SAFETY: sched_getcpu takes no arguments.
    let Ok(here) = usize::try_from(unsafe { libc::sched_getcpu() }) else { return };
    let mut elsewhere = *allowed;
    // SAFETY: CPU_ISSET reads bit `here` of the set, which exists: `here` < CPU_SETSIZE is checked first.
    if here >= libc::CPU_SETSIZE as usize || !unsafe { libc::CPU_ISSET(here, &elsewhere.0) } {
        return;
    }
    // SAFETY: as above, for the bit CPU_CLR clears.
    unsafe { libc::CPU_CLR(here, &mut elsewhere.0) };
    // SAFETY: CPU_COUNT reads the set.
    if unsafe { libc::CPU_COUNT(&elsewhere.0) } > 0 {
        elsewhere.apply_to(child);
    }
}
