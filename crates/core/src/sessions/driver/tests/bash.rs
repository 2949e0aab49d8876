//! The Bash driver in this machine's bash.

use super::harness::Driver;
use crate::Language::Bash;
use crate::sessions::driver::{CellEnd, DriverGone};

#[tokio::test]
async fn the_directory_variables_and_functions_persist() {
    let mut driver = Driver::start(Bash).await;
    let cell = "mkdir sub && cd sub\ncount=41\ndeclare -A colours=([sky]=blue)\ngreet() { echo \"hi $*\"; }";
    driver.run(Bash, cell).await.expect("", "", 0);
    let dir = driver.dir().join("sub").canonicalize().expect("sub");
    driver.run(Bash, "pwd; greet $((count + 1)) ${colours[sky]}").await.expect(
        &format!("{}\nhi 42 blue\n", dir.display()),
        "",
        0,
    );
    // The exit code is the last command's; the output of both streams comes through, stdin is empty.
    driver.run(Bash, "echo out; echo err >&2; cat; (exit 7)").await.expect("out\n", "err\n", 7);
    driver.run(Bash, "printf 'é\\0SANDLOT-END:%s\\n' ffff").await.expect("é\0SANDLOT-END:ffff\n", "", 0);
    driver.run(Bash, "false; true").await.expect("", "", 0);
}

#[tokio::test]
async fn sigint_stops_a_loop_at_the_top_or_in_a_function_and_the_shell_survives() {
    let mut driver = Driver::start(Bash).await;
    driver.run(Bash, "kept=yes; spin() { while true; do :; done; }").await.expect("", "", 0);
    let interrupted = CellEnd { exit_code: 130, interrupted: true, exiting: false };
    let cell = driver.run_interrupted(Bash, "echo started; while true; do :; done; echo after", true).await;
    assert_eq!((cell.stdout.as_str(), cell.stderr.as_str(), cell.end), ("started\n", "", interrupted));
    // In a function called by a function: the whole cell stops, not just the innermost function.
    let cell =
        driver.run_interrupted(Bash, "outer() { spin; echo after-spin; }\necho started; outer; echo after", true);
    let cell = cell.await;
    assert_eq!((cell.stdout.as_str(), cell.stderr.as_str(), cell.end), ("started\n", "", interrupted));
    let cell = driver.run_interrupted(Bash, "echo started; sleep 60; echo after", true).await;
    assert_eq!((cell.stdout.as_str(), cell.end), ("started\n", interrupted));
    driver.run(Bash, "echo $kept; true").await.expect("yes\n", "", 0);
}

#[tokio::test]
async fn exit_ends_the_cell_with_its_code_then_the_shell() {
    let mut driver = Driver::start(Bash).await;
    let bye = driver.run(Bash, "echo bye; exit 3").await;
    assert_eq!((bye.stdout.as_str(), bye.end), ("bye\n", CellEnd { exit_code: 3, interrupted: false, exiting: true }));
    let gone = driver.try_run(Bash, "echo never", None).await;
    assert!(matches!(gone, Err(DriverGone::Closed(_))), "{gone:?}");
    assert_eq!(driver.wait().await.code(), Some(3));
}
