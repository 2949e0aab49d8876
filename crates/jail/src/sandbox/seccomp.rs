//! The seccomp filter installed last before exec: default allow, with a deny list aimed at the kernel attack
//! surface a sandboxed program never needs. The deny list follows what Docker's default profile keeps from an
//! unprivileged container, and adds namespace creation: the sandbox already runs in a user namespace, and a nested
//! one gives `CAP_SYS_ADMIN` over new namespaces, the usual route to kernel bugs (docs/security.md, "Seccomp",
//! lists every call and why).
//!
//! The filter is classic BPF written here by hand so every instruction can be reviewed:
//! 1. a foreign architecture kills the process;
//! 2. any x32 syscall (`nr >= 0x40000000`) kills the process: x32 numbers alias the x86_64 ones and would slip
//!    past a deny list that only compares numbers;
//! 3. each denied syscall returns `EPERM`;
//! 4. `clone3` returns `ENOSYS` (its flags live in memory a filter cannot read; libc then falls back to `clone`);
//! 5. `clone` with any `CLONE_NEW*` flag returns `EPERM`;
//! 6. `socket`/`socketpair` outside `AF_UNIX`, `AF_INET`, `AF_INET6` return `EAFNOSUPPORT`;
//! 7. `fallocate` in any mode but plain allocation, `PUNCH_HOLE | KEEP_SIZE` and `ZERO_RANGE` returns `EOPNOTSUPP`:
//!    the others reserve blocks past the file's size (`KEEP_SIZE`), which neither `RLIMIT_FSIZE` nor the quota's
//!    count of sizes sees, or grow a file without `RLIMIT_FSIZE` (`INSERT_RANGE`). See [`FALLOCATE_MODES`];
//! 8. `chmod`, `fchmod`, `fchmodat`, `fchmodat2` with a mode holding `S_ISUID` or `S_ISGID`, and `open`, `openat`,
//!    `creat`, `mknod`, `mknodat` creating a file with one of them, return `EPERM`: a set-id copy of a shell left in
//!    `/data` would let any local user who reaches the directory run as the sandbox's uid. `openat2`, whose mode
//!    lies in memory a filter cannot read, returns `ENOSYS` (callers fall back to `openat`). `mkdir` drops both
//!    bits itself, and a directory inherits `S_ISGID` only from a parent that has it;
//! 9. `inotify_add_watch` with a mask holding `IN_ACCESS`, `IN_OPEN` or `IN_CLOSE_NOWRITE` returns `EPERM` (and
//!    `fanotify_init` is denied in step 3): the system directories are the host's inodes, so read-side events there
//!    show every program the host or another sandbox runs. Watches for changes keep working.
//!
//! Steps 3–9 find the syscall number with a binary search (a tree of `JGE` tests over the sorted numbers, with a
//! few `JEQ` at each leaf), not a list of `JEQ`: at most 16 instructions per syscall instead of over a hundred.
//! The kernel runs the filter once for every syscall number when it installs it (to learn which numbers it may
//! allow without running the filter again), and on every syscall it could not decide that way, so the tree keeps
//! both the install and every checked syscall short. Steps 7–9 made the kernel run the filter on every `openat`;
//! what that and the tree cost is in docs/benchmarks.md ("The seccomp filter").
//!
//! Steps 5–9 read arguments. The filter sees the 64-bit argument registers as two 32-bit words and loads the low
//! one (both supported architectures are little-endian, so it comes first); every argument checked is one the kernel
//! itself reads as 32 bits or fewer (flags, a mode, a family), so the high word cannot change the kernel's answer.

use nix::errno::Errno;

const BPF_LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const BPF_JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const BPF_JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
const BPF_JSET_K: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
const BPF_RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;

const OFFSET_NR: u32 = 0;
const OFFSET_ARCH: u32 = 4;
const OFFSET_ARG0: u32 = 16;
/// Size of one argument in `struct seccomp_data`.
const ARG_SIZE: u32 = 8;

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

/// The `fallocate` modes allowed, exactly (any other combination of flags gets `EOPNOTSUPP`, which callers such as
/// glibc's `posix_fallocate` take as "not supported here" and fall back to writing):
/// - `0` allocates and grows the file: `RLIMIT_FSIZE` stops it at the quota (`EFBIG`/`SIGXFSZ`), and the quota's
///   watchdog counts the size;
/// - `PUNCH_HOLE | KEEP_SIZE` (the kernel wants both) only frees blocks;
/// - `ZERO_RANGE` without `KEEP_SIZE` grows the file like mode 0, and `RLIMIT_FSIZE` applies the same way.
///
/// Refused: `KEEP_SIZE` with anything but `PUNCH_HOLE` (blocks past the end of the file, invisible in its size: the
/// bypass of the quota), `INSERT_RANGE` (grows the file without checking `RLIMIT_FSIZE`), `UNSHARE_RANGE` (can
/// allocate with `KEEP_SIZE`), `COLLAPSE_RANGE` (harmless, it only frees, but nothing ordinary uses it),
/// `WRITE_ZEROES` (Linux 6.17) and any flag a later kernel adds.
pub const FALLOCATE_MODES: [u32; 3] =
    [0, (libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE) as u32, libc::FALLOC_FL_ZERO_RANGE as u32];

/// The mode bits that make an executable run as its owner or group.
const SET_ID_BITS: u32 = libc::S_ISUID | libc::S_ISGID;

/// The `open` flags under which the kernel uses the mode argument: creating a file (`O_TMPFILE` without its
/// `O_DIRECTORY` part, which alone creates nothing).
const CREATING_OPEN_FLAGS: u32 = (libc::O_CREAT | (libc::O_TMPFILE & !libc::O_DIRECTORY)) as u32;

/// The inotify events of reading: on the read-only binds of the host's system directories, whose inodes the host and
/// every sandbox share, they would report what others read and run. Events of changes (`IN_MODIFY`, `IN_CREATE`,
/// `IN_CLOSE_WRITE`, ... which `fs.watch` and most tools ask for) stay allowed.
const INOTIFY_READ_EVENTS: u32 = libc::IN_ACCESS | libc::IN_OPEN | libc::IN_CLOSE_NOWRITE;

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
    // watching others' file accesses (unprivileged since Linux 5.13, on inodes such as the shared system files)
    ("fanotify_init", libc::SYS_fanotify_init),
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

/// Loads the low 32 bits of syscall argument `n` (counting from 0) into the accumulator.
fn load_arg(n: u32) -> libc::sock_filter {
    stmt(BPF_LD_W_ABS, OFFSET_ARG0 + n * ARG_SIZE)
}

/// Where a syscall number the filter singles out goes: one of the blocks that follow the search tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    Allow,
    Deny,
    NoSys,
    CloneFlags,
    SocketFamily,
    FallocateMode,
    /// A mode (`chmod`, `mknod`...) in the given argument may not hold a set-id bit.
    SetIdMode {
        mode_arg: u32,
    },
    /// A mode in `mode_arg` may not hold a set-id bit when the flags in `flags_arg` create a file (`open`).
    CreatedSetIdMode {
        flags_arg: u32,
        mode_arg: u32,
    },
    InotifyMask,
}

impl Block {
    const ALL: [Block; 11] = [
        Block::Allow,
        Block::Deny,
        Block::NoSys,
        Block::CloneFlags,
        Block::SocketFamily,
        Block::FallocateMode,
        Block::SetIdMode { mode_arg: 1 },
        Block::SetIdMode { mode_arg: 2 },
        Block::CreatedSetIdMode { flags_arg: 1, mode_arg: 2 },
        Block::CreatedSetIdMode { flags_arg: 2, mode_arg: 3 },
        Block::InotifyMask,
    ];

    /// The block's instructions; on entry the accumulator holds the syscall number.
    fn code(self) -> Vec<libc::sock_filter> {
        match self {
            Block::Allow => vec![stmt(BPF_RET_K, libc::SECCOMP_RET_ALLOW)],
            Block::Deny => vec![stmt(BPF_RET_K, errno(libc::EPERM))],
            Block::NoSys => vec![stmt(BPF_RET_K, errno(libc::ENOSYS))],
            Block::CloneFlags => vec![
                load_arg(0),
                jump(BPF_JSET_K, CLONE_NAMESPACE_FLAGS, 0, 1),
                stmt(BPF_RET_K, errno(libc::EPERM)),
                stmt(BPF_RET_K, libc::SECCOMP_RET_ALLOW),
            ],
            Block::SocketFamily => vec![
                load_arg(0),
                jump(BPF_JEQ_K, libc::AF_UNIX as u32, 3, 0),
                jump(BPF_JEQ_K, libc::AF_INET as u32, 2, 0),
                jump(BPF_JEQ_K, libc::AF_INET6 as u32, 1, 0),
                stmt(BPF_RET_K, errno(libc::EAFNOSUPPORT)),
                stmt(BPF_RET_K, libc::SECCOMP_RET_ALLOW),
            ],
            // fallocate(fd, mode, offset, len)
            Block::FallocateMode => vec![
                load_arg(1),
                jump(BPF_JEQ_K, FALLOCATE_MODES[0], 3, 0),
                jump(BPF_JEQ_K, FALLOCATE_MODES[1], 2, 0),
                jump(BPF_JEQ_K, FALLOCATE_MODES[2], 1, 0),
                stmt(BPF_RET_K, errno(libc::EOPNOTSUPP)),
                stmt(BPF_RET_K, libc::SECCOMP_RET_ALLOW),
            ],
            Block::SetIdMode { mode_arg } => vec![
                load_arg(mode_arg),
                jump(BPF_JSET_K, SET_ID_BITS, 0, 1),
                stmt(BPF_RET_K, errno(libc::EPERM)),
                stmt(BPF_RET_K, libc::SECCOMP_RET_ALLOW),
            ],
            Block::CreatedSetIdMode { flags_arg, mode_arg } => vec![
                load_arg(mode_arg),
                jump(BPF_JSET_K, SET_ID_BITS, 0, 3),
                load_arg(flags_arg),
                jump(BPF_JSET_K, CREATING_OPEN_FLAGS, 0, 1),
                stmt(BPF_RET_K, errno(libc::EPERM)),
                stmt(BPF_RET_K, libc::SECCOMP_RET_ALLOW),
            ],
            // inotify_add_watch(fd, path, mask)
            Block::InotifyMask => vec![
                load_arg(2),
                jump(BPF_JSET_K, INOTIFY_READ_EVENTS, 0, 1),
                stmt(BPF_RET_K, errno(libc::EPERM)),
                stmt(BPF_RET_K, libc::SECCOMP_RET_ALLOW),
            ],
        }
    }
}

/// A jump of the search tree: over `n` instructions of the tree, or to a block after it.
#[derive(Debug, Clone, Copy)]
enum Jump {
    Skip(usize),
    To(Block),
}

/// An instruction of the search tree, before its jumps to blocks are resolved.
#[derive(Debug, Clone, Copy)]
struct TreeInsn {
    code: u16,
    k: u32,
    jt: Jump,
    jf: Jump,
}

/// Most syscall numbers a leaf of the search tree compares one by one.
const LEAF_SIZE: usize = 4;

/// The syscall numbers the filter singles out, sorted, with their block; every other number is allowed.
fn singled_out() -> Vec<(u32, Block)> {
    let nr = |n: libc::c_long| n as u32;
    let mut entries: Vec<(u32, Block)> = DENIED.iter().map(|(_, number)| (nr(*number), Block::Deny)).collect();
    entries.push((nr(libc::SYS_clone3), Block::NoSys));
    entries.push((nr(libc::SYS_clone), Block::CloneFlags));
    entries.push((nr(libc::SYS_socket), Block::SocketFamily));
    entries.push((nr(libc::SYS_socketpair), Block::SocketFamily));
    entries.push((nr(libc::SYS_fallocate), Block::FallocateMode));
    entries.push((nr(libc::SYS_openat2), Block::NoSys));
    entries.push((nr(libc::SYS_inotify_add_watch), Block::InotifyMask));
    for (number, block) in set_id_checks() {
        entries.push((nr(number), block));
    }
    entries.sort_unstable_by_key(|&(number, _)| number);
    entries.dedup_by_key(|&mut (number, _)| number);
    entries
}

/// The syscalls that take a file mode which could hold a set-id bit, with the check each gets.
fn set_id_checks() -> Vec<(libc::c_long, Block)> {
    let mut checks = vec![
        (libc::SYS_fchmod, Block::SetIdMode { mode_arg: 1 }), // fchmod(fd, mode)
        (libc::SYS_fchmodat, Block::SetIdMode { mode_arg: 2 }), // fchmodat(dirfd, path, mode)
        (libc::SYS_fchmodat2, Block::SetIdMode { mode_arg: 2 }), // fchmodat2(dirfd, path, mode, flags)
        (libc::SYS_mknodat, Block::SetIdMode { mode_arg: 2 }), // mknodat(dirfd, path, mode, dev)
        (libc::SYS_openat, Block::CreatedSetIdMode { flags_arg: 2, mode_arg: 3 }), // openat(dirfd, path, flags, mode)
    ];
    #[cfg(target_arch = "x86_64")]
    checks.extend([
        (libc::SYS_chmod, Block::SetIdMode { mode_arg: 1 }), // chmod(path, mode)
        (libc::SYS_creat, Block::SetIdMode { mode_arg: 1 }), // creat(path, mode)
        (libc::SYS_mknod, Block::SetIdMode { mode_arg: 1 }), // mknod(path, mode, dev)
        (libc::SYS_open, Block::CreatedSetIdMode { flags_arg: 1, mode_arg: 2 }), // open(path, flags, mode)
    ]);
    checks
}

/// Binary search over sorted `entries` (the accumulator holds the syscall number): a `JGE` on the middle number
/// splits them until a leaf compares a few with `JEQ`; a number found jumps to its block, one not found is allowed.
fn search_tree(entries: &[(u32, Block)]) -> Vec<TreeInsn> {
    if entries.len() <= LEAF_SIZE {
        let mut leaf: Vec<TreeInsn> = entries
            .iter()
            .map(|&(number, block)| TreeInsn { code: BPF_JEQ_K, k: number, jt: Jump::To(block), jf: Jump::Skip(0) })
            .collect();
        leaf.push(TreeInsn { code: BPF_RET_K, k: libc::SECCOMP_RET_ALLOW, jt: Jump::Skip(0), jf: Jump::Skip(0) });
        return leaf;
    }
    let (lower, upper) = entries.split_at(entries.len() / 2);
    let (below, at_or_above) = (search_tree(lower), search_tree(upper));
    let split = TreeInsn { code: BPF_JGE_K, k: upper[0].0, jt: Jump::Skip(below.len()), jf: Jump::Skip(0) };
    std::iter::once(split).chain(below).chain(at_or_above).collect()
}

/// The filter program; `None` if a jump of the search tree would span more than the 255 instructions classic BPF
/// can encode (the tests check it does not).
pub fn program() -> Option<Vec<libc::sock_filter>> {
    let mut p = vec![
        stmt(BPF_LD_W_ABS, OFFSET_ARCH),
        jump(BPF_JEQ_K, AUDIT_ARCH, 1, 0),
        stmt(BPF_RET_K, libc::SECCOMP_RET_KILL_PROCESS),
        stmt(BPF_LD_W_ABS, OFFSET_NR),
        jump(BPF_JGE_K, X32_SYSCALL_BIT, 0, 1),
        stmt(BPF_RET_K, libc::SECCOMP_RET_KILL_PROCESS),
    ];
    let tree = search_tree(&singled_out());
    let tree_at = p.len();
    let blocks: Vec<(Block, Vec<libc::sock_filter>)> = Block::ALL.iter().map(|&b| (b, b.code())).collect();
    let mut block_starts = Vec::with_capacity(blocks.len());
    let mut next = tree_at + tree.len();
    for (block, code) in &blocks {
        block_starts.push((*block, next));
        next += code.len();
    }
    let start_of = |block: Block| block_starts.iter().find(|(b, _)| *b == block).map(|(_, start)| *start);
    for (index, insn) in tree.iter().enumerate() {
        let resolve = |jump: Jump| match jump {
            Jump::Skip(n) => u8::try_from(n).ok(),
            Jump::To(block) => u8::try_from(start_of(block)? - (tree_at + index + 1)).ok(),
        };
        p.push(jump(insn.code, insn.k, resolve(insn.jt)?, resolve(insn.jf)?));
    }
    for (_, code) in blocks {
        p.extend(code);
    }
    Some(p)
}

/// Installs the filter on the calling thread (inherited by every child). Requires `no_new_privs`.
pub fn install() -> Result<(), Errno> {
    let filter = program().ok_or(Errno::E2BIG)?;
    let prog = libc::sock_fprog { len: filter.len() as u16, filter: filter.as_ptr() as *mut libc::sock_filter };
    // SAFETY: prog points to `filter`, which is alive for the call; the kernel copies the program.
    let rc = unsafe { libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &prog as *const libc::sock_fprog) };
    if rc < 0 { Err(Errno::last()) } else { Ok(()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The low words of a syscall's first four arguments.
    type Args = [u32; 4];

    /// Runs the filter in a tiny BPF interpreter over one syscall, to check the jumps land where intended.
    fn evaluate(nr: u32, arch: u32, arg0: u32) -> u32 {
        run(nr, arch, [arg0, 0, 0, 0]).0
    }

    /// Like [`evaluate`], with the native architecture and the four arguments given.
    fn evaluate_args(nr: u32, args: Args) -> u32 {
        run(nr, AUDIT_ARCH, args).0
    }

    /// The filter's verdict and the number of instructions it ran.
    fn run(nr: u32, arch: u32, args: Args) -> (u32, usize) {
        let data = |offset: u32| match offset {
            OFFSET_NR => nr,
            OFFSET_ARCH => arch,
            o if o >= OFFSET_ARG0 && (o - OFFSET_ARG0).is_multiple_of(ARG_SIZE) && o < OFFSET_ARG0 + 4 * ARG_SIZE => {
                args[((o - OFFSET_ARG0) / ARG_SIZE) as usize]
            }
            other => panic!("unexpected load at {other}"),
        };
        static PROGRAM: std::sync::OnceLock<Vec<libc::sock_filter>> = std::sync::OnceLock::new();
        let program = PROGRAM.get_or_init(|| program().expect("the filter's jumps fit in classic BPF"));
        let (mut pc, mut acc) = (0usize, 0u32);
        for step in 1.. {
            let insn = program[pc];
            pc += 1;
            match insn.code {
                BPF_LD_W_ABS => acc = data(insn.k),
                BPF_RET_K => return (insn.k, step),
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
        unreachable!("the loop above only ends by returning")
    }

    fn sys(n: libc::c_long) -> u32 {
        n as u32
    }

    /// The syscalls whose argument 1 is a mode (the legacy ones exist on x86_64 only).
    #[cfg(target_arch = "x86_64")]
    const MODE_IN_ARG1: &[libc::c_long] = &[libc::SYS_chmod, libc::SYS_fchmod, libc::SYS_creat, libc::SYS_mknod];
    #[cfg(not(target_arch = "x86_64"))]
    const MODE_IN_ARG1: &[libc::c_long] = &[libc::SYS_fchmod];
    #[cfg(target_arch = "x86_64")]
    const SYS_OPEN: libc::c_long = libc::SYS_open;
    #[cfg(not(target_arch = "x86_64"))]
    const SYS_OPEN: libc::c_long = -1;

    /// What the filter must answer for syscall number `nr` with arguments `args`, written as a plain list.
    fn expected(nr: u32, args: Args) -> u32 {
        let nr = libc::c_long::from(nr);
        let [arg0, arg1, arg2, arg3] = args;
        let set_id = |mode: u32| mode & (libc::S_ISUID | libc::S_ISGID) != 0;
        let creates = |flags: u32| flags & (libc::O_CREAT | 0o20000000) as u32 != 0; // O_CREAT, __O_TMPFILE
        if DENIED.iter().any(|(_, number)| *number == nr) {
            errno(libc::EPERM)
        } else if nr == libc::SYS_clone3 {
            errno(libc::ENOSYS)
        } else if nr == libc::SYS_clone && arg0 & CLONE_NAMESPACE_FLAGS != 0 {
            errno(libc::EPERM)
        } else if (nr == libc::SYS_socket || nr == libc::SYS_socketpair)
            && ![libc::AF_UNIX, libc::AF_INET, libc::AF_INET6].contains(&(arg0 as i32))
        {
            errno(libc::EAFNOSUPPORT)
        } else if nr == libc::SYS_fallocate && !FALLOCATE_MODES.contains(&arg1) {
            errno(libc::EOPNOTSUPP)
        } else if nr == libc::SYS_inotify_add_watch
            && arg2 & (libc::IN_ACCESS | libc::IN_OPEN | libc::IN_CLOSE_NOWRITE) != 0
        {
            errno(libc::EPERM)
        } else if nr == libc::SYS_openat2 {
            errno(libc::ENOSYS)
        } else if (MODE_IN_ARG1.contains(&nr) && set_id(arg1))
            || ([libc::SYS_fchmodat, libc::SYS_fchmodat2, libc::SYS_mknodat].contains(&nr) && set_id(arg2))
            || (nr == SYS_OPEN && creates(arg1) && set_id(arg2))
            || (nr == libc::SYS_openat && creates(arg2) && set_id(arg3))
        {
            errno(libc::EPERM)
        } else {
            libc::SECCOMP_RET_ALLOW
        }
    }

    /// Arguments that exercise every check: each value in every position, and every pair of values in two
    /// neighbouring positions (flags and mode of `open` and `openat`).
    fn argument_samples() -> Vec<Args> {
        let values = [
            0,
            libc::AF_UNIX as u32,
            libc::AF_NETLINK as u32,
            libc::CLONE_NEWUSER as u32,
            libc::FALLOC_FL_KEEP_SIZE as u32,
            (libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE) as u32,
            libc::FALLOC_FL_ZERO_RANGE as u32,
            0o755,
            0o4755,
            0o2700,
            libc::O_CREAT as u32,
            libc::O_TMPFILE as u32,
            libc::O_DIRECTORY as u32,
            libc::IN_OPEN,
            libc::IN_MODIFY | libc::IN_CREATE,
            u32::MAX,
        ];
        let mut samples = Vec::new();
        for position in 0..4 {
            for value in values {
                let mut args = [0; 4];
                args[position] = value;
                samples.push(args);
            }
        }
        for position in 0..3 {
            for first in values {
                for second in values {
                    let mut args = [0; 4];
                    (args[position], args[position + 1]) = (first, second);
                    samples.push(args);
                }
            }
        }
        samples
    }

    #[test]
    fn the_search_tree_answers_every_syscall_number_as_the_list_says() {
        for nr in 0..1024 {
            for args in argument_samples() {
                assert_eq!(evaluate_args(nr, args), expected(nr, args), "syscall {nr}, args {args:x?}");
            }
        }
    }

    #[test]
    fn any_syscall_is_decided_in_a_few_instructions() {
        let longest = (0..1024)
            .flat_map(|nr| argument_samples().into_iter().map(move |args| run(nr, AUDIT_ARCH, args).1))
            .max()
            .unwrap_or(0);
        assert!(longest <= 16, "the longest path runs {longest} instructions");
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

    #[test]
    fn fallocate_may_only_allocate_within_the_size_or_free() {
        let fallocate = |mode: i32| evaluate_args(sys(libc::SYS_fallocate), [3, mode as u32, 0, 1 << 26]);
        for mode in [0, libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, libc::FALLOC_FL_ZERO_RANGE] {
            assert_eq!(fallocate(mode), libc::SECCOMP_RET_ALLOW, "mode {mode:#x}");
        }
        let refused = [
            libc::FALLOC_FL_KEEP_SIZE,
            libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
            libc::FALLOC_FL_UNSHARE_RANGE,
            libc::FALLOC_FL_UNSHARE_RANGE | libc::FALLOC_FL_KEEP_SIZE,
            libc::FALLOC_FL_COLLAPSE_RANGE,
            libc::FALLOC_FL_INSERT_RANGE,
            libc::FALLOC_FL_PUNCH_HOLE,
            0x80, // FALLOC_FL_WRITE_ZEROES (Linux 6.17)
            0x100,
        ];
        for mode in refused {
            assert_eq!(fallocate(mode), errno(libc::EOPNOTSUPP), "mode {mode:#x}");
        }
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn set_id_bits_cannot_be_set_or_created() {
        let sys_args = |nr: libc::c_long, args: Args| evaluate_args(sys(nr), args);
        let (creat, write) = (libc::O_CREAT as u32 | libc::O_WRONLY as u32, libc::O_WRONLY as u32);
        let tmpfile = libc::O_TMPFILE as u32 | libc::O_RDWR as u32;
        for mode in [0o4755, 0o2755, 0o6000, 0o104755] {
            assert_eq!(sys_args(libc::SYS_chmod, [0, mode, 0, 0]), errno(libc::EPERM), "chmod {mode:o}");
            assert_eq!(sys_args(libc::SYS_fchmod, [3, mode, 0, 0]), errno(libc::EPERM), "fchmod {mode:o}");
            assert_eq!(sys_args(libc::SYS_fchmodat, [3, 0, mode, 0]), errno(libc::EPERM), "fchmodat {mode:o}");
            assert_eq!(sys_args(libc::SYS_fchmodat2, [3, 0, mode, 0]), errno(libc::EPERM), "fchmodat2 {mode:o}");
            assert_eq!(sys_args(libc::SYS_creat, [0, mode, 0, 0]), errno(libc::EPERM), "creat {mode:o}");
            assert_eq!(sys_args(libc::SYS_mknod, [0, mode, 0, 0]), errno(libc::EPERM), "mknod {mode:o}");
            assert_eq!(sys_args(libc::SYS_mknodat, [3, 0, mode, 0]), errno(libc::EPERM), "mknodat {mode:o}");
            assert_eq!(sys_args(libc::SYS_open, [0, creat, mode, 0]), errno(libc::EPERM), "open {mode:o}");
            assert_eq!(sys_args(libc::SYS_open, [0, tmpfile, mode, 0]), errno(libc::EPERM), "O_TMPFILE {mode:o}");
            assert_eq!(sys_args(libc::SYS_openat, [3, 0, creat, mode]), errno(libc::EPERM), "openat {mode:o}");
            // Without a flag that creates, the kernel ignores the mode.
            assert_eq!(sys_args(libc::SYS_openat, [3, 0, write, mode]), libc::SECCOMP_RET_ALLOW, "openat {mode:o}");
            let directory = libc::O_DIRECTORY as u32;
            assert_eq!(sys_args(libc::SYS_open, [0, directory, mode, 0]), libc::SECCOMP_RET_ALLOW, "{mode:o}");
        }
        for mode in [0o755, 0o1777, 0o644, 0] {
            assert_eq!(sys_args(libc::SYS_chmod, [0, mode, 0, 0]), libc::SECCOMP_RET_ALLOW, "chmod {mode:o}");
            assert_eq!(sys_args(libc::SYS_fchmodat, [3, 0, mode, 0]), libc::SECCOMP_RET_ALLOW, "fchmodat {mode:o}");
            assert_eq!(sys_args(libc::SYS_openat, [3, 0, creat, mode]), libc::SECCOMP_RET_ALLOW, "openat {mode:o}");
            assert_eq!(sys_args(libc::SYS_mknodat, [3, 0, mode, 0]), libc::SECCOMP_RET_ALLOW, "mknodat {mode:o}");
        }
        assert_eq!(sys_args(libc::SYS_openat2, [3, 0, 0, 24]), errno(libc::ENOSYS));
    }

    #[test]
    fn inotify_may_watch_changes_but_not_reads() {
        let watch = |mask: u32| evaluate_args(sys(libc::SYS_inotify_add_watch), [3, 0, mask, 0]);
        for mask in [libc::IN_ACCESS, libc::IN_OPEN, libc::IN_CLOSE_NOWRITE, libc::IN_ALL_EVENTS, libc::IN_CLOSE] {
            assert_eq!(watch(mask), errno(libc::EPERM), "mask {mask:#x}");
        }
        let node_fs_watch = libc::IN_ATTRIB
            | libc::IN_CREATE
            | libc::IN_MODIFY
            | libc::IN_DELETE
            | libc::IN_DELETE_SELF
            | libc::IN_MOVE_SELF
            | libc::IN_MOVED_FROM
            | libc::IN_MOVED_TO;
        for mask in [node_fs_watch, libc::IN_CLOSE_WRITE | libc::IN_MASK_ADD, libc::IN_MODIFY | libc::IN_ONLYDIR] {
            assert_eq!(watch(mask), libc::SECCOMP_RET_ALLOW, "mask {mask:#x}");
        }
        assert_eq!(evaluate(sys(libc::SYS_fanotify_init), AUDIT_ARCH, 0x200), errno(libc::EPERM));
    }
}
