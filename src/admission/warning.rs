//! Warnings as kube-apiserver passes them on to the client.
//!
//! The apiserver keeps warnings as given until those of one request total 4096 characters;
//! from then on it cuts each to 256 characters and drops the rest (`truncateAtTotalRunes`,
//! `truncateItemRunes` in staging/src/k8s.io/apiserver/pkg/endpoints/filters/warning.go). It
//! drops a warning with a control character outright (`net.NewWarningHeader`), and the
//! admission API asks webhooks to keep each warning short (`AdmissionResponse.warnings`).
//!
//! So a warning here is a subject and facts ([`Warning`]): the facts are packed in order into
//! as many warnings of at most [`MAX_CHARS`] as it takes, each starting with the subject, so
//! nothing is cut. Only a user-supplied value is ever shortened ([`quote`], [`cut`]), and the
//! text says so. [`fit`] is applied to every warning the webhook returns: it replaces control
//! characters, splits a warning that is still too long at a word boundary rather than lose its
//! end, and keeps the total within what the apiserver passes on.

use std::fmt::Write as _;

/// Longest warning, in characters, that kube-apiserver never cuts.
pub(crate) const MAX_CHARS: usize = 256;
/// Characters of warnings per request the apiserver passes on before it starts cutting.
pub(crate) const MAX_TOTAL_CHARS: usize = 4096;
/// Longest user-supplied value quoted in full.
pub(crate) const VALUE_MAX_CHARS: usize = 100;

/// Between the subject and the first fact.
const SUBJECT_END: &str = ": ";
/// Between two facts.
const FACT_SEP: &str = "; ";
/// Marks where a too-long warning was split: at the end of one part, at the start of the next.
const CONTINUED: &str = " (continued)";

/// A warning under construction: a subject and facts, in the order the reader needs them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    subject: String,
    facts: Vec<String>,
}

impl Warning {
    /// A warning about `subject` (what it is about: `volume claim template "data"`).
    pub fn new(subject: impl Into<String>) -> Self {
        Self {
            subject: subject.into(),
            facts: Vec::new(),
        }
    }

    /// Adds a fact, kept whole.
    pub fn fact(mut self, fact: impl Into<String>) -> Self {
        self.facts.push(fact.into());
        self
    }

    /// Adds a changed field as `field old -> new`; where that cannot share one warning with
    /// the subject, as two facts, `field from old` and `field to new`.
    pub fn change(self, field: &str, old: &str, new: &str) -> Self {
        let whole = format!("{field} {old} -> {new}");
        if self.room() >= chars(&whole) {
            self.fact(whole)
        } else {
            self.fact(format!("{field} from {old}"))
                .fact(format!("{field} to {new}"))
        }
    }

    /// Characters left for facts in each warning.
    fn room(&self) -> usize {
        MAX_CHARS.saturating_sub(chars(&self.subject) + SUBJECT_END.len())
    }

    /// The warnings: `subject: fact; fact`, as many facts to each as fit, in order.
    pub fn build(self) -> Vec<String> {
        if self.facts.is_empty() {
            return split(&self.subject);
        }
        let mut out = Vec::new();
        let mut current = String::new();
        for fact in &self.facts {
            if !current.is_empty() && chars(&current) + FACT_SEP.len() + chars(fact) <= MAX_CHARS {
                current.push_str(FACT_SEP);
                current.push_str(fact);
                continue;
            }
            if !current.is_empty() {
                out.push(std::mem::take(&mut current));
            }
            current = format!("{}{SUBJECT_END}{fact}", self.subject);
        }
        out.push(current);
        // A single fact too long for one warning (none of ours: their values are cut) is
        // split rather than lost.
        out.iter().flat_map(|w| split(w)).collect()
    }
}

/// Characters of `s`, as the apiserver counts them (runes).
pub(crate) fn chars(s: &str) -> usize {
    s.chars().count()
}

/// A user-supplied value in double quotes, escaped as Go's `%q` would (control characters
/// included); longer than [`VALUE_MAX_CHARS`], its start followed by how long it was.
pub(crate) fn quote(value: &str) -> String {
    quote_to(value, VALUE_MAX_CHARS)
}

/// [`quote`] with another limit.
pub(crate) fn quote_to(value: &str, max: usize) -> String {
    let (head, total) = head(value, max);
    match total {
        None => format!("{head:?}"),
        Some(n) => format!("{head:?}... (cut from {n} characters)"),
    }
}

/// A user-supplied value as it is (a quantity, a number), control characters escaped; longer
/// than [`VALUE_MAX_CHARS`], its start followed by how long it was.
pub(crate) fn cut(value: &str) -> String {
    cut_to(value, VALUE_MAX_CHARS)
}

/// [`cut`] with another limit.
pub(crate) fn cut_to(value: &str, max: usize) -> String {
    let (head, total) = head(value, max);
    let head = escape_controls(head);
    match total {
        None => head,
        Some(n) => format!("{head}... (cut from {n} characters)"),
    }
}

/// The first `max` characters of `value`, and its length when that is more.
fn head(value: &str, max: usize) -> (&str, Option<usize>) {
    match value.char_indices().nth(max) {
        None => (value, None),
        Some((end, _)) => (&value[..end], Some(chars(value))),
    }
}

/// Control characters written as escapes: the apiserver drops a warning that has one.
fn escape_controls(s: &str) -> String {
    if !s.chars().any(char::is_control) {
        return s.to_owned();
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if c.is_control() {
            let _ = write!(out, "{}", c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// A warning of more than [`MAX_CHARS`] as several: each part ends at a boundary (`; `, then
/// `, `, then a space, then anywhere) and is marked as continued.
pub(crate) fn split(warning: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = warning;
    let mut first = true;
    loop {
        let prefix = if first { "" } else { "... " };
        if chars(prefix) + chars(rest) <= MAX_CHARS {
            out.push(format!("{prefix}{rest}"));
            return out;
        }
        let room = MAX_CHARS - chars(prefix) - CONTINUED.len();
        // Byte offset of the first character that does not fit.
        let limit = rest.char_indices().nth(room).map_or(rest.len(), |(i, _)| i);
        let window = &rest[..limit];
        let end = ["; ", ", ", " "]
            .iter()
            .find_map(|sep| window.rfind(sep).filter(|&i| i > limit / 2))
            .unwrap_or(limit);
        out.push(format!("{prefix}{}{CONTINUED}", &rest[..end]));
        rest = rest[end..].trim_start_matches([';', ',', ' ']);
        if rest.is_empty() {
            return out;
        }
        first = false;
    }
}

/// Every warning of a response as the apiserver will pass it on unchanged: control
/// characters escaped, none longer than [`MAX_CHARS`] (split, not cut), and no more in total
/// than [`MAX_TOTAL_CHARS`] (past it, a last warning says how many were left out).
pub(crate) fn fit(warnings: Vec<String>) -> Vec<String> {
    let parts: Vec<String> = warnings
        .iter()
        .flat_map(|w| split(&escape_controls(w)))
        .collect();
    let total: usize = parts.iter().map(|w| chars(w)).sum();
    if total <= MAX_TOTAL_CHARS {
        return parts;
    }
    // Room for the note about the rest.
    let budget = MAX_TOTAL_CHARS - 100;
    let mut kept = Vec::new();
    let mut used = 0;
    for part in &parts {
        let n = chars(part);
        if used + n > budget {
            break;
        }
        used += n;
        kept.push(part.clone());
    }
    let left = parts.len() - kept.len();
    kept.push(format!(
        "{left} more warnings left out: the apiserver passes on {MAX_TOTAL_CHARS} characters of warnings"
    ));
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_fit(warnings: &[String]) {
        for w in warnings {
            assert!(chars(w) <= MAX_CHARS, "{} characters: {w}", chars(w));
        }
    }

    #[test]
    fn facts_are_packed_in_order_and_never_cut() {
        let subject = "volume claim template \"data\"";
        let w = Warning::new(subject)
            .fact("storage 1Gi -> 5Gi")
            .fact("labels changed")
            .build();
        assert_eq!(
            w,
            ["volume claim template \"data\": storage 1Gi -> 5Gi; labels changed"]
        );

        // Forty facts of twenty characters: each warning holds what fits, in order, and
        // starts with the subject; together they hold every fact whole.
        let facts: Vec<String> = (0..40)
            .map(|i| format!("fact number {i:02} is.."))
            .collect();
        let w = facts
            .iter()
            .fold(Warning::new(subject), |w, f| w.fact(f.clone()))
            .build();
        all_fit(&w);
        assert!(w.len() > 3, "{w:?}");
        let mut seen = Vec::new();
        for warning in &w {
            let rest = warning
                .strip_prefix(&format!("{subject}: "))
                .unwrap_or_else(|| panic!("starts with the subject: {warning}"));
            seen.extend(rest.split("; ").map(str::to_owned));
        }
        assert_eq!(seen, facts);
        // Packed: no warning could have taken the next one's first fact.
        for pair in w.windows(2) {
            let next_fact = pair[1]
                .split(": ")
                .nth(1)
                .and_then(|r| r.split("; ").next());
            let next_fact = next_fact.unwrap_or_default();
            assert!(
                chars(&pair[0]) + 2 + chars(next_fact) > MAX_CHARS,
                "{pair:?}"
            );
        }
    }

    #[test]
    fn a_change_that_cannot_fit_is_split_into_from_and_to() {
        let long_old = quote(&"o".repeat(100));
        let long_new = quote(&"n".repeat(100));
        let subject = "volume claim template \"data\"";
        let w = Warning::new(subject)
            .change("volumeAttributesClassName", &long_old, &long_new)
            .fact("policy OnDelete")
            .build();
        all_fit(&w);
        assert_eq!(
            w,
            [
                format!("{subject}: volumeAttributesClassName from {long_old}"),
                format!("{subject}: volumeAttributesClassName to {long_new}; policy OnDelete"),
            ]
        );
        let w = Warning::new(subject)
            .change("volumeAttributesClassName", "unset", "\"gold\"")
            .build();
        assert_eq!(
            w,
            [format!(
                "{subject}: volumeAttributesClassName unset -> \"gold\""
            )]
        );
    }

    #[test]
    fn only_values_are_cut_and_it_says_so() {
        assert_eq!(quote("gold"), "\"gold\"");
        assert_eq!(cut("1Gi"), "1Gi");
        let long = "é".repeat(300);
        let q = quote(&long);
        assert!(
            q.starts_with(&format!("\"{}", "é".repeat(VALUE_MAX_CHARS))),
            "{q}"
        );
        assert!(q.ends_with("\"... (cut from 300 characters)"), "{q}");
        assert_eq!(chars(&q), VALUE_MAX_CHARS + 2 + 29);
        assert_eq!(cut_to("123456789", 4), "1234... (cut from 9 characters)");
        // Exactly at the limit: whole.
        assert_eq!(quote_to("abcd", 4), "\"abcd\"");
        // Control characters are escaped, quoted or not.
        assert_eq!(quote("a\nb"), "\"a\\nb\"");
        assert_eq!(cut("a\tb\u{7f}"), "a\\tb\\u{7f}");
    }

    #[test]
    fn a_too_long_warning_is_split_at_boundaries_not_cut() {
        let clauses: Vec<String> = (0..30).map(|i| format!("clause {i:02} says x")).collect();
        let text = clauses.join("; ");
        let parts = split(&text);
        all_fit(&parts);
        assert!(parts.len() >= 2, "{parts:?}");
        assert!(parts[0].ends_with(CONTINUED), "{}", parts[0]);
        assert!(parts[1].starts_with("... clause"), "{}", parts[1]);
        // Nothing is lost: the clauses come back whole, in order.
        let joined: Vec<String> = parts
            .iter()
            .map(|p| {
                p.trim_start_matches("... ")
                    .trim_end_matches(CONTINUED)
                    .to_owned()
            })
            .collect();
        assert_eq!(joined.join("; "), text);

        // No boundary at all: split anyway, every character kept.
        let word = "x".repeat(600);
        let parts = split(&word);
        all_fit(&parts);
        let kept: usize = parts
            .iter()
            .map(|p| {
                p.trim_start_matches("... ")
                    .trim_end_matches(CONTINUED)
                    .len()
            })
            .sum();
        assert_eq!(kept, 600);
        // Short ones are left alone; the limit counts characters, not bytes.
        assert_eq!(split("short"), ["short"]);
        let wide = "é".repeat(MAX_CHARS);
        assert_eq!(split(&wide), std::slice::from_ref(&wide));
    }

    #[test]
    fn a_subject_without_facts_is_one_warning() {
        assert_eq!(Warning::new("all fine").build(), ["all fine"]);
    }

    #[test]
    fn a_response_keeps_to_what_the_apiserver_passes_on() {
        // Control characters would make the apiserver drop the warning.
        assert_eq!(fit(vec!["a\nb".into()]), ["a\\nb"]);
        // Over the total: the first ones are kept and the last says how many were left out.
        let many: Vec<String> = (0..40)
            .map(|i| format!("{i:03} {}", "w".repeat(196)))
            .collect();
        let out = fit(many.clone());
        let total: usize = out.iter().map(|w| chars(w)).sum();
        assert!(total <= MAX_TOTAL_CHARS, "{total}");
        all_fit(&out);
        let kept = out.len() - 1;
        assert_eq!(out[..kept], many[..kept]);
        assert_eq!(
            out[kept],
            format!(
                "{} more warnings left out: the apiserver passes on 4096 characters of warnings",
                40 - kept
            )
        );
        // Within the total: unchanged.
        assert_eq!(fit(many[..5].to_vec()), many[..5].to_vec());
    }
}
