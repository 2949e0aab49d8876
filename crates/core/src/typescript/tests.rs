//! The transform on its own: what stripping keeps, what is transformed, and how a syntax error is reported. Runs
//! through `node` are the jail's tests (`crates/jail/tests/integration/typescript.rs`).

use super::*;

#[test]
fn types_are_blanked_in_place_so_every_position_is_kept() {
    let code = "interface Point { x: number; y: number }\n\
                function norm<T extends Point>(p: T): number {\n  return Math.hypot(p.x, p.y);\n}\n\
                const p: Point = { x: 3, y: 4 } as Point;\nconsole.log(norm(p));\n";
    let javascript = to_javascript(code);
    assert!(!javascript.source_mapped && !javascript.module);
    assert_eq!(javascript.code.len(), code.len(), "{}", javascript.code);
    let lines: Vec<&str> = javascript.code.lines().collect();
    assert_eq!(lines.len(), code.lines().count());
    for (stripped, written) in lines.iter().zip(code.lines()) {
        assert_eq!(stripped.len(), written.len(), "{stripped:?} from {written:?}");
    }
    assert_eq!(lines[1].find("(p"), code.lines().nth(1).unwrap().find("(p"));
    assert_eq!(lines[2], "  return Math.hypot(p.x, p.y);");
    assert_eq!(lines[5], "console.log(norm(p));");
    assert!(!javascript.code.contains("interface") && !javascript.code.contains("number"), "{}", javascript.code);
}

#[test]
fn module_syntax_is_left_for_node() {
    let code = "const n: number = await Promise.resolve(1);\nexport const x = n;\nconsole.log(import.meta.url);\n";
    let javascript = to_javascript(code);
    assert_eq!(
        javascript,
        JavaScript {
            code: "const n         = await Promise.resolve(1);\nexport const x = n;\nconsole.log(import.meta.url);\n"
                .to_owned(),
            source_mapped: false,
            module: true,
            failed: false,
        }
    );
}

#[test]
fn imports_used_only_as_types_are_dropped() {
    let code = "import { RequestListener } from 'node:http';\nimport { readFileSync } from 'node:fs';\n\
                const l: RequestListener | null = null;\nconsole.log(l, typeof readFileSync);\n";
    let javascript = to_javascript(code);
    assert!(javascript.source_mapped && javascript.module, "{javascript:?}");
    assert!(!javascript.code.contains("RequestListener"), "{}", javascript.code);
    assert!(javascript.code.contains("import { readFileSync } from 'node:fs'"), "{}", javascript.code);
}

#[test]
fn module_syntax_is_told_from_the_javascript_made() {
    let cases = [
        ("const x: number = 1;\nconsole.log(x);\n", false),
        ("const fs = require('node:fs');\nconsole.log(module.exports);\n", false),
        ("console.log(import.meta.url);\n", true),
        ("const n: number = await Promise.resolve(1);\n", true),
        ("export {};\n", true),
        // Transformed to `const fs = require(...)`: CommonJS, though the TypeScript has module syntax.
        ("import fs = require('node:fs');\nconsole.log(typeof fs);\n", false),
        // Only types imported: nothing of the import is left.
        ("import type { Stats } from 'node:fs';\nlet s: Stats | undefined;\n", false),
    ];
    for (code, module) in cases {
        assert_eq!(to_javascript(code).module, module, "{code}");
    }
}

#[test]
fn enums_and_namespaces_are_transformed_with_an_inline_source_map() {
    let code = "enum Color { Red, Green = 5 }\nnamespace Geo { export const unit = 2; }\n\
                class P { constructor(private x: number) {} get() { return this.x; } }\n\
                console.log(Color.Green, Geo.unit, new P(7).get());\n";
    let javascript = to_javascript(code);
    assert!(javascript.source_mapped);
    let (program, map) =
        javascript.code.split_once("//# sourceMappingURL=data:application/json;charset=utf-8;base64,").unwrap();
    assert!(program.contains("Color[Color[\"Green\"] = 5] = \"Green\""), "{program}");
    assert!(program.contains("this.x = x"), "{program}");
    let map = base64::engine::general_purpose::STANDARD.decode(map.trim()).unwrap();
    let map: serde_json::Value = serde_json::from_slice(&map).unwrap();
    assert_eq!(map["sources"], serde_json::json!([FILE_NAME]));
}

#[test]
fn a_syntax_error_becomes_a_program_that_reports_it_with_its_line() {
    let code = "const a = 1;\nconst b: number = ;\nconsole.log(a);\n";
    let javascript = to_javascript(code);
    assert!(!javascript.source_mapped);
    let message = javascript.code.strip_prefix("process.stderr.write(").unwrap();
    let (literal, rest) = message.split_once(");\n").unwrap();
    assert_eq!(rest, "process.exitCode = 1;\n");
    let message: String = serde_json::from_str(literal).unwrap();
    assert!(message.contains("main.ts:2:"), "{message}");
    assert!(message.contains("Expression expected") || message.contains("Unexpected"), "{message}");
}

#[test]
fn node_options_get_source_maps_added() {
    assert_eq!(with_source_maps(None), "--enable-source-maps");
    assert_eq!(with_source_maps(Some("  ")), "--enable-source-maps");
    assert_eq!(with_source_maps(Some("--max-old-space-size=64")), "--max-old-space-size=64 --enable-source-maps");
}

#[test]
fn diagnostics_are_bounded_however_many_errors_there_are() {
    // 100,000 bad `--` on one 200,000-character line: swc's own writer printed the line under each.
    // On a stack as large as the helper's: the `--` nest.
    let code = format!("let x: number = {}1;\n", "-".repeat(200_000));
    let transform = std::thread::Builder::new().stack_size(HELPER_STACK_BYTES).spawn(move || to_javascript(&code));
    let javascript = transform.unwrap().join().unwrap();
    assert!(javascript.code.len() < 4096, "{} bytes", javascript.code.len());
    let message = javascript.code.strip_prefix("process.stderr.write(").unwrap();
    let message: String = serde_json::from_str(message.split_once(");\n").unwrap().0).unwrap();
    assert!(message.starts_with("error[InvalidSyntax]: "), "{message}");
    assert!(message.contains(" --> main.ts:1:"), "{message}");
    assert!(message.contains("more errors"), "{message}");
}
