//! Landlock, a second fence behind the mount namespace: the program may read and execute what the sandbox shows,
//! write only under `/data`, `/tmp` and `/dev/shm` (plus the harmless devices, and in the Home layout the
//! conversation's home path), and, on kernels with ABI 6, can
//! neither signal processes outside its domain nor reach abstract unix sockets created outside it.

use std::path::Path;

use landlock::{
    ABI, Access, AccessFs, RestrictionStatus, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetError, Scope,
    path_beneath_rules,
};

/// Directories the program may change.
const WRITABLE: &[&str] = &["/data", "/tmp", "/dev/shm"];
/// Device files the program may write to.
const WRITABLE_DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/full", "/dev/tty"];

/// Restricts the calling process (and its future children), with `home` (the Home layout's conversation path)
/// writable too. Best effort: on a kernel without Landlock, or with an older ABI, what the kernel supports is
/// enforced and the status says so.
pub fn apply(home: Option<&Path>) -> Result<RestrictionStatus, RulesetError> {
    let abi = ABI::V6;
    Ruleset::default()
        .handle_access(AccessFs::from_all(abi))?
        .scope(Scope::from_all(abi))?
        .create()?
        .add_rules(path_beneath_rules(["/"], AccessFs::from_read(abi)))?
        .add_rules(path_beneath_rules(WRITABLE, AccessFs::from_all(abi)))?
        .add_rules(path_beneath_rules(home, AccessFs::from_all(abi)))?
        .add_rules(path_beneath_rules(
            WRITABLE_DEVICES,
            AccessFs::from_read(abi) | AccessFs::WriteFile | AccessFs::IoctlDev,
        ))?
        .restrict_self()
}
