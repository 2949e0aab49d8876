//! TypeScript stripped in the server (the default `TypeScriptMode::Strip`) and run by `node` in the jail, on a
//! backend that has no TypeScript runner at all: only JavaScript's `node` is discovered, and the TypeScript override
//! points at a tsx that does not exist, so a run that reached for tsx would fail. Types, interfaces, generics, enums,
//! namespaces, parameter properties, ES modules with top-level `await`, CommonJS `require`, the positions errors
//! name, and a syntax error that is a failed run (not an error) after which the engine goes on serving. The transform
//! runs in its helper process (this binary), as a server's does, and code that crashes it fails its own run only.

use crate::common;

use std::collections::BTreeMap;

use common::{Sandbox, check, check_eq, describe};
use libtest_mimic::Failed;
use sandlot_core::{Language, RunReport, RunRequest, SessionUse, Termination};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    common::trials(
        "typescript",
        vec![
            ("typescript_is_listed_on_the_javascript_runner", typescript_is_listed_on_the_javascript_runner),
            ("types_interfaces_and_generics_run_on_node", types_interfaces_and_generics_run_on_node),
            ("enums_namespaces_and_parameter_properties_run", enums_namespaces_and_parameter_properties_run),
            ("es_modules_import_and_await_at_top_level", es_modules_import_and_await_at_top_level),
            ("commonjs_programs_require", commonjs_programs_require),
            ("runtime_errors_name_the_typescript_line", runtime_errors_name_the_typescript_line),
            ("a_syntax_error_is_a_failed_run_with_its_line", a_syntax_error_is_a_failed_run_with_its_line),
            ("code_that_crashes_the_transform_fails_its_run_only", code_that_crashes_the_transform_fails_its_run_only),
            ("a_helper_serves_transforms_one_after_another", a_helper_serves_transforms_one_after_another),
            ("session_cells_are_stripped_in_the_server", session_cells_are_stripped_in_the_server),
        ],
    )
}

/// A sandbox whose backend has `node` for JavaScript and no TypeScript runner (a tsx that is not there).
fn without_tsx() -> Sandbox {
    Sandbox::with_engine_config(
        tempfile::tempdir().expect("temp root"),
        |config| {
            config.languages = vec![Language::JavaScript, Language::TypeScript];
            config.overrides.typescript = Some("/nonexistent/tsx".into());
        },
        |_| {},
    )
}

fn typescript(sandbox: &Sandbox, code: &str) -> RunReport {
    sandbox.run("ts", Language::TypeScript, code)
}

/// A run that must succeed with exactly `stdout`.
fn check_prints(report: &RunReport, stdout: &str) -> Result<(), Failed> {
    check(report.outcome.success(), || describe(report))?;
    check_eq(report.outcome.stdout.as_str(), stdout, &describe(report))
}

fn typescript_is_listed_on_the_javascript_runner() -> Result<(), Failed> {
    let sandbox = without_tsx();
    let runners = sandbox.engine.runners();
    let node = runners.iter().find(|r| r.language == Language::JavaScript).expect("node");
    let typescript = runners.iter().find(|r| r.language == Language::TypeScript);
    check_eq(typescript.map(|r| r.image.as_str()), Some(node.image.as_str()), "TypeScript's runner")?;
    check(!node.image.contains("tsx"), || format!("{node:?}"))
}

fn types_interfaces_and_generics_run_on_node() -> Result<(), Failed> {
    let sandbox = without_tsx();
    let code = r#"interface Shape { area(): number }
type Pair<T> = [T, T];
abstract class Base implements Shape { abstract area(): number; }
class Square extends Base { constructor(readonly side: number) { super(); } area(): number { return this.side ** 2; } }
function largest<T extends Shape>(shapes: T[]): T | undefined {
  return shapes.reduce<T | undefined>((a, b) => (a && a.area() >= b.area() ? a : b), undefined);
}
const pair: Pair<number> = [2, 3];
const sizes = pair.map((n): Square => new Square(n)) satisfies Shape[];
const config = { name: "x" } as const;
let maybe: string | null = null;
console.log(largest(sizes)!.area(), config.name, maybe ?? "none", typeof (process.versions.node as string));
"#;
    check_prints(&typescript(&sandbox, code), "9 x none string\n")
}

fn enums_namespaces_and_parameter_properties_run() -> Result<(), Failed> {
    let sandbox = without_tsx();
    let code = r#"enum Color { Red, Green = 5, Blue }
const enum Flag { On = "on" }
namespace Geo { export const unit = 2; export function twice(n: number) { return n * unit; } }
class Point { constructor(private x: number, public y = 1) {} sum() { return this.x + this.y; } }
console.log(Color.Blue, Color[5], Flag.On, Geo.twice(21), new Point(3).sum());
"#;
    check_prints(&typescript(&sandbox, code), "6 Green on 42 4\n")?;
    // The caller's NODE_OPTIONS stay; source maps are added for the transformed code.
    let env = BTreeMap::from([("NODE_OPTIONS".to_owned(), "--no-warnings".to_owned())]);
    let code = "enum E { A }\nconsole.log(E.A, process.env.NODE_OPTIONS);\n";
    let report = sandbox.run_with("ts", Language::TypeScript, code, Vec::new(), env);
    check_prints(&report, "0 --no-warnings --enable-source-maps\n")
}

fn es_modules_import_and_await_at_top_level() -> Result<(), Failed> {
    let sandbox = without_tsx();
    let code = r#"import { writeFileSync, readFileSync } from "node:fs";
import * as path from "node:path";
import type { Stats } from "node:fs";
import { RequestListener } from "node:http"; // a type only, without `import type`: dropped, as tsx drops it
const name: string = path.join("/data", "esm.txt");
writeFileSync(name, "written");
const later: number = await new Promise<number>((resolve) => setTimeout(() => resolve(7), 10));
const stats: Stats | RequestListener | undefined = undefined;
const file = path.basename(new URL(import.meta.url).pathname);
console.log(readFileSync(name, "utf8"), later, typeof require, file, stats);
export const done = true;
"#;
    // Run from main.mjs: an ES module for any node, with module detection or without.
    check_prints(&typescript(&sandbox, code), "written 7 undefined main.mjs undefined\n")
}

fn commonjs_programs_require() -> Result<(), Failed> {
    let sandbox = without_tsx();
    let code = r#"const os = require("node:os") as typeof import("node:os");
const { basename } = require("node:path");
const count: number = os.cpus().length;
console.log(count > 0, basename(__filename), typeof module.exports);
"#;
    check_prints(&typescript(&sandbox, code), "true main.js object\n")
}

fn runtime_errors_name_the_typescript_line() -> Result<(), Failed> {
    let sandbox = without_tsx();
    // Stripped: the JavaScript has the TypeScript's lines and columns.
    let code = "interface A { n: number }\nconst a: A = { n: 1 };\n\nthrow new Error(`failed at ${a.n}`);\n";
    let report = typescript(&sandbox, code);
    check_eq(report.outcome.termination.clone(), Termination::Exited { code: 1 }, &describe(&report))?;
    check(report.outcome.stderr.contains("main.js:4:7"), || describe(&report))?;
    // Transformed (an enum moves lines): the inline source map takes the stack back to the TypeScript.
    let code = "enum E { A, B }\nnamespace N { export const x = 1; }\n\nfunction fail(): never {\n  throw new Error(`E.B is ${E.B}`);\n}\nfail();\n";
    let report = typescript(&sandbox, code);
    check_eq(report.outcome.termination.clone(), Termination::Exited { code: 1 }, &describe(&report))?;
    check(report.outcome.stderr.contains("E.B is 1"), || describe(&report))?;
    check(report.outcome.stderr.contains("main.ts:5:9"), || describe(&report))?;
    // An ES module importing bindings (transformed, to drop type-only imports): mapped back too.
    let code = "import { join } from 'node:path';\n\nconst p: string = join('a', 'b');\nthrow new Error(p);\n";
    let report = typescript(&sandbox, code);
    check_eq(report.outcome.termination.clone(), Termination::Exited { code: 1 }, &describe(&report))?;
    check(report.outcome.stderr.contains("main.ts:4:7"), || describe(&report))
}

fn a_syntax_error_is_a_failed_run_with_its_line() -> Result<(), Failed> {
    let sandbox = without_tsx();
    let report = typescript(&sandbox, "const a: number = 1;\nconsole.log(a);\nconst b: = 2;\n");
    check_eq(report.outcome.termination.clone(), Termination::Exited { code: 1 }, &describe(&report))?;
    check_eq(report.outcome.stdout.as_str(), "", "stdout")?;
    check(report.outcome.stderr.contains("main.ts:3:"), || describe(&report))?;
    check(report.outcome.stderr.starts_with("error"), || describe(&report))?;
    // The engine goes on serving.
    check_prints(&typescript(&sandbox, "const ok: string = 'ok';\nconsole.log(ok);\n"), "ok\n")
}

/// Parentheses nested a million deep overflow any stack swc's recursive parser is given: in the helper, that ends
/// the helper, and the run fails with a message; the engine (this process) goes on.
fn code_that_crashes_the_transform_fails_its_run_only() -> Result<(), Failed> {
    let sandbox = without_tsx();
    let depth = 500_000; // 1 MB of code, the largest a run may send
    let code = format!("const x: number = {}1{};\n", "(".repeat(depth), ")".repeat(depth));
    let report = typescript(&sandbox, &code);
    check_eq(report.outcome.termination.clone(), Termination::Exited { code: 1 }, &describe(&report))?;
    check(report.outcome.stderr.contains("could not be transformed"), || describe(&report))?;
    check_prints(&typescript(&sandbox, "const ok: string = 'still';\nconsole.log(ok);\n"), "still\n")
}

/// The helpers of this process waiting for their TypeScript (children of this test binary started as the helper).
fn waiting_helpers() -> Vec<i32> {
    let me = std::process::id().to_string();
    let helper = sandlot_core::typescript::HELPER_SUBCOMMAND.as_bytes();
    let is_helper = |pid: &str| {
        let parent = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|stat| stat.rsplit(')').next().and_then(|rest| rest.split_whitespace().nth(1)) == Some(&me));
        parent
            && std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|line| line.split(|b| *b == 0).any(|a| a == helper))
    };
    let pids = std::fs::read_dir("/proc").expect("/proc").flatten().map(|entry| entry.file_name());
    pids.filter_map(|pid| pid.to_str().filter(|pid| is_helper(pid)).and_then(|pid| pid.parse().ok())).collect()
}

/// Waits until one helper waits (at most 10 s): its pid.
fn one_waiting_helper() -> Result<i32, Failed> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        if let [helper] = waiting_helpers()[..] {
            return Ok(helper);
        }
        check(std::time::Instant::now() < deadline, || format!("helpers waiting: {:?}", waiting_helpers()))?;
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// A transform takes the helper started ahead, which then waits for the next program: one helper serves one
/// transform after another (a transform runs no code, so a program finds nothing of another's in it). After a large
/// program it is let go and another is started. A waiting helper that died is not used: the transform starts its own.
fn a_helper_serves_transforms_one_after_another() -> Result<(), Failed> {
    let sandbox = without_tsx();
    check_prints(&typescript(&sandbox, "const a: number = 1;\nconsole.log(a);\n"), "1\n")?;
    let first = one_waiting_helper()?;
    // It warmed up at the least priority, and waits at the server's again (this test runs as root).
    let nice = || {
        std::fs::read_to_string(format!("/proc/{first}/stat"))
            .ok()
            .and_then(|stat| stat.rsplit(')').next()?.split_whitespace().nth(16)?.parse::<i32>().ok())
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while nice() != Some(0) {
        check(std::time::Instant::now() < deadline, || format!("the waiting helper's nice value: {:?}", nice()))?;
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    check_prints(&typescript(&sandbox, "const b: number = 2;\nconsole.log(b);\n"), "2\n")?;
    check_eq(one_waiting_helper()?, first, "the helper that served a transform waits for the next")?;
    // A program past 64 KiB (a long comment): its helper is let go after it.
    let large = format!("// {}\nconst c: number = 3;\nconsole.log(c);\n", "x".repeat(70 * 1024));
    check_prints(&typescript(&sandbox, &large), "3\n")?;
    let second = one_waiting_helper()?;
    check(second != first, || "the helper of a large program waits again".into())?;
    // Killed when let go, and reaped soon after.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::path::Path::new(&format!("/proc/{first}")).exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    check(!std::path::Path::new(&format!("/proc/{first}")).exists(), || "a let-go helper lives on".into())?;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(second), nix::sys::signal::Signal::SIGKILL)?;
    std::thread::sleep(std::time::Duration::from_millis(100));
    check_prints(&typescript(&sandbox, "const d: number = 4;\nconsole.log(d);\n"), "4\n")
}

/// A live sandbox's TypeScript cells that are scripts are stripped in the server and reach the node driver as
/// JavaScript: they run with no esbuild in the sandbox (none is found without tsx), share the JavaScript cells'
/// globals, and a command of its own (`SessionUse::Process`) in TypeScript runs too. A cell with module syntax is
/// still the driver's to convert, and says it needs esbuild.
fn session_cells_are_stripped_in_the_server() -> Result<(), Failed> {
    use std::os::unix::fs::PermissionsExt;
    // A live sandbox binds every runner's prefix, so the TypeScript runner here is a file that exists: a `tsx` that
    // fails if run, in no package, so no esbuild is found beside it (nor on PATH: the runner named tsx is this one).
    std::fs::create_dir_all("/var/tmp")?;
    let fake = tempfile::tempdir_in("/var/tmp")?;
    std::fs::set_permissions(fake.path(), std::fs::Permissions::from_mode(0o755))?;
    std::fs::create_dir(fake.path().join("bin"))?;
    let tsx = fake.path().join("bin/tsx");
    std::fs::write(&tsx, "#!/bin/sh\necho not tsx >&2\nexit 99\n")?;
    std::fs::set_permissions(&tsx, std::fs::Permissions::from_mode(0o755))?;
    let sandbox = Sandbox::with_engine_config(
        tempfile::tempdir()?,
        |config| {
            config.languages = vec![Language::JavaScript, Language::TypeScript];
            config.overrides.typescript = Some(tsx.clone());
        },
        |_| {},
    );
    let call = |language: Language, code: &str, session: SessionUse| {
        sandbox.run_request(RunRequest {
            conversation_id: "ts-session".into(),
            language: language.as_str().into(),
            code: code.into(),
            session,
            ..RunRequest::default()
        })
    };
    let cell = "enum E { A = 20 }\nconst twice = (n: number): number => n * 2;\ntwice(E.A + 1)";
    check_prints(&call(Language::TypeScript, cell, SessionUse::Interpreter), "42\n")?;
    check_prints(&call(Language::JavaScript, "twice(1)", SessionUse::Interpreter), "2\n")?;
    let command = "const n: number = 7;\nconsole.log(n * 6);\n";
    check_prints(&call(Language::TypeScript, command, SessionUse::Process), "42\n")?;
    let module = call(Language::TypeScript, "import { sep } from 'node:path';\nsep", SessionUse::Interpreter);
    check(!module.outcome.success() && module.outcome.stderr.contains("esbuild"), || describe(&module))
}
