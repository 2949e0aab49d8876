//! TypeScript made JavaScript in the server, so that a TypeScript run is a JavaScript run: `node` runs the result
//! as it runs JavaScript, with no tsx or esbuild in the sandbox (see `mode.rs` for when tsx is used instead).
//!
//! swc's fast type stripper (what Node's own type stripping uses, through amaro) first blanks the types out in
//! place: every line and column of the result is the user's, so Node's errors and stack traces point at the code as
//! written, with no source map. What blanking cannot express (enums, namespaces with values, parameter properties,
//! `import x = require()`, `export =`) is transformed instead: its lines move, so that result carries an inline
//! source map and must run with `--enable-source-maps` ([`JavaScript::source_mapped`]).
//! Module syntax is left as written: Node (20.19+, 22.7+) runs a `.js` file with `import`, `export` or top-level
//! `await` as an ES module and any other as CommonJS, so `require` and `import` programs both run.
//! Code that does not parse becomes a program that prints swc's diagnostic (what, and where: `main.ts:LINE:COL`) to
//! stderr and exits with 1: a failed run, as a JavaScript syntax error is, recorded like any run.
//! A server runs the transform in a helper process (`helper.rs`): code nested deep enough overflows swc's stack.

mod diagnostics;
mod helper;
mod mode;

use base64::Engine as _;
use swc_common::errors::Handler;
use swc_common::sync::Lrc;
use swc_common::{FileName, GLOBALS, Globals, SourceMap};
use swc_ecma_ast::{EsVersion, ModuleDecl, ModuleItem, Program};
use swc_ecma_parser::StringInput;
use swc_ts_fast_strip::{ErrorCode, Mode, Options, TransformOutput, TsError};

use diagnostics::Diagnostics;
pub use helper::{HELPER_DEADLINE, HELPER_STACK_BYTES, HELPER_SUBCOMMAND, Helpers, run_helper_if_asked};
pub use mode::TypeScriptMode;

/// The name diagnostics and source maps give the user's code.
pub const FILE_NAME: &str = "main.ts";

/// What [`to_javascript`] made of a TypeScript program.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct JavaScript {
    /// JavaScript that `node` runs as it runs the user's JavaScript.
    pub code: String,
    /// The code was transformed, not only stripped: it ends with an inline source map, which Node follows only
    /// with `--enable-source-maps` (see [`with_source_maps`]).
    pub source_mapped: bool,
    /// The code has module syntax (`import`, `export`, `import.meta`, top-level `await`): it must run as an ES
    /// module (from a `.mjs` file), which a node without module detection (18, and 20 before 20.19) needs told.
    pub module: bool,
    /// The TypeScript did not parse or could not be transformed: the code is a program that reports it.
    #[serde(default)]
    pub failed: bool,
}

/// TypeScript to JavaScript: the types stripped in place, or, for what stripping cannot express, transformed with a
/// source map; code that does not parse becomes a program that reports it (see the module's header). Never fails:
/// a panic of the transformer is reported the same way, so one bad program cannot take a server thread down.
pub fn to_javascript(code: &str) -> JavaScript {
    let attempt = std::panic::catch_unwind(|| transpile(code));
    match attempt {
        Ok(Ok(javascript)) => javascript,
        Ok(Err(diagnostics)) => reporting(&diagnostics),
        Err(_) => reporting(&format!("error: the TypeScript transform failed on this program ({FILE_NAME})\n")),
    }
}

/// `NODE_OPTIONS` for a source-mapped program: the caller's own, with `--enable-source-maps` added.
pub fn with_source_maps(node_options: Option<&str>) -> String {
    match node_options.map(str::trim).filter(|o| !o.is_empty()) {
        Some(options) => format!("{options} --enable-source-maps"),
        None => "--enable-source-maps".to_owned(),
    }
}

/// Strip first; transform when the code has what stripping cannot express, or imports bindings (which may be types
/// only). `Err`: the diagnostics to show.
fn transpile(code: &str) -> Result<JavaScript, String> {
    let (mut javascript, mut source_mapped) = match operate(code, Mode::StripOnly) {
        Ok(output) => (output.code, false),
        Err((error, _)) if matches!(error.code, ErrorCode::UnsupportedSyntax) => match operate(code, Mode::Transform) {
            Ok(output) => (inline_source_map(output), true),
            Err((_, diagnostics)) => return Err(diagnostics),
        },
        Err((_, diagnostics)) => return Err(diagnostics),
    };
    // The output, not the input: `import x = require()` parses as module syntax but is transformed to a `require`.
    let mut kind = kind_of(&javascript);
    // Stripping keeps `import { SomeType } from "..."` of a name that is only a type, which then fails to link; the
    // transform drops what is used only as a type, as tsc and tsx do.
    if kind == Kind::ModuleImportingBindings
        && !source_mapped
        && let Ok(output) = operate(code, Mode::Transform)
    {
        (javascript, source_mapped) = (inline_source_map(output), true);
        kind = kind_of(&javascript);
    }
    Ok(JavaScript { code: javascript, source_mapped, module: kind != Kind::Script, failed: false })
}

/// What swc's parser makes of JavaScript: a module or a script, as Node's own detection decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// No module syntax, or code that does not parse (left to Node to report).
    Script,
    Module,
    /// A module with an `import` that binds names (`import x`, `import { x }`, `import * as x`).
    ModuleImportingBindings,
}

fn kind_of(code: &str) -> Kind {
    let source_map: Lrc<SourceMap> = Default::default();
    let file = source_map.new_source_file(Lrc::new(FileName::Anon), code.to_owned());
    let syntax = swc_ecma_parser::Syntax::Es(Default::default());
    let lexer = swc_ecma_parser::Lexer::new(syntax, EsVersion::latest(), StringInput::from(&*file), None);
    let mut parser = swc_ecma_parser::Parser::new_from(lexer);
    match parser.parse_program() {
        Ok(Program::Module(module)) => {
            let binds = |item: &ModuleItem| matches!(item, ModuleItem::ModuleDecl(ModuleDecl::Import(import)) if !import.specifiers.is_empty());
            if module.body.iter().any(binds) { Kind::ModuleImportingBindings } else { Kind::Module }
        }
        _ => Kind::Script,
    }
}

/// One pass of swc's stripper; on failure its error and the diagnostics it wrote (rustc-like, with the line).
fn operate(code: &str, mode: Mode) -> Result<TransformOutput, (TsError, String)> {
    // Built from its JSON form, as amaro passes it: the parser's settings then are the crate's own default
    // (TypeScript with decorators, as tsx parses them), which its `Default` lacks.
    let transform = matches!(mode, Mode::Transform);
    let options = serde_json::json!({
        "filename": FILE_NAME,
        "mode": if transform { "transform" } else { "strip-only" },
        "sourceMap": transform,
    });
    let options: Options = serde_json::from_value(options).map_err(|e| {
        let error = TsError { message: e.to_string(), code: ErrorCode::Unknown };
        (error, format!("error: the TypeScript transform's options: {e}\n"))
    })?;
    let source_map: Lrc<SourceMap> = Default::default();
    let written = Diagnostics::new(source_map.clone());
    let handler = Handler::with_emitter(true, false, Box::new(written.clone()));
    let result =
        GLOBALS.set(&Globals::new(), || swc_ts_fast_strip::operate(&source_map, &handler, code.to_owned(), options));
    result.map_err(|error| {
        let text = written.text();
        let text = if text.trim().is_empty() { format!("error: {}\n", error.message) } else { text };
        (error, text)
    })
}

/// The transformed code with its source map appended as a data URL.
fn inline_source_map(output: TransformOutput) -> String {
    let mut code = output.code;
    if let Some(map) = output.map {
        let encoded = base64::engine::general_purpose::STANDARD.encode(map);
        code.push_str("\n//# sourceMappingURL=data:application/json;charset=utf-8;base64,");
        code.push_str(&encoded);
        code.push('\n');
    }
    code
}

/// A program that prints `diagnostics` to stderr and exits with 1, as Node does for a syntax error.
pub(crate) fn reporting(diagnostics: &str) -> JavaScript {
    let message = serde_json::Value::String(diagnostics.to_owned());
    let code = format!("process.stderr.write({message});\nprocess.exitCode = 1;\n");
    JavaScript { code, source_mapped: false, module: false, failed: true }
}

#[cfg(test)]
mod tests;
