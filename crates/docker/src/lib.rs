//! sandlot-docker: the Docker backend. Runner images are found by their labels (`sandbox.runner=true`,
//! `sandbox.language=<language>`, optionally `sandbox.version` and `sandbox.packages`, the key packages reported by
//! `sandbox_list_runners`); each run is one container with `/data` bound, no network, a read-only root, a
//! sized `/tmp`, no capabilities, `no-new-privileges`, the run's memory (no swap), CPU and pids limits and an init,
//! removed afterwards. Live sandboxes (`LiveBackend`) are one such container per conversation, kept up, each process
//! a `docker exec` in it (`live/`, image `runner-live`). The images and their contract are in `runners/`.

mod backend;
mod error;
mod hardening;
mod live;
mod live_image;
mod nosuid_root;

pub use backend::{DockerBackend, DockerConfig};
pub use error::{Error, Result};
pub use live::LIVE_LABEL;
pub use nosuid_root::ensure_nosuid_nodev;
