//! The attacks of docs/security.md ("The server's file tools: bounded work") on the file tools that run in the server
//! (codegen's `Read`, `Edit`, `Glob`, `Grep`; open-sandbox's `file.*`), called in-process over a workspace the test
//! fills as a sandbox would, each with the default configuration: a replace-all that would build a huge string, a
//! read or a search whose result has no end, ignore files that cost the server more than the walk, a regex whose
//! compiled program is huge, a walk made endless by hard links, a call whose client left, and a path segment no file
//! system names. Each asserts the refusal or the cut, exactly.

use crate::common;

use std::path::PathBuf;

use sandlot_core::ConversationId;
use sandlot_server::AppState;
use sandlot_server::surfaces::codegen::tools::{self as codegen_tools, Call};
use sandlot_server::surfaces::codegen::{CodegenState, Tenant};
use sandlot_server::surfaces::open_sandbox::tools::{self as open_tools, ToolError};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// A result's budget as JSON (`kit::result_budget::TOOL_RESULT_BYTES`).
const BUDGET: usize = 1024 * 1024;

struct Fixture {
    _root: tempfile::TempDir,
    app: AppState,
    codegen: CodegenState,
    tenant: Tenant,
}

/// A server's state over a root in memory (so a tree of 100,000 entries is made in under a second).
fn fixture() -> Fixture {
    let (root, app) = common::state_in(tempfile::tempdir_in("/dev/shm").unwrap(), "secret", None);
    let tenant = Tenant::new(sandlot_core::Tenant::new("caller-a"), None).unwrap();
    Fixture { _root: root, codegen: CodegenState::new(app.clone()), app, tenant }
}

impl Fixture {
    /// Calls codegen's tool `name`.
    async fn codegen(&self, name: &str, arguments: Value) -> Result<String, String> {
        self.codegen_with(name, arguments, CancellationToken::new()).await
    }

    async fn codegen_with(&self, name: &str, arguments: Value, cancel: CancellationToken) -> Result<String, String> {
        let entry = codegen_tools::registry().into_iter().find(|entry| entry.tool.name == name).unwrap();
        let arguments = arguments.as_object().unwrap().clone();
        let call = Call { state: self.codegen.clone(), tenant: self.tenant.clone(), arguments, cancel };
        (entry.call)(call).await
    }

    /// The codegen workspace's directory on the host, made.
    fn codegen_dir(&self) -> PathBuf {
        self.app.engine.workspaces().prepare(&self.tenant.workspace).unwrap()
    }

    /// Calls open-sandbox's tool `name` as caller-a in its workspace.
    async fn open(&self, name: &str, arguments: Value) -> Result<Value, ToolError> {
        let tenant = sandlot_core::Tenant::new("caller-a");
        open_tools::call(&self.app, &tenant, &self.open_workspace(), name, arguments, Default::default())
            .await
            .map(|called| called.result)
    }

    fn open_workspace(&self) -> ConversationId {
        ConversationId::parse("osb-bounds").unwrap()
    }

    /// The open-sandbox workspace's directory on the host, made.
    fn open_dir(&self) -> PathBuf {
        self.app.engine.workspaces().prepare(&self.open_workspace()).unwrap()
    }
}

/// What `text` takes inside a JSON string.
fn json_len(text: &str) -> usize {
    serde_json::to_string(text).unwrap().len() - 2
}

#[tokio::test]
async fn attack_replace_all_that_would_build_a_huge_string_is_refused_first() {
    let f = fixture();
    // 1 MiB of `a`, each to be replaced by 128 bytes: a 128 MiB string (16 MiB of it made 2 GiB).
    let megabyte = "a".repeat(1 << 20);
    let long = "b".repeat(128);
    std::fs::write(f.codegen_dir().join("a.txt"), &megabyte).unwrap();
    f.codegen("Read", json!({"file_path": "a.txt", "limit": 1})).await.unwrap();
    let edited = f
        .codegen("Edit", json!({"file_path": "a.txt", "old_string": "a", "new_string": long, "replace_all": true}))
        .await;
    let refusal = "refusing to change a.txt: the result would be 134217728 bytes, over the 16 MiB a file may have";
    assert_eq!(edited, Err(refusal.to_owned()));
    assert_eq!(std::fs::read_to_string(f.codegen_dir().join("a.txt")).unwrap(), megabyte);

    std::fs::write(f.open_dir().join("a.txt"), &megabyte).unwrap();
    let replaced = f.open("file.replace", json!({"path": "a.txt", "search": "a", "replace": long})).await;
    assert_eq!(replaced, Err(ToolError::Tool(refusal.to_owned())));
    assert_eq!(std::fs::read_to_string(f.open_dir().join("a.txt")).unwrap(), megabyte);
    // Within the limit, both still replace.
    let ok = f.open("file.replace", json!({"path": "a.txt", "search": "aaaa", "replace": "b"})).await;
    assert_eq!(ok, Ok(json!({"count": 262_144})));
}

#[tokio::test]
async fn attack_read_and_grep_results_stop_at_their_byte_budget() {
    let f = fixture();
    // 8 MB of newlines read with limit 1e12: 8 million numbered lines (~80 MB) before the budget.
    std::fs::write(f.codegen_dir().join("newlines.txt"), vec![b'\n'; 8_000_000]).unwrap();
    let text = f.codegen("Read", json!({"file_path": "newlines.txt", "limit": 1e12})).await.unwrap();
    let (body, last) = text.trim_end().rsplit_once('\n').unwrap();
    let shown = body.lines().count();
    assert_eq!(last, format!("[cut: the result reached the 1024 KiB it holds; read on with offset={}]", shown + 1));
    assert!(json_len(body) <= BUDGET && json_len(body) > BUDGET - 64, "{}", json_len(body));
    // A line past the budget is read on from where it said.
    let next = f.codegen("Read", json!({"file_path": "newlines.txt", "offset": shown + 1, "limit": 1})).await;
    assert_eq!(next, Ok(format!("{}\t\n", shown + 1)));

    // Every line of every file matches: the result stops at the budget, saying so.
    let lines: String = (0..40_000).map(|i| format!("match line {i:030}\n")).collect();
    for name in ["one.txt", "two.txt"] {
        std::fs::write(f.codegen_dir().join(name), &lines).unwrap();
    }
    let found = f.codegen("Grep", json!({"pattern": "match"})).await.unwrap();
    let (body, last) = found.trim_end().rsplit_once('\n').unwrap();
    assert_eq!(last, "[cut: the result reached the 1024 KiB it holds; narrow the search or use head_limit]");
    assert!(json_len(body) <= BUDGET, "{}", json_len(body));
    assert!(body.lines().all(|line| line.starts_with("newlines.txt") || line.contains(":match line ")));

    // open-sandbox: a 16 MiB sparse file (nothing against the quota) is read within the budget as JSON.
    let sparse = std::fs::File::create(f.open_dir().join("sparse")).unwrap();
    sparse.set_len(16 << 20).unwrap();
    let read = f.open("file.read", json!({"path": "sparse"})).await.unwrap();
    assert_eq!(read["truncated"], true);
    let content = read["content"].as_str().unwrap();
    assert_eq!((content.len(), content.bytes().all(|b| b == 0)), (BUDGET / 6, true));
    std::fs::write(f.open_dir().join("lines.txt"), &lines).unwrap();
    let searched = f.open("file.search", json!({"path": "lines.txt", "query": "match"})).await.unwrap();
    assert_eq!(searched["truncated"], true);
    let matches = searched["matches"].as_array().unwrap();
    assert!(serde_json::to_string(matches).unwrap().len() <= BUDGET);
    // Each is 41 bytes, its quotes and a comma.
    assert_eq!(matches.len(), BUDGET / 44);
    // A small file is whole, without the flag.
    std::fs::write(f.open_dir().join("small.txt"), "match\nno\n").unwrap();
    let small = f.open("file.search", json!({"path": "small.txt", "query": "match"})).await;
    assert_eq!(small, Ok(json!({"matches": ["match"]})));
}

#[tokio::test]
async fn attack_hard_linked_ignore_files_are_read_within_a_budget() {
    let f = fixture();
    let dir = f.codegen_dir();
    // 10,000 patterns (each of the 40 directories' .gitignore the same inode): past the 2,000 one walk compiles.
    let patterns: String = (0..10_000).map(|i| format!("**/generated{i}/*.py\n")).collect();
    std::fs::write(dir.join("big.ignore"), &patterns).unwrap();
    for i in 0..40 {
        std::fs::create_dir(dir.join(format!("d{i}"))).unwrap();
        std::fs::hard_link(dir.join("big.ignore"), dir.join(format!("d{i}/.gitignore"))).unwrap();
    }
    std::fs::write(dir.join("d0/kept.py"), "").unwrap();
    // A real .gitignore is still applied.
    std::fs::write(dir.join(".gitignore"), "ignored.py\n").unwrap();
    std::fs::write(dir.join("ignored.py"), "").unwrap();
    std::fs::write(dir.join("main.py"), "").unwrap();
    let started = std::time::Instant::now();
    let found = f.codegen("Glob", json!({"pattern": "*.py"})).await.unwrap();
    let mut lines: Vec<&str> = found.lines().collect();
    let last = lines.pop().unwrap();
    lines.sort();
    assert_eq!(lines, ["d0/kept.py", "main.py"]);
    let cut = "[.gitignore cut: 40 ignore file(s) not applied, past the 256 KiB and 2000 patterns one call reads]";
    assert_eq!(last, cut);
    // Generous on 2 busy cores; compiling 40 × 10,000 patterns took minutes and gigabytes.
    assert!(started.elapsed() < std::time::Duration::from_secs(20), "{:?}", started.elapsed());
}

#[tokio::test]
async fn attack_a_regex_bomb_is_refused_with_a_clear_error() {
    let f = fixture();
    std::fs::write(f.codegen_dir().join("a.txt"), "fn main() {}\n").unwrap();
    let refusal = "grep: the pattern is too large once compiled (over 4 MiB); use fewer or smaller repetitions, or \
                   ASCII classes ((?-u)\\w)";
    // 17 and 14 bytes: each would compile to over 100 MiB of program under the regex engine's defaults.
    for bomb in [r"[\w\W]{1000}{100}", r"(\w{100}){100}", r"\w{1000}\w{1000}"] {
        assert_eq!(f.codegen("Grep", json!({"pattern": bomb})).await, Err(refusal.to_owned()), "{bomb}");
    }
    assert_eq!(f.codegen("Grep", json!({"pattern": r"fn \w+\("})).await, Ok("a.txt:1:fn main() {}\n".to_owned()));
}

#[tokio::test]
async fn attack_hard_links_cannot_make_a_walk_endless_and_are_read_once() {
    let f = fixture();
    let dir = f.codegen_dir();
    // 1,000 names of one file: Grep reads it once.
    std::fs::create_dir(dir.join("links")).unwrap();
    std::fs::write(dir.join("links/0"), "needle\n").unwrap();
    for i in 1..1000 {
        std::fs::hard_link(dir.join("links/0"), dir.join(format!("links/{i}"))).unwrap();
    }
    let found = f.codegen("Grep", json!({"pattern": "needle", "output_mode": "count"})).await.unwrap();
    assert_eq!(found.lines().count(), 1, "{}", &found[..found.len().min(200)]);
    // 100,000 symlinks, never followed nor listed: the walk stops at the entries it may examine.
    plant_symlinks(&dir);
    plant_symlinks(&f.open_dir());
    let cut = "[walk cut: 100000 directory entries examined, the limit of one call; later files were not seen]";
    assert_eq!(f.codegen("Glob", json!({"pattern": "*.none"})).await, Ok(cut.to_owned()));
    let listed = f.open("file.list", json!({})).await;
    assert_eq!(listed, Ok(json!({"entries": [], "truncated": true})));
}

/// 100,000 symlinks in `dir/symlinks`.
fn plant_symlinks(dir: &std::path::Path) {
    std::fs::create_dir(dir.join("symlinks")).unwrap();
    for i in 0..100_000 {
        std::os::unix::fs::symlink("/", dir.join(format!("symlinks/{i}"))).unwrap();
    }
}

#[tokio::test]
async fn a_cancelled_call_stops_its_walk() {
    let f = fixture();
    std::fs::write(f.codegen_dir().join("a.py"), "x\n").unwrap();
    let cancel = CancellationToken::new();
    cancel.cancel();
    let glob = f.codegen_with("Glob", json!({"pattern": "*.py"}), cancel.clone()).await;
    assert_eq!(glob, Err("cancelled".to_owned()));
    let grep = f.codegen_with("Grep", json!({"pattern": "x"}), cancel).await;
    assert_eq!(grep, Err("cancelled".to_owned()));
    assert_eq!(f.codegen("Glob", json!({"pattern": "*.py"})).await, Ok("a.py".to_owned()));
}

#[tokio::test]
async fn a_path_segment_over_255_bytes_is_the_callers_error_and_texts_name_no_host_path() {
    let f = fixture();
    let root = f.app.engine.workspaces().root().to_string_lossy().into_owned();
    let long = format!("/workspace/{}/x", "n".repeat(256));
    let invalid = format!("{long} has a segment longer than 255 bytes");
    assert_eq!(f.codegen("Read", json!({"file_path": long})).await, Err(invalid.clone()));
    f.codegen("Write", json!({"file_path": "/workspace/ok.txt", "content": "x"})).await.unwrap();
    let written = f.codegen("Write", json!({"file_path": long, "content": "x"})).await.unwrap_err();
    assert!(!written.contains(&root) && written.contains("longer than 255 bytes"), "{written}");
    let read = f.open("file.read", json!({"path": long})).await;
    assert_eq!(read, Err(ToolError::InvalidParams(invalid)));
    // A file where a directory is needed: an I/O failure, named by the caller's path only.
    let under_a_file = f.codegen("Write", json!({"file_path": "/workspace/ok.txt/child", "content": "x"})).await;
    let text = under_a_file.unwrap_err();
    assert!(!text.contains(&root) && text.contains("/workspace/ok.txt/child"), "{text}");
}
