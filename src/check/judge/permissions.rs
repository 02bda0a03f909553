//! The release's permissions, and the features they allow.

use super::*;

/// One access the ServiceAccount needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Access {
    /// The feature that needs it.
    pub feature: &'static str,
    pub verb: &'static str,
    pub group: &'static str,
    pub resource: &'static str,
    /// Namespaced to the release namespace; cluster-wide otherwise.
    pub in_release_namespace: bool,
    /// The one object the need is about, where the chart grants it by `resourceNames`.
    pub name: Option<String>,
}

/// The switches of `serve` that change what the ServiceAccount needs (all on by default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Features {
    pub controller: bool,
    pub claim_rollout: bool,
    pub converge: bool,
    pub retroactive_default_class: bool,
    pub conditions: bool,
    pub max_unavailable: bool,
    /// `--self-managed-certs`: the certificate Secret and both webhook configurations are
    /// written by the binary, each by name.
    pub self_managed_certs: bool,
    /// `--lease-name`, `--cert-secret`, `--mutating-webhook-configuration`,
    /// `--validating-webhook-configuration` where the Deployment sets them.
    pub lease: Option<String>,
    pub cert_secret: Option<String>,
    pub mutating_webhook: Option<String>,
    pub validating_webhook: Option<String>,
    /// The pods' ServiceAccount (chart value `serviceAccount.name`), where the Deployment
    /// names one.
    pub service_account: Option<String>,
    /// The port of `/readyz` (`--probe-addr`), and the Deployment's pod selector.
    pub probe_port: u16,
    pub selector: Option<String>,
}

impl Default for Features {
    fn default() -> Self {
        Self {
            controller: true,
            claim_rollout: true,
            converge: true,
            retroactive_default_class: true,
            conditions: true,
            max_unavailable: true,
            self_managed_certs: false,
            lease: None,
            cert_secret: None,
            mutating_webhook: None,
            validating_webhook: None,
            service_account: None,
            probe_port: 8080,
            selector: None,
        }
    }
}

impl Features {
    /// The switches as the Deployment's container arguments set them (`--converge=false`).
    pub(crate) fn from_args(args: &[String]) -> Self {
        let off = |flag: &str| args.iter().any(|a| a == &format!("--{flag}=false"));
        let value = |flag: &str| {
            let prefix = format!("--{flag}=");
            args.iter()
                .find_map(|a| a.strip_prefix(&prefix))
                .filter(|v| !v.is_empty())
                .map(str::to_owned)
        };
        let controller = !off("controller");
        Self {
            controller,
            claim_rollout: controller && !off("claim-rollout"),
            converge: controller && !off("converge"),
            retroactive_default_class: controller && !off("retroactive-default-class"),
            conditions: controller && !off("statefulset-conditions"),
            max_unavailable: controller && !off("max-unavailable-driver"),
            self_managed_certs: args
                .iter()
                .any(|a| a == "--self-managed-certs" || a == "--self-managed-certs=true"),
            lease: value("lease-name"),
            cert_secret: value("cert-secret"),
            mutating_webhook: value("mutating-webhook-configuration"),
            validating_webhook: value("validating-webhook-configuration"),
            service_account: None,
            probe_port: value("probe-addr")
                .and_then(|a| a.rsplit(':').next().and_then(|p| p.parse().ok()))
                .unwrap_or(8080),
            selector: None,
        }
    }

    /// What the chart grants for these switches (templates/rbac.yaml), one need per line;
    /// `release` names the objects granted by name where the Deployment does not.
    pub(crate) fn needs(&self, release: &super::Release) -> Vec<Access> {
        let a = |feature, verb, group, resource, in_release_namespace| Access {
            feature,
            verb,
            group,
            resource,
            in_release_namespace,
            name: None,
        };
        let named = |access: Access, name: &str| Access {
            name: Some(name.to_owned()),
            ..access
        };
        let mut needs = Vec::new();
        for (group, resource) in [
            ("", "namespaces"),
            ("storage.k8s.io", "storageclasses"),
            ("apps", "statefulsets"),
            ("", "persistentvolumeclaims"),
        ] {
            needs.push(a("webhook", "watch", group, resource, false));
        }
        if self.controller {
            let lease = self.lease.as_deref().unwrap_or(&release.lease);
            needs.push(named(
                a(
                    "leader election",
                    "update",
                    "coordination.k8s.io",
                    "leases",
                    true,
                ),
                lease,
            ));
            needs.push(a("controller", "watch", "", "pods", false));
            needs.push(a("controller", "create", "", "events", false));
            // Dry runs only, in the release namespace (the webhooks exclude it).
            needs.push(a(
                "capability probes",
                "create",
                "apps",
                "statefulsets",
                true,
            ));
            needs.push(a(
                "capability probes",
                "create",
                "",
                "persistentvolumeclaims",
                true,
            ));
        }
        if self.claim_rollout || self.retroactive_default_class {
            needs.push(a(
                "claim rollout / retroactive default class",
                "patch",
                "",
                "persistentvolumeclaims",
                false,
            ));
        }
        if self.claim_rollout {
            needs.push(a(
                "pod restarts for offline expansion",
                "create",
                "",
                "pods/eviction",
                false,
            ));
        }
        if self.claim_rollout || self.converge || self.conditions {
            needs.push(a(
                "convergence / conditions",
                "patch",
                "apps",
                "statefulsets",
                false,
            ));
        }
        if self.converge {
            needs.push(a("convergence", "delete", "apps", "statefulsets", false));
            needs.push(a("convergence", "create", "", "configmaps", true));
        }
        if self.claim_rollout || self.converge {
            needs.push(a("convergence", "create", "apps", "statefulsets", false));
        }
        if self.conditions {
            needs.push(a(
                "conditions",
                "patch",
                "apps",
                "statefulsets/status",
                false,
            ));
        }
        if self.max_unavailable {
            needs.push(a("maxUnavailable driver", "delete", "", "pods", false));
        }
        if self.self_managed_certs {
            let secret = self
                .cert_secret
                .clone()
                .unwrap_or_else(|| format!("{}-certs", release.fullname));
            needs.push(named(
                a("self-managed certificates", "update", "", "secrets", true),
                &secret,
            ));
            for (resource, configured) in [
                ("mutatingwebhookconfigurations", &self.mutating_webhook),
                ("validatingwebhookconfigurations", &self.validating_webhook),
            ] {
                if let Some(name) = configured {
                    needs.push(named(
                        a(
                            "self-managed certificates",
                            "patch",
                            "admissionregistration.k8s.io",
                            resource,
                            false,
                        ),
                        name,
                    ));
                }
            }
        }
        needs
    }
}

/// The answers of the SelfSubjectAccessReviews made as the ServiceAccount, one per need
/// (`Ok(allowed)`), or why impersonation was refused.
pub(crate) fn permissions(
    service_account: &str,
    answers: &Result<Vec<(Access, bool)>, String>,
) -> Check {
    let name = "service account permissions";
    let answers = match answers {
        Ok(answers) => answers,
        Err(why) => {
            return Check::warning(
                name,
                format!("could not ask as {service_account}: {why}"),
                "run check as a user allowed to impersonate service accounts (cluster-admin) to verify the RBAC",
            );
        }
    };
    let denied: Vec<String> = answers
        .iter()
        .filter(|(_, allowed)| !allowed)
        .map(|(a, _)| {
            let resource = if a.group.is_empty() {
                a.resource.to_owned()
            } else {
                format!("{}.{}", a.resource, a.group)
            };
            match &a.name {
                Some(name) => format!("{} {resource} {name:?} (for {})", a.verb, a.feature),
                None => format!("{} {resource} (for {})", a.verb, a.feature),
            }
        })
        .collect();
    if denied.is_empty() {
        Check::ok(
            name,
            format!(
                "{service_account} may do all {} things its features need",
                answers.len()
            ),
        )
    } else {
        Check::failed(
            name,
            format!("{service_account} may not {}", denied.join(", ")),
            format!(
                "upgrade the release so its RBAC matches its features, or turn the feature off, see {}",
                runbook("which-of-our-features-to-turn-off-there")
            ),
        )
    }
}
