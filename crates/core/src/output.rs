//! Output of a running program: the chunks streamed live to a sink, and the capped copy kept for the outcome.

/// Which stream a chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stream {
    Stdout,
    Stderr,
}

/// A piece of output, as it was read from the program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputChunk {
    pub stream: Stream,
    pub data: Vec<u8>,
}

/// Receives output while the program runs. Only bytes within the output cap are ever passed on.
pub trait OutputSink: Send + Sync {
    fn output(&self, chunk: OutputChunk);
}

/// A sink that drops everything, for callers that only want the final outcome.
impl OutputSink for () {
    fn output(&self, _chunk: OutputChunk) {}
}

impl<F: Fn(OutputChunk) + Send + Sync> OutputSink for F {
    fn output(&self, chunk: OutputChunk) {
        self(chunk)
    }
}

/// One stream's bytes, kept up to a cap. Bytes past the cap are counted and dropped, never buffered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapturedStream {
    bytes: Vec<u8>,
    cap: usize,
    dropped: u64,
}

impl CapturedStream {
    /// An empty stream that keeps at most `cap` bytes.
    pub fn new(cap: usize) -> Self {
        Self { bytes: Vec::new(), cap, dropped: 0 }
    }

    /// Keeps what fits of `data` and returns that part (to forward live); counts the rest as dropped.
    pub fn push<'a>(&mut self, data: &'a [u8]) -> &'a [u8] {
        let room = self.cap.saturating_sub(self.bytes.len());
        let kept = &data[..data.len().min(room)];
        self.bytes.extend_from_slice(kept);
        self.dropped += (data.len() - kept.len()) as u64;
        kept
    }

    /// Whether any byte was dropped.
    pub fn truncated(&self) -> bool {
        self.dropped > 0
    }

    /// The kept bytes as text (invalid UTF-8 replaced).
    pub fn into_text(self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }
}

/// The longest prefix of `text` (ending on a character boundary) that takes at most `budget` bytes inside a JSON
/// string as serde_json writes it: `"`, `\\` and the short escapes (`\n`, `\t`, ...) take 2 bytes, other control
/// characters 6 (`\u0001`), everything else its UTF-8 length. Used to bound a result in the bytes it is sent as,
/// whatever the program printed (a control byte is 1 byte of output but 6 of JSON).
pub fn json_prefix(text: &str, budget: usize) -> &str {
    if text.len().saturating_mul(6) <= budget {
        return text; // even all control characters would fit
    }
    let mut used = 0usize;
    for (index, byte) in text.bytes().enumerate() {
        used += match byte {
            b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 2,
            0..0x20 => 6,
            _ => 1,
        };
        if used > budget {
            let mut end = index;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            return &text[..end];
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_prefix_counts_bytes_as_json_writes_them() {
        for text in ["plain", "a\"b\\c\nd", "\u{1}\u{2}x", "é✓🦀", "\u{7f}\u{85}"] {
            let encoded = serde_json::to_string(text).unwrap().len() - 2;
            assert_eq!(json_prefix(text, encoded), text, "{text:?} fits its own size");
            let shorter = json_prefix(text, encoded - 1);
            assert!(shorter.len() < text.len() && text.starts_with(shorter), "{text:?}");
            assert!(serde_json::to_string(shorter).unwrap().len() - 2 < encoded, "{text:?}");
        }
        assert_eq!(json_prefix(&"\u{1}".repeat(1000), 60), "\u{1}".repeat(10));
        assert_eq!(json_prefix("é", 1), "", "never half a character");
    }

    #[test]
    fn keeps_up_to_the_cap_and_marks_truncation() {
        let mut s = CapturedStream::new(5);
        assert_eq!(s.push(b"abc"), b"abc");
        assert!(!s.truncated());
        assert_eq!(s.push(b"defg"), b"de");
        assert_eq!(s.push(b"h"), b"");
        assert!(s.truncated());
        assert_eq!(s.into_text(), "abcde");
    }
}
