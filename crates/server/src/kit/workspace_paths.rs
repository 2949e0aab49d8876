//! The paths an agent gives the file tools, made workspace-relative: absolute ones as the agent sees them in the
//! sandbox (`/workspace/src/a.rs`, from `pwd`) or relative to the workspace (`src/a.rs`). `.` and `..` are
//! resolved lexically and refused when they leave the workspace; nothing is resolved on disk here (no symlink is
//! followed: the tools open through `sandlot_core::Workspaces`, which refuses them at open time, race-free).

/// Where the workspace-style profiles mount the caller's workspace in the sandbox; absolute paths under it are
/// accepted by their file tools.
pub const WORKSPACE_MOUNT: &str = "/workspace";

/// codegen-sandbox's message for a path that leaves the workspace.
pub const OUTSIDE: &str = "resolve path: path is outside workspace root";

/// `path` relative to the workspace root, with `/` separators and no `.`, `..` or empty segments; `""` is the root
/// itself. `Err` is the tool's error text.
pub fn relative(path: &str) -> Result<String, String> {
    let rest = if let Some(absolute) = path.strip_prefix('/') {
        let mount = WORKSPACE_MOUNT.trim_start_matches('/');
        match absolute.strip_prefix(mount) {
            Some(rest) if rest.is_empty() || rest.starts_with('/') => rest,
            _ => return Err(OUTSIDE.to_owned()),
        }
    } else {
        path
    };
    if path.contains('\0') {
        return Err(format!("resolve path: invalid path {path:?}"));
    }
    let mut segments: Vec<&str> = Vec::new();
    for segment in rest.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                if segments.pop().is_none() {
                    return Err(OUTSIDE.to_owned());
                }
            }
            other => segments.push(other),
        }
    }
    Ok(segments.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_sandbox_and_relative_paths() {
        let cases = [
            ("a.txt", "a.txt"),
            ("./src//b.rs", "src/b.rs"),
            ("/workspace/src/b.rs", "src/b.rs"),
            ("/workspace", ""),
            ("/workspace/", ""),
            (".", ""),
            ("src/../a.txt", "a.txt"),
        ];
        for (path, expected) in cases {
            assert_eq!(relative(path).as_deref(), Ok(expected), "{path}");
        }
    }

    #[test]
    fn refuses_paths_leaving_the_workspace() {
        for path in ["..", "../x", "a/../../x", "/etc/passwd", "/workspacex/a", "/workspace/../etc", "/"] {
            assert_eq!(relative(path), Err(OUTSIDE.to_owned()), "{path}");
        }
    }
}
