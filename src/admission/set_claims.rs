//! The link between a StatefulSet and its claims: the StatefulSet controller names the claim
//! of template `T` for replica `N` of set `S` as `T-S-N` (upstream `getPersistentVolumeClaimName`),
//! and the webhook records the desired templates in an annotation of the set.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;

use crate::cluster::ClusterView;
use crate::names;

/// `<template>-<set>-<ordinal>`.
pub(crate) fn claim_name(template: &str, set: &str, ordinal: u32) -> String {
    format!("{template}-{set}-{ordinal}")
}

/// A claim name resolved to the set, template and ordinal it belongs to.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SetClaim {
    pub set: std::sync::Arc<StatefulSet>,
    pub template: String,
    pub ordinal: u32,
}

/// Every `(template, set, ordinal)` that could have produced the claim name `claim`. Names
/// are ambiguous (`a-b-c-0` is template `a` of set `b-c`, or template `a-b` of set `c`), so
/// every split is returned; only a set that really has such a template is the owner.
pub(crate) fn candidates(claim: &str) -> Vec<(&str, &str, u32)> {
    let Some((prefix, ordinal)) = claim.rsplit_once('-') else {
        return Vec::new();
    };
    if ordinal.is_empty() || !ordinal.bytes().all(|b| b.is_ascii_digit()) {
        return Vec::new();
    }
    // A leading zero never comes out of the controller's %d formatting.
    if ordinal.len() > 1 && ordinal.starts_with('0') {
        return Vec::new();
    }
    let Ok(ordinal) = ordinal.parse::<u32>() else {
        return Vec::new();
    };
    prefix
        .match_indices('-')
        .map(|(i, _)| (&prefix[..i], &prefix[i + 1..], ordinal))
        .filter(|(t, s, _)| !t.is_empty() && !s.is_empty())
        .collect()
}

/// Finds the StatefulSet in the view whose template would produce `claim` in `namespace`.
pub(crate) fn resolve(view: &ClusterView, namespace: &str, claim: &str) -> Option<SetClaim> {
    candidates(claim)
        .into_iter()
        .find_map(|(template, set_name, ordinal)| {
            let set = view.stateful_set(namespace, set_name)?;
            let has_template = set.spec.volume_claim_templates.as_ref().is_some_and(|ts| {
                ts.iter()
                    .any(|t| t.metadata.name.as_deref() == Some(template))
            });
            has_template.then(|| SetClaim {
                set,
                template: template.to_owned(),
                ordinal,
            })
        })
}

/// The desired templates recorded on a set, if any: `None` without the annotation, an error
/// when it does not parse as a JSON array of claims.
pub(crate) fn desired_templates(
    annotations: Option<&BTreeMap<String, String>>,
) -> Option<Result<Vec<PersistentVolumeClaim>, serde_json::Error>> {
    let raw = annotations?.get(names::DESIRED_VOLUME_CLAIM_TEMPLATES)?;
    Some(serde_json::from_str(raw))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn set(name: &str, templates: &[&str]) -> serde_json::Value {
        let templates: Vec<_> = templates
            .iter()
            .map(|t| json!({"metadata": {"name": t}, "spec": {}}))
            .collect();
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
               "metadata": {"name": name, "namespace": "db"},
               "spec": {"selector": {}, "serviceName": name, "template": {}, "volumeClaimTemplates": templates}})
    }

    #[test]
    fn claim_names_resolve_to_their_set_even_with_dashes() {
        let view = ClusterView::from_json(&[set("web", &["data"]), set("my-db", &["wal-log"])])
            .expect("objects");
        let hit = resolve(&view, "db", "data-web-3").expect("resolves");
        assert_eq!((hit.template.as_str(), hit.ordinal), ("data", 3));
        let hit = resolve(&view, "db", "wal-log-my-db-0").expect("resolves");
        assert_eq!(hit.set.metadata.name.as_deref(), Some("my-db"));
        assert_eq!(hit.template, "wal-log");
        for miss in [
            "data-web",
            "data-web-x",
            "data-web-01",
            "logs-web-0",
            "data-web-0-0",
            "data-other-0",
        ] {
            assert!(resolve(&view, "db", miss).is_none(), "{miss}");
        }
        assert!(resolve(&view, "elsewhere", "data-web-0").is_none());
        assert_eq!(claim_name("data", "web", 2), "data-web-2");
    }
}
