//! A tool result's byte budget, checked while the result is built, not after: every piece is counted as the bytes
//! it takes inside a JSON string (`sandlot_core::json_len`: a NUL byte is 1 byte on disk and 6 on the wire), a piece
//! that does not fit is cut or left out, and the budget remembers it so that the tool ends its result with a line
//! saying what was cut (as `sandbox_run_code` does). Invariant: what a budget took never exceeds its size as JSON,
//! so a file tool's answer is bounded whatever the workspace holds.

/// The bytes (as JSON) of one file tool's result at most: a codegen tool's text, an open-sandbox tool's result.
pub const TOOL_RESULT_BYTES: usize = 1024 * 1024;

/// What is left of a result's budget.
#[derive(Debug)]
pub struct ResultBudget {
    left: usize,
    cut: bool,
}

impl ResultBudget {
    /// A budget of `bytes` as JSON.
    pub fn new(bytes: usize) -> Self {
        Self { left: bytes, cut: false }
    }

    /// A budget of [`TOOL_RESULT_BYTES`].
    pub fn tool() -> Self {
        Self::new(TOOL_RESULT_BYTES)
    }

    /// Takes `piece` whole if it fits (true); else takes nothing, and the result is cut (false).
    pub fn take(&mut self, piece: &str) -> bool {
        self.take_cost(sandlot_core::json_len(piece))
    }

    /// Takes `item` whole as one string of a JSON array (its text, its quotes and a comma) if it fits (true); else
    /// takes nothing, and the result is cut (false).
    pub fn take_item(&mut self, item: &str) -> bool {
        self.take_cost(sandlot_core::json_len(item) + 3)
    }

    fn take_cost(&mut self, cost: usize) -> bool {
        if self.cut || cost > self.left {
            self.cut = true;
            return false;
        }
        self.left -= cost;
        true
    }

    /// The longest beginning of `piece` that fits (never splitting a character), taken; the result is cut when
    /// that is not all of it.
    pub fn take_prefix<'a>(&mut self, piece: &'a str) -> &'a str {
        if self.cut {
            return "";
        }
        let kept = sandlot_core::json_prefix(piece, self.left);
        self.left -= sandlot_core::json_len(kept);
        if kept.len() < piece.len() {
            self.cut = true;
        }
        kept
    }

    /// Whether anything was cut or left out.
    pub fn is_cut(&self) -> bool {
        self.cut
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_are_counted_as_json_and_the_first_that_does_not_fit_ends_the_result() {
        let mut budget = ResultBudget::new(10);
        assert!(budget.take("abc\n")); // 5 bytes as JSON
        assert!(!budget.take("\0")); // 6
        assert!(budget.is_cut());
        assert!(!budget.take("x"), "nothing is taken after a cut");
        let mut budget = ResultBudget::new(7);
        assert_eq!(budget.take_prefix("ab\0cd"), "ab"); // the NUL would be 6 more
        assert!(budget.is_cut());
        let mut budget = ResultBudget::new(8);
        assert_eq!(budget.take_prefix("abcdéf"), "abcdéf");
        assert!(!budget.is_cut());
        let mut budget = ResultBudget::new(10);
        assert!(budget.take_item("abcd")); // "abcd",
        assert!(!budget.take_item("ab"));
    }
}
