//! Structured logs with `tracing`: text for people, JSON for log pipelines.

use std::ffi::OsStr;
use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Installs the global subscriber, writing to stderr. `RUST_LOG` overrides `filter`. Text is
/// coloured only on a terminal and never with `NO_COLOR` set; JSON never is.
pub fn init(format: LogFormat, filter: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(filter));
    let ansi = colour(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    );
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = match format {
        LogFormat::Text => builder.with_ansi(ansi).try_init(),
        LogFormat::Json => builder
            .with_ansi(false)
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
    };
    // A second init (tests) keeps the first subscriber.
    let _ = result;
}

/// Whether text logs carry ANSI colours: only on a terminal, and not when `NO_COLOR` is set
/// to a non-empty value (no-color.org), whatever the value is.
pub fn colour(terminal: bool, no_color: Option<&OsStr>) -> bool {
    terminal && no_color.is_none_or(OsStr::is_empty)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        let set = Some(OsStr::new("1"));
        let empty = Some(OsStr::new(""));
        assert!(colour(true, None));
        assert!(colour(true, empty), "an empty NO_COLOR is unset");
        assert!(!colour(true, set));
        assert!(!colour(true, Some(OsStr::new("false"))), "any value counts");
        assert!(!colour(false, None));
        assert!(!colour(false, empty));
    }
}
