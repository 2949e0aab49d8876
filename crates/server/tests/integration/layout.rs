//! The server's layout rules, read from its sources: the kit names no surface (nor the app that composes them),
//! and no surface imports another. A helper two surfaces need belongs in the kit.

use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file beneath `dir`, with its text.
fn sources(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            found.push((path, text));
        }
    }
    found.sort();
    found
}

/// The code of `text` without its comments (a doc may name anything).
fn code(text: &str) -> String {
    text.lines().filter(|line| !line.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n")
}

fn surfaces() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(src().join("surfaces"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .map(|p| p.file_name().unwrap().to_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn the_kit_names_no_surface() {
    let offending: Vec<String> = sources(&src().join("kit"))
        .into_iter()
        .filter(|(_, text)| {
            let code = code(text);
            code.contains("crate::surfaces") || code.contains("crate::app")
        })
        .map(|(path, _)| path.display().to_string())
        .collect();
    assert_eq!(offending, Vec::<String>::new());
}

#[test]
fn no_surface_imports_another() {
    let names = surfaces();
    assert_eq!(names, ["baponi", "codegen", "open_sandbox", "sandlot"], "a new surface: add it here, on the kit");
    let mut offending = Vec::new();
    for own in &names {
        for (path, text) in sources(&src().join("surfaces").join(own)) {
            let code = code(&text);
            let others = names.iter().filter(|other| *other != own);
            // Out of its folder: another surface by its path, or the surfaces' common parent by `super::super`.
            let strays = others.filter(|other| code.contains(&format!("surfaces::{other}")));
            offending.extend(strays.map(|other| format!("{} -> {other}", path.display())));
            // How deep the file's module is below the surface's own (`mod.rs` is its folder's module).
            let components = path.strip_prefix(src().join("surfaces").join(own)).unwrap().components().count();
            let depth = components - usize::from(path.ends_with("mod.rs"));
            let escapes = "super::".repeat(depth + 1);
            if code.contains(&escapes) {
                offending.push(format!("{} -> the surfaces' parent ({escapes})", path.display()));
            }
        }
    }
    assert_eq!(offending, Vec::<String>::new());
}
