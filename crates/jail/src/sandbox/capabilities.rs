//! Dropping every capability: bounding set, ambient set, and the effective/permitted/inheritable sets.

use nix::errno::Errno;

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Leaves the calling process with no capability at all, now or after exec.
pub fn drop_all() -> Result<(), Errno> {
    // Capabilities are numbered from 0 to the kernel's last one, which is the first that gives EINVAL.
    for cap in 0..64 {
        // SAFETY: prctl with integer arguments only.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) } < 0 {
            match Errno::last() {
                Errno::EINVAL => break,
                errno => return Err(errno),
            }
        }
    }
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) } < 0 {
        return Err(Errno::last());
    }
    let header = CapHeader { version: LINUX_CAPABILITY_VERSION_3, pid: 0 };
    let data = [CapData { effective: 0, permitted: 0, inheritable: 0 }; 2];
    // SAFETY: header and data are live, correctly laid out structs for capability version 3 (two data entries).
    if unsafe { libc::syscall(libc::SYS_capset, &header as *const CapHeader, data.as_ptr()) } < 0 {
        return Err(Errno::last());
    }
    Ok(())
}
