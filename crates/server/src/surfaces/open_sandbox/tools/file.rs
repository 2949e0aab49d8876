//! `file.read`, `file.write`, `file.list`, `file.search`, `file.replace` on the workspace's host directory. A path
//! is made workspace-relative as the codegen profile does it (`kit::workspace_paths::relative`: `/workspace/...` or
//! relative, `..` resolved lexically, refused when it leaves); files are opened with `Workspaces::open_file`
//! (beneath the workspace, no symlink followed, FIFOs never waited on) and written with `Engine::upload_file`
//! (atomic, parents created, the disk quota applied, never through a symlink). A path that goes through a symlink is
//! refused like one outside the workspace, whatever the link points to. Reads go through the tenant's `TenantView`
//! (another tenant's workspace reads as one that does not exist); a write first claims the workspace for the
//! tenant (another tenant's is `not_available`).

use std::io::Read as _;

use sandlot_core::{ConversationId, Error, Tenant, Workspaces};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{OUTSIDE, Scope, ToolError, ToolInfo, WORKSPACE_MOUNT, info, parse, refusal, result};
use crate::AppState;
use crate::kit::conversation_access::{self, TenantView};
use crate::kit::workspace_paths as paths;

/// The largest file read, searched or rewritten.
const MAX_BYTES: u64 = 16 * 1024 * 1024;
/// Files a listing walks at most, and the bytes of their paths.
const MAX_FILES: usize = 100_000;
const MAX_PATH_BYTES: usize = 64 * 1024 * 1024;

/// `file.read`'s arguments.
#[derive(Deserialize, JsonSchema)]
pub struct ReadArgs {
    /// A file: relative to the workspace, or absolute under /workspace.
    pub path: String,
}

#[derive(Serialize, JsonSchema)]
pub struct ReadResult {
    /// The whole file as text.
    pub content: String,
}

/// `file.write`'s arguments.
#[derive(Deserialize, JsonSchema)]
pub struct WriteArgs {
    /// The file to create or replace (parent directories are created).
    pub path: String,
    /// The whole new content.
    pub content: String,
}

#[derive(Serialize, JsonSchema)]
pub struct WriteResult {
    /// The file's absolute path as the sandbox sees it.
    pub path: String,
}

/// `file.list`'s arguments.
#[derive(Deserialize, JsonSchema)]
pub struct ListArgs {
    /// A directory (default: the workspace root).
    #[serde(default)]
    pub path: Option<String>,
}

#[derive(Serialize, JsonSchema)]
pub struct ListResult {
    /// The names in the directory, sorted.
    pub entries: Vec<String>,
}

/// `file.search`'s arguments.
#[derive(Deserialize, JsonSchema)]
pub struct SearchArgs {
    /// The file to search.
    pub path: String,
    /// The text to look for (non-empty, matched as a substring).
    pub query: String,
}

#[derive(Serialize, JsonSchema)]
pub struct SearchResult {
    /// The lines containing the query, in order.
    pub matches: Vec<String>,
}

/// `file.replace`'s arguments.
#[derive(Deserialize, JsonSchema)]
pub struct ReplaceArgs {
    /// The file to change.
    pub path: String,
    /// The text to replace (non-empty); every occurrence is replaced.
    pub search: String,
    /// The text to put in its place.
    pub replace: String,
}

#[derive(Serialize, JsonSchema)]
pub struct ReplaceResult {
    /// How many occurrences were replaced.
    pub count: u64,
}

pub fn tools() -> Vec<ToolInfo> {
    vec![
        info::<ReadArgs, ReadResult>("file.read", Scope::Workspace, None),
        info::<WriteArgs, WriteResult>("file.write", Scope::Workspace, None),
        info::<ListArgs, ListResult>("file.list", Scope::Workspace, None),
        info::<SearchArgs, SearchResult>("file.search", Scope::Workspace, None),
        info::<ReplaceArgs, ReplaceResult>("file.replace", Scope::Workspace, None),
    ]
}

/// `file.<tool>` for `tenant`.
pub async fn call(
    app: &AppState,
    tenant: &Tenant,
    workspace: &ConversationId,
    tool: &str,
    arguments: Value,
) -> Result<Value, ToolError> {
    let workspaces = app.engine.workspaces().clone();
    let view = || TenantView::new(&app.engine, tenant, workspace.clone()).map_err(|e| ToolError::Tool(e.to_string()));
    let claim = || conversation_access::claim(&app.engine, tenant, workspace).map_err(|e| refusal("", workspace, &e));
    match tool {
        "read" => {
            let args: ReadArgs = parse(arguments)?;
            let relative = file_path(&args.path)?;
            let content = read(view()?, relative, args.path).await?;
            result(&ReadResult { content })
        }
        "write" => {
            let args: WriteArgs = parse(arguments)?;
            let relative = file_path(&args.path)?;
            claim()?;
            refuse_symlinks(workspaces, workspace.clone(), relative.clone(), args.path.clone()).await?;
            app.engine
                .upload_file(workspace, &relative, args.content.into_bytes())
                .await
                .map_err(|e| failure(&args.path, e))?;
            result(&WriteResult { path: format!("{WORKSPACE_MOUNT}/{relative}") })
        }
        "list" => {
            let args: ListArgs = parse(arguments)?;
            let shown = args.path.unwrap_or_default();
            let relative = paths::relative(&shown).map_err(|_| ToolError::InvalidParams(OUTSIDE.to_owned()))?;
            let view = view()?;
            let entries = blocking(move || list(&view, &relative, &shown)).await?;
            result(&ListResult { entries })
        }
        "search" => {
            let args: SearchArgs = parse(arguments)?;
            let relative = file_path(&args.path)?;
            if args.query.is_empty() {
                return Err(ToolError::InvalidParams("query must not be empty".to_owned()));
            }
            let text = read(view()?, relative, args.path).await?;
            let matches = text.lines().filter(|line| line.contains(&args.query)).map(str::to_owned).collect();
            result(&SearchResult { matches })
        }
        "replace" => {
            let args: ReplaceArgs = parse(arguments)?;
            let relative = file_path(&args.path)?;
            if args.search.is_empty() {
                return Err(ToolError::InvalidParams("search must not be empty".to_owned()));
            }
            let text = read(view()?, relative.clone(), args.path.clone()).await?;
            let count = text.matches(args.search.as_str()).count() as u64;
            if count > 0 {
                claim()?;
                let replaced = text.replace(args.search.as_str(), &args.replace);
                app.engine
                    .upload_file(workspace, &relative, replaced.into_bytes())
                    .await
                    .map_err(|e| failure(&args.path, e))?;
            }
            result(&ReplaceResult { count })
        }
        _ => Err(ToolError::UnknownTool(format!("file.{tool}"))),
    }
}

/// The workspace-relative path of a file argument; the root itself is no file.
fn file_path(path: &str) -> Result<String, ToolError> {
    if path.is_empty() {
        return Err(ToolError::InvalidParams("path is required".to_owned()));
    }
    let relative = paths::relative(path).map_err(|_| ToolError::InvalidParams(OUTSIDE.to_owned()))?;
    if relative.is_empty() {
        return Err(ToolError::Tool(format!("{path} is a directory")));
    }
    Ok(relative)
}

/// The tool error of a failure to open or write `shown`: a symlink on the way is a path outside the workspace.
fn failure(shown: &str, error: Error) -> ToolError {
    match error {
        Error::InvalidPath { message, .. } if message.contains("symlink") => {
            ToolError::InvalidParams(format!("{OUTSIDE}: {shown} goes through a symlink"))
        }
        Error::FileNotFound { .. } => ToolError::Tool(format!("{shown}: no such file or directory")),
        Error::InvalidPath { message, .. } => ToolError::Tool(format!("{shown} {message}")),
        other => ToolError::Tool(other.to_string()),
    }
}

/// Runs blocking file work off the async threads.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ToolError> + Send + 'static,
) -> Result<T, ToolError> {
    tokio::task::spawn_blocking(work).await.map_err(|e| ToolError::Tool(format!("internal error: {e}")))?
}

/// The text of the regular file `relative` (at most [`MAX_BYTES`]; invalid UTF-8 replaced).
async fn read(workspace: TenantView, relative: String, shown: String) -> Result<String, ToolError> {
    blocking(move || {
        let file = workspace.open_file(&relative).map_err(|e| failure(&shown, e))?;
        let mut bytes = Vec::new();
        file.take(MAX_BYTES + 1).read_to_end(&mut bytes).map_err(|e| ToolError::Tool(format!("read {shown}: {e}")))?;
        if bytes.len() as u64 > MAX_BYTES {
            return Err(ToolError::Tool(format!("{shown} is larger than 16 MiB")));
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    })
    .await
}

/// Refuses a write whose path goes through a symlink (`upload_file` would replace a final symlink, never write
/// through it; refusing says so to the caller instead).
async fn refuse_symlinks(
    workspaces: Workspaces,
    workspace: ConversationId,
    relative: String,
    shown: String,
) -> Result<(), ToolError> {
    blocking(move || match workspaces.open_file(&workspace, &relative) {
        Err(Error::InvalidPath { message, .. }) if message.contains("symlink") => {
            Err(failure(&shown, Error::InvalidPath { path: relative, message }))
        }
        _ => Ok(()),
    })
    .await
}

/// The names in the directory `relative` (`""`: the root): the files and the directories that hold files
/// (`Workspaces::list_within`, which follows no symlink; symlinks, special files and empty directories are not
/// listed).
fn list(workspace: &TenantView, relative: &str, shown: &str) -> Result<Vec<String>, ToolError> {
    if !relative.is_empty() {
        match workspace.open_file(relative) {
            Ok(_) => return Err(ToolError::Tool(format!("{shown} is not a directory"))),
            Err(Error::InvalidPath { message, .. }) if message == "is a directory" => {}
            Err(error) => return Err(failure(shown, error)),
        }
    }
    let listing = workspace.list_within(MAX_FILES, MAX_PATH_BYTES).map_err(|e| ToolError::Tool(e.to_string()))?;
    let prefix = if relative.is_empty() { String::new() } else { format!("{relative}/") };
    let mut entries: Vec<String> = listing
        .files
        .iter()
        .filter_map(|file| file.path.strip_prefix(&prefix))
        .filter_map(|rest| rest.split('/').next())
        .map(str::to_owned)
        .collect();
    entries.sort();
    entries.dedup();
    Ok(entries)
}
