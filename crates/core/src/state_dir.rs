//! The server's own state under a conversation root: `<root>/.sandlot/`, mode 0700, holding the run history
//! (`history.db` and its journal files) and the generated file-URL secret (`file-secret`).
//!
//! Invariant: no conversation id can name this directory or anything in it. Ids start with a letter or a digit
//! ([`crate::ConversationId`]), so `.sandlot` is out of their reach; the history used to live at `<root>/sandlot.db`,
//! where a conversation named `sandlot.db-journal` or `sandlot.db-wal` made a directory in the journal's place and
//! stopped the next start. [`StateDir::prepare`] moves what an older sandlot left at the root.

use std::path::{Path, PathBuf};

use crate::private_dir::create_private_dir;
use crate::{Error, Result};

/// Name of the state directory under the root.
pub const STATE_DIR_NAME: &str = ".sandlot";

/// Where older versions kept each file, and its name in the state directory now.
const MOVED: &[(&str, &str)] = &[
    ("sandlot.db", "history.db"),
    ("sandlot.db-wal", "history.db-wal"),
    ("sandlot.db-shm", "history.db-shm"),
    ("sandlot.db-journal", "history.db-journal"),
    (".file-secret", "file-secret"),
];

/// The server's state directory of one root.
#[derive(Debug, Clone)]
pub struct StateDir {
    dir: PathBuf,
}

impl StateDir {
    /// Creates `<root>/.sandlot` (mode 0700) if needed and moves the state files an older sandlot kept at the
    /// root into it. Only regular files move: a directory of that name is a conversation's, and stays.
    pub fn prepare(root: &Path) -> Result<Self> {
        let dir = root.join(STATE_DIR_NAME);
        create_private_dir(&dir, "create state directory", "make state directory private")?;
        for (old, new) in MOVED {
            let (old, new) = (root.join(old), dir.join(new));
            let is_file = std::fs::symlink_metadata(&old).is_ok_and(|m| m.file_type().is_file());
            if is_file && std::fs::symlink_metadata(&new).is_err() {
                std::fs::rename(&old, &new).map_err(|e| Error::io("move state file", &old, e))?;
                tracing::info!(from = %old.display(), to = %new.display(), "moved the server's state");
            }
        }
        Ok(Self { dir })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// The run history's database.
    pub fn history(&self) -> PathBuf {
        self.dir.join("history.db")
    }

    /// The generated file-URL secret.
    pub fn file_secret(&self) -> PathBuf {
        self.dir.join("file-secret")
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn moves_the_files_an_older_version_kept_at_the_root_and_leaves_conversations() {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("sandlot.db"), "db").unwrap();
        std::fs::write(root.path().join("sandlot.db-wal"), "wal").unwrap();
        std::fs::write(root.path().join(".file-secret"), "secret").unwrap();
        std::fs::create_dir_all(root.path().join("sandlot.db-shm/files")).unwrap(); // a conversation
        let state = StateDir::prepare(root.path()).unwrap();
        assert_eq!(std::fs::read_to_string(state.history()).unwrap(), "db");
        assert_eq!(std::fs::read_to_string(state.path().join("history.db-wal")).unwrap(), "wal");
        assert_eq!(std::fs::read_to_string(state.file_secret()).unwrap(), "secret");
        assert!(!state.path().join("history.db-shm").exists());
        assert!(root.path().join("sandlot.db-shm/files").is_dir());
        let mut left: Vec<String> =
            std::fs::read_dir(root.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        left.sort();
        assert_eq!(left, [".sandlot", "sandlot.db-shm"]);
        let mode = std::fs::metadata(state.path()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
    }

    #[test]
    fn files_already_in_the_state_directory_win() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join(STATE_DIR_NAME)).unwrap();
        std::fs::write(root.path().join(STATE_DIR_NAME).join("file-secret"), "new").unwrap();
        std::fs::write(root.path().join(".file-secret"), "old").unwrap();
        let state = StateDir::prepare(root.path()).unwrap();
        assert_eq!(std::fs::read_to_string(state.file_secret()).unwrap(), "new");
    }
}
