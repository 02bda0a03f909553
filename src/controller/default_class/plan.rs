//! What to do with one claim: pure, from the claim, the view of classes and namespaces, and
//! what the controller remembers about earlier attempts on it.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use serde_json::{Value, json};

use crate::admission::claim::default_class::{DefaultClass, pick_default_class};
use crate::cluster::ClusterView;

/// Why a claim is left alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Leave {
    /// Not classless, unbound and alive (see [`qualifies`]).
    NotCandidate,
    /// Its namespace opted out (`stateful-admission.io/ignore: "true"`).
    IgnoredNamespace,
    /// Its namespace is not in the cache yet (that watch lags behind the claim's): acting now
    /// could miss an opt-out; the namespace's arrival brings the claim back.
    NamespaceNotCached,
    /// No default for its namespace (yet): a class or namespace change brings it back.
    NoDefault,
    /// This very version was tried already (rejected, conflicted or patched): only a
    /// change to the claim makes it worth another request.
    AlreadyTried,
}

/// The decision for one claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Plan {
    Leave(Leave),
    /// Set `spec.storageClassName` to `class`, provided the claim is still at
    /// `resource_version`.
    Assign {
        class: DefaultClass,
        resource_version: String,
    },
}

/// Whether a claim asks for the default class and may still get one (see
/// [`takes_default_class`](crate::capabilities::judge::takes_default_class)).
pub(crate) fn qualifies(claim: &PersistentVolumeClaim) -> bool {
    crate::capabilities::judge::takes_default_class(claim)
}

/// Decides for `claim`; `tried` is the resourceVersion of the last attempt on it, if any.
pub(crate) fn plan(claim: &PersistentVolumeClaim, view: &ClusterView, tried: Option<&str>) -> Plan {
    if !qualifies(claim) {
        return Plan::Leave(Leave::NotCandidate);
    }
    let namespace = claim.metadata.namespace.as_deref().unwrap_or("");
    if view.namespace(namespace).is_none() {
        return Plan::Leave(Leave::NamespaceNotCached);
    }
    if view.namespace_ignored(namespace) {
        return Plan::Leave(Leave::IgnoredNamespace);
    }
    let Some(resource_version) = claim.metadata.resource_version.clone() else {
        // Without a version there is no safe precondition.
        return Plan::Leave(Leave::NotCandidate);
    };
    if tried == Some(resource_version.as_str()) {
        return Plan::Leave(Leave::AlreadyTried);
    }
    match pick_default_class(view, namespace) {
        Some(class) => Plan::Assign {
            class,
            resource_version,
        },
        None => Plan::Leave(Leave::NoDefault),
    }
}

/// The merge patch of an assignment: the resourceVersion in the body is a precondition
/// (409 Conflict when the claim moved), so a claim bound or given a class meanwhile is
/// never changed.
pub(crate) fn patch_body(class: &str, resource_version: &str) -> Value {
    json!({
        "metadata": {"resourceVersion": resource_version},
        "spec": {"storageClassName": class},
    })
}

/// How an attempt ended, from the API's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Assigned,
    /// 409: the claim changed since it was read; its watch event brings it back.
    Conflict,
    /// 404: the claim is gone.
    Gone,
    /// The apiserver refused this change for good: typically it forbids setting a class on
    /// a classless claim (before Kubernetes 1.25, KEP-3333), or a policy denies it. Reported
    /// once, retried only when the claim changes.
    Rejected,
    /// Anything else (unavailable, timeouts): retried soon.
    Transient,
}

/// Classifies an API error of the assignment patch.
pub(crate) fn classify(code: u16) -> Outcome {
    match code {
        409 => Outcome::Conflict,
        404 => Outcome::Gone,
        // Throttling is worth another try; any other client error would repeat itself.
        429 => Outcome::Transient,
        400..=499 => Outcome::Rejected,
        _ => Outcome::Transient,
    }
}

/// Whether a refusal is the pre-1.25 validation (core/validation
/// `ValidatePersistentVolumeClaimUpdate` before KEP-3333: "spec: Forbidden: spec is
/// immutable after creation ...").
pub(crate) fn is_old_apiserver_refusal(message: &str) -> bool {
    message.contains("spec is immutable after creation")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::claim::default_class::DefaultSource;

    fn claim(spec: Value, status: Value, annotations: Value) -> PersistentVolumeClaim {
        serde_json::from_value(json!({
            "metadata": {"name": "data", "namespace": "team", "resourceVersion": "7",
                         "uid": "u-1", "annotations": annotations},
            "spec": spec,
            "status": status,
        }))
        .expect("a claim")
    }

    fn pending(spec: Value) -> PersistentVolumeClaim {
        claim(spec, json!({"phase": "Pending"}), json!({}))
    }

    fn class(name: &str, created: &str, default: bool) -> Value {
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "provisioner": "p",
               "metadata": {"name": name, "creationTimestamp": created, "annotations":
                 {"storageclass.kubernetes.io/is-default-class": if default {"true"} else {"false"}}}})
    }

    fn namespace(name: &str, default: Option<&str>, ignored: bool) -> Value {
        let mut ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        if let Some(d) = default {
            ns["metadata"]["annotations"] =
                json!({"stateful-admission.io/default-storage-class": d});
        }
        if ignored {
            ns["metadata"]["labels"] = json!({"stateful-admission.io/ignore": "true"});
        }
        ns
    }

    fn view(objects: &[Value]) -> ClusterView {
        ClusterView::from_json(objects).expect("a view")
    }

    fn assign(name: &str, source: DefaultSource) -> Plan {
        Plan::Assign {
            class: DefaultClass {
                name: name.to_owned(),
                source,
            },
            resource_version: "7".to_owned(),
        }
    }

    #[test]
    fn candidates_are_classless_unbound_and_alive() {
        let deleting = {
            let mut c = pending(json!({}));
            c.metadata.deletion_timestamp = Some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
            );
            c
        };
        let cases: [(&str, PersistentVolumeClaim, bool); 9] = [
            ("classless pending claim", pending(json!({})), true),
            (
                "classless claim with no status",
                claim(json!({}), json!({}), json!({})),
                true,
            ),
            (
                "class set",
                pending(json!({"storageClassName": "gold"})),
                false,
            ),
            (
                "empty class is a choice",
                pending(json!({"storageClassName": ""})),
                false,
            ),
            (
                "beta annotation",
                claim(
                    json!({}),
                    json!({"phase": "Pending"}),
                    json!({"volume.beta.kubernetes.io/storage-class": "gold"}),
                ),
                false,
            ),
            (
                "pre-bound to a volume",
                pending(json!({"volumeName": "pv-1"})),
                false,
            ),
            (
                "empty volumeName is unset",
                pending(json!({"volumeName": ""})),
                true,
            ),
            (
                "bound",
                claim(json!({}), json!({"phase": "Bound"}), json!({})),
                false,
            ),
            ("being deleted", deleting, false),
        ];
        for (name, claim, expected) in cases {
            assert_eq!(qualifies(&claim), expected, "{name}");
        }
    }

    #[test]
    fn plans_follow_the_admission_rule_pick() {
        let old = class("old", "2024-01-01T00:00:00Z", true);
        let new = class("new", "2024-06-01T00:00:00Z", true);
        let tie_b = class("b-class", "2024-06-01T00:00:00Z", true);
        let tie_a = class("a-class", "2024-06-01T00:00:00Z", true);
        let plain = class("plain", "2025-01-01T00:00:00Z", false);
        // (behaviour, cluster objects, claim, version tried before, plan)
        type Case<'a> = (
            &'a str,
            Vec<Value>,
            PersistentVolumeClaim,
            Option<&'a str>,
            Plan,
        );
        let cases: Vec<Case> = vec![
            (
                "no class at all",
                vec![],
                pending(json!({})),
                None,
                Plan::Leave(Leave::NoDefault),
            ),
            (
                "only a non-default class",
                vec![plain.clone()],
                pending(json!({})),
                None,
                Plan::Leave(Leave::NoDefault),
            ),
            (
                "one default",
                vec![old.clone(), plain.clone()],
                pending(json!({})),
                None,
                assign("old", DefaultSource::Cluster),
            ),
            (
                "two defaults: newest wins",
                vec![old.clone(), new.clone()],
                pending(json!({})),
                None,
                assign("new", DefaultSource::Cluster),
            ),
            (
                "two defaults created together: smallest name",
                vec![tie_b, tie_a],
                pending(json!({})),
                None,
                assign("a-class", DefaultSource::Cluster),
            ),
            (
                "namespace default first",
                vec![
                    old.clone(),
                    plain.clone(),
                    namespace("team", Some("plain"), false),
                ],
                pending(json!({})),
                None,
                assign("plain", DefaultSource::Namespace),
            ),
            (
                "namespace default naming a missing class falls back",
                vec![old.clone(), namespace("team", Some("missing"), false)],
                pending(json!({})),
                None,
                assign("old", DefaultSource::Cluster),
            ),
            (
                "opted-out namespace",
                vec![old.clone(), namespace("team", None, true)],
                pending(json!({})),
                None,
                Plan::Leave(Leave::IgnoredNamespace),
            ),
            (
                "a class is never replaced",
                vec![old.clone()],
                pending(json!({"storageClassName": "x"})),
                None,
                Plan::Leave(Leave::NotCandidate),
            ),
            (
                "bound claim",
                vec![old.clone()],
                claim(json!({}), json!({"phase": "Bound"}), json!({})),
                None,
                Plan::Leave(Leave::NotCandidate),
            ),
            (
                "same version tried before",
                vec![old.clone()],
                pending(json!({})),
                Some("7"),
                Plan::Leave(Leave::AlreadyTried),
            ),
            (
                "claim changed since the last try",
                vec![old.clone()],
                pending(json!({})),
                Some("6"),
                assign("old", DefaultSource::Cluster),
            ),
        ];
        for (name, mut objects, claim, tried, expected) in cases {
            // The claim's namespace is cached unless the case says otherwise.
            if !objects.iter().any(|o| o["kind"] == "Namespace") {
                objects.push(namespace("team", None, false));
            }
            assert_eq!(plan(&claim, &view(&objects), tried), expected, "{name}");
        }
        let uncached = view(&[class("old", "2020-01-01T00:00:00Z", true)]);
        assert_eq!(
            plan(&pending(json!({})), &uncached, None),
            Plan::Leave(Leave::NamespaceNotCached),
            "a namespace the cache has not seen yet"
        );
    }

    #[test]
    fn the_patch_carries_the_version_as_precondition() {
        assert_eq!(
            patch_body("gold", "42"),
            json!({"metadata": {"resourceVersion": "42"}, "spec": {"storageClassName": "gold"}})
        );
    }

    #[test]
    fn api_errors_are_classified() {
        let old_apiserver = "PersistentVolumeClaim \"data\" is invalid: spec: Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims";
        let cases = [
            (409, Outcome::Conflict),
            (404, Outcome::Gone),
            (422, Outcome::Rejected),
            (403, Outcome::Rejected),
            (400, Outcome::Rejected),
            (429, Outcome::Transient),
            (500, Outcome::Transient),
            (503, Outcome::Transient),
        ];
        for (code, expected) in cases {
            assert_eq!(classify(code), expected, "{code}");
        }
        assert!(is_old_apiserver_refusal(old_apiserver));
        assert!(!is_old_apiserver_refusal(
            "admission webhook denied the request"
        ));
    }
}
