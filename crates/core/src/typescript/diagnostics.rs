//! swc's diagnostics as a run shows them: `error[Code]: message`, `--> main.ts:LINE:COL`, the line and a caret.
//!
//! Bounded: swc's own writer prints the whole source line under every error, so code that makes an error per token
//! on one long line (200,000 `-` on a line: 100,000 bad `--`) made it write tens of gigabytes. Here at most
//! [`MAX_SHOWN`] errors are written, each with at most [`LINE_WINDOW`] characters of its line.

use std::cell::RefCell;
use std::fmt::Write as _;
use std::rc::Rc;

use swc_common::SourceMap;
use swc_common::errors::{DiagnosticBuilder, DiagnosticId, Emitter};
use swc_common::sync::Lrc;

use super::FILE_NAME;

/// Errors written in full; those after are counted in one last line.
pub const MAX_SHOWN: usize = 10;

/// Characters of a line shown under an error, around its column.
pub const LINE_WINDOW: usize = 120;

/// An emitter for swc's `Handler` whose text stays readable through a clone (the handler owns the emitter).
#[derive(Clone)]
pub(super) struct Diagnostics {
    source_map: Lrc<SourceMap>,
    state: Rc<RefCell<State>>,
}

#[derive(Default)]
struct State {
    text: String,
    seen: usize,
}

impl Diagnostics {
    pub fn new(source_map: Lrc<SourceMap>) -> Self {
        Self { source_map, state: Rc::default() }
    }

    /// What was written, with a line for the errors left out.
    pub fn text(&self) -> String {
        let state = self.state.borrow();
        let mut text = state.text.clone();
        if state.seen > MAX_SHOWN {
            let _ = writeln!(text, "... and {} more errors", state.seen - MAX_SHOWN);
        }
        text
    }
}

impl Emitter for Diagnostics {
    fn emit(&mut self, diagnostic: &mut DiagnosticBuilder<'_>) {
        let mut state = self.state.borrow_mut();
        state.seen += 1;
        if state.seen > MAX_SHOWN {
            return;
        }
        let code = match &diagnostic.code {
            Some(DiagnosticId::Error(code)) | Some(DiagnosticId::Lint(code)) => format!("[{code}]"),
            None => String::new(),
        };
        let _ = writeln!(state.text, "{}{code}: {}", diagnostic.level, diagnostic.message());
        let Some(span) = diagnostic.span.primary_span() else { return };
        let place = self.source_map.lookup_char_pos(span.lo);
        let column = place.col.0; // characters, from 0
        let _ = writeln!(state.text, " --> {FILE_NAME}:{}:{}", place.line, column + 1);
        let Some(line) = place.file.get_line(place.line.saturating_sub(1)) else { return };
        let start = column.saturating_sub(LINE_WINDOW / 2);
        let shown: String = line.chars().skip(start).take(LINE_WINDOW).collect();
        let caret = " ".repeat(column - start);
        let _ = writeln!(state.text, "  | {}\n  | {caret}^", shown.trim_end());
    }
}
