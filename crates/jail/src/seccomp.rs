//! The seccomp filter installed last before exec: default allow, with a deny list aimed at the kernel attack
//! surface a sandboxed program never needs (DESIGN.md "The sandbox", `reference/sandbox-isolation-notes.md` §C).
//!
//! The filter is classic BPF written here by hand so every instruction can be reviewed:
//! 1. a foreign architecture kills the process;
//! 2. any x32 syscall (`nr >= 0x40000000`) kills the process: x32 numbers alias the x86_64 ones and would slip
//!    past a deny list that only compares numbers;
//! 3. each denied syscall returns `EPERM`;
//! 4. `clone3` returns `ENOSYS` (its flags live in memory a filter cannot read; libc then falls back to `clone`);
//! 5. `clone` with any `CLONE_NEW*` flag returns `EPERM`;
//! 6. `socket`/`socketpair` outside `AF_UNIX`, `AF_INET`, `AF_INET6` return `EAFNOSUPPORT`.

use nix::errno::Errno;

const BPF_LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const BPF_JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const BPF_JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
const BPF_JSET_K: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
const BPF_RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;

const OFFSET_NR: u32 = 0;
const OFFSET_ARCH: u32 = 4;
const OFFSET_ARG0: u32 = 16;

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// Flags that make `clone` create namespaces.
const CLONE_NAMESPACE_FLAGS: u32 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWCGROUP
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | 0x80/* CLONE_NEWTIME */) as u32;

/// Syscalls refused with `EPERM`.
pub const DENIED: &[(&str, libc::c_long)] = &[
    // debugging other processes
    ("ptrace", libc::SYS_ptrace),
    ("process_vm_readv", libc::SYS_process_vm_readv),
    ("process_vm_writev", libc::SYS_process_vm_writev),
    ("kcmp", libc::SYS_kcmp),
    ("pidfd_getfd", libc::SYS_pidfd_getfd),
    ("process_madvise", libc::SYS_process_madvise),
    // namespaces and the filesystem tree
    ("unshare", libc::SYS_unshare),
    ("setns", libc::SYS_setns),
    ("mount", libc::SYS_mount),
    ("umount2", libc::SYS_umount2),
    ("pivot_root", libc::SYS_pivot_root),
    ("chroot", libc::SYS_chroot),
    ("open_tree", libc::SYS_open_tree),
    ("move_mount", libc::SYS_move_mount),
    ("fsopen", libc::SYS_fsopen),
    ("fsconfig", libc::SYS_fsconfig),
    ("fsmount", libc::SYS_fsmount),
    ("fspick", libc::SYS_fspick),
    ("mount_setattr", libc::SYS_mount_setattr),
    ("open_by_handle_at", libc::SYS_open_by_handle_at),
    ("name_to_handle_at", libc::SYS_name_to_handle_at),
    // kernel subsystems with a history of privilege escalations
    ("bpf", libc::SYS_bpf),
    ("perf_event_open", libc::SYS_perf_event_open),
    ("userfaultfd", libc::SYS_userfaultfd),
    ("keyctl", libc::SYS_keyctl),
    ("add_key", libc::SYS_add_key),
    ("request_key", libc::SYS_request_key),
    ("io_uring_setup", libc::SYS_io_uring_setup),
    ("io_uring_enter", libc::SYS_io_uring_enter),
    ("io_uring_register", libc::SYS_io_uring_register),
    // the machine itself
    ("init_module", libc::SYS_init_module),
    ("finit_module", libc::SYS_finit_module),
    ("delete_module", libc::SYS_delete_module),
    ("kexec_load", libc::SYS_kexec_load),
    ("kexec_file_load", libc::SYS_kexec_file_load),
    ("reboot", libc::SYS_reboot),
    ("swapon", libc::SYS_swapon),
    ("swapoff", libc::SYS_swapoff),
    ("acct", libc::SYS_acct),
    ("quotactl", libc::SYS_quotactl),
    ("quotactl_fd", libc::SYS_quotactl_fd),
    ("settimeofday", libc::SYS_settimeofday),
    ("clock_settime", libc::SYS_clock_settime),
    ("clock_adjtime", libc::SYS_clock_adjtime),
    ("adjtimex", libc::SYS_adjtimex),
    ("syslog", libc::SYS_syslog),
    ("vhangup", libc::SYS_vhangup),
    #[cfg(target_arch = "x86_64")]
    ("iopl", libc::SYS_iopl),
    #[cfg(target_arch = "x86_64")]
    ("ioperm", libc::SYS_ioperm),
    #[cfg(target_arch = "x86_64")]
    ("uselib", libc::SYS_uselib),
];

fn stmt(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt: 0, jf: 0, k }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

fn errno(e: i32) -> u32 {
    libc::SECCOMP_RET_ERRNO | (e as u32 & libc::SECCOMP_RET_DATA)
}

/// The filter program.
pub fn program() -> Vec<libc::sock_filter> {
    let nr = |n: libc::c_long| n as u32;
    let mut p = vec![
        stmt(BPF_LD_W_ABS, OFFSET_ARCH),
        jump(BPF_JEQ_K, AUDIT_ARCH, 1, 0),
        stmt(BPF_RET_K, libc::SECCOMP_RET_KILL_PROCESS),
        stmt(BPF_LD_W_ABS, OFFSET_NR),
        jump(BPF_JGE_K, X32_SYSCALL_BIT, 0, 1),
        stmt(BPF_RET_K, libc::SECCOMP_RET_KILL_PROCESS),
    ];
    for (_, number) in DENIED {
        p.push(jump(BPF_JEQ_K, nr(*number), 0, 1));
        p.push(stmt(BPF_RET_K, errno(libc::EPERM)));
    }
    p.push(jump(BPF_JEQ_K, nr(libc::SYS_clone3), 0, 1));
    p.push(stmt(BPF_RET_K, errno(libc::ENOSYS)));
    // clone: inspect the flags argument.
    p.push(jump(BPF_JEQ_K, nr(libc::SYS_clone), 0, 4));
    p.push(stmt(BPF_LD_W_ABS, OFFSET_ARG0));
    p.push(jump(BPF_JSET_K, CLONE_NAMESPACE_FLAGS, 0, 1));
    p.push(stmt(BPF_RET_K, errno(libc::EPERM)));
    p.push(stmt(BPF_RET_K, libc::SECCOMP_RET_ALLOW));
    // socket and socketpair: inspect the domain (the accumulator still holds the syscall number here).
    p.push(jump(BPF_JEQ_K, nr(libc::SYS_socket), 1, 0));
    p.push(jump(BPF_JEQ_K, nr(libc::SYS_socketpair), 0, 5));
    p.push(stmt(BPF_LD_W_ABS, OFFSET_ARG0));
    p.push(jump(BPF_JEQ_K, libc::AF_UNIX as u32, 3, 0));
    p.push(jump(BPF_JEQ_K, libc::AF_INET as u32, 2, 0));
    p.push(jump(BPF_JEQ_K, libc::AF_INET6 as u32, 1, 0));
    p.push(stmt(BPF_RET_K, errno(libc::EAFNOSUPPORT)));
    p.push(stmt(BPF_RET_K, libc::SECCOMP_RET_ALLOW));
    p
}

/// Installs the filter on the calling thread (inherited by every child). Requires `no_new_privs`.
pub fn install() -> Result<(), Errno> {
    let filter = program();
    let prog = libc::sock_fprog { len: filter.len() as u16, filter: filter.as_ptr() as *mut libc::sock_filter };
    // SAFETY: prog points to `filter`, which is alive for the call; the kernel copies the program.
    let rc = unsafe { libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &prog as *const libc::sock_fprog) };
    if rc < 0 { Err(Errno::last()) } else { Ok(()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the filter in a tiny BPF interpreter over one syscall, to check the jumps land where intended.
    fn evaluate(nr: u32, arch: u32, arg0: u32) -> u32 {
        let data = |offset: u32| match offset {
            OFFSET_NR => nr,
            OFFSET_ARCH => arch,
            OFFSET_ARG0 => arg0,
            other => panic!("unexpected load at {other}"),
        };
        let program = program();
        let (mut pc, mut acc) = (0usize, 0u32);
        loop {
            let insn = program[pc];
            pc += 1;
            match insn.code {
                BPF_LD_W_ABS => acc = data(insn.k),
                BPF_RET_K => return insn.k,
                BPF_JEQ_K | BPF_JGE_K | BPF_JSET_K => {
                    let taken = match insn.code {
                        BPF_JEQ_K => acc == insn.k,
                        BPF_JGE_K => acc >= insn.k,
                        _ => acc & insn.k != 0,
                    };
                    pc += usize::from(if taken { insn.jt } else { insn.jf });
                }
                other => panic!("unknown instruction {other:#x}"),
            }
        }
    }

    fn sys(n: libc::c_long) -> u32 {
        n as u32
    }

    #[test]
    fn denied_syscalls_get_eperm_and_others_pass() {
        for (name, number) in DENIED {
            assert_eq!(evaluate(sys(*number), AUDIT_ARCH, 0), errno(libc::EPERM), "{name}");
        }
        for number in [libc::SYS_read, libc::SYS_write, libc::SYS_execve, libc::SYS_openat, libc::SYS_exit_group] {
            assert_eq!(evaluate(sys(number), AUDIT_ARCH, 0), libc::SECCOMP_RET_ALLOW, "{number}");
        }
    }

    #[test]
    fn foreign_arch_and_x32_are_killed() {
        assert_eq!(evaluate(sys(libc::SYS_read), 0x4000_0003, 0), libc::SECCOMP_RET_KILL_PROCESS);
        assert_eq!(evaluate(X32_SYSCALL_BIT | sys(libc::SYS_getpid), AUDIT_ARCH, 0), libc::SECCOMP_RET_KILL_PROCESS);
    }

    #[test]
    fn clone_is_checked_by_flags() {
        let thread_flags = (libc::CLONE_VM | libc::CLONE_FS | libc::CLONE_FILES | libc::CLONE_THREAD) as u32;
        assert_eq!(evaluate(sys(libc::SYS_clone), AUDIT_ARCH, thread_flags), libc::SECCOMP_RET_ALLOW);
        assert_eq!(evaluate(sys(libc::SYS_clone), AUDIT_ARCH, libc::SIGCHLD as u32), libc::SECCOMP_RET_ALLOW);
        for flag in [libc::CLONE_NEWUSER, libc::CLONE_NEWNS, libc::CLONE_NEWNET, libc::CLONE_NEWPID, 0x80] {
            assert_eq!(evaluate(sys(libc::SYS_clone), AUDIT_ARCH, flag as u32), errno(libc::EPERM), "{flag:#x}");
        }
        assert_eq!(evaluate(sys(libc::SYS_clone3), AUDIT_ARCH, 0), errno(libc::ENOSYS));
    }

    #[test]
    fn sockets_are_limited_to_unix_and_ip() {
        for family in [libc::AF_UNIX, libc::AF_INET, libc::AF_INET6] {
            assert_eq!(evaluate(sys(libc::SYS_socket), AUDIT_ARCH, family as u32), libc::SECCOMP_RET_ALLOW);
            assert_eq!(evaluate(sys(libc::SYS_socketpair), AUDIT_ARCH, family as u32), libc::SECCOMP_RET_ALLOW);
        }
        for family in [libc::AF_NETLINK, libc::AF_PACKET, libc::AF_VSOCK, libc::AF_ALG] {
            assert_eq!(evaluate(sys(libc::SYS_socket), AUDIT_ARCH, family as u32), errno(libc::EAFNOSUPPORT));
        }
    }
}
