//! Clipping text that came from a request or the API before it goes into a message, an Event
//! or a log line: one rule, so every place cuts the same way.

/// At most `max` bytes of `s`: as it is when it fits, else cut on a character boundary and
/// ended with `...` (within the `max`).
pub(crate) fn clip(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let cut = (0..=max.saturating_sub(3))
        .rev()
        .find(|i| s.is_char_boundary(*i))
        .unwrap_or(0);
    format!("{}...", &s[..cut])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_cut_on_a_character_boundary_within_the_limit() {
        assert_eq!(clip("abc", 3), "abc");
        assert_eq!(clip("abcd", 3), "...");
        assert_eq!(clip("abcdefgh", 6), "abc...");
        // "é" is two bytes: never cut in half.
        let cut = clip(&"é".repeat(600), 1000);
        assert!(cut.len() <= 1000 && cut.ends_with("..."), "{}", cut.len());
        assert_eq!(clip("aébc", 4), "a...");
        assert_eq!(clip("", 0), "");
        assert_eq!(clip("ab", 0), "...");
    }
}
