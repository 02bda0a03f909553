//! From the apiserver's answers to values: pure functions over the JSON that discovery,
//! OpenAPI and the dry runs return, so that what real apiservers answered (the captures under
//! `tests/fixtures/apiserver-behaviour/`) is the test.

use serde_json::Value as Json;

use super::{NativeField, StorageVersion, Value};

/// The OpenAPI definitions whose properties tell which fields the apiserver's types have.
pub const STATEFULSET_SPEC: &str = "io.k8s.api.apps.v1.StatefulSetSpec";
pub const ROLLING_UPDATE: &str = "io.k8s.api.apps.v1.RollingUpdateStatefulSetStrategy";
pub const CLAIM_SPEC: &str = "io.k8s.api.core.v1.PersistentVolumeClaimSpec";

/// The property names of `definition` in an OpenAPI document: v3 (`components.schemas`) or
/// v2 (`definitions`). `None` when the document does not define it.
pub fn properties(document: &Json, definition: &str) -> Option<Vec<String>> {
    let schema = document
        .pointer("/components/schemas")
        .and_then(|s| s.get(definition))
        .or_else(|| document.get("definitions").and_then(|d| d.get(definition)))?;
    Some(
        schema
            .get("properties")
            .and_then(Json::as_object)
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default(),
    )
}

/// What the types say of each field the probes look at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fields {
    /// `RollingUpdateStatefulSetStrategy.maxUnavailable` exists (`None`: not read).
    pub max_unavailable: Option<bool>,
    /// `PersistentVolumeClaimSpec.volumeAttributesClassName` exists.
    pub claim_volume_attributes_class: Option<bool>,
    /// The KEP-4650 field of `StatefulSetSpec`, when there is one (`None`: not read).
    pub native_template_field: Option<Option<NativeField>>,
}

impl Fields {
    /// Reads the fields from the OpenAPI documents at hand (each may be `None`: not fetched).
    pub fn from_openapi(apps: Option<&Json>, core: Option<&Json>) -> Self {
        let has = |doc: Option<&Json>, definition: &str, field: &str| {
            doc.and_then(|d| properties(d, definition))
                .map(|props| props.iter().any(|p| p == field))
        };
        let native = apps
            .and_then(|d| properties(d, STATEFULSET_SPEC))
            .map(|props| {
                NativeField::ALL
                    .into_iter()
                    .find(|f| props.iter().any(|p| p == f.property()))
            });
        Self {
            max_unavailable: has(apps, ROLLING_UPDATE, "maxUnavailable"),
            claim_volume_attributes_class: has(core, CLAIM_SPEC, "volumeAttributesClassName"),
            native_template_field: native,
        }
    }
}

/// Kept when the dry run's answer still has the field at `pointer`; else absent where the
/// types lack it, dropped otherwise.
fn fate(answer: &Json, pointer: &str, in_types: Option<bool>) -> Value {
    if answer.pointer(pointer).is_some_and(|v| !v.is_null()) {
        Value::Kept
    } else if in_types == Some(false) {
        Value::Absent
    } else {
        Value::Dropped
    }
}

/// The StatefulSet dry run: was `maxUnavailable` kept? (The registry drops it where
/// `MaxUnavailableStatefulSet` is off: `dropStatefulSetDisabledFields` in
/// `pkg/registry/apps/statefulset/strategy.go`.)
pub fn max_unavailable(answer: &Json, fields: &Fields) -> Value {
    fate(
        answer,
        "/spec/updateStrategy/rollingUpdate/maxUnavailable",
        fields.max_unavailable,
    )
}

/// The claim dry run: was `volumeAttributesClassName` kept? (`dropDisabledFields` in
/// `pkg/api/persistentvolumeclaim/util.go` drops it where `VolumeAttributesClass` is off.)
pub fn claim_volume_attributes_class(answer: &Json, fields: &Fields) -> Value {
    fate(
        answer,
        "/spec/volumeAttributesClassName",
        fields.claim_volume_attributes_class,
    )
}

/// The StatefulSet dry run that also carried `field`: the apiserver takes template edits
/// natively only where its types have the field and it survived (a gate off drops it).
pub fn native_template_edits(answer: &Json, field: Option<NativeField>) -> Value {
    match field {
        Some(field)
            if answer
                .pointer(&format!("/spec/{}", field.property()))
                .is_some_and(|v| !v.is_null()) =>
        {
            Value::Native(field)
        }
        _ => Value::NotNative,
    }
}

/// The versions a discovery `APIGroup` serves, newest first among those we know. Accepts the
/// apiserver's `versions: [{groupVersion, version}]` and a list of group-version strings.
pub fn served_versions(group: &Json) -> Vec<StorageVersion> {
    let listed: Vec<String> = group
        .get("versions")
        .and_then(Json::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| {
            v.get("version")
                .and_then(Json::as_str)
                .map(str::to_owned)
                .or_else(|| {
                    v.get("groupVersion")
                        .or(Some(v))
                        .and_then(Json::as_str)
                        .map(|gv| gv.rsplit('/').next().unwrap_or(gv).to_owned())
                })
        })
        .collect();
    StorageVersion::NEWEST_FIRST
        .into_iter()
        .filter(|v| listed.iter().any(|l| l == v.as_str()))
        .collect()
}

/// Whether a discovery `APIResourceList` serves VolumeAttributesClasses.
pub fn lists_volume_attributes_classes(resources: &Json) -> bool {
    resources
        .get("resources")
        .and_then(Json::as_array)
        .into_iter()
        .flatten()
        .any(|r| r.get("name").and_then(Json::as_str) == Some("volumeattributesclasses"))
}

/// The newest version whose resource list has VolumeAttributesClasses, from `(version, list)`
/// pairs (a `storage.k8s.io/v1beta1` can be served without them, as on 1.24).
pub fn volume_attributes_class_api(lists: &[(StorageVersion, Json)]) -> Value {
    StorageVersion::NEWEST_FIRST
        .into_iter()
        .find(|v| {
            lists
                .iter()
                .any(|(listed, list)| listed == v && lists_volume_attributes_classes(list))
        })
        .map_or(Value::NotServed, Value::Served)
}

/// The answer to a dry-run patch giving a class-less claim a class: accepted (2xx), refused
/// by the apiserver's immutability rule (before KEP-3333's gate: "spec is immutable after
/// creation"), or `None` when the answer says neither (another admission refused it).
pub fn class_from_unset(status: u16, message: &str) -> Option<Value> {
    match status {
        200..=299 => Some(Value::Accepted),
        422 if message.contains("spec is immutable after creation") => Some(Value::Refused),
        _ => None,
    }
}

/// The answer to a dry-run patch lowering a claim's request to a value still above its
/// capacity: accepted (2xx), refused by the rule that predates recovery ("field can not be
/// less than previous value", `ValidatePersistentVolumeClaimUpdate` without
/// `RecoverVolumeExpansionFailure`), or `None` when it says neither.
pub fn lowering_above_capacity(status: u16, message: &str) -> Option<Value> {
    match status {
        200..=299 => Some(Value::Accepted),
        422 if message.contains("can not be less than previous value") => Some(Value::Refused),
        _ => None,
    }
}

/// What a stored StatefulSet tells of `maxUnavailable`, before or without a probe: a set that
/// kept the field shows it kept; one whose managedFields say a writer set the field though the
/// stored object lacks it shows it dropped. `None` when the set says neither.
pub fn max_unavailable_evidence(set: &k8s_openapi::api::apps::v1::StatefulSet) -> Option<Value> {
    let kept = set
        .spec
        .update_strategy
        .as_ref()
        .and_then(|s| s.rolling_update.as_ref())
        .is_some_and(|r| r.max_unavailable.is_some());
    if kept {
        return Some(Value::Kept);
    }
    let owned = set.metadata.managed_fields.iter().flatten().any(|m| {
        m.fields_v1
            .as_ref()
            .and_then(|f| {
                f.0.pointer("/f:spec/f:updateStrategy/f:rollingUpdate/f:maxUnavailable")
            })
            .is_some()
    });
    owned.then_some(Value::Dropped)
}

/// Whether a claim asks for the default class and may still get one — upstream
/// `assignDefaultStorageClass` (pkg/controller/volume/persistentvolume/pv_controller.go)
/// with `PersistentVolumeClaimHasClass`: no `spec.storageClassName` (an empty string is a
/// choice: "no class"), no beta class annotation, not bound nor pre-bound to a volume, and
/// not being deleted. Such a claim is where giving a class can be tried.
pub fn takes_default_class(claim: &k8s_openapi::api::core::v1::PersistentVolumeClaim) -> bool {
    let annotated = claim
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(crate::names::BETA_STORAGE_CLASS_ANNOTATION));
    let Some(spec) = claim.spec.as_ref() else {
        return false;
    };
    let bound = claim
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| p == "Bound");
    !annotated
        && spec.storage_class_name.is_none()
        && spec.volume_name.as_deref().unwrap_or("").is_empty()
        && !bound
        && claim.metadata.deletion_timestamp.is_none()
}

/// For a bound claim whose request is above its capacity (an expansion in flight or failed),
/// a request between the two (in bytes) that a dry-run patch can lower it to; `None` for any
/// other claim, or when no whole byte lies strictly between.
pub fn lowered_request(
    claim: &k8s_openapi::api::core::v1::PersistentVolumeClaim,
) -> Option<String> {
    use crate::quantity::Quantity;
    let bound = claim
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| p == "Bound");
    if !bound || claim.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let quantity = |q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>| {
        q.and_then(|q| Quantity::parse(&q.0).ok())
    };
    let request = quantity(
        claim
            .spec
            .as_ref()
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("storage")),
    )?
    .units_ceil();
    let capacity = quantity(
        claim
            .status
            .as_ref()
            .and_then(|s| s.capacity.as_ref())
            .and_then(|c| c.get("storage")),
    )?
    .units_ceil();
    let between = capacity + (request - capacity) / 2;
    (between > capacity && between < request).then(|| between.to_string())
}

/// What the captured apiservers (`tests/fixtures/apiserver-behaviour/<label>`) answered,
/// turned into capabilities by this module's own functions: the test data of every table that
/// runs over the supported versions.
#[cfg(test)]
pub(crate) mod captured {
    use super::*;
    use crate::capabilities::{Capabilities, Learned};
    use serde_json::json;

    /// The labels of the captured apiservers.
    pub(crate) const LABELS: [&str; 6] = [
        "v1.24",
        "v1.32",
        "v1.32-gates-on",
        "v1.35",
        "v1.35-maxunavailable-on",
        "v1.36",
    ];

    /// The records of one captured apiserver (tests/fixtures/apiserver-behaviour/<label>).
    pub(crate) fn probes(label: &str) -> Vec<Json> {
        let path = format!(
            "{}/tests/fixtures/apiserver-behaviour/{label}/probes.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        serde_json::from_str::<Vec<Json>>(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    fn record<'a>(records: &'a [Json], id: &str) -> &'a Json {
        records
            .iter()
            .find(|r| r["id"] == id)
            .unwrap_or_else(|| panic!("no probe {id}"))
    }

    /// The captured OpenAPI answer is trimmed to property names per definition; as a v2 document.
    fn openapi(records: &[Json]) -> Json {
        let trimmed = &record(records, "01g-openapi-fields")["response"]["body"];
        let definitions: serde_json::Map<String, Json> = trimmed
            .as_object()
            .into_iter()
            .flatten()
            .map(|(name, props)| {
                let properties: serde_json::Map<String, Json> = props
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Json::as_str)
                    .map(|p| (p.to_owned(), json!({})))
                    .collect();
                (name.clone(), json!({"properties": properties}))
            })
            .collect();
        json!({"definitions": definitions})
    }

    /// What each capability is on each captured apiserver, derived from its answers alone.
    pub(crate) fn derive(label: &str) -> Vec<(super::super::Name, Value)> {
        use super::super::Name;
        let records = probes(label);
        let doc = openapi(&records);
        let fields = Fields::from_openapi(Some(&doc), Some(&doc));
        let body = |id: &str| &record(&records, id)["response"]["body"];
        let status = |id: &str| {
            record(&records, id)["response"]["status"]
                .as_u64()
                .and_then(|s| u16::try_from(s).ok())
                .unwrap_or(0)
        };
        let message = |id: &str| body(id)["message"].as_str().unwrap_or("").to_owned();
        let served = served_versions(body("01d-discovery-storage"));
        let lists: Vec<(StorageVersion, Json)> = served
            .iter()
            .filter_map(|v| {
                records
                    .iter()
                    .find(|r| {
                        r["request"]["path"] == format!("/apis/storage.k8s.io/{}", v.as_str())
                    })
                    .map(|r| (*v, r["response"]["body"].clone()))
            })
            .collect();
        vec![
            (
                Name::MaxUnavailable,
                max_unavailable(body("02b-sts-create-maxunavailable"), &fields),
            ),
            (
                Name::ClaimVolumeAttributesClass,
                claim_volume_attributes_class(body("05d-pvc-create-vac"), &fields),
            ),
            (
                Name::VolumeAttributesClassApi,
                volume_attributes_class_api(&lists),
            ),
            (
                Name::RetroactiveDefaultClass,
                class_from_unset(
                    status("06b-pvc-patch-class-from-unset"),
                    &message("06b-pvc-patch-class-from-unset"),
                )
                .unwrap_or(Value::NotServed),
            ),
            (
                Name::ExpansionRecovery,
                lowering_above_capacity(
                    status("06k-pvc-shrink-above-capacity"),
                    &message("06k-pvc-shrink-above-capacity"),
                )
                .unwrap_or(Value::NotServed),
            ),
            (
                Name::NativeTemplateEdits,
                native_template_edits(
                    body("02a-sts-create-defaults"),
                    fields.native_template_field.flatten(),
                ),
            ),
        ]
    }

    /// The capabilities of `label`, each learned "by probe" from its captured answer, and its
    /// `/version`.
    pub(crate) fn capabilities(label: &str) -> Capabilities {
        let mut capabilities = Capabilities::default();
        for (name, value) in derive(label) {
            capabilities.set(name, Learned::probed(value, format!("captured {label}")));
        }
        let records = probes(label);
        capabilities.git_version =
            record(&records, "01a-version")["response"]["body"]["gitVersion"]
                .as_str()
                .map(str::to_owned);
        capabilities
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Each captured apiserver's answers give the capabilities its README table states.
    #[test]
    fn the_captured_answers_of_each_apiserver_give_its_capabilities() {
        use StorageVersion::{V1, V1beta1};
        use Value::*;
        let table = [
            (
                "v1.24",
                [Absent, Absent, NotServed, Refused, Refused, NotNative],
            ),
            (
                "v1.32",
                [Dropped, Dropped, NotServed, Accepted, Accepted, NotNative],
            ),
            (
                "v1.32-gates-on",
                [Kept, Kept, Served(V1beta1), Accepted, Accepted, NotNative],
            ),
            (
                "v1.35",
                [Dropped, Kept, Served(V1), Accepted, Accepted, NotNative],
            ),
            (
                "v1.35-maxunavailable-on",
                [Kept, Kept, Served(V1), Accepted, Accepted, NotNative],
            ),
            (
                "v1.36",
                [Dropped, Kept, Served(V1), Accepted, Accepted, NotNative],
            ),
        ];
        for (label, want) in table {
            let got: Vec<Value> = captured::derive(label)
                .into_iter()
                .map(|(_, v)| v)
                .collect();
            assert_eq!(got, want, "{label}");
        }
    }

    #[test]
    fn a_field_is_kept_dropped_or_absent_from_the_types() {
        let kept = json!({"spec": {"updateStrategy": {"rollingUpdate": {"maxUnavailable": 2}}}});
        let dropped = json!({"spec": {"updateStrategy": {"rollingUpdate": {"partition": 0}}}});
        let typed = Fields {
            max_unavailable: Some(true),
            ..Fields::default()
        };
        let untyped = Fields {
            max_unavailable: Some(false),
            ..Fields::default()
        };
        assert_eq!(max_unavailable(&kept, &typed), Value::Kept);
        assert_eq!(max_unavailable(&dropped, &typed), Value::Dropped);
        assert_eq!(max_unavailable(&dropped, &untyped), Value::Absent);
        // Without OpenAPI a missing field reads as dropped, never absent.
        assert_eq!(
            max_unavailable(&dropped, &Fields::default()),
            Value::Dropped
        );
        assert_eq!(
            max_unavailable(&json!(null), &Fields::default()),
            Value::Dropped
        );
    }

    #[test]
    fn openapi_v3_and_v2_documents_both_tell_the_native_field() {
        let v3 = json!({"components": {"schemas": {STATEFULSET_SPEC: {"properties": {
            "replicas": {}, "volumeClaimUpdatePolicy": {}}}}}});
        let v2 = json!({"definitions": {STATEFULSET_SPEC: {"properties": {"replicas": {}}}}});
        assert_eq!(
            Fields::from_openapi(Some(&v3), None).native_template_field,
            Some(Some(NativeField::VolumeClaimUpdatePolicy))
        );
        assert_eq!(
            Fields::from_openapi(Some(&v2), None).native_template_field,
            Some(None)
        );
        assert_eq!(Fields::from_openapi(None, None), Fields::default());
        let answer = json!({"spec": {"volumeClaimUpdatePolicy": "OnDelete"}});
        assert_eq!(
            native_template_edits(&answer, Some(NativeField::VolumeClaimUpdatePolicy)),
            Value::Native(NativeField::VolumeClaimUpdatePolicy)
        );
        // Listed in the types but dropped by a gate: not native.
        assert_eq!(
            native_template_edits(
                &json!({"spec": {}}),
                Some(NativeField::VolumeClaimUpdatePolicy)
            ),
            Value::NotNative
        );
        assert_eq!(native_template_edits(&answer, None), Value::NotNative);
    }

    #[test]
    fn discovery_in_the_apiservers_shape_and_hostile_shapes() {
        let group = json!({"versions": [
            {"groupVersion": "storage.k8s.io/v1beta1", "version": "v1beta1"},
            {"groupVersion": "storage.k8s.io/v1", "version": "v1"},
            {"groupVersion": "storage.k8s.io/v2", "version": "v2"}]});
        assert_eq!(
            served_versions(&group),
            [StorageVersion::V1, StorageVersion::V1beta1]
        );
        assert!(served_versions(&json!({"versions": "v1"})).is_empty());
        assert!(served_versions(&json!([1, 2])).is_empty());
        assert!(!lists_volume_attributes_classes(
            &json!({"resources": [{"name": 7}]})
        ));
        assert_eq!(volume_attributes_class_api(&[]), Value::NotServed);
    }

    #[test]
    fn patch_answers_that_say_neither_teach_nothing() {
        assert_eq!(class_from_unset(200, ""), Some(Value::Accepted));
        assert_eq!(
            class_from_unset(
                422,
                "PersistentVolumeClaim \"c\" is invalid: spec: Forbidden: spec is immutable after creation except resources.requests for bound claims"
            ),
            Some(Value::Refused)
        );
        assert_eq!(class_from_unset(403, "denied by a policy"), None);
        assert_eq!(class_from_unset(422, "another rule"), None);
        assert_eq!(
            lowering_above_capacity(
                422,
                "spec.resources.requests.storage: Forbidden: field can not be less than previous value"
            ),
            Some(Value::Refused)
        );
        // Below the capacity is refused everywhere: it says nothing of recovery.
        assert_eq!(
            lowering_above_capacity(
                422,
                "spec.resources.requests.storage: Forbidden: field can not be less than status.capacity"
            ),
            None
        );
    }

    #[test]
    fn a_stored_set_shows_max_unavailable_by_the_field_or_its_dropped_ownership() {
        let set = |spec: Json, managed: Json| -> k8s_openapi::api::apps::v1::StatefulSet {
            serde_json::from_value(json!({
                "metadata": {"name": "db", "managedFields": managed}, "spec": spec}))
            .expect("a set")
        };
        let strategy = |rolling: Json| {
            json!({"selector": {}, "serviceName": "db", "template": {},
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": rolling}})
        };
        let owns = json!([{"manager": "helm", "operation": "Apply",
            "fieldsV1": {"f:spec": {"f:updateStrategy": {"f:rollingUpdate": {"f:maxUnavailable": {}}}}}}]);
        let other = json!([{"manager": "helm", "operation": "Apply",
            "fieldsV1": {"f:spec": {"f:updateStrategy": {"f:rollingUpdate": {"f:partition": {}}}}}}]);
        let kept = strategy(json!({"maxUnavailable": 2}));
        let dropped = strategy(json!({"partition": 0}));
        assert_eq!(
            max_unavailable_evidence(&set(kept.clone(), owns.clone())),
            Some(Value::Kept)
        );
        assert_eq!(
            max_unavailable_evidence(&set(kept, other.clone())),
            Some(Value::Kept)
        );
        assert_eq!(
            max_unavailable_evidence(&set(dropped.clone(), owns)),
            Some(Value::Dropped)
        );
        // The annotation alone (or nothing) tells nothing: the user may have written it.
        assert_eq!(max_unavailable_evidence(&set(dropped.clone(), other)), None);
        assert_eq!(max_unavailable_evidence(&set(dropped, Json::Null)), None);
    }

    #[test]
    fn a_lowered_request_lies_strictly_between_capacity_and_request() {
        let claim = |phase: &str, request: &str, capacity: &str| {
            serde_json::from_value::<k8s_openapi::api::core::v1::PersistentVolumeClaim>(json!({
                "metadata": {"name": "data", "namespace": "db"},
                "spec": {"resources": {"requests": {"storage": request}}},
                "status": {"phase": phase, "capacity": {"storage": capacity}}}))
            .expect("a claim")
        };
        assert_eq!(
            lowered_request(&claim("Bound", "3Gi", "2Gi")).as_deref(),
            Some("2684354560")
        );
        assert_eq!(lowered_request(&claim("Bound", "2Gi", "2Gi")), None);
        assert_eq!(lowered_request(&claim("Bound", "1Gi", "2Gi")), None);
        assert_eq!(lowered_request(&claim("Bound", "3", "2")), None);
        assert_eq!(lowered_request(&claim("Pending", "3Gi", "2Gi")), None);
        assert_eq!(lowered_request(&claim("Bound", "a lot", "2Gi")), None);
    }
}
