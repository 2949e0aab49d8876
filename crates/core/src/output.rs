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

#[cfg(test)]
mod tests {
    use super::*;

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
