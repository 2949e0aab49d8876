//! `file.read`, `file.write`, `file.list`, `file.search`, `file.replace` on the workspace's host directory. A path
//! is made workspace-relative as the codegen profile does it (`kit::workspace_paths::relative`: `/workspace/...` or
//! relative, `..` resolved lexically, refused when it leaves); files are opened with `Workspaces::open_file`
//! (beneath the workspace, no symlink followed, FIFOs never waited on) and written with `Engine::upload_file`
//! (atomic, parents created, the disk quota applied, never through a symlink). A path that goes through a symlink is
//! refused like one outside the workspace, whatever the link points to. Reads go through the tenant's `TenantView`
//! (another tenant's workspace reads as one that does not exist); a write first claims the workspace for the
//! tenant (another tenant's is `not_available`).
//!
//! Every result is bounded while it is built (`kit::result_budget`: `content`, `matches` and `entries` stop at the
//! budget and the result says `truncated`), a replace is refused before its text is built when the file would pass
//! 16 MiB (`kit::file_limits`), and `file.list` walks within `kit::tool_walk`'s bounds, stopped when the call is.

use std::io::Read as _;

use sandlot_core::{ConversationId, Error, Tenant, Workspaces};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{OUTSIDE, Scope, ToolError, ToolInfo, WORKSPACE_MOUNT, info, parse, refusal, result};
use crate::AppState;
use crate::kit::conversation_access::{self, TenantView};
use crate::kit::file_limits::{self, MAX_FILE_BYTES as MAX_BYTES};
use crate::kit::result_budget::{ResultBudget, TOOL_RESULT_BYTES};
use crate::kit::tool_walk;
use crate::kit::workspace_paths as paths;

/// `file.read`'s arguments.
#[derive(Deserialize, JsonSchema)]
pub struct ReadArgs {
    /// A file: relative to the workspace, or absolute under /workspace.
    pub path: String,
}

#[derive(Serialize, JsonSchema)]
pub struct ReadResult {
    /// The file as text: all of it, unless `truncated`.
    pub content: String,
    /// The file holds more than the result does (a result holds 1 MiB as JSON).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
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
    /// More names exist than were listed (the walk's or the result's bounds).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
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
    /// More lines matched than the result holds (1 MiB as JSON).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
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

/// `file.<tool>` for `tenant`; its blocking work stops when `cancel` is, or when this future is dropped.
pub async fn call(
    app: &AppState,
    tenant: &Tenant,
    workspace: &ConversationId,
    tool: &str,
    arguments: Value,
    cancel: &CancellationToken,
) -> Result<Value, ToolError> {
    let workspaces = app.engine.workspaces().clone();
    let view = || TenantView::new(&app.engine, tenant, workspace.clone()).map_err(|e| ToolError::Tool(e.to_string()));
    let claim = || conversation_access::claim(&app.engine, tenant, workspace).map_err(|e| refusal("", workspace, &e));
    match tool {
        "read" => {
            let args: ReadArgs = parse(arguments)?;
            let relative = file_path(&args.path)?;
            let view = view()?;
            let (content, truncated) = blocking(cancel, move |_| head(&view, &relative, &args.path)).await?;
            result(&ReadResult { content, truncated })
        }
        "write" => {
            let args: WriteArgs = parse(arguments)?;
            let relative = file_path(&args.path)?;
            claim()?;
            refuse_symlinks(workspaces, workspace.clone(), relative.clone(), args.path.clone(), cancel).await?;
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
            let (entries, truncated) = blocking(cancel, move |cancel| list(&view, &relative, &shown, &cancel)).await?;
            result(&ListResult { entries, truncated })
        }
        "search" => {
            let args: SearchArgs = parse(arguments)?;
            let relative = file_path(&args.path)?;
            if args.query.is_empty() {
                return Err(ToolError::InvalidParams("query must not be empty".to_owned()));
            }
            let text = read(view()?, relative, args.path, cancel).await?;
            let mut budget = ResultBudget::tool();
            let matches = text
                .lines()
                .filter(|line| line.contains(&args.query))
                .map_while(|line| budget.take_item(line).then(|| line.to_owned()))
                .collect();
            result(&SearchResult { matches, truncated: budget.is_cut() })
        }
        "replace" => {
            let args: ReplaceArgs = parse(arguments)?;
            let relative = file_path(&args.path)?;
            if args.search.is_empty() {
                return Err(ToolError::InvalidParams("search must not be empty".to_owned()));
            }
            let text = read(view()?, relative.clone(), args.path.clone(), cancel).await?;
            let count = text.matches(args.search.as_str()).count();
            let size = file_limits::replaced_size(text.len(), count, args.search.len(), args.replace.len());
            if let Some(refusal) = file_limits::refuse_replaced_size(&args.path, size) {
                return Err(ToolError::Tool(refusal));
            }
            if count > 0 {
                claim()?;
                let replaced = text.replace(args.search.as_str(), &args.replace);
                app.engine
                    .upload_file(workspace, &relative, replaced.into_bytes())
                    .await
                    .map_err(|e| failure(&args.path, e))?;
            }
            result(&ReplaceResult { count: count as u64 })
        }
        _ => Err(ToolError::UnknownTool(format!("file.{tool}"))),
    }
}

/// Writes `bytes` to the workspace-relative `relative` as `file.write` does (the workspace claimed, no symlink on
/// the way, parents made, the disk quota); for the browser's screenshots.
pub(super) async fn write_file(
    app: &AppState,
    workspace: &ConversationId,
    relative: &str,
    bytes: Vec<u8>,
    cancel: &CancellationToken,
) -> Result<(), ToolError> {
    let workspaces = app.engine.workspaces().clone();
    let shown = format!("{WORKSPACE_MOUNT}/{relative}");
    refuse_symlinks(workspaces, workspace.clone(), relative.to_owned(), shown.clone(), cancel).await?;
    app.engine.upload_file(workspace, relative, bytes).await.map_err(|e| failure(&shown, e))?;
    Ok(())
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
        Error::InvalidPath { message, .. } if message == "is a directory" || message == "is not a regular file" => {
            ToolError::Tool(format!("{shown} {message}"))
        }
        // The path's shape (a segment over 255 bytes, a control character): the caller's to fix.
        Error::InvalidPath { message, .. } => ToolError::InvalidParams(format!("{shown} {message}")),
        Error::Io { action, source, .. } => ToolError::Tool(format!("{action} {shown}: {source}")),
        other => ToolError::Tool(other.to_string()),
    }
}

/// Runs blocking file work off the async threads, handing it a token cancelled when `cancel` is or when this future
/// is dropped (the client left), which long work polls.
async fn blocking<T: Send + 'static>(
    cancel: &CancellationToken,
    work: impl FnOnce(CancellationToken) -> Result<T, ToolError> + Send + 'static,
) -> Result<T, ToolError> {
    let token = cancel.child_token();
    let guard = token.clone().drop_guard();
    let result = tokio::task::spawn_blocking(move || work(token)).await;
    drop(guard);
    result.map_err(|e| ToolError::Tool(format!("internal error: {e}")))?
}

/// The beginning of the regular file `relative` that fits a result's budget (invalid UTF-8 replaced), and whether
/// the file holds more: only what can be sent is read.
fn head(workspace: &TenantView, relative: &str, shown: &str) -> Result<(String, bool), ToolError> {
    let file = workspace.open_file(relative).map_err(|e| failure(shown, e))?;
    // Every byte takes at least one byte of JSON: one more than the budget tells whether there is more.
    let mut bytes = Vec::new();
    file.take(TOOL_RESULT_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| ToolError::Tool(format!("read {shown}: {e}")))?;
    let text = String::from_utf8_lossy(&bytes);
    let mut budget = ResultBudget::tool();
    let kept = budget.take_prefix(&text);
    Ok((kept.to_owned(), budget.is_cut()))
}

/// The text of the regular file `relative` (at most [`MAX_BYTES`]; invalid UTF-8 replaced).
async fn read(
    workspace: TenantView,
    relative: String,
    shown: String,
    cancel: &CancellationToken,
) -> Result<String, ToolError> {
    blocking(cancel, move |_| {
        let file = workspace.open_file(&relative).map_err(|e| failure(&shown, e))?;
        let mut bytes = Vec::new();
        file.take(MAX_BYTES + 1).read_to_end(&mut bytes).map_err(|e| ToolError::Tool(format!("read {shown}: {e}")))?;
        if bytes.len() as u64 > MAX_BYTES {
            return Err(ToolError::Tool(format!("{shown} is larger than 16 MiB")));
        }
        // Valid UTF-8 (the usual case) becomes the string without a second copy of up to 16 MiB.
        Ok(String::from_utf8(bytes).unwrap_or_else(|invalid| String::from_utf8_lossy(invalid.as_bytes()).into_owned()))
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
    cancel: &CancellationToken,
) -> Result<(), ToolError> {
    blocking(cancel, move |_| match workspaces.open_file(&workspace, &relative) {
        Err(Error::InvalidPath { message, .. }) if message.contains("symlink") => {
            Err(failure(&shown, Error::InvalidPath { path: relative, message }))
        }
        _ => Ok(()),
    })
    .await
}

/// The names in the directory `relative` (`""`: the root): the files and the directories that hold files
/// (`kit::tool_walk`, which follows no symlink; symlinks, special files and empty directories are not listed),
/// within the result's budget; and whether some were left out.
fn list(
    workspace: &TenantView,
    relative: &str,
    shown: &str,
    cancel: &CancellationToken,
) -> Result<(Vec<String>, bool), ToolError> {
    if !relative.is_empty() {
        match workspace.open_file(relative) {
            Ok(_) => return Err(ToolError::Tool(format!("{shown} is not a directory"))),
            Err(Error::InvalidPath { message, .. }) if message == "is a directory" => {}
            Err(error) => return Err(failure(shown, error)),
        }
    }
    let (listing, _) = tool_walk::walk(workspace, cancel).map_err(ToolError::Tool)?;
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
    let mut budget = ResultBudget::tool();
    entries.retain(|entry| budget.take_item(entry));
    Ok((entries, listing.truncated || budget.is_cut()))
}
