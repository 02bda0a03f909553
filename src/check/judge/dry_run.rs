//! The dry-run requests: whether the apiserver reached the webhook through its Service, and
//! what the rules did to a StatefulSet, a template edit and a claim.

use super::*;

/// What the dry-run requests showed about the apiserver → Service → pod path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PathProof {
    /// A response carried our mutation or warning: the apiserver called the webhook and
    /// trusted its certificate.
    Reached,
    NotReached,
}

/// Why the webhooks never see requests in the probe namespace, if they do not: the chart
/// excludes kube-system, the release namespace and namespaces labelled
/// `stateful-admission.io/ignore: "true"` (the server allows those unchanged as well).
pub(crate) fn probe_namespace_excluded(
    release: &Release,
    labels: Option<&std::collections::BTreeMap<String, String>>,
) -> Option<Check> {
    let namespace = &release.probe_namespace;
    let why = if namespace == "kube-system" || *namespace == release.namespace {
        "the chart excludes it from both webhooks"
    } else if labels
        .and_then(|l| l.get(names::IGNORE_LABEL))
        .is_some_and(|v| v == "true")
    {
        "it is labelled stateful-admission.io/ignore=true"
    } else {
        return None;
    };
    Some(Check::warning(
        "dry-run requests",
        format!("skipped: the webhooks never see namespace {namespace:?}: {why}"),
        "name a namespace the webhooks cover with --probe-namespace",
    ))
}

/// A dry-run StatefulSet create carrying `max-unavailable` above its replicas: the
/// mutating webhook warns (or, with `--strict-max-unavailable`, denies) naming the annotation.
/// `outcome` is the created object and the warnings, or the error message.
pub(crate) fn statefulset_dry_run(outcome: &Result<Vec<String>, String>) -> (Check, PathProof) {
    let name = "dry-run StatefulSet create";
    let ours =
        |text: &str| text.contains(names::MAX_UNAVAILABLE) || text.contains("maxUnavailable");
    match outcome {
        Ok(warnings) => match warnings.iter().find(|w| ours(w)) {
            Some(warning) => (
                Check::ok(
                    name,
                    format!("the webhook answered with its warning: {warning}"),
                ),
                PathProof::Reached,
            ),
            None => (
                Check::failed(
                    name,
                    "the apiserver accepted the dry run without the webhook's warning: the webhook was not called or its call failed (failurePolicy Ignore hides that)",
                    format!(
                        "check the Service, its endpoints and the caBundle, see {} and {}",
                        runbook("timeouts-context-deadline-exceeded"),
                        runbook("noticing-that-the-webhook-is-down")
                    ),
                ),
                PathProof::NotReached,
            ),
        },
        Err(message) if message.contains("denied the request") && ours(message) => (
            Check::ok(
                name,
                format!("the webhook denied it as its rules say: {message}"),
            ),
            PathProof::Reached,
        ),
        Err(message) => (
            Check::failed(
                name,
                format!("the dry run failed: {message}"),
                format!(
                    "an x509 or timeout error names the cause, see {}",
                    runbook("troubleshooting-by-symptom")
                ),
            ),
            PathProof::NotReached,
        ),
    }
}

/// A dry-run edit of an existing set's volumeClaimTemplates: which set, and the object as it
/// would be stored with the warnings, or the apiserver's message.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TemplateEdit {
    pub name: String,
    pub outcome: Result<(Value, Vec<String>), String>,
}

/// The template edit is allowed because the mutating webhook records it and puts the live
/// templates back; without the webhook the apiserver refuses it (`spec: Forbidden`).
/// `None`: no set with templates in `namespace` to try it on.
pub(crate) fn template_edit_dry_run(
    namespace: &str,
    edit: &Option<TemplateEdit>,
) -> (Check, PathProof) {
    let name = "dry-run StatefulSet template edit";
    let Some(edit) = edit else {
        return (
            Check::ok(
                name,
                format!(
                    "skipped: no StatefulSet with volumeClaimTemplates in {namespace:?} to try an edit on (--probe-namespace)"
                ),
            ),
            PathProof::NotReached,
        );
    };
    let set = &edit.name;
    match &edit.outcome {
        Ok((object, warnings)) => {
            let recorded = object
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(names::DESIRED_VOLUME_CLAIM_TEMPLATES))
                .is_some();
            let warned = warnings
                .iter()
                .any(|w| w.contains(names::DESIRED_VOLUME_CLAIM_TEMPLATES));
            if recorded && warned {
                (
                    Check::ok(
                        name,
                        format!(
                            "a label added to a template of StatefulSet {set:?} was recorded in {} with the webhook's warning",
                            names::DESIRED_VOLUME_CLAIM_TEMPLATES
                        ),
                    ),
                    PathProof::Reached,
                )
            } else {
                (
                    Check::failed(
                        name,
                        format!(
                            "the edit of StatefulSet {set:?} came back without the webhook's record or warning"
                        ),
                        format!("see {}", runbook("noticing-that-the-webhook-is-down")),
                    ),
                    PathProof::NotReached,
                )
            }
        }
        Err(message)
            if message.contains("updates to statefulset spec")
                || (message.contains("Forbidden") && message.contains("volumeClaimTemplates")) =>
        {
            (
                Check::failed(
                    name,
                    format!(
                        "the apiserver refused the edit of StatefulSet {set:?} itself: the mutating webhook did not run ({message})"
                    ),
                    format!(
                        "check the Service, its endpoints and the caBundle, see {}",
                        runbook("noticing-that-the-webhook-is-down")
                    ),
                ),
                PathProof::NotReached,
            )
        }
        Err(message) => (
            Check::failed(
                name,
                format!("the dry-run edit of StatefulSet {set:?} failed: {message}"),
                format!("see {}", runbook("troubleshooting-by-symptom")),
            ),
            PathProof::NotReached,
        ),
    }
}

/// A dry-run create of a claim without `storageClassName`: the class it comes back with.
/// The built-in DefaultStorageClass plugin may have set it before our webhook, so a class
/// alone proves nothing about the path (the StatefulSet check does); no class where a
/// default exists does show a missing mutation.
pub(crate) fn claim_dry_run(outcome: &Result<Value, String>, default_class: Option<&str>) -> Check {
    let name = "dry-run PersistentVolumeClaim create";
    match (outcome, default_class) {
        (Err(message), _) => Check::failed(
            name,
            format!("the dry run failed: {message}"),
            format!("see {}", runbook("troubleshooting-by-symptom")),
        ),
        (Ok(claim), default) => {
            let class = claim
                .pointer("/spec/storageClassName")
                .and_then(Value::as_str);
            match (class, default) {
                (Some(class), _) => Check::ok(
                    name,
                    format!("a claim without a class is created with class {class:?}"),
                ),
                (None, Some(default)) => Check::failed(
                    name,
                    format!(
                        "a claim without a class came back without one, though {default:?} is the default"
                    ),
                    format!(
                        "the mutating webhook did not run, see {}",
                        runbook("noticing-that-the-webhook-is-down")
                    ),
                ),
                (None, None) => Check::warning(
                    name,
                    "no default StorageClass (cluster or namespace): claims without a class stay without one",
                    "mark a StorageClass as default, or annotate the namespace with stateful-admission.io/default-storage-class",
                ),
            }
        }
    }
}
