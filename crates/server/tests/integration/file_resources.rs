//! A conversation's files as MCP resources (`sandlot://conversations/{id}/files/{path}`): listed a page at a time,
//! read as text or blob within the read limit, bad ids and paths refused naming them, and (the attack) symlinks a
//! sandbox planted in `/data` never followed: not to a host file, not to another conversation, not to the server's
//! own state. Through the HTTP app without a network; the same handler serves stdio (tests/e2e covers that).

use crate::common;

use std::os::unix::fs::symlink;
use std::path::Path;

use base64::Engine as _;
use http_body_util::BodyExt;
use sandlot_server::AppState;
use sandlot_server::kit::{AllowedHosts, Authenticator};
use sandlot_server::{HttpOptions, app};
use serde_json::{Value, json};
use tower::ServiceExt;

const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0\x1f\x15\xc4\x89\xff\xfe";

fn router(state: &AppState) -> axum::Router {
    app(state.clone(), Authenticator::token("tok"), HttpOptions::new(AllowedHosts::new(vec!["localhost".into()])))
}

/// One stateless JSON-RPC request: the message answered.
async fn rpc(router: &axum::Router, method: &str, params: Value) -> Value {
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params });
    let response = router.clone().oneshot(common::post_mcp(&body.to_string())).await.unwrap();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    common::jsonrpc_answer(&bytes)
}

async fn read(router: &axum::Router, uri: &str) -> Value {
    rpc(router, "resources/read", json!({ "uri": uri })).await
}

fn write(root: &Path, conversation: &str, path: &str, bytes: &[u8]) {
    let file = root.join(conversation).join("files").join(path);
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(file, bytes).unwrap();
}

#[tokio::test]
async fn files_are_listed_a_page_at_a_time_and_the_template_is_announced() {
    let (root, state) = common::state("secret", None);
    for i in 0..150 {
        write(root.path(), "many", &format!("f{i:03}.txt"), b"x");
    }
    write(root.path(), "c1", "out/result file.csv", b"a,b\n1,2\n");
    let router = router(&state);

    let templates = rpc(&router, "resources/templates/list", json!({})).await;
    let templates = templates["result"]["resourceTemplates"].as_array().unwrap();
    assert!(
        templates.iter().any(|t| t["uriTemplate"] == "sandlot://conversations/{conversationId}/files/{path}"),
        "{templates:?}"
    );

    let mut uris = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let params = cursor.as_ref().map_or(json!({}), |c| json!({ "cursor": c }));
        let page = rpc(&router, "resources/list", params).await;
        let resources = page["result"]["resources"].as_array().unwrap_or_else(|| panic!("{page}"));
        // The first page holds the MCP Apps views (tests/apps.rs) too.
        let files: Vec<&Value> =
            resources.iter().filter(|r| r["uri"].as_str().unwrap().starts_with("sandlot://")).collect();
        assert!(files.len() <= 100, "a page holds at most 100 files");
        uris.extend(files.iter().map(|r| r["uri"].as_str().unwrap().to_owned()));
        pages += 1;
        match page["result"]["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(pages, 2);
    assert_eq!(uris.len(), 151);
    assert!(uris.contains(&"sandlot://conversations/many/files/f149.txt".to_owned()));
    // Segments are percent-encoded, `/` kept; the listed URI reads back.
    let csv = "sandlot://conversations/c1/files/out/result%20file.csv";
    assert!(uris.contains(&csv.to_owned()), "{uris:?}");
    let answer = read(&router, csv).await;
    let contents = &answer["result"]["contents"][0];
    assert_eq!((contents["text"].as_str(), contents["mimeType"].as_str()), (Some("a,b\n1,2\n"), Some("text/csv")));

    let bad = rpc(&router, "resources/list", json!({ "cursor": "nonsense" })).await;
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
}

#[tokio::test]
async fn text_is_text_and_binary_is_a_blob_of_the_same_bytes() {
    let (root, state) = common::state("secret", None);
    write(root.path(), "c1", "notes.md", "# héllo\n".as_bytes());
    write(root.path(), "c1", "plot.png", PNG);
    write(root.path(), "c1", "noext", b"plain words");
    let router = router(&state);

    let text = read(&router, "sandlot://conversations/c1/files/notes.md").await;
    let contents = &text["result"]["contents"][0];
    assert_eq!(contents["text"], "# héllo\n", "{text}");
    assert_eq!(contents["mimeType"], "text/markdown");
    assert_eq!(contents["uri"], "sandlot://conversations/c1/files/notes.md");

    let blob = read(&router, "sandlot://conversations/c1/files/plot.png").await;
    let contents = &blob["result"]["contents"][0];
    assert!(contents.get("text").is_none(), "{blob}");
    assert_eq!(contents["mimeType"], "image/png");
    let decoded = base64::engine::general_purpose::STANDARD.decode(contents["blob"].as_str().unwrap()).unwrap();
    assert_eq!(decoded, PNG);

    let plain = read(&router, "sandlot://conversations/c1/files/noext").await;
    assert_eq!(plain["result"]["contents"][0]["mimeType"], "text/plain", "{plain}");
}

#[tokio::test]
async fn a_file_over_the_read_limit_is_refused_with_the_limit_and_a_download_url() {
    let (root, mut state) = common::state("secret", None);
    state.resource_read_bytes = 1024;
    write(root.path(), "c1", "fits.bin", &[0xff; 1024]);
    write(root.path(), "c1", "big.txt", &[b'a'; 1025]);
    let router = router(&state);

    let fits = read(&router, "sandlot://conversations/c1/files/fits.bin").await;
    assert_eq!(fits["result"]["contents"][0]["blob"].as_str().unwrap().len(), 1368, "{fits}");

    let big = read(&router, "sandlot://conversations/c1/files/big.txt").await;
    assert_eq!(big["error"]["code"], -32602, "{big}");
    let message = big["error"]["message"].as_str().unwrap();
    assert!(message.contains("1024 bytes") && message.contains("SANDLOT_RESOURCE_READ_BYTES"), "{message}");
    let url = big["error"]["data"]["url"].as_str().unwrap();
    assert!(url.starts_with("http://test/files/c1/big.txt?sig=") && message.contains(url), "{big}");
}

#[tokio::test]
async fn bad_ids_and_paths_are_invalid_params_and_a_missing_file_is_not_found() {
    let (root, state) = common::state("secret", None);
    write(root.path(), "c1", "a.txt", b"a");
    write(root.path(), "c2", "secret.txt", b"other conversation");
    let router = router(&state);

    for (uri, named) in [
        ("sandlot://conversations/..%2Fc2/files/secret.txt", "conversation"),
        ("sandlot://conversations/bad%20id/files/a.txt", "conversation"),
        ("sandlot://conversations/c1/files/../../c2/files/secret.txt", "'..'"),
        ("sandlot://conversations/c1/files/%2E%2E/%2E%2E/c2/files/secret.txt", "'..'"),
        ("sandlot://conversations/c1/files//etc/passwd", "absolute"),
        ("sandlot://conversations/c1/files/a.txt%00", "control"),
        ("sandlot://conversations/c1/files/a%0A.txt", "control"),
        ("sandlot://conversations/c1/files/%FF", "UTF-8"),
        ("sandlot://conversations/c1/files/", "empty"),
    ] {
        let answer = read(&router, uri).await;
        assert_eq!(answer["error"]["code"], -32602, "{uri}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(named), "{uri}: {message}");
        assert!(!answer.to_string().contains("other conversation"), "{uri}: {answer}");
    }
    // No file system names a segment over 255 bytes: the caller's invalid path, not the server's fault.
    let long = format!("sandlot://conversations/c1/files/{}/a.txt", "n".repeat(256));
    let answer = read(&router, &long).await;
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    assert!(answer["error"]["message"].as_str().unwrap().contains("has a segment longer than 255 bytes"), "{answer}");
    for uri in ["sandlot://conversations/c1/files/nope.txt", "sandlot://conversations/c3/files/a.txt"] {
        let answer = read(&router, uri).await;
        assert_eq!(answer["error"]["code"], -32002, "{uri}: {answer}");
    }
}

/// The attack: what a sandboxed program can do to `/data` (it owns it), plant symlinks, aimed at a host file, at
/// another conversation's file (as a file link and as a directory link) and at the server's history database.
/// Every read is refused and no byte of any target comes back; the listing does not show them either.
#[tokio::test]
async fn symlinks_in_data_are_never_followed_by_resources_read() {
    let (root, state) = common::state("secret", None);
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    write(root.path(), "victim", "secret.txt", b"VICTIM-SECRET");
    let state_dir = root.path().join(".sandlot");
    std::fs::create_dir_all(&state_dir).unwrap();
    std::fs::write(state_dir.join("history.db"), b"HISTORY-DB-BYTES").unwrap();
    write(root.path(), "attacker", "ok.txt", b"fine");
    let data = root.path().join("attacker/files");
    symlink("/etc/passwd", data.join("passwd")).unwrap();
    symlink(root.path().join("victim/files/secret.txt"), data.join("victim.txt")).unwrap();
    symlink("../../victim/files", data.join("victim-dir")).unwrap();
    symlink(state_dir.join("history.db"), data.join("history.db")).unwrap();
    symlink("../../.sandlot", data.join("state")).unwrap();
    let router = router(&state);

    for path in ["passwd", "victim.txt", "victim-dir/secret.txt", "history.db", "state/history.db"] {
        let answer = read(&router, &format!("sandlot://conversations/attacker/files/{path}")).await;
        assert_eq!(answer["error"]["code"], -32602, "{path}: {answer}");
        assert!(answer["error"]["message"].as_str().unwrap().contains("symlink"), "{path}: {answer}");
        let text = answer.to_string();
        for leaked in ["root:", "VICTIM-SECRET", "HISTORY-DB-BYTES"] {
            assert!(!text.contains(leaked), "{path} leaked {leaked}: {text}");
        }
        assert!(!passwd.is_empty() && !text.contains(passwd.lines().next().unwrap()), "{path}: {text}");
    }
    let listed = rpc(&router, "resources/list", json!({})).await;
    let uris: Vec<&str> =
        listed["result"]["resources"].as_array().unwrap().iter().map(|r| r["uri"].as_str().unwrap()).collect();
    assert!(uris.contains(&"sandlot://conversations/attacker/files/ok.txt"), "{uris:?}");
    assert!(
        uris.iter().all(|u| !u.starts_with("sandlot://conversations/attacker/") || u.ends_with("/ok.txt")),
        "{uris:?}"
    );
    // The real file still reads.
    let ok = read(&router, "sandlot://conversations/attacker/files/ok.txt").await;
    assert_eq!(ok["result"]["contents"][0]["text"], "fine", "{ok}");
}

/// Attack: `resources/list` walked every conversation's directories on the runtime's worker threads, so a tree of
/// many directories stalled every other request (six concurrent listings over 100k directories delayed `/healthz` by
/// 3.1 s). On this test's single-threaded runtime, a task ticking every millisecond measures how long the runtime
/// was held: now the walk is on the blocking pool and the ticker is never held for half the listing's time (before,
/// it was held for all of it: the runtime's one thread did the walk). The walk also stops at
/// `MAX_VISITED_ENTRIES` entries and says the listing is cut short.
#[tokio::test]
async fn attack_a_tree_of_many_directories_cannot_stall_the_runtime_while_listed() {
    let (root, state) = common::state_in(tempfile::tempdir_in("/dev/shm").unwrap(), "secret", None);
    write(root.path(), "deep", "answer.txt", b"42");
    let files = root.path().join("deep/files");
    for i in 0..sandlot_core::MAX_VISITED_ENTRIES {
        std::fs::create_dir(files.join(format!("d{i}"))).unwrap();
    }
    let router = router(&state);
    let longest = std::sync::Arc::new(std::sync::Mutex::new(std::time::Duration::ZERO));
    let ticker = tokio::spawn({
        let longest = longest.clone();
        async move {
            let mut last = std::time::Instant::now();
            loop {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                let mut longest = longest.lock().unwrap();
                *longest = (*longest).max(last.elapsed());
                last = std::time::Instant::now();
            }
        }
    });
    tokio::time::sleep(std::time::Duration::from_millis(5)).await; // the ticker is running
    let started = std::time::Instant::now();
    let listed = rpc(&router, "resources/list", json!({})).await;
    let took = started.elapsed();
    tokio::time::sleep(std::time::Duration::from_millis(50)).await; // the ticker sees the last gap too
    ticker.abort();
    let longest = *longest.lock().unwrap();
    // Nothing listed: the walk stopped at its budget before reaching the one file (created first, listed last).
    let files: Vec<&Value> = listed["result"]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| !r["uri"].as_str().unwrap().starts_with("ui://"))
        .collect();
    assert!(files.is_empty(), "{listed}");
    assert!(longest < took / 2, "the runtime was held {longest:?} of the listing's {took:?}");
}
