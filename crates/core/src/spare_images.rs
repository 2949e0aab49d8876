//! Blank conversation images made ahead of need, so that a conversation's first use renames one into place and
//! mounts it (a mount: milliseconds) instead of formatting one (`mkfs.ext4` and a trial mount: tens of milliseconds
//! under load, on the first run's path).
//!
//! A long-running server keeps [`SPARES`] of them in a directory of its state (`<root>/.sandlot/spare-images`, mode
//! 0700), made one at a time by one background thread, started at start-up and again after each one is taken.
//! Invariants: a spare is whole or absent (made and mounted under `building-*`, unmounted, then renamed to
//! `spare-*` when whole; a crash's leftovers are unmounted and removed by the next fill); taking one is a rename,
//! which exactly one taker wins; a spare made for another quota is grown when mounted, as any image.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::disk_image::{DiskImages, IMAGE_NAME, unmount};

/// How many blank images a server keeps ready: enough for a burst of new conversations while the next are made.
pub const SPARES: usize = 4;

/// The spares' directory, and whether a thread is filling it.
#[derive(Debug, Clone)]
pub struct Spares {
    dir: PathBuf,
    filling: Arc<AtomicBool>,
}

impl PartialEq for Spares {
    fn eq(&self, other: &Self) -> bool {
        self.dir == other.dir
    }
}

impl Eq for Spares {}

impl Spares {
    pub fn new(dir: PathBuf) -> Self {
        Self { dir, filling: Arc::new(AtomicBool::new(false)) }
    }

    /// Renames a spare to `image`; whether one was there to take.
    pub fn take(&self, image: &Path) -> bool {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return false };
        entries
            .flatten()
            .filter(|entry| entry.file_name().to_string_lossy().starts_with("spare-"))
            .any(|entry| std::fs::rename(entry.path(), image).is_ok())
    }

    /// How many spares are ready.
    pub fn ready(&self) -> usize {
        std::fs::read_dir(&self.dir).map_or(0, |entries| {
            entries.flatten().filter(|entry| entry.file_name().to_string_lossy().starts_with("spare-")).count()
        })
    }

    /// Starts a thread that makes spares of `images` until [`SPARES`] are ready, unless one is at it already.
    pub fn refill(&self, images: &DiskImages) {
        if self.filling.swap(true, Ordering::SeqCst) {
            return;
        }
        let (spares, images) = (self.clone(), images.clone());
        let started = std::thread::Builder::new().name("spare-images".into()).spawn(move || {
            if let Err(error) = spares.fill(&images) {
                tracing::warn!(dir = %spares.dir.display(), "cannot make spare disk images: {error}");
            }
            spares.filling.store(false, Ordering::SeqCst);
        });
        if started.is_err() {
            self.filling.store(false, Ordering::SeqCst);
        }
    }

    fn fill(&self, images: &DiskImages) -> std::io::Result<()> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&self.dir)?;
        self.remove_leftovers();
        static MADE: AtomicU64 = AtomicU64::new(0);
        while self.ready() < SPARES {
            let number = MADE.fetch_add(1, Ordering::Relaxed);
            let building = self.dir.join(format!("building-{}-{number}", std::process::id()));
            let files = building.join("files");
            std::fs::create_dir_all(&files)?;
            let image = building.join(IMAGE_NAME);
            let made = images.make(&image, &files).and_then(|()| unmount(&files));
            let named = made.and_then(|()| {
                std::fs::rename(&image, self.dir.join(format!("spare-{}-{number}.img", std::process::id())))
            });
            let _ = std::fs::remove_dir_all(&building);
            named?;
        }
        Ok(())
    }

    /// What a fill that did not finish left (a crash): its mount detached, its files removed.
    fn remove_leftovers(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(pid) = name.strip_prefix("building-").and_then(|rest| rest.split('-').next()) else { continue };
            // Another server on the same root may be making one now.
            if pid != std::process::id().to_string() && Path::new("/proc").join(pid).exists() {
                continue;
            }
            let _ = unmount(&entry.path().join("files"));
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}
