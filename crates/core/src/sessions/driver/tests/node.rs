//! The node driver (JavaScript and TypeScript cells in one global context) in this machine's node, with its
//! esbuild for TypeScript.

use super::harness::Driver;
use crate::Language::{JavaScript, TypeScript};
use crate::sessions::driver::CellEnd;

#[tokio::test]
async fn javascript_declarations_functions_and_requires_persist_and_values_are_shown() {
    let mut driver = Driver::start(JavaScript).await;
    driver
        .run(JavaScript, "const path = require('path');\nvar x = 41;\nfunction inc(n) { return n + 1 }")
        .await
        .expect("", "", 0);
    driver.run(JavaScript, "console.log(path.join('a', String(inc(x))))").await.expect("a/42\n", "", 0);
    driver.run(JavaScript, "({ sum: x + 1, list: [1, 'two'] })").await.expect(
        "{ sum: 42, list: [ 1, 'two' ] }\n",
        "",
        0,
    );
    driver.run(JavaScript, "Promise.resolve(x * 2)").await.expect("82\n", "", 0);
    // Top-level await: the declarations stay global, the last value is shown.
    driver.run(JavaScript, "const later = await Promise.resolve(7);\nlater + 1").await.expect("8\n", "", 0);
    driver.run(JavaScript, "later").await.expect("7\n", "", 0);
}

#[tokio::test]
async fn typescript_cells_strip_types_and_share_the_javascript_state() {
    let mut driver = Driver::start(TypeScript).await;
    driver.run(JavaScript, "var fromJs = 20").await.expect("", "", 0);
    let cell = "import * as path from 'path';\nimport fs = require('fs');\n\
        function twice(n: number): number { return n * 2 }\nconst t: number = twice(fromJs + 1);";
    driver.run(TypeScript, cell).await.expect("", "", 0);
    driver.run(TypeScript, "interface P { x: number }\nconst p: P = { x: t };\np.x").await.expect("42\n", "", 0);
    driver.run(TypeScript, "[path.basename('/a/b.ts'), fs.existsSync('/')]").await.expect("[ 'b.ts', true ]\n", "", 0);
    driver.run(JavaScript, "twice(t)").await.expect("84\n", "", 0);
    let error = "Transform failed with 1 error:\ncell-6.ts:1:20: ERROR: Unexpected \";\"\n";
    driver.run(TypeScript, "const bad: number = ;").await.expect("", error, 1);
}

#[tokio::test]
async fn typescript_without_esbuild_fails_clearly() {
    let mut driver = Driver::start(JavaScript).await;
    driver.run(TypeScript, "const a: number = 1").await.expect(
        "",
        "Error: TypeScript needs esbuild: SANDLOT_ESBUILD is not set\n",
        1,
    );
    driver.run(JavaScript, "1 + 1").await.expect("2\n", "", 0);
}

#[tokio::test]
async fn errors_exit_1_with_their_stack_and_process_exit_ends_only_the_cell() {
    let mut driver = Driver::start(JavaScript).await;
    driver.run(JavaScript, "var kept = 1;\nfunction boom() { throw new TypeError('boom') }\nboom()").await.expect(
        "",
        "TypeError: boom\n    at boom (cell-1.js:2:25)\n    at cell-1.js:3:1\n",
        1,
    );
    driver
        .run(JavaScript, "console.log('before'); process.exit(3); console.log('after')")
        .await
        .expect("before\n", "", 3);
    driver.run(JavaScript, "kept").await.expect("1\n", "", 0);
}

#[tokio::test]
async fn cells_and_their_children_read_an_empty_stdin() {
    let mut driver = Driver::start(JavaScript).await;
    let cell = "const cp = require('child_process');\n\
        [require('fs').readFileSync(0, 'utf8'), cp.execSync('cat', { stdio: ['inherit', 'pipe', 'pipe'] }).toString()]";
    driver.run(JavaScript, cell).await.expect("[ '', '' ]\n", "", 0);
    driver.run(JavaScript, "'still here'").await.expect("'still here'\n", "", 0);
}

#[tokio::test]
async fn sigint_interrupts_a_busy_loop_and_an_awaited_promise_keeping_the_state() {
    let mut driver = Driver::start(JavaScript).await;
    driver.run(JavaScript, "var kept = 'yes'").await.expect("", "", 0);
    let cell = driver.run_interrupted(JavaScript, "console.log('started'); while (true) {}", false).await;
    assert_eq!(
        (cell.stdout.as_str(), cell.end),
        ("started\n", CellEnd { exit_code: 130, interrupted: true, exiting: false })
    );
    // `started` once the synchronous part is over (see node.js on a SIGINT at its very end).
    let cell = "await null;\nconsole.log('started');\nawait new Promise(() => {})";
    let cell = driver.run_interrupted(JavaScript, cell, false).await;
    assert_eq!(
        (cell.stdout.as_str(), cell.end),
        ("started\n", CellEnd { exit_code: 130, interrupted: true, exiting: false })
    );
    driver.run(JavaScript, "kept").await.expect("'yes'\n", "", 0);
}
