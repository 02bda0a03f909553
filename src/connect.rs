//! Finding the cluster: the kubeconfig (`KUBECONFIG` or `~/.kube/config`), else the
//! in-cluster environment, as kube's `Config::infer` does; and, when neither is there, why
//! not in one line. kube's own error nests both causes and repeats the innermost one at
//! every level of its source chain, with the path quoted twice.

use std::error::Error;
use std::fmt;

use kube::config::{InClusterError, KubeConfigOptions, KubeconfigError};

/// Neither a kubeconfig nor an in-cluster environment could be loaded. Its text is one line
/// without the way out, which depends on the command (`serve` has `--state`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoCluster {
    /// Why the kubeconfig could not be used.
    pub kubeconfig: String,
    /// Why the in-cluster environment could not be used; `None` when it was not tried (a
    /// `--context` names a kubeconfig context).
    pub in_cluster: Option<String>,
}

impl fmt::Display for NoCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no cluster configuration: {}", self.kubeconfig)?;
        if let Some(in_cluster) = &self.in_cluster {
            write!(f, ", and {in_cluster}")?;
        }
        Ok(())
    }
}

impl Error for NoCluster {}

/// The configuration `kube::Config::infer` finds, or why there is none.
pub async fn infer() -> Result<kube::Config, NoCluster> {
    match kube::Config::infer().await {
        Ok(config) => Ok(config),
        Err(error) => {
            // The inference error keeps the in-cluster cause private; asking again is cheap
            // (environment variables and two small files) and gives it typed.
            let in_cluster = kube::Config::incluster()
                .err()
                .map(|e| describe_in_cluster(&e))
                .unwrap_or_else(|| one_line(&error));
            let kubeconfig = error
                .source()
                .and_then(|s| s.downcast_ref::<KubeconfigError>())
                .map(describe_kubeconfig)
                .unwrap_or_else(|| one_line(&error));
            Err(NoCluster {
                kubeconfig,
                in_cluster: Some(in_cluster),
            })
        }
    }
}

/// The configuration of one kubeconfig context.
pub async fn from_context(context: &str) -> Result<kube::Config, NoCluster> {
    let options = KubeConfigOptions {
        context: Some(context.to_owned()),
        ..KubeConfigOptions::default()
    };
    kube::Config::from_kubeconfig(&options)
        .await
        .map_err(|e| NoCluster {
            kubeconfig: describe_kubeconfig(&e),
            in_cluster: None,
        })
}

/// Why the kubeconfig could not be used, naming its path once, unquoted inside quotes.
pub fn describe_kubeconfig(error: &KubeconfigError) -> String {
    match error {
        KubeconfigError::ReadConfig(io, path) => {
            format!("cannot read the kubeconfig {}: {io}", quoted(path))
        }
        KubeconfigError::FindPath => {
            "no kubeconfig (KUBECONFIG is not set and there is no home directory)".to_owned()
        }
        other => format!("kubeconfig: {}", one_line(other)),
    }
}

/// Why the process is not running in a cluster, or what is wrong with its environment.
pub fn describe_in_cluster(error: &InClusterError) -> String {
    match error {
        InClusterError::ReadEnvironmentVariable(_) => {
            "not running in a cluster (KUBERNETES_SERVICE_HOST/PORT are not set)".to_owned()
        }
        other => format!("in-cluster: {}", one_line(other)),
    }
}

/// An error and its sources on one line, each cause once: kube's messages embed their
/// source's text, so a source already quoted is left out.
pub fn one_line(error: &(dyn Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

fn quoted(path: &std::path::Path) -> String {
    format!("\"{}\"", path.display())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn not_found() -> std::io::Error {
        std::io::Error::from(std::io::ErrorKind::NotFound)
    }

    #[test]
    fn an_unreadable_kubeconfig_names_its_path_once_in_plain_quotes() {
        let error = KubeconfigError::ReadConfig(not_found(), PathBuf::from("/home/u/.kube/config"));
        let text = describe_kubeconfig(&error);
        assert_eq!(
            text,
            "cannot read the kubeconfig \"/home/u/.kube/config\": entity not found"
        );
        assert_eq!(text.matches("/home/u/.kube/config").count(), 1);
        assert!(!text.contains("'\""), "{text}");
    }

    #[test]
    fn a_missing_in_cluster_environment_is_said_plainly() {
        let error = InClusterError::ReadEnvironmentVariable(std::env::VarError::NotPresent);
        assert_eq!(
            describe_in_cluster(&error),
            "not running in a cluster (KUBERNETES_SERVICE_HOST/PORT are not set)"
        );
    }

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        // kube's ReadFile embeds the io error in its text and has it as its source too.
        let load = kube::config::LoadDataError::ReadFile(not_found(), PathBuf::from("/ca.crt"));
        let error = KubeconfigError::LoadCertificateAuthority(load);
        let text = describe_kubeconfig(&error);
        assert_eq!(text.matches("entity not found").count(), 1, "{text}");
        assert!(
            text.starts_with("kubeconfig: failed to load certificate authority"),
            "{text}"
        );
    }

    #[test]
    fn both_causes_are_joined_into_one_line() {
        let error = NoCluster {
            kubeconfig: "cannot read the kubeconfig \"/k\": gone".to_owned(),
            in_cluster: Some("not running in a cluster".to_owned()),
        };
        assert_eq!(
            error.to_string(),
            "no cluster configuration: cannot read the kubeconfig \"/k\": gone, and not running in a cluster"
        );
        assert!(!error.to_string().contains('\n'));
    }
}
