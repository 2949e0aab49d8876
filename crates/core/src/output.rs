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

/// Receives output while the program runs. Only bytes the result keeps are ever passed on (see [`CapturedStream`]).
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

/// One stream's bytes within a cap: the first half of the cap (the head) and the last half (the tail, a ring that
/// always holds the latest bytes), so the end of a run's output, usually its answer or its error, is never lost.
/// Bytes between them are counted and dropped, never buffered; the kept text then has a marker line between head and
/// tail saying how many were cut. The head is forwarded live as it comes; the tail is decided only at the stream's
/// end, so it is forwarded then, after the marker ([`CapturedStream::rest`]): what live listeners get is exactly
/// the kept text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapturedStream {
    head: Vec<u8>,
    head_cap: usize,
    tail: std::collections::VecDeque<u8>,
    tail_cap: usize,
    dropped: u64,
}

impl CapturedStream {
    /// An empty stream that keeps at most `cap` bytes of output: the first `cap / 2` and the last `cap - cap / 2`.
    pub fn new(cap: usize) -> Self {
        let head_cap = cap / 2;
        Self { head: Vec::new(), head_cap, tail: Default::default(), tail_cap: cap - head_cap, dropped: 0 }
    }

    /// Keeps `data`: what fits in the head, the rest in the tail (dropping the tail's oldest bytes past the cap).
    /// Returns the part that went to the head, which is final and can be forwarded live at once.
    pub fn push<'a>(&mut self, data: &'a [u8]) -> &'a [u8] {
        let room = self.head_cap.saturating_sub(self.head.len());
        let (to_head, rest) = data.split_at(data.len().min(room));
        self.head.extend_from_slice(to_head);
        let skipped = rest.len().saturating_sub(self.tail_cap); // older than any tail could keep
        let rest = &rest[skipped..];
        let evicted = (self.tail.len() + rest.len()).saturating_sub(self.tail_cap);
        self.tail.drain(..evicted);
        self.tail.extend(rest);
        self.dropped += (skipped + evicted) as u64;
        to_head
    }

    /// Whether any byte was dropped.
    pub fn truncated(&self) -> bool {
        self.dropped > 0
    }

    /// What the kept text has after the head: when bytes were dropped, a marker line saying how many, then the
    /// tail. Forwarded to live listeners once the stream has ended.
    pub fn rest(&self) -> Vec<u8> {
        let mut rest = Vec::with_capacity(self.tail.len() + 160);
        if self.truncated() {
            if self.head.last().is_some_and(|&byte| byte != b'\n') {
                rest.push(b'\n');
            }
            rest.extend_from_slice(self.marker().as_bytes());
        }
        rest.extend(&self.tail);
        rest
    }

    /// The line between head and tail when bytes were dropped.
    fn marker(&self) -> String {
        cut_marker(self.dropped, self.head_cap, self.tail_cap)
    }

    /// The kept text: the head, then [`CapturedStream::rest`] (invalid UTF-8 replaced).
    pub fn into_text(self) -> String {
        let mut bytes = self.rest();
        bytes.splice(0..0, self.head);
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

/// The line a [`CapturedStream`] puts between its head (`head` bytes) and its tail (`tail` bytes) when `cut` bytes
/// between them were dropped.
pub fn cut_marker(cut: u64, head: usize, tail: usize) -> String {
    format!(
        "[... {cut} bytes cut here: each stream keeps its first {head} and last {tail} bytes (SANDLOT_MAX_OUTPUT_BYTES) ...]\n"
    )
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
    fn keeps_the_head_and_the_latest_tail_and_marks_the_cut() {
        let mut s = CapturedStream::new(6);
        assert_eq!(s.push(b"ab"), b"ab");
        assert_eq!(s.push(b"cde"), b"c", "the head (3 bytes) is forwarded at once, the rest waits in the tail");
        assert!(!s.truncated());
        assert_eq!(s.clone().into_text(), "abcde", "nothing dropped: no marker");
        assert_eq!(s.push(b"fgh"), b"");
        assert_eq!(s.push(b"0123456789"), b"", "a chunk longer than the tail keeps its end");
        assert!(s.truncated());
        let marker =
            "[... 12 bytes cut here: each stream keeps its first 3 and last 3 bytes (SANDLOT_MAX_OUTPUT_BYTES) ...]";
        assert_eq!(String::from_utf8(s.rest()).unwrap(), format!("\n{marker}\n789"));
        assert_eq!(s.into_text(), format!("abc\n{marker}\n789"));
        let mut lines = CapturedStream::new(4);
        lines.push(b"a\nbcdefg\n");
        assert_eq!(
            lines.into_text(),
            format!(
                "a\n{}g\n",
                "[... 5 bytes cut here: each stream keeps its first 2 and last 2 bytes (SANDLOT_MAX_OUTPUT_BYTES) ...]\n"
            )
        );
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
