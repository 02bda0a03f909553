//! StatefulSet CREATE over claims that already exist (a set re-created after an orphan
//! delete, or a name reused): the StatefulSet controller adopts a claim named
//! `<template>-<set>-<ordinal>` as it is, so one whose immutable fields differ from the new
//! template will never match it and can never be updated in place.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use serde_json::Value;

use super::templates::template_name;
use crate::admission::set_claims::claim_name;
use crate::admission::warning::{self, Warning};
use crate::cluster::{ClusterView, Kind};

/// Warnings beyond this many are summed up in one line; a set of 500 replicas must not
/// produce 500 warnings.
pub(crate) const MAX_CLAIM_WARNINGS: usize = 5;

/// Legacy class annotation, still honoured by the volume controller.
const BETA_CLASS_ANNOTATION: &str = "volume.beta.kubernetes.io/storage-class";

/// One warning per existing claim of the new set whose immutable fields differ from its
/// template. Every ordinal is considered (claims beyond `replicas` are adopted on scale-up,
/// and `spec.ordinals.start` may shift them), by scanning the namespace's claims for the
/// exact names the controller would use.
pub(crate) fn existing_claim_warnings(
    view: &ClusterView,
    namespace: &str,
    set: &str,
    templates: &[Value],
) -> Vec<String> {
    if templates.is_empty() {
        return Vec::new();
    }
    // Until the claim list is in, say so rather than say nothing (the verdict does not read
    // claims: readiness does not wait for them).
    if !view.is_synced(Kind::Claim) {
        return Warning::new(format!(
            "existing PersistentVolumeClaims of StatefulSet {} were not checked against its templates",
            warning::cut(set)
        ))
        .fact("the webhook is still loading the cluster's claims")
        .build();
    }
    let mut claims: Vec<(u32, String, std::sync::Arc<PersistentVolumeClaim>)> = Vec::new();
    let names: Vec<&str> = templates.iter().map(template_name).collect();
    let wanted = |claim: &str| names.iter().any(|t| ordinal_of(claim, t, set).is_some());
    for claim in view.claims_in(namespace, wanted) {
        let Some(name) = claim.metadata.name.as_deref() else {
            continue;
        };
        for template in templates {
            let t = template_name(template);
            if let Some(ordinal) = ordinal_of(name, t, set) {
                claims.push((ordinal, t.to_owned(), claim.clone()));
            }
        }
    }
    claims.sort_by(|a, b| (a.1.as_str(), a.0).cmp(&(b.1.as_str(), b.0)));

    let mut warnings = Vec::new();
    let mut more = 0usize;
    for (ordinal, t, claim) in &claims {
        let Some(template) = templates.iter().find(|x| template_name(x) == t) else {
            continue;
        };
        let differing = immutable_differences(template, claim);
        if differing.is_empty() {
            continue;
        }
        if warnings.len() == MAX_CLAIM_WARNINGS {
            more += 1;
            continue;
        }
        let name = claim_name(t, set, *ordinal);
        warnings.extend(
            Warning::new(format!(
                "PersistentVolumeClaim {} already exists",
                warning::cut(&name)
            ))
            .fact(format!(
                "differs from template {} in {}",
                warning::quote_to(t, 63),
                differing.join(", ")
            ))
            .fact("the set will use it as is and never update it in place")
            .build(),
        );
    }
    if more > 0 {
        warnings.push(format!(
            "{more} more existing PersistentVolumeClaims differ from their template in immutable fields"
        ));
    }
    warnings
}

/// The ordinal when `claim` is exactly `claim_name(template, set, n)`.
fn ordinal_of(claim: &str, template: &str, set: &str) -> Option<u32> {
    let rest = claim
        .strip_prefix(template)?
        .strip_prefix('-')?
        .strip_prefix(set)?
        .strip_prefix('-')?;
    let n: u32 = rest.parse().ok()?;
    (claim_name(template, set, n) == claim).then_some(n)
}

/// Names of the immutable fields in which the claim differs from the template. A field the
/// template leaves unset is not compared when the apiserver fills it in on the claim (the
/// class by the default-class admission, the volume mode by defaulting).
pub(crate) fn immutable_differences(
    template: &Value,
    claim: &PersistentVolumeClaim,
) -> Vec<&'static str> {
    let Some(spec) = claim.spec.as_ref() else {
        return Vec::new();
    };
    let t = template.get("spec").unwrap_or(&Value::Null);
    let field = |k: &str| t.get(k).filter(|v| !v.is_null());
    let mut out = Vec::new();

    if let Some(want) = field("storageClassName").and_then(Value::as_str) {
        let have = spec.storage_class_name.as_deref().or_else(|| {
            claim
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(BETA_CLASS_ANNOTATION))
                .map(String::as_str)
        });
        if have != Some(want) {
            out.push("storageClassName");
        }
    }

    let mut want_modes: Vec<&str> = field("accessModes")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut have_modes: Vec<&str> = spec
        .access_modes
        .as_deref()
        .unwrap_or_default()
        .iter()
        .map(String::as_str)
        .collect();
    want_modes.sort_unstable();
    want_modes.dedup();
    have_modes.sort_unstable();
    have_modes.dedup();
    if want_modes != have_modes {
        out.push("accessModes");
    }

    let want_mode = field("volumeMode")
        .and_then(Value::as_str)
        .unwrap_or("Filesystem");
    if spec.volume_mode.as_deref().unwrap_or("Filesystem") != want_mode {
        out.push("volumeMode");
    }

    let have_selector = spec
        .selector
        .as_ref()
        .and_then(|s| serde_json::to_value(s).ok());
    if !same_object(field("selector"), have_selector.as_ref()) {
        out.push("selector");
    }
    let have_source = spec
        .data_source
        .as_ref()
        .and_then(|s| serde_json::to_value(s).ok());
    if !same_object(field("dataSource"), have_source.as_ref()) {
        out.push("dataSource");
    }
    out
}

/// Equal as objects, with an empty object the same as none.
fn same_object(a: Option<&Value>, b: Option<&Value>) -> bool {
    let empty = |v: Option<&Value>| v.is_none_or(|v| v.as_object().is_some_and(|m| m.is_empty()));
    if empty(a) && empty(b) {
        return true;
    }
    a == b
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(name: &str, ns: &str, spec: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
               "metadata": {"name": name, "namespace": ns}, "spec": spec})
    }

    fn template(name: &str, spec: Value) -> Value {
        json!({"metadata": {"name": name}, "spec": spec})
    }

    #[tokio::test]
    async fn claims_not_listed_yet_are_said_not_checked() {
        let mut writers = crate::cluster::ClusterWriters::new();
        let view = writers.view();
        writers.apply_stateful_set(kube::runtime::watcher::Event::Init);
        writers.apply_stateful_set(kube::runtime::watcher::Event::InitDone);
        let template = serde_json::json!({"metadata": {"name": "data"},
            "spec": {"accessModes": ["ReadWriteOnce"]}});
        let warnings = existing_claim_warnings(&view, "db", "web", std::slice::from_ref(&template));
        assert_eq!(
            warnings,
            [
                "existing PersistentVolumeClaims of StatefulSet web were not checked against its templates: the webhook is still loading the cluster's claims"
            ]
        );
        writers.apply_claim(kube::runtime::watcher::Event::Init);
        writers.apply_claim(kube::runtime::watcher::Event::InitDone);
        assert!(existing_claim_warnings(&view, "db", "web", &[template]).is_empty());
    }

    #[test]
    fn existing_claims_with_other_immutable_fields_are_warned_about() {
        let rwo = json!({"accessModes": ["ReadWriteOnce"], "storageClassName": "fast",
                         "resources": {"requests": {"storage": "1Gi"}}});
        let view = ClusterView::from_json(&[
            // Matches the template (size differs: not immutable).
            claim("data-web-0", "db", json!({"accessModes": ["ReadWriteOnce"], "storageClassName": "fast",
                                             "resources": {"requests": {"storage": "9Gi"}}, "volumeMode": "Filesystem"})),
            claim("data-web-1", "db", json!({"accessModes": ["ReadWriteMany"], "storageClassName": "slow"})),
            // Beyond replicas: still adopted on scale-up.
            claim("data-web-7", "db", json!({"accessModes": ["ReadWriteOnce"], "storageClassName": "fast", "volumeMode": "Block"})),
            claim("data-web-2", "other", json!({"accessModes": ["ReadWriteMany"]})),
            claim("data-web-01", "db", json!({"accessModes": ["ReadWriteMany"]})),
            claim("data-webx-1", "db", json!({"accessModes": ["ReadWriteMany"]})),
            claim("data-web-3", "db", json!({"accessModes": ["ReadWriteOnce"], "storageClassName": "fast",
                                             "selector": {"matchLabels": {"a": "b"}},
                                             "dataSource": {"kind": "VolumeSnapshot", "name": "s"}})),
        ])
        .expect("view");
        let warnings = existing_claim_warnings(&view, "db", "web", &[template("data", rwo)]);
        assert_eq!(
            warnings,
            [
                "PersistentVolumeClaim data-web-1 already exists: differs from template \"data\" in storageClassName, accessModes; the set will use it as is and never update it in place",
                "PersistentVolumeClaim data-web-3 already exists: differs from template \"data\" in selector, dataSource; the set will use it as is and never update it in place",
                "PersistentVolumeClaim data-web-7 already exists: differs from template \"data\" in volumeMode; the set will use it as is and never update it in place",
            ]
        );
        assert!(warnings.iter().all(|w| w.chars().count() <= 256));
    }

    #[test]
    fn an_unset_template_class_is_not_compared_and_warnings_are_capped() {
        let objects: Vec<Value> = (0..12)
            .map(|i| {
                claim(
                    &format!("data-web-{i}"),
                    "db",
                    json!({"accessModes": ["ReadWriteMany"], "storageClassName": "std"}),
                )
            })
            .collect();
        let view = ClusterView::from_json(&objects).expect("view");
        let same = template("data", json!({"accessModes": ["ReadWriteMany"]}));
        assert!(existing_claim_warnings(&view, "db", "web", &[same]).is_empty());
        let other = template("data", json!({"accessModes": ["ReadWriteOnce"]}));
        let warnings = existing_claim_warnings(&view, "db", "web", &[other]);
        assert_eq!(warnings.len(), MAX_CLAIM_WARNINGS + 1);
        assert_eq!(
            warnings.last().map(String::as_str),
            Some(
                "7 more existing PersistentVolumeClaims differ from their template in immutable fields"
            )
        );
        assert!(
            existing_claim_warnings(
                &ClusterView::empty(),
                "db",
                "web",
                &[template("data", json!({}))]
            )
            .is_empty()
        );
    }

    #[test]
    fn a_long_claim_name_is_cut_but_every_fact_is_kept() {
        let set = "w".repeat(240);
        let name = format!("data-{set}-0");
        let view = ClusterView::from_json(&[claim(
            &name,
            "db",
            json!({"accessModes": ["ReadWriteMany"], "storageClassName": "slow"}),
        )])
        .expect("view");
        let rwo = json!({"accessModes": ["ReadWriteOnce"], "storageClassName": "fast"});
        let warnings = existing_claim_warnings(&view, "db", &set, &[template("data", rwo)]);
        assert!(
            warnings.iter().all(|w| w.chars().count() <= 256),
            "{warnings:?}"
        );
        let all = warnings.join(" / ");
        assert!(
            all.contains("... (cut from 247 characters) already exists"),
            "{all}"
        );
        assert!(
            all.contains("differs from template \"data\" in storageClassName, accessModes"),
            "{all}"
        );
        assert!(all.contains("never update it in place"), "{all}");
    }

    #[test]
    fn ordinals_are_parsed_exactly() {
        assert_eq!(ordinal_of("data-web-3", "data", "web"), Some(3));
        assert_eq!(ordinal_of("data-web-03", "data", "web"), None);
        assert_eq!(ordinal_of("data-web-+3", "data", "web"), None);
        assert_eq!(ordinal_of("data-web-", "data", "web"), None);
        assert_eq!(ordinal_of("data-my-web-3", "data", "web"), None);
    }
}
