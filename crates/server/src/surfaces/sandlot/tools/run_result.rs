//! What a model reads of a run. The text block is written for a model's context window, not for a log store: a
//! header line with the outcome, exit code and duration, then the output (stdout, then stderr, as `output` is built)
//! within a budget (`SANDLOT_RESULT_TEXT_BYTES`, default 20 KiB as JSON), its head and tail kept with one line
//! between them saying how many bytes were cut and where the whole is (`sandlot://runs/{runId}/output`,
//! `GET /v1/runs/{runId}/output`). No byte of output appears twice in the text.
//!
//! A `session` run whose earlier state was lost gets one more line between the header and the output: the notice
//! saying why (a restart of the server, the sandbox's end, an interpreter killed), so the model knows its variables
//! are gone before it reads an error about them.
//!
//! `structuredContent` keeps its fields, bounded the same way: `output` is the very text the model reads (after the
//! header), `stdout` and `stderr` each the head and tail of half the budget. So a result holds at most about three
//! budgets of output as JSON (60 KiB by default: the text, `output`, and both streams), whatever the run printed.

use sandlot_core::{Excerpt, head_and_tail};

use super::run_code_output::RunCodeOutput;

/// Where the whole output of `run_id` can be read, for a cut marker.
fn whole_output_at(run_id: &str) -> String {
    format!("resources/read sandlot://runs/{run_id}/output or GET /v1/runs/{run_id}/output")
}

/// The head and tail of `text` within `budget` bytes (as JSON), with a marker line where bytes were cut; whether
/// anything was cut.
pub fn excerpt(text: &str, budget: usize, run_id: &str) -> (String, bool) {
    let Excerpt { head, tail, cut } = head_and_tail(text, budget);
    if cut == 0 {
        return (format!("{head}{tail}"), false);
    }
    let mut kept = String::with_capacity(head.len() + tail.len() + 160);
    kept.push_str(head);
    if !head.is_empty() && !head.ends_with('\n') {
        kept.push('\n');
    }
    kept.push_str(&format!("[... {cut} bytes cut here; the whole output: {} ...]\n", whole_output_at(run_id)));
    kept.push_str(tail);
    (kept, true)
}

/// The text block of a result whose structured content is `result`: its header line, then its `output` (already
/// bounded), so a model reads each byte once.
pub fn model_text(result: &RunCodeOutput) -> String {
    let mut header = Vec::new();
    if let Some(outcome) = result.outcome {
        header.push(format!("outcome: {}", outcome.as_str()));
    }
    // Exit code and duration only for a run that ran (a refused one has neither).
    if result.run_id.is_some() {
        header.push(format!("exit code {}", result.exit_code));
        header.push(format!("{} ms", result.duration_ms));
    }
    let mut header = header.join(", ");
    if let Some(session) = result.session.as_ref().filter(|session| session.state_lost) {
        let notice = session.notice.as_deref().unwrap_or("the live sandbox's earlier state is gone");
        if !header.is_empty() {
            header.push('\n');
        }
        // One line, whatever the notice holds.
        header.push_str(&format!("session state lost: {}", notice.replace(['\r', '\n'], " ")));
    }
    let output = &result.output;
    match (header.is_empty(), output.is_empty()) {
        (true, _) => output.to_owned(),
        (false, true) => format!("{header}\n(no output)"),
        (false, false) => format!("{header}\n{output}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandlot_core::Outcome;

    #[test]
    fn a_long_output_keeps_its_head_and_tail_and_says_where_the_rest_is() {
        let text: String = (0..50_000).map(|i| format!("line {i}\n")).collect();
        let (kept, cut) = excerpt(&text, 2000, "r1");
        assert!(cut);
        assert!(kept.starts_with("line 0\n") && kept.ends_with("line 49999\n"), "{kept}");
        let marker = kept.lines().find(|l| l.starts_with("[...")).unwrap();
        let dropped: usize = marker.split(' ').nth(1).unwrap().parse().unwrap();
        assert_eq!(kept.len() - marker.len() - 1 + dropped, text.len(), "every byte is either shown or counted");
        assert!(marker.contains("sandlot://runs/r1/output") && marker.contains("GET /v1/runs/r1/output"), "{marker}");
        assert!(kept.len() < 2200);
        assert_eq!(excerpt("short\n", 2000, "r1"), ("short\n".to_owned(), false));
    }

    #[test]
    fn the_text_block_holds_the_output_once_after_a_header() {
        let ran = |outcome, exit_code, duration_ms, output: &str| RunCodeOutput {
            exit_code,
            duration_ms,
            run_id: Some("r".into()),
            outcome: Some(outcome),
            ..RunCodeOutput::failure(output.into())
        };
        assert_eq!(
            model_text(&ran(Outcome::Error, 3, 12, "out\nerr\n")),
            "outcome: error, exit code 3, 12 ms\nout\nerr\n"
        );
        assert_eq!(model_text(&ran(Outcome::Ok, 0, 0, "")), "outcome: ok, exit code 0, 0 ms\n(no output)");
        let busy = RunCodeOutput { outcome: Some(Outcome::Busy), ..RunCodeOutput::failure("server busy".into()) };
        assert_eq!(model_text(&busy), "outcome: busy\nserver busy");
        let no_run = RunCodeOutput::failure("no runner for language ruby".into());
        assert_eq!(model_text(&no_run), "no runner for language ruby");
        let session = |state_lost, notice: Option<&str>| {
            Some(super::super::run_code_output::SessionInfo {
                id: "s1".into(),
                calls: 1,
                state_lost,
                notice: notice.map(Into::into),
            })
        };
        let lost = RunCodeOutput {
            session: session(true, Some("the server restarted\nsince")),
            ..ran(Outcome::Ok, 0, 5, "x\n")
        };
        assert_eq!(
            model_text(&lost),
            "outcome: ok, exit code 0, 5 ms\nsession state lost: the server restarted since\nx\n"
        );
        let kept = RunCodeOutput { session: session(false, None), ..ran(Outcome::Ok, 0, 5, "x\n") };
        assert_eq!(model_text(&kept), "outcome: ok, exit code 0, 5 ms\nx\n");
    }
}
