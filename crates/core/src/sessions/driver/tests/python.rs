//! The Python driver in this machine's python3.

use super::harness::Driver;
use crate::Language::Python;
use crate::sessions::driver::CellEnd;

#[tokio::test]
async fn variables_functions_and_imports_persist_and_the_last_expression_is_shown() {
    let mut driver = Driver::start(Python).await;
    driver.run(Python, "import json\nx = 41\ndef inc(n):\n    return n + 1\n").await.expect("", "", 0);
    driver.run(Python, "print(json.dumps(inc(x)))").await.expect("42\n", "", 0);
    driver.run(Python, "y = inc(x)\ny * 2").await.expect("84\n", "", 0);
    // None is not shown; `_` is the last value shown; strings show as their repr.
    driver.run(Python, "None").await.expect("", "", 0);
    driver.run(Python, "_ + 1").await.expect("85\n", "", 0);
    driver.run(Python, "'a' + 'b'").await.expect("'ab'\n", "", 0);
    // The namespace is __main__'s, with none of the driver's names.
    driver.run(Python, "print(__name__, sorted(k for k in globals() if not k.startswith('__')))").await.expect(
        "__main__ ['inc', 'json', 'x', 'y']\n",
        "",
        0,
    );
}

#[tokio::test]
async fn top_level_await_works_as_in_notebooks() {
    let mut driver = Driver::start(Python).await;
    driver.run(Python, "import asyncio\nawait asyncio.sleep(0)\nv = 5").await.expect("", "", 0);
    driver.run(Python, "await asyncio.sleep(0, result=v + 1)").await.expect("6\n", "", 0);
    // A cell without await may still run its own loop.
    driver.run(Python, "asyncio.run(asyncio.sleep(0, result=v))").await.expect("5\n", "", 0);
}

#[tokio::test]
async fn an_exception_prints_the_cells_traceback_exits_1_and_the_driver_goes_on() {
    let mut driver = Driver::start(Python).await;
    let cell = driver.run(Python, "z = 5\ndef boom():\n    raise ValueError('boom')\nboom()\nz = 6").await;
    cell.expect(
        "",
        "Traceback (most recent call last):\n  File \"<cell 1>\", line 4, in <module>\n    boom()\n  \
         File \"<cell 1>\", line 3, in boom\n    raise ValueError('boom')\nValueError: boom\n",
        1,
    );
    driver.run(Python, "z").await.expect("5\n", "", 0);
    let cell = driver.run(Python, "1 +").await;
    assert_eq!((cell.stdout.as_str(), cell.end.exit_code), ("", 1));
    assert!(cell.stderr.starts_with("  File \"<cell 3>\", line 1\n"), "{}", cell.stderr);
    assert!(cell.stderr.ends_with("SyntaxError: invalid syntax\n"), "{}", cell.stderr);
}

#[tokio::test]
async fn system_exit_ends_the_cell_with_its_code_not_the_driver() {
    let mut driver = Driver::start(Python).await;
    driver.run(Python, "import sys\nprint('before')\nsys.exit(3)\nprint('after')").await.expect("before\n", "", 3);
    driver.run(Python, "raise SystemExit").await.expect("", "", 0);
    driver.run(Python, "raise SystemExit('bye')").await.expect("", "bye\n", 1);
    driver.run(Python, "print('alive')").await.expect("alive\n", "", 0);
}

#[tokio::test]
async fn output_comes_in_order_markers_of_other_nonces_pass_and_stdin_is_empty() {
    let mut driver = Driver::start(Python).await;
    let code = "import sys, subprocess\n\
        for i in range(3):\n    print(i)\n    print('e%d' % i, file=sys.stderr)\n\
        print('\\0SANDLOT-END:' + 'f' * 32 + ':{\"exit_code\": 9, \"interrupted\": false}')\n\
        print('\\0SANDLOT-END:' + 'f' * 32, file=sys.stderr)\n\
        print(repr(sys.stdin.read()), subprocess.run(['cat'], capture_output=True).stdout)\n\
        _ = sys.stdout.write('no newline')";
    let fake = format!("\0SANDLOT-END:{}", "f".repeat(32));
    driver.run(Python, code).await.expect(
        &format!("0\n1\n2\n{fake}:{{\"exit_code\": 9, \"interrupted\": false}}\n'' b''\nno newline"),
        &format!("e0\ne1\ne2\n{fake}\n"),
        0,
    );
    driver.run(Python, "print('next')").await.expect("next\n", "", 0);
}

#[tokio::test]
async fn sigint_interrupts_a_busy_cell_and_keeps_the_state() {
    let mut driver = Driver::start(Python).await;
    driver.run(Python, "kept = 'yes'").await.expect("", "", 0);
    let cell = driver.run_interrupted(Python, "print('started')\nwhile True:\n    pass", false).await;
    assert_eq!(
        (cell.stdout.as_str(), cell.end),
        ("started\n", CellEnd { exit_code: 130, interrupted: true, exiting: false })
    );
    assert!(cell.stderr.starts_with("Traceback (most recent call last):\n  File \"<cell 2>\""), "{}", cell.stderr);
    assert!(cell.stderr.ends_with("\nKeyboardInterrupt\n"), "{}", cell.stderr);
    driver.run(Python, "kept").await.expect("'yes'\n", "", 0);
}

#[tokio::test]
async fn open_matplotlib_figures_are_shown_after_a_cell() {
    let mut driver = Driver::start(Python).await;
    // A stand-in for matplotlib.pyplot in the working directory (first on sys.path), which records its show()
    // calls: what the driver does is call show() after a cell when figures are open, and only then.
    let package = driver.dir().join("matplotlib");
    std::fs::create_dir(&package).expect("mkdir");
    std::fs::write(package.join("__init__.py"), "").expect("write");
    std::fs::write(
        package.join("pyplot.py"),
        "figures = []\nshown = []\ndef figure():\n    figures.append(len(figures) + 1)\n\
         def get_fignums():\n    return list(figures)\n\
         def show():\n    shown.append(list(figures))\n    figures.clear()\n",
    )
    .expect("write");
    driver.run(Python, "import matplotlib.pyplot as plt\nplt.figure(); plt.figure()").await.expect("", "", 0);
    driver.run(Python, "print(plt.shown)").await.expect("[[1, 2]]\n", "", 0);
    // After a failed cell too: what it drew before failing is shown.
    let cell = driver.run(Python, "plt.figure()\nraise ValueError('after drawing')").await;
    assert_eq!((cell.stdout.as_str(), cell.end.exit_code), ("", 1));
    driver.run(Python, "plt.shown").await.expect("[[1, 2], [1]]\n", "", 0);
}
