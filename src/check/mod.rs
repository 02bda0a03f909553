//! `stateful-admission check`: verifies an install from outside, as a user with a kubeconfig
//! would. [`gather`] fetches what the checks look at (thin: API calls only); [`judge`] turns
//! it into one [`Check`] per line (pure, testable with plain JSON); [`versions`] knows which
//! proposals each Kubernetes version implements natively.

pub mod gather;
pub(crate) mod judge;
pub mod versions;

use serde::Serialize;

/// Where troubleshooting starts; every hint links an anchor of docs/runbooks.md.
pub const RUNBOOKS: &str = "docs/runbooks.md";

/// The outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Warning,
    Failed,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Warning => "warning",
            Self::Failed => "failed",
        }
    }
}

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// What was checked, e.g. `mutating webhook configuration`.
    pub name: String,
    pub status: Status,
    /// What was found.
    pub message: String,
    /// What to do, with a runbook link; empty when nothing is to be done.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub hint: String,
}

impl Check {
    pub fn ok(name: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(name, Status::Ok, message, "")
    }

    pub fn warning(
        name: impl Into<String>,
        message: impl Into<String>,
        hint: impl Into<String>,
    ) -> Self {
        Self::new(name, Status::Warning, message, hint)
    }

    pub fn failed(
        name: impl Into<String>,
        message: impl Into<String>,
        hint: impl Into<String>,
    ) -> Self {
        Self::new(name, Status::Failed, message, hint)
    }

    fn new(
        name: impl Into<String>,
        status: Status,
        message: impl Into<String>,
        hint: impl Into<String>,
    ) -> Self {
        Self {
            name: name.into(),
            status,
            message: message.into(),
            hint: hint.into(),
        }
    }
}

/// A link to a section of the runbooks.
pub fn runbook(anchor: &str) -> String {
    format!("{RUNBOOKS}#{anchor}")
}

/// The name of the check that fails when the cluster cannot be reached at all.
pub const CLUSTER_CONNECTION: &str = "cluster connection";

/// Every check of one run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    pub checks: Vec<Check>,
}

impl Report {
    /// The report of a run that found no cluster to check: one failed `cluster connection`
    /// line, so that `--output json` is JSON in this outcome too.
    pub fn without_cluster(error: impl Into<String>) -> Self {
        Self {
            checks: vec![Check::failed(
                CLUSTER_CONNECTION,
                error,
                format!(
                    "set KUBECONFIG or pass --context, see {}",
                    runbook("check-cannot-reach-the-cluster")
                ),
            )],
        }
    }

    /// Whether any check failed; warnings do not fail.
    pub fn failed(&self) -> bool {
        self.checks.iter().any(|c| c.status == Status::Failed)
    }

    /// One line per check: `ok|warning|failed  name: message (hint)`.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for check in &self.checks {
            out.push_str(&format!(
                "{:<8} {}: {}",
                check.status.as_str(),
                check.name,
                check.message
            ));
            if !check.hint.is_empty() {
                out.push_str(&format!(" -> {}", check.hint));
            }
            out.push('\n');
        }
        let count = |s: Status| self.checks.iter().filter(|c| c.status == s).count();
        out.push_str(&format!(
            "{} ok, {} warnings, {} failed\n",
            count(Status::Ok),
            count(Status::Warning),
            count(Status::Failed)
        ));
        out
    }
}

/// The names of one release's objects, as the chart makes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    /// The release namespace.
    pub namespace: String,
    /// The chart's full name (`sa.fullname`): the Service, both webhook configurations, the
    /// ServiceAccount and the Deployment are called so.
    pub fullname: String,
    /// The Service port the webhook configurations name (chart value `service.port`).
    pub service_port: i32,
    /// The Lease of the controller.
    pub lease: String,
    /// The Secrets that may hold the serving certificate, in the order tried: cert-manager's
    /// `<fullname>-tls`, then the self-managed `<fullname>-certs`.
    pub secrets: Vec<String>,
    /// A namespace the webhooks cover, for the dry-run requests.
    pub probe_namespace: String,
}

impl Release {
    /// The names the chart gives a release called `release` (chart name
    /// `stateful-admission`, no overrides): the release name itself when it contains the chart
    /// name, else `<release>-stateful-admission`, cut to 63 characters.
    pub fn of(release: &str, namespace: &str) -> Self {
        const CHART: &str = "stateful-admission";
        let fullname = if release.contains(CHART) {
            release.to_owned()
        } else {
            format!("{release}-{CHART}")
        };
        let fullname: String = fullname.chars().take(63).collect();
        let fullname = fullname.trim_end_matches('-').to_owned();
        Self {
            namespace: namespace.to_owned(),
            service_port: 443,
            lease: format!("{fullname}-leader"),
            secrets: vec![format!("{fullname}-tls"), format!("{fullname}-certs")],
            probe_namespace: "default".to_owned(),
            fullname,
        }
    }

    /// The ServiceAccount the pods run as, as an impersonated user.
    pub fn service_account_user(&self) -> String {
        format!("system:serviceaccount:{}:{}", self.namespace, self.fullname)
    }
}
