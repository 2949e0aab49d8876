//! Every tool's `structuredContent` is valid against the `outputSchema` it advertises in `tools/list`, checked with
//! a real JSON Schema validator (as the Python and TypeScript SDKs check results), for a representative call of
//! each tool and each kind of failed result: a run that succeeded and made a file, one that failed, one that timed
//! out, a language without a runner, a busy server, the runners, an upload, a live sandbox's status (none: this
//! backend keeps none). Through the HTTP app, over an engine whose backend plays a script instead of running code.

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use sandlot_core::{
    Backend, Engine, EngineConfig, Job, Language, OutputSink, RunOutcome, RunnerInfo, Termination, Workspaces,
};
use sandlot_server::AppState;
use sandlot_server::kit::{AllowedHosts, Authenticator};
use sandlot_server::{HttpOptions, app};
use serde_json::{Value, json};

/// Plays the run its code names: `ok` prints and writes `out.txt`, `fail` exits 3, `slow` times out, `hold`
/// takes half a second (so a second run finds the server busy).
struct Scripted;

#[async_trait::async_trait]
impl Backend for Scripted {
    fn name(&self) -> &'static str {
        "scripted"
    }
    fn runners(&self) -> Vec<RunnerInfo> {
        let packages = BTreeMap::from([("numpy".to_owned(), "2.2.6".to_owned())]);
        vec![
            RunnerInfo {
                language: Language::Python,
                image: "/usr/bin/python3".into(),
                version: "3.12".into(),
                packages,
            },
            RunnerInfo {
                language: Language::Bash,
                image: "/bin/bash".into(),
                version: "5.2".into(),
                packages: BTreeMap::new(),
            },
        ]
    }
    async fn run(&self, job: Job, _sink: &dyn OutputSink) -> sandlot_core::Result<RunOutcome> {
        let mut outcome = RunOutcome::empty(Termination::Exited { code: 0 }, Duration::from_millis(7));
        match job.code.as_str() {
            "ok" => {
                std::fs::write(job.workspace.join("out.txt"), "hello\n").unwrap();
                outcome.stdout = "hi\n".into();
            }
            "fail" => {
                outcome.termination = Termination::Exited { code: 3 };
                outcome.stderr = "oops\n".into();
            }
            "slow" => outcome.termination = Termination::TimedOut,
            "hold" => tokio::time::sleep(Duration::from_millis(500)).await,
            other => panic!("no script {other}"),
        }
        Ok(outcome)
    }
}

fn router() -> (tempfile::TempDir, axum::Router) {
    let root = tempfile::tempdir().unwrap();
    let config = EngineConfig { max_concurrent_runs: 1, max_queued: 0, ..EngineConfig::default() };
    let engine = Engine::new(Arc::new(Scripted), Workspaces::new(root.path()), config);
    let (_unused, common) = common::state("secret", None);
    let state = AppState { engine: Arc::new(engine), ..common };
    let router = app(state, Authenticator::token("tok"), HttpOptions::new(AllowedHosts::new(vec!["localhost".into()])));
    (root, router)
}

async fn call(router: &axum::Router, tool: &str, arguments: Value) -> Value {
    common::mcp_result(router, "tools/call", json!({ "name": tool, "arguments": arguments })).await
}

fn run(code: &str, language: &str) -> Value {
    json!({ "conversationId": "c1", "language": language, "code": code })
}

/// The errors of `value` against `schema`, each with where it is.
fn violations(schema: &Value, value: &Value) -> Vec<String> {
    let validator = jsonschema::validator_for(schema).unwrap_or_else(|e| panic!("not a valid schema: {e}\n{schema}"));
    validator.iter_errors(value).map(|e| format!("{} at {}", e, e.instance_path())).collect()
}

#[tokio::test]
async fn every_result_is_valid_against_the_advertised_output_schema() {
    let (_root, router) = router();
    let listed = common::mcp_result(&router, "tools/list", json!({})).await;
    let schemas: BTreeMap<String, Value> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| (tool["name"].as_str().unwrap().to_owned(), tool["outputSchema"].clone()))
        .collect();
    for (name, schema) in &schemas {
        // What SDKs that validate need: an object schema, nothing to resolve elsewhere.
        assert_eq!(schema["type"], "object", "{name}: {schema}");
        assert!(!schema.to_string().contains("$ref"), "{name}: {schema}");
    }

    let busy = {
        let held = call(&router, "sandbox_run_code", run("hold", "python"));
        let refused = async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            call(&router, "sandbox_run_code", json!({ "conversationId": "c2", "language": "bash", "code": "x" })).await
        };
        let (held, refused) = tokio::join!(held, refused);
        assert_eq!(held["structuredContent"]["success"], true, "{held}");
        refused
    };
    let results = [
        ("sandbox_run_code", call(&router, "sandbox_run_code", run("ok", "python")).await),
        ("sandbox_run_code", call(&router, "sandbox_run_code", run("fail", "bash")).await),
        ("sandbox_run_code", call(&router, "sandbox_run_code", run("slow", "py")).await),
        ("sandbox_run_code", call(&router, "sandbox_run_code", run("ok", "typescript")).await),
        ("sandbox_run_code", call(&router, "sandbox_run_code", run("ok", "ruby")).await),
        ("sandbox_run_code", busy),
        ("sandbox_list_runners", call(&router, "sandbox_list_runners", json!({})).await),
        (
            "sandbox_upload_file",
            call(
                &router,
                "sandbox_upload_file",
                json!({ "conversationId": "c1", "path": "in/a.csv", "content": "a\n" }),
            )
            .await,
        ),
        (
            "sandbox_session",
            call(&router, "sandbox_session", json!({ "conversationId": "c1", "action": "status" })).await,
        ),
    ];

    // Each kind of result is what it should be, so the validation below covers every optional field.
    let content = |i: usize| &results[i].1["structuredContent"];
    assert_eq!(
        (content(0)["outcome"].clone(), content(0)["files"][0]["name"].clone()),
        (json!("ok"), json!("out.txt"))
    );
    assert_eq!((content(1)["outcome"].clone(), content(1)["exitCode"].clone()), (json!("error"), json!(3)));
    assert_eq!((content(2)["outcome"].clone(), content(2)["timedOut"].clone()), (json!("timeout"), json!(true)));
    assert_eq!(content(3)["output"], "no runner for language typescript; available: python, bash");
    assert_eq!(content(4)["output"], "no runner for language ruby; available: python, bash");
    assert!(content(3).get("runId").is_none() && content(3).get("outcome").is_none(), "{}", content(3));
    assert_eq!((content(5)["busy"].clone(), content(5)["outcome"].clone()), (json!(true), json!("busy")));
    assert!(content(5)["retryAfterSeconds"].as_u64().unwrap() >= 1, "{}", content(5));
    assert!(content(0).get("busy").is_none() && content(0).get("retryAfterSeconds").is_none(), "{}", content(0));
    assert_eq!(content(6)["languages"][0]["packages"], json!({ "numpy": "2.2.6" }));
    assert_eq!(content(7)["path"], "in/a.csv");

    for (tool, result) in &results {
        let structured = &result["structuredContent"];
        assert!(structured.is_object(), "{tool}: {result}");
        assert_eq!(violations(&schemas[*tool], structured), Vec::<String>::new(), "{tool}: {structured}");
    }
    // The tools checked are all the tools there are, but sandbox_browser: it needs a live sandbox with Chromium,
    // which this backend has not; the MCP Python SDK checks its results against this schema in
    // tests/e2e/python_v1/test_browser.py.
    let mut checked: std::collections::BTreeSet<&str> = results.iter().map(|(tool, _)| *tool).collect();
    checked.insert("sandbox_browser");
    assert_eq!(checked, schemas.keys().map(String::as_str).collect());
}
