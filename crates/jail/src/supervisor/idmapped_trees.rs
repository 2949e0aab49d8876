//! A conversation's tree for a prepared sandbox, made when its run comes: a clone of the workspace (nosuid, nodev)
//! idmapped from the storage uid to the run's, as a run's init makes it for itself (see `sys::idmap`). The user
//! namespace that says how is made once per run uid and kept: making one takes a process, which stays off the
//! run's path when it is made with the sandbox, ahead of the run.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::sys::mount::{MOUNT_ATTR_NODEV, MOUNT_ATTR_NOSUID, clone_tree, set_tree_attributes, set_tree_idmap};

/// The kept user namespaces, by run uid (at most one per uid of the server's range).
pub struct IdmappedTrees {
    storage: u32,
    namespaces: Mutex<HashMap<u32, Arc<OwnedFd>>>,
}

impl IdmappedTrees {
    /// Trees whose files owned by `storage` on disk show as the run's.
    pub fn new(storage: u32) -> Self {
        Self { storage, namespaces: Mutex::default() }
    }

    /// The user namespace mapping the storage uid to `run`, made now if it is not kept yet (blocking: call it
    /// ahead of the run).
    pub fn namespace(&self, run: u32) -> std::io::Result<Arc<OwnedFd>> {
        if let Some(kept) = self.namespaces.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).get(&run) {
            return Ok(Arc::clone(kept));
        }
        let made = Arc::new(crate::sys::idmap::user_namespace_reaped(self.storage, run)?);
        let mut namespaces = self.namespaces.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        Ok(Arc::clone(namespaces.entry(run).or_insert(made)))
    }

    /// The tree of `workspace` for a run of uid `run`, ready to be mounted at `/data`.
    pub fn tree(&self, workspace: &Path, run: u32) -> std::io::Result<OwnedFd> {
        let namespace = self.namespace(run)?;
        let tree = clone_tree(workspace)?;
        set_tree_attributes(&tree, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)?;
        set_tree_idmap(&tree, &namespace)?;
        Ok(tree)
    }
}
