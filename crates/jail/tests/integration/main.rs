//! The jail's integration tests: one binary (one link, one file on disk) with a module per subject, run by
//! libtest-mimic because the binary doubles as the jail's init and zygote, the TypeScript helper and the child of the
//! one-shot and unprivileged launch paths. Tests are named `module::test` (`attacks::fork_bomb_is_contained`).
//!
//! These tests need root (cgroups, dedicated sandbox uids); `scripts/test.sh` runs them as root. Without root they
//! fail rather than skip, so a CI that lost its privileges cannot pass silently.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod ahead;
mod attacks;
mod common;
mod cpu;
mod disk;
mod home_layout;
mod live;
mod live_prepared;
mod prepared;
mod runs;
mod sessions;
mod templates;
mod typescript;
mod volumes;
mod workspace_layout;

fn main() {
    common::serve_if_re_executed();
    live::serve_unprivileged_child_if_asked();
    let trials = [
        ahead::trials(),
        attacks::trials(),
        cpu::trials(),
        disk::trials(),
        home_layout::trials(),
        live::trials(),
        live_prepared::trials(),
        prepared::trials(),
        runs::trials(),
        sessions::trials(),
        templates::trials(),
        typescript::trials(),
        volumes::trials(),
        workspace_layout::trials(),
    ];
    common::run(trials.into_iter().flatten().collect())
}
