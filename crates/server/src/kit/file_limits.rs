//! What the file tools of both workspace profiles (codegen's `Read`/`Edit`, open-sandbox's `file.*`) hold a file to:
//! the largest file they read whole or rewrite, and the size a replace-all would give, computed before the new text
//! is built, since a small file with many matches and a longer replacement could become a string of gigabytes in
//! the server (16 MiB of `a`, each replaced by 128 bytes, is 2 GiB).

/// The largest file read whole, searched or rewritten.
pub const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// The size of a text of `len` bytes once its `matches` occurrences of `old` bytes are each replaced by `new` bytes
/// (saturating: a size past `u64` is past any limit).
pub fn replaced_size(len: usize, matches: usize, old: usize, new: usize) -> u64 {
    let kept = (len as u64).saturating_sub((matches as u64).saturating_mul(old as u64));
    kept.saturating_add((matches as u64).saturating_mul(new as u64))
}

/// The error text of a replace-all whose result would be `size` bytes, past [`MAX_FILE_BYTES`]; `None` within it.
pub fn refuse_replaced_size(shown: &str, size: u64) -> Option<String> {
    (size > MAX_FILE_BYTES).then(|| {
        format!("refusing to change {shown}: the result would be {size} bytes, over the 16 MiB a file may have")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_size_is_computed_without_building_the_text() {
        assert_eq!(replaced_size(10, 2, 1, 4), 16);
        assert_eq!(replaced_size(16 << 20, 16 << 20, 1, 128), 2 << 30);
        assert_eq!(replaced_size(usize::MAX, usize::MAX, 0, usize::MAX), u64::MAX);
        assert_eq!(refuse_replaced_size("a", MAX_FILE_BYTES), None);
        assert!(refuse_replaced_size("a", MAX_FILE_BYTES + 1).is_some());
    }
}
