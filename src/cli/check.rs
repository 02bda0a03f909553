//! `stateful-admission check`: runs [`crate::check`] and prints its report.

use std::io::Write;
use std::process::ExitCode;

use super::{CheckArgs, CheckOutput};
use crate::telemetry::{self, LogFormat};

/// `stateful-admission check`: every check against the release the flags name, printed as
/// text or JSON; exit 0 when none failed, 1 when one did, 2 without a cluster.
pub fn run(args: CheckArgs) -> ExitCode {
    use crate::check::{Check, Report};
    // The report carries every failure; the client's own error lines (a 404 is an ERROR to
    // it) would only repeat them. RUST_LOG still turns them on.
    telemetry::init(LogFormat::Text, "off");
    let outcome = match tokio::runtime::Runtime::new() {
        Err(error) => Err((
            Report {
                checks: vec![Check::failed(
                    "runtime",
                    format!("cannot start the runtime: {error}"),
                    "",
                )],
            },
            ExitCode::FAILURE,
        )),
        // Exit 2 without a cluster configuration.
        Ok(runtime) => runtime
            .block_on(check_release(&args))
            .map_err(|no_cluster| {
                (
                    Report::without_cluster(no_cluster.to_string()),
                    ExitCode::from(2),
                )
            }),
    };
    let (report, code) = match (outcome, args.output) {
        (Ok(report), _) => {
            let code = if report.failed() {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            };
            (report, code)
        }
        // JSON in every outcome, so that scripts can rely on it.
        (Err((report, code)), CheckOutput::Json) => (report, code),
        (Err((report, code)), CheckOutput::Text) => {
            for failed in &report.checks {
                match failed.hint.as_str() {
                    "" => eprintln!("error: {}", failed.message),
                    hint => eprintln!("error: {}; {hint}", failed.message),
                }
            }
            return code;
        }
    };
    let text = match args.output {
        CheckOutput::Text => report.text(),
        CheckOutput::Json => match serde_json::to_string_pretty(&report) {
            Ok(json) => json + "\n",
            Err(error) => {
                eprintln!("error: {error}");
                return ExitCode::FAILURE;
            }
        },
    };
    if let Err(e) = std::io::stdout().lock().write_all(text.as_bytes())
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        eprintln!("error: cannot write the output: {e}");
        return ExitCode::FAILURE;
    }
    code
}

/// Runs every check against the release the flags name, or says why there is no cluster.
async fn check_release(
    args: &CheckArgs,
) -> Result<crate::check::Report, crate::connect::NoCluster> {
    use crate::check::{Release, gather};
    let config = match &args.context {
        Some(context) => crate::connect::from_context(context).await?,
        None => crate::connect::infer().await?,
    };
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    let mut release = Release::of(&args.release, &namespace);
    release.service_port = args.service_port;
    release.probe_namespace = args.probe_namespace.clone();
    if let Some(lease) = &args.lease_name {
        release.lease = lease.clone();
    }
    Ok(gather::run(config, &release).await)
}
