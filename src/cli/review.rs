//! `stateful-admission review`: runs [`crate::review::offline`] and prints its outcome.

use std::io::{Read, Write};
use std::process::ExitCode;

use super::{PatchFormat, PhaseArg, ReviewArgs, Show};
use crate::admission::{Context, Phase};
use crate::cluster::{ClusterView, state_file};
use crate::review::offline::{self, Phases};
use crate::telemetry::{self, LogFormat};

/// `stateful-admission review`: one AdmissionReview evaluated offline as the apiserver would
/// run the webhooks; exit 0 allowed, 1 denied, 2 bad input.
pub fn run(args: ReviewArgs) -> ExitCode {
    telemetry::init(LogFormat::Text, "warn");
    let bad_input = |message: String| {
        eprintln!("error: {message}");
        ExitCode::from(2)
    };
    if args.show == Show::Object {
        if args.patch_given {
            return bad_input(
                "--patch formats the printed review; --show object prints the object instead"
                    .to_owned(),
            );
        }
        if matches!(args.phase, Some(PhaseArg::Validate)) {
            return bad_input(
                "--show object needs the mutating phase: a validating webhook never changes the object"
                    .to_owned(),
            );
        }
    }
    let view = match &args.state {
        Some(path) => match state_file::load(path) {
            Ok(objects) => ClusterView::from_objects(objects),
            Err(e) => return bad_input(e.to_string()),
        },
        None => ClusterView::empty(),
    };
    let mut body = Vec::new();
    let read = if args.review.as_os_str() == "-" {
        std::io::stdin().read_to_end(&mut body).map(|_| ())
    } else {
        std::fs::read(&args.review).map(|b| body = b)
    };
    if let Err(e) = read {
        return bad_input(format!("cannot read {}: {e}", args.review.display()));
    }
    let phases = match args.phase {
        None => Phases::Both,
        Some(PhaseArg::Mutate) => Phases::Only(Phase::Mutate),
        Some(PhaseArg::Validate) => Phases::Only(Phase::Validate),
    };
    let policy = args.policy.policy();
    let ctx = Context {
        view: &view,
        policy: &policy,
    };
    let outcome = match offline::review(&body, phases, &ctx) {
        Ok(outcome) => outcome,
        Err(e) => return bad_input(format!("{}: {e}", args.review.display())),
    };
    if args.state.is_none() {
        // Rules that read cluster state (default classes, expansion limits, a set's stored
        // templates) see nothing, which is easy to mistake for their answer.
        eprintln!(
            "note: no --state given: reviewed against an empty cluster (no StorageClasses, Namespaces, StatefulSets or claims)"
        );
    }
    let allowed = outcome.allowed;
    let printed = match (args.show, args.patch) {
        (Show::Review, PatchFormat::Base64) => outcome.review,
        (Show::Review, PatchFormat::Json) => match outcome.review_with_decoded_patch() {
            Ok(review) => review,
            Err(e) => return bad_input(e),
        },
        (Show::Object, _) if !allowed => {
            // Nothing would be stored; say why, as kubectl would.
            let message = outcome
                .review
                .pointer("/response/status/message")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("denied");
            eprintln!("denied: {message}");
            return ExitCode::from(1);
        }
        (Show::Object, _) => match outcome.object {
            Some(object) => object,
            None => {
                return bad_input(format!(
                    "{}: --show object: the request carries no object (a DELETE or CONNECT)",
                    args.review.display()
                ));
            }
        },
    };
    let text = match serde_json::to_string_pretty(&printed) {
        Ok(text) => text,
        Err(e) => return bad_input(e.to_string()),
    };
    // A reader that stops early (`| head`) is not an error of ours.
    if let Err(e) = writeln!(std::io::stdout().lock(), "{text}")
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        return bad_input(format!("cannot write the output: {e}"));
    }
    if allowed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
