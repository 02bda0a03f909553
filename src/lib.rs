//! stateful-admission: an admission webhook and companion controller that bring StatefulSet
//! and storage enhancement proposals (KEP-4650, KEP-961, KEP-3333, KEP-284, KEP-2804) to
//! clusters running a stock kube-apiserver.
//!
//! Pure core, thin shell: [`admission`] holds the rules as plain functions over a read-only
//! [`cluster::ClusterView`]; [`server`] and the command line only wire them up.

#![warn(unreachable_pub)]

pub mod admission;
pub mod allocator;
pub(crate) mod backoff;
pub mod capabilities;
pub mod certs;
pub mod check;
pub mod cli;
pub mod cluster;
pub mod connect;
pub mod controller;
pub mod field_manager;
pub mod gitops;
pub mod health;
pub mod names;
pub mod quantity;
pub mod review;
pub mod rollout;
pub mod serve;
pub mod server;
pub mod status;
pub mod telemetry;
pub(crate) mod text;
pub mod write_limit;

/// The direction of the arrows between modules (README "Code layout"), read from the sources.
#[cfg(test)]
mod layout_tests {
    use std::path::{Path, PathBuf};

    fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
        let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                sources(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    /// The lines of the sources under `src/<dir>` that name one of `forbidden`.
    fn offending(dir: &str, forbidden: &[&str]) -> Vec<String> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(dir);
        let mut files = Vec::new();
        sources(&root, &mut files);
        assert!(!files.is_empty(), "no sources under {}", root.display());
        let mut found = Vec::new();
        for file in files {
            let text = std::fs::read_to_string(&file).expect("source");
            for (n, line) in text.lines().enumerate() {
                if forbidden.iter().any(|f| line.contains(f)) {
                    found.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
                }
            }
        }
        found
    }

    #[test]
    fn status_and_check_never_import_the_controller() {
        for dir in ["status", "check"] {
            let found = offending(dir, &["crate::controller", "super::controller"]);
            assert!(
                found.is_empty(),
                "{dir} reaches into the controller:\n{}",
                found.join("\n")
            );
        }
    }

    #[test]
    fn the_rollout_model_stays_pure() {
        let found = offending(
            "rollout",
            &[
                "use crate::controller",
                "crate::controller::",
                "prometheus_client",
                "tokio",
                "kube::Client",
                "Mutex",
            ],
        );
        assert!(
            found.is_empty(),
            "the rollout model is not pure:\n{}",
            found.join("\n")
        );
    }
}
