//! `SANDLOT_SCRUB_SECRETS`: sandlot's own `sandbox_run_code` results and `sandlot://runs/{id}/output` have secret
//! shapes replaced by `[REDACTED:<name>]` when the operator asks, and are left whole when not. Through the HTTP
//! app, over an engine whose backend echoes the code as the program's output.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use sandlot_core::{
    Backend, Engine, EngineConfig, History, Job, Language, OutputSink, RunOutcome, RunnerInfo, Termination, Workspaces,
};
use sandlot_server::AppState;
use sandlot_server::kit::{AllowedHosts, Authenticator};
use sandlot_server::{HttpOptions, app};
use serde_json::json;

/// An AWS access key id and a GitHub token, of the shapes the scrubber knows.
const AWS_KEY: &str = "AKIAABCDEFGHIJKLMNOP";
const GITHUB_TOKEN: &str = "ghp_0123456789abcdefghijABCDEFGHIJ0123456789";

/// Prints the code on stdout and again on stderr.
struct Echo;

#[async_trait::async_trait]
impl Backend for Echo {
    fn name(&self) -> &'static str {
        "echo"
    }
    fn runners(&self) -> Vec<RunnerInfo> {
        vec![RunnerInfo {
            language: Language::Bash,
            image: "/bin/bash".into(),
            version: "5.2".into(),
            packages: Default::default(),
        }]
    }
    async fn run(&self, job: Job, _sink: &dyn OutputSink) -> sandlot_core::Result<RunOutcome> {
        let mut outcome = RunOutcome::empty(Termination::Exited { code: 0 }, Duration::from_millis(1));
        outcome.stdout = format!("{}\n", job.code);
        outcome.stderr = format!("{}\n", job.code);
        Ok(outcome)
    }
}

fn router(scrub_secrets: bool) -> (tempfile::TempDir, axum::Router) {
    let root = tempfile::tempdir().unwrap();
    let history = History::open(root.path().join("history.db"), true).unwrap();
    let workspaces = Workspaces::new(root.path().join("conversations"));
    let engine = Engine::new(Arc::new(Echo), workspaces, EngineConfig::default()).with_history(history);
    let (_unused, common) = common::state("secret", None);
    let state = AppState { engine: Arc::new(engine), scrub_secrets, ..common };
    let router = app(state, Authenticator::token("tok"), HttpOptions::new(AllowedHosts::new(vec!["localhost".into()])));
    (root, router)
}

/// Runs code printing both secrets; the tool result's text and structured content, and the kept output resource.
async fn secrets_printed(scrub_secrets: bool) -> (String, String) {
    let (_root, router) = router(scrub_secrets);
    let code = format!("key={AWS_KEY} token {GITHUB_TOKEN}");
    let arguments = json!({ "conversationId": "c1", "language": "bash", "code": code });
    let result =
        common::mcp_result(&router, "tools/call", json!({ "name": "sandbox_run_code", "arguments": arguments })).await;
    let run_id = result["structuredContent"]["runId"].as_str().unwrap().to_owned();
    let uri = format!("sandlot://runs/{run_id}/output");
    let output = common::mcp_result(&router, "resources/read", json!({ "uri": uri })).await;
    (result.to_string(), output.to_string())
}

#[tokio::test]
async fn secrets_printed_by_code_are_redacted_in_results_and_kept_output_when_asked() {
    let (result, output) = secrets_printed(true).await;
    for text in [&result, &output] {
        assert!(!text.contains(AWS_KEY) && !text.contains(GITHUB_TOKEN), "a secret got through: {text}");
        assert!(text.contains("[REDACTED:aws-access-key]"), "{text}");
        assert!(text.contains("[REDACTED:github-pat]"), "{text}");
    }
}

#[tokio::test]
async fn without_the_setting_output_is_returned_whole() {
    let (result, output) = secrets_printed(false).await;
    for text in [&result, &output] {
        assert!(text.contains(AWS_KEY) && text.contains(GITHUB_TOKEN), "{text}");
        assert!(!text.contains("REDACTED"), "{text}");
    }
}
