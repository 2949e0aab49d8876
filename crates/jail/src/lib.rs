//! sandlot-jail: the native Linux backend, the only crate with `unsafe`.
//!
//! Two sides, joined only by [`protocol`] (what they say to each other) and `sys` (the raw syscalls both need):
//! - the **supervisor** ([`JailBackend`]), in the server or `sandlot run`: it gets an init per run (cloned by a
//!   zygote, or forked by the command), holds the run's cgroup slot and uid, sends the spec, reads output with caps,
//!   enforces the deadline and the disk quota, and kills the whole tree;
//! - the **sandbox** side: the zygote, and per run the init, the sandbox's pid 1 and the worker that execs the
//!   program. All are the sandlot binary, started through [`run_hidden_subcommand`] or [`fork_init_for_one_shot`].
//!
//! `docs/architecture.md` draws the map; `docs/security.md` lists every layer and what it protects.

pub mod protocol;
mod sandbox;
mod supervisor;
mod sys;

pub use supervisor::{
    AHEAD_IDLE, CgroupSupport, Check, CheckStatus, DEFAULT_UIDS, EgressHandle, Error, ForkedInit, HostRunner,
    JailBackend, JailConfig, ProcessModel, RefusedRunner, Result, RunnerOverrides, SKELETON_DIR_NAME, UidRange,
    diagnose, discover_runners, protected_dirs, screen_runners,
};

/// Becomes the zygote when the process was started as one (`argv[1]` is [`protocol::ZYGOTE_SUBCOMMAND`]), and never
/// returns then; otherwise returns at once. Call it first thing in `main`, before any thread exists.
pub fn run_hidden_subcommand() {
    if std::env::args_os().nth(1).is_some_and(|arg| arg == protocol::ZYGOTE_SUBCOMMAND) {
        sandbox::zygote::main()
    }
}

/// For a one-shot command: forks the init of its one run now, to hand to a [`ProcessModel::OneShot`] backend
/// ([`JailBackend::use_forked_init`]). Call it while the process has a single thread (before any async runtime); the
/// init waits for its spec, and exits when it finds none (its standard input closed).
pub fn fork_init_for_one_shot() -> std::io::Result<ForkedInit> {
    let (theirs, ours) = supervisor::init_pipes()?;
    let pid = sandbox::fork_init(theirs, sandbox::Maker::OneShot)?;
    // The init prepares its sandbox while this command prepares the run: on another CPU, not queued behind it. The
    // command keeps to the other CPUs for its short life; the init, and so the program, keeps all of them.
    sys::step_aside_from_this_cpu();
    Ok(ForkedInit::new(pid, ours))
}

/// The jail's seccomp program as bytes (`sock_filter`s), for what installs it outside the worker: a Python
/// template's child (see `supervisor::python_template`). Empty if the program could not be built.
pub(crate) fn seccomp_program_bytes() -> Vec<u8> {
    sandbox::seccomp::program()
        .unwrap_or_default()
        .iter()
        .flat_map(|insn| {
            let mut bytes = insn.code.to_ne_bytes().to_vec();
            bytes.extend([insn.jt, insn.jf]);
            bytes.extend(insn.k.to_ne_bytes());
            bytes
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    /// The two sides meet only in `protocol` and `sys`: no file of one names a module of the other.
    #[test]
    fn the_sides_import_only_protocol_and_sys_from_each_other() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        for (side, other) in [("sandbox", "supervisor"), ("supervisor", "sandbox")] {
            for entry in std::fs::read_dir(src.join(side)).unwrap() {
                let path = entry.unwrap().path();
                let text = std::fs::read_to_string(&path).unwrap();
                let crossing = [format!("crate::{other}"), format!("super::{other}"), format!("super::super::{other}")];
                for needle in crossing {
                    assert!(!text.contains(&needle), "{} names {needle}", path.display());
                }
            }
        }
    }

    /// Within a folder, no module imports a sibling that imports it back: each folder reads as layers, and a helper
    /// two modules share lives in a module of its own (`sandbox/stdio.rs` for the init and pid 1).
    #[test]
    fn no_module_imports_a_sibling_that_imports_it_back() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut pairs = Vec::new();
        for folder in ["sandbox", "supervisor", "sys"] {
            let mut modules = std::collections::BTreeMap::new();
            for entry in std::fs::read_dir(src.join(folder)).unwrap() {
                let path = entry.unwrap().path();
                let name = path.file_stem().unwrap().to_str().unwrap().to_owned();
                modules.insert(name, std::fs::read_to_string(&path).unwrap());
            }
            let names: Vec<&str> = modules.keys().map(String::as_str).collect();
            for (a, text) in &modules {
                for b in sibling_imports(text, folder, &names) {
                    if a.as_str() < b && sibling_imports(&modules[b], folder, &names).contains(&a.as_str()) {
                        pairs.push(format!("{folder}/{a}.rs <-> {folder}/{b}.rs"));
                    }
                }
            }
        }
        assert_eq!(pairs, Vec::<String>::new());
    }

    /// The sibling modules (of `names`) that `text` names through `super::` (a path or a `{...}` group) or
    /// `crate::<folder>::`.
    fn sibling_imports<'a>(text: &str, folder: &str, names: &[&'a str]) -> Vec<&'a str> {
        let mut named = std::collections::BTreeSet::new();
        for prefix in ["super::".to_owned(), format!("crate::{folder}::")] {
            for (at, _) in text.match_indices(&prefix) {
                let rest = &text[at + prefix.len()..];
                match rest.strip_prefix('{') {
                    Some(group) => named.extend(top_level_items(group).into_iter().map(leading_ident)),
                    None => {
                        named.insert(leading_ident(rest));
                    }
                }
            }
        }
        names.iter().copied().filter(|name| named.contains(name)).collect()
    }

    /// The items of a `use` group up to its closing brace: `a, b::{c, d}, e}` gives `a`, `b::{c, d}` and `e`.
    fn top_level_items(group: &str) -> Vec<&str> {
        let (mut items, mut depth, mut start) = (Vec::new(), 0, 0);
        for (i, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    items.push(&group[start..i]);
                    break;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    items.push(&group[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        items
    }

    fn leading_ident(text: &str) -> &str {
        let text = text.trim_start();
        let end = text.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(text.len());
        &text[..end]
    }
}
