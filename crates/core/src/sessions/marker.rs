//! A conversation's note of its last live sandbox, `<root>/<id>/session.json`: which server started it and how it
//! ended. A live sandbox's state survives nothing (not a restart of the server), so the next `session` call of a
//! conversation reads this note to tell the model why its variables are gone. Best effort: a note that cannot be
//! read or written only costs that sentence.

use std::path::{Path, PathBuf};

/// The note's file name, beside the conversation's `files`.
pub const MARKER_NAME: &str = "session.json";

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Marker {
    /// The live sandbox's id.
    pub session: String,
    /// The id of the server process that started it.
    pub boot: String,
    /// Calls it served, noted when it ended (not after each call: a call costs no write).
    pub calls: Option<u64>,
    /// Why it ended; `None` while it lives (or when its server died without saying).
    pub ended: Option<String>,
}

pub fn path(conversation_dir: &Path) -> PathBuf {
    conversation_dir.join(MARKER_NAME)
}

pub fn read(conversation_dir: &Path) -> Option<Marker> {
    let bytes = std::fs::read(path(conversation_dir)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

pub fn write(conversation_dir: &Path, marker: &Marker) {
    let Ok(json) = serde_json::to_vec(marker) else { return };
    let (file, temporary) = (path(conversation_dir), conversation_dir.join(".session.json.new"));
    let written = std::fs::write(&temporary, json).and_then(|()| std::fs::rename(&temporary, &file));
    if let Err(error) = written {
        tracing::warn!(%error, file = %file.display(), "cannot write a conversation's session note");
    }
}

/// What the next call says about the state a previous live sandbox had, if it is gone: `None` when there was none.
pub fn lost_state_notice(previous: Option<&Marker>, boot: &str) -> Option<String> {
    let previous = previous?;
    let what = match previous.calls {
        Some(calls) => format!("session {} ({calls} call{})", previous.session, plural(calls)),
        None => format!("session {}", previous.session),
    };
    Some(match (&previous.ended, previous.boot == boot) {
        (_, false) => format!(
            "the server restarted since this conversation's last session call, ending {what}: its interpreters, \
             variables and processes are gone (files in the conversation's directory are kept); this is a new session"
        ),
        (Some(reason), true) => format!(
            "{what} ended ({reason}): its interpreters, variables and processes are gone (files are kept); this is \
             a new session"
        ),
        (None, true) => format!("{what} ended: its state is gone (files are kept); this is a new session"),
    })
}

fn plural(n: u64) -> &'static str {
    if n == 1 { "" } else { "s" }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marker(boot: &str, ended: Option<&str>) -> Marker {
        Marker { session: "s1".into(), boot: boot.into(), calls: Some(2), ended: ended.map(Into::into) }
    }

    #[test]
    fn a_restart_and_an_end_are_told_apart() {
        assert_eq!(lost_state_notice(None, "b"), None);
        let restarted = lost_state_notice(Some(&marker("a", None)), "b").unwrap_or_default();
        assert!(restarted.contains("server restarted"), "{restarted}");
        let idle = lost_state_notice(Some(&marker("b", Some("idle for 900 s"))), "b").unwrap_or_default();
        assert!(idle.contains("ended (idle for 900 s)") && idle.contains("2 calls"), "{idle}");
    }

    #[test]
    fn a_note_round_trips_through_its_file() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(read(dir.path()), None);
        let note = marker("b", Some("closed"));
        write(dir.path(), &note);
        assert_eq!(read(dir.path()), Some(note));
    }
}
