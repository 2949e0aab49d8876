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
        used += json_cost(byte);
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

/// Bytes `text` takes inside a JSON string as serde_json writes it, quotes excluded (see [`json_prefix`]).
pub fn json_len(text: &str) -> usize {
    text.bytes().map(json_cost).sum()
}

/// Bytes `byte` takes inside a JSON string as serde_json writes it (see [`json_prefix`]).
fn json_cost(byte: u8) -> usize {
    match byte {
        b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 2,
        0..0x20 => 6,
        _ => 1,
    }
}

/// The longest suffix of `text` (starting on a character boundary) that takes at most `budget` bytes inside a JSON
/// string; the mirror of [`json_prefix`].
pub fn json_suffix(text: &str, budget: usize) -> &str {
    if text.len().saturating_mul(6) <= budget {
        return text;
    }
    let mut used = 0usize;
    for (index, byte) in text.bytes().enumerate().rev() {
        used += json_cost(byte);
        if used > budget {
            let mut start = index + 1;
            while !text.is_char_boundary(start) {
                start += 1;
            }
            return &text[start..];
        }
    }
    text
}

/// What is kept of a text too long for its budget: its beginning and its end. `head` and `tail` are slices of the
/// text that never overlap; the bytes between them (`cut`) are left out. A text that fits is all in `head`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Excerpt<'a> {
    pub head: &'a str,
    pub tail: &'a str,
    /// Bytes of the text left out, between `head` and `tail`.
    pub cut: usize,
}

/// The head and tail of `text` that take at most `budget` bytes together inside JSON strings (half each), cut at
/// line ends when one is in the outer half of each part, so a model sees whole first and last lines. Bounds a
/// result in the bytes it is sent as, whatever the program printed.
pub fn head_and_tail(text: &str, budget: usize) -> Excerpt<'_> {
    if json_prefix(text, budget).len() == text.len() {
        return Excerpt { head: text, tail: "", cut: 0 };
    }
    let mut head = json_prefix(text, budget / 2);
    if let Some(end) = head.rfind('\n').filter(|&end| end + 1 >= head.len() / 2) {
        head = &head[..end + 1];
    }
    let mut tail = json_suffix(text, budget - budget / 2);
    // A tail that starts a line already (after a newline) is whole; else it starts after its first newline.
    if !text[..text.len() - tail.len()].ends_with('\n')
        && let Some(start) = tail.find('\n').filter(|&start| start < tail.len() / 2)
    {
        tail = &tail[start + 1..];
    }
    Excerpt { head, tail, cut: text.len() - head.len() - tail.len() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_len_is_what_serde_json_writes() {
        let text = "a\"\\\n\u{1}é\u{7f}";
        assert_eq!(json_len(text), serde_json::to_string(text).unwrap().len() - 2);
    }

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

    #[test]
    fn head_and_tail_keep_whole_first_and_last_lines_within_the_budget() {
        let text: String = (0..100_000).map(|i| format!("line {i}\n")).collect();
        let excerpt = head_and_tail(&text, 1000);
        assert!(excerpt.head.starts_with("line 0\n") && excerpt.head.ends_with('\n'), "{:?}", excerpt.head);
        assert!(excerpt.tail.ends_with("line 99999\n") && excerpt.tail.starts_with("line "), "{:?}", excerpt.tail);
        let sent = |s: &str| serde_json::to_string(s).unwrap().len() - 2;
        assert!(sent(excerpt.head) + sent(excerpt.tail) <= 1000);
        assert!(sent(excerpt.head) > 400 && sent(excerpt.tail) > 400, "most of the budget is used");
        assert_eq!(excerpt.head.len() + excerpt.cut + excerpt.tail.len(), text.len());
        assert!(text.starts_with(excerpt.head) && text.ends_with(excerpt.tail));
    }

    #[test]
    fn head_and_tail_keep_a_text_that_fits_whole_and_never_split_a_character() {
        assert_eq!(head_and_tail("short\n", 100), Excerpt { head: "short\n", tail: "", cut: 0 });
        assert_eq!(head_and_tail("", 0), Excerpt { head: "", tail: "", cut: 0 });
        let crabs = "🦀".repeat(1000); // one line, four bytes a character
        let excerpt = head_and_tail(&crabs, 101);
        assert_eq!((excerpt.head.len(), excerpt.tail.len(), excerpt.cut), (48, 48, 4000 - 96));
        let controls = "\u{1}".repeat(1000); // six bytes each as JSON
        let excerpt = head_and_tail(&controls, 120);
        assert_eq!((excerpt.head.len(), excerpt.tail.len(), excerpt.cut), (10, 10, 980));
    }

    #[test]
    fn json_suffix_mirrors_json_prefix() {
        assert_eq!(json_suffix("abc\"d", 4), "c\"d");
        assert_eq!(json_suffix("xé", 1), "", "never half a character");
        assert_eq!(json_suffix("xé", 2), "é");
        assert_eq!(json_suffix("plain", 100), "plain");
    }
}
