//! Directories private to the server's user: created with mode 0700, and set to 0700 when an older version made
//! them with another mode, so no other host user (the sandbox uids included) can reach what is below them.

use std::path::Path;

use crate::{Error, Result};

/// Creates `dir` and its parents if needed and makes `dir` mode 0700. `create` and `make_private` are the actions
/// its errors name.
pub(crate) fn create_private_dir(dir: &Path, create: &'static str, make_private: &'static str) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(|e| Error::io(create, dir, e))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(|e| Error::io(make_private, dir, e))
}
