//! The command line: flags and subcommands ([`args`]), read by [`parse`], and what the
//! one-shot commands print ([`review`], [`check`], [`certs`]; `status` is [`crate::status`]).
//!
//! Environment names: every flag of `serve` can be set as `STATEFUL_ADMISSION_<FLAG>` (upper
//! case, dashes to underscores), because a Deployment configures the server through its
//! environment. `review` reads the same variables for the flags it shares with `serve` (the
//! policy flags and `--state`), so that it judges as the configured server would. The
//! one-shot commands' own flags (`review --phase/--patch/--show`, `check`, `status`,
//! `certs generate`) come from the command line only: a variable exported for `serve` never changes them.

pub(crate) mod args;
pub mod certs;
pub mod check;
pub mod review;
pub mod serve;

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches};

pub use args::*;

/// The prefix of every environment name.
pub const ENV_PREFIX: &str = "STATEFUL_ADMISSION_";

/// The environment name that once set `--self-signed-name`; still read, with a warning.
pub const DEPRECATED_SELF_SIGNED_NAMES: &str = "STATEFUL_ADMISSION_SELF_SIGNED_NAMES";

/// Parses the process's arguments and environment; exits with clap's message and code 2 on
/// a usage error, as `Cli::parse` does. Run as the kubectl plugin `kubectl-stateful_admission`
/// (kubectl passes the words after the plugin's), help and errors name it
/// `kubectl stateful-admission`.
pub fn parse() -> Cli {
    let plugin = std::env::args_os()
        .next()
        .map(std::path::PathBuf::from)
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .is_some_and(|n| n.starts_with("kubectl-"));
    let command = if plugin {
        Cli::command().bin_name("kubectl stateful-admission")
    } else {
        Cli::command()
    };
    let matches = command.clone().get_matches();
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    match (&mut cli.command, matches.subcommand()) {
        (Command::Serve(serve), Some((_, sub))) => {
            // Flags valid one by one, inconsistent together: a usage error (exit 2).
            if let Err(why) = serve.controller.timing().validate() {
                let mut command = command;
                command
                    .find_subcommand_mut("serve")
                    .map_or_else(
                        || Cli::command().error(clap::error::ErrorKind::ArgumentConflict, &why),
                        |serve| serve.error(clap::error::ErrorKind::ArgumentConflict, &why),
                    )
                    .exit();
            }
            if sub.value_source("self_signed_names") == Some(ValueSource::DefaultValue)
                && let Some(names) = std::env::var_os(DEPRECATED_SELF_SIGNED_NAMES)
                && !names.is_empty()
            {
                serve.self_signed_names = names
                    .to_string_lossy()
                    .split(',')
                    .map(str::to_owned)
                    .collect();
                serve.deprecated_names_env = true;
            }
        }
        (Command::Review(review), Some((_, sub))) => {
            review.patch_given = sub
                .value_source("patch")
                .is_some_and(|s| s != ValueSource::DefaultValue);
        }
        _ => {}
    }
    cli
}
