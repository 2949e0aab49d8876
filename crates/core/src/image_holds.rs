//! Which node has a conversation's disk image mounted, for roots that several machines share (`SANDBOX_ROOT` on a
//! network filesystem every node mounts, docs/scaling.md): an ext4 image mounted read-write by two kernels at once is
//! corrupted, so a node mounts one only while it holds its hold.
//!
//! The hold is an exclusive `flock` of `<root>/<id>/files.img.holder`, kept from the mount to the unmount by the
//! process that mounted it, with the node's name written in the file. Invariants:
//! - A process that finds the image held by another node refuses the conversation ([`std::io::ErrorKind::ResourceBusy`],
//!   naming the node): its calls belong on that node (the load balancer's affinity sends them there).
//! - Held by a process of the same node (the server, while a `sandlot run` uses the conversation; one kernel, one
//!   mount): used all the same.
//! - A node that dies releases its holds with its locks (at once on a local filesystem; when its lease expires on
//!   NFS), so its conversations, files kept, resume on another node.

use std::collections::HashMap;
use std::io::{Read, Seek};
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The file whose lock is the hold, beside the image.
pub const HOLDER_NAME: &str = "files.img.holder";

/// This process's holds.
#[derive(Debug)]
pub struct ImageHolds {
    node: String,
    held: Mutex<HashMap<PathBuf, OwnedFd>>,
}

impl PartialEq for ImageHolds {
    fn eq(&self, other: &Self) -> bool {
        self.node == other.node
    }
}

impl Eq for ImageHolds {}

impl ImageHolds {
    /// The holds of a process of `node` (a name every node sharing the root has its own of: the host's name by
    /// default, a pod's name on Kubernetes).
    pub fn new(node: impl Into<String>) -> Self {
        Self { node: node.into(), held: Mutex::default() }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, OwnedFd>> {
        self.held.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes the hold of the image in `conversation` (`<root>/<id>`) for this node, unless this process has it;
    /// [`std::io::ErrorKind::ResourceBusy`] naming the node that has it.
    pub fn take(&self, conversation: &Path) -> std::io::Result<()> {
        if self.held().contains_key(conversation) {
            return Ok(());
        }
        use rustix::fs::{FlockOperation, Mode, OFlags};
        let fd = rustix::fs::open(
            conversation.join(HOLDER_NAME),
            OFlags::CREATE | OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )?;
        let mut file = std::fs::File::from(fd);
        match rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {
                // Written over, then cut: the file is never empty once a node has held it.
                file.write_all_at(self.node.as_bytes(), 0)?;
                file.set_len(self.node.len() as u64)?;
                self.held().insert(conversation.to_path_buf(), file.into());
                Ok(())
            }
            Err(rustix::io::Errno::WOULDBLOCK) => {
                let holder = read_holder(&mut file)?;
                match holder == self.node {
                    true => Ok(()),
                    false => Err(std::io::Error::new(
                        std::io::ErrorKind::ResourceBusy,
                        format!("its files are mounted on the node {holder:?}, which shares this root"),
                    )),
                }
            }
            Err(error) => Err(error.into()),
        }
    }

    /// Lets the hold of `conversation` go (its image was unmounted, or the conversation removed).
    pub fn release(&self, conversation: &Path) {
        self.held().remove(conversation);
    }
}

/// The holder's name: read again while it is empty (a node that has just taken the hold writes its name right after,
/// for a moment at most).
fn read_holder(file: &mut std::fs::File) -> std::io::Result<String> {
    for _ in 0..200 {
        let mut holder = String::new();
        file.rewind()?;
        file.read_to_string(&mut holder)?;
        if !holder.trim().is_empty() {
            return Ok(holder.trim().to_owned());
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    Ok(String::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_node_holds_an_image_and_another_gets_it_once_let_go() {
        let dir = tempfile::tempdir().expect("dir");
        let (a, b, a_again) = (ImageHolds::new("node-a"), ImageHolds::new("node-b"), ImageHolds::new("node-a"));
        a.take(dir.path()).expect("free");
        a.take(dir.path()).expect("its own");
        a_again.take(dir.path()).expect("another process of the same node");
        let refused = b.take(dir.path()).expect_err("another node's");
        assert_eq!(refused.kind(), std::io::ErrorKind::ResourceBusy);
        assert!(refused.to_string().contains("node-a"), "{refused}");
        a.release(dir.path());
        b.take(dir.path()).expect("let go");
        assert_eq!(std::fs::read_to_string(dir.path().join(HOLDER_NAME)).expect("read"), "node-b");
    }
}
