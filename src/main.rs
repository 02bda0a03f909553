//! Command line: `serve` runs the webhook and the controller; `review` evaluates one
//! AdmissionReview offline; `check` verifies an install; `status` shows storage rollouts;
//! `certs generate` writes certificates for local development. The flags, what the one-shot
//! commands print and how `serve` is started from its flags are in the library's `cli`
//! module; what `serve` runs is the library's `serve::Serve`.

use std::process::ExitCode;

use stateful_admission::cli::{self, CertsCommand, Command};
use stateful_admission::telemetry::{self, LogFormat};

// jemalloc, returning freed memory to the system (see the module).
stateful_admission::global_allocator!();

fn main() -> ExitCode {
    let cli = cli::parse();
    match cli.command {
        Command::Serve(args) => cli::serve::run(*args),
        Command::Review(args) => cli::review::run(args),
        Command::Certs(CertsCommand::Generate(args)) => cli::certs::generate(args),
        Command::Check(args) => cli::check::run(args),
        Command::Status(args) => status(args),
        Command::Gitops(args) => {
            use std::io::Write;
            let text = stateful_admission::gitops::render(args.snippet);
            let mut out = std::io::stdout().lock();
            match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
                // A reader that went away (`| head`) is not an error of ours.
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                    eprintln!("error: cannot write the output: {e}");
                    ExitCode::FAILURE
                }
                _ => ExitCode::SUCCESS,
            }
        }
    }
}

fn status(args: stateful_admission::status::Args) -> ExitCode {
    // Every outcome is said in a line of its own; the client's error lines (one per 5xx or
    // connection failure, while --wait retries) would only repeat them. RUST_LOG turns them on.
    telemetry::init(LogFormat::Text, "off");
    match tokio::runtime::Runtime::new() {
        Ok(runtime) => ExitCode::from(runtime.block_on(stateful_admission::status::run(args))),
        Err(error) => {
            eprintln!("error: cannot start the runtime: {error}");
            ExitCode::from(2)
        }
    }
}
