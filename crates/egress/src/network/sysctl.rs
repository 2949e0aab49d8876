//! Network settings of the namespace the calling thread is in, through `/proc/sys/net`.
//!
//! The kernel resolves `/proc/sys/net/…` against the network namespace of the thread that opens the file, so a
//! thread that has entered a namespace (see `namespace`) reads and writes that namespace's settings.

use std::io;

/// Writes `value` to `/proc/sys/<key>` and checks that it reads back.
pub(super) fn set(key: &str, value: &str) -> io::Result<()> {
    let path = format!("/proc/sys/{key}");
    std::fs::write(&path, value)
        .map_err(|error| io::Error::new(error.kind(), format!("set {key} to {value}: {error}")))?;
    let read = get(key)?;
    if read != value {
        return Err(io::Error::other(format!("set {key} to {value}: it reads {read}")));
    }
    Ok(())
}

/// The value of `/proc/sys/<key>`, trimmed.
pub(super) fn get(key: &str) -> io::Result<String> {
    let path = format!("/proc/sys/{key}");
    std::fs::read_to_string(&path)
        .map(|value| value.trim().to_string())
        .map_err(|error| io::Error::new(error.kind(), format!("read {key}: {error}")))
}

/// Turns IPv6 off for the interfaces made from now on in this namespace (`all` too when `everywhere`, which takes
/// `::1` off loopback). A kernel without IPv6 has nothing to turn off.
pub(super) fn ipv6_off(everywhere: bool) -> io::Result<()> {
    if !std::path::Path::new("/proc/sys/net/ipv6").exists() {
        return Ok(());
    }
    set("net/ipv6/conf/default/disable_ipv6", "1")?;
    if everywhere {
        set("net/ipv6/conf/all/disable_ipv6", "1")?;
    }
    Ok(())
}
