//! The parts of the built-in registries' defaulting and validation our tests depend on,
//! with the messages of `pkg/apis/apps/validation` and `pkg/apis/core/validation`.

use serde_json::{Value, json};

use super::errors::FieldError;
use super::{FakeApiConfig, ValueWording};

/// The apiserver's message when a StatefulSet update touches an immutable spec field.
pub const STATEFULSET_SPEC_FORBIDDEN: &str = "updates to statefulset spec for fields other than 'replicas', 'ordinals', \
     'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden";

/// The apiserver's message when a PVC update touches an immutable spec field (v1.29+, with
/// `volumeAttributesClassName` in the types).
pub const PVC_SPEC_FORBIDDEN: &str = "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims";

/// The same before v1.29.
pub const PVC_SPEC_FORBIDDEN_V1_24: &str =
    "spec is immutable after creation except resources.requests for bound claims";

/// The message of a StatefulSet update that changes other fields than `mutable`, joined as
/// `pkg/apis/apps/validation.ValidateStatefulSetUpdate` words it.
pub fn statefulset_spec_forbidden(mutable: &[&str]) -> String {
    let quoted: Vec<String> = mutable.iter().map(|f| format!("'{f}'")).collect();
    let listed = match quoted.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => String::new(),
    };
    format!("updates to statefulset spec for fields other than {listed} are forbidden")
}

/// The annotation older clients use instead of `spec.storageClassName`.
const BETA_STORAGE_CLASS_ANNOTATION: &str = "volume.beta.kubernetes.io/storage-class";

/// An embedded ObjectMeta's zero `creationTimestamp`: printed as `null` up to v1.34, left out
/// after (`metav1.Time` became `omitzero`).
fn zero_creation_timestamp(meta: &mut serde_json::Map<String, Value>, null: bool) {
    if null {
        meta.entry("creationTimestamp").or_insert(Value::Null);
    } else if meta.get("creationTimestamp").is_some_and(Value::is_null) {
        meta.remove("creationTimestamp");
    }
}

/// Fields the StatefulSet types of the configured version do not have: what a write sends
/// there is lost in decoding, before the field manager sees it.
pub fn drop_unknown_statefulset_fields(object: &mut Value, config: &FakeApiConfig) {
    if !config.statefulset_max_unavailable_in_types {
        drop_max_unavailable(object);
    }
    let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    // KEP-4650's field, in no captured version (the synthetic switch has it); the other name
    // its drafts used is in none.
    if !config.native_template_edits {
        spec.remove("volumeClaimUpdatePolicy");
    }
    spec.remove("volumeClaimUpdateStrategy");
    if !config.claim_volume_attributes_class_in_types {
        for template in spec
            .get_mut("volumeClaimTemplates")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            drop_volume_attributes_class(template);
        }
    }
}

/// Fields the apiserver fills in when a StatefulSet is written (`SetDefaults_StatefulSet`),
/// including the defaulted claim templates the captured requests show, as the configured
/// version does.
pub fn default_statefulset(object: &mut Value, config: &FakeApiConfig) {
    drop_unknown_statefulset_fields(object, config);
    let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    spec.entry("replicas").or_insert(json!(1));
    spec.entry("podManagementPolicy")
        .or_insert(json!("OrderedReady"));
    spec.entry("revisionHistoryLimit").or_insert(json!(10));
    if config.statefulset_retention_policy {
        spec.entry("persistentVolumeClaimRetentionPolicy")
            .or_insert(json!({"whenDeleted": "Retain", "whenScaled": "Retain"}));
    }
    // Only an empty type gets a `rollingUpdate` block; `{type: RollingUpdate}` keeps it nil,
    // which changes how the StatefulSet controller re-creates pods (`newVersionedStatefulSetPod`).
    let strategy = spec.entry("updateStrategy").or_insert(json!({}));
    if let Some(strategy) = strategy.as_object_mut() {
        if strategy.get("type").is_none_or(|t| t.is_null() || t == "") {
            strategy.insert("type".to_owned(), json!("RollingUpdate"));
            if strategy.get("rollingUpdate").is_none_or(Value::is_null) {
                strategy.insert("rollingUpdate".to_owned(), json!({}));
            }
        }
        if strategy.get("type") == Some(&json!("RollingUpdate"))
            && let Some(rolling) = strategy
                .get_mut("rollingUpdate")
                .and_then(Value::as_object_mut)
        {
            rolling.entry("partition").or_insert(json!(0));
            // With MaxUnavailableStatefulSet on, SetDefaults_StatefulSet gives 1.
            if config.max_unavailable_default_one {
                rolling.entry("maxUnavailable").or_insert(json!(1));
            }
        }
    }
    if let Some(template) = spec.get_mut("template").and_then(Value::as_object_mut) {
        let meta = template.entry("metadata").or_insert(json!({}));
        if let Some(meta) = meta.as_object_mut() {
            zero_creation_timestamp(meta, config.zero_creation_timestamp_null);
        }
        if let Some(pod) = template.get_mut("spec").and_then(Value::as_object_mut) {
            default_pod_spec(pod);
        }
    }
    if let Some(templates) = spec
        .get_mut("volumeClaimTemplates")
        .and_then(Value::as_array_mut)
    {
        for template in templates.iter_mut().filter_map(Value::as_object_mut) {
            let meta = template.entry("metadata").or_insert(json!({}));
            if let Some(meta) = meta.as_object_mut() {
                zero_creation_timestamp(meta, config.zero_creation_timestamp_null);
            }
            template.entry("apiVersion").or_insert(json!("v1"));
            template
                .entry("kind")
                .or_insert(json!("PersistentVolumeClaim"));
            if let Some(tspec) = template.get_mut("spec").and_then(Value::as_object_mut) {
                tspec.entry("volumeMode").or_insert(json!("Filesystem"));
            }
            template
                .entry("status")
                .or_insert(json!({"phase": "Pending"}));
        }
    }
}

/// `SetDefaults_PodSpec` and what it reaches (containers, probes, ports, volumes), as a
/// StatefulSet's pod template gets them.
pub fn default_pod_spec(pod: &mut serde_json::Map<String, Value>) {
    pod.entry("restartPolicy").or_insert(json!("Always"));
    pod.entry("terminationGracePeriodSeconds")
        .or_insert(json!(30));
    pod.entry("dnsPolicy").or_insert(json!("ClusterFirst"));
    pod.entry("securityContext").or_insert(json!({}));
    pod.entry("schedulerName")
        .or_insert(json!("default-scheduler"));
    for list in ["initContainers", "containers"] {
        let Some(containers) = pod.get_mut(list).and_then(Value::as_array_mut) else {
            continue;
        };
        for container in containers.iter_mut().filter_map(Value::as_object_mut) {
            default_container(container);
        }
    }
    if let Some(volumes) = pod.get_mut("volumes").and_then(Value::as_array_mut) {
        for volume in volumes.iter_mut().filter_map(Value::as_object_mut) {
            for source in ["configMap", "secret", "downwardAPI", "projected"] {
                if let Some(source) = volume.get_mut(source).and_then(Value::as_object_mut) {
                    source.entry("defaultMode").or_insert(json!(420));
                }
            }
        }
    }
}

/// `SetDefaults_Container` with its ports and probes.
fn default_container(container: &mut serde_json::Map<String, Value>) {
    let policy = image_pull_policy(container.get("image").and_then(Value::as_str).unwrap_or(""));
    container.entry("resources").or_insert(json!({}));
    container
        .entry("terminationMessagePath")
        .or_insert(json!("/dev/termination-log"));
    container
        .entry("terminationMessagePolicy")
        .or_insert(json!("File"));
    container.entry("imagePullPolicy").or_insert(json!(policy));
    if let Some(ports) = container.get_mut("ports").and_then(Value::as_array_mut) {
        for port in ports.iter_mut().filter_map(Value::as_object_mut) {
            port.entry("protocol").or_insert(json!("TCP"));
        }
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        let Some(probe) = container.get_mut(probe).and_then(Value::as_object_mut) else {
            continue;
        };
        probe.entry("timeoutSeconds").or_insert(json!(1));
        probe.entry("periodSeconds").or_insert(json!(10));
        probe.entry("successThreshold").or_insert(json!(1));
        probe.entry("failureThreshold").or_insert(json!(3));
        if let Some(get) = probe.get_mut("httpGet").and_then(Value::as_object_mut) {
            get.entry("scheme").or_insert(json!("HTTP"));
        }
    }
}

/// `Always` for an image without a tag or tagged `latest`, else `IfNotPresent`.
fn image_pull_policy(image: &str) -> &'static str {
    if image.contains('@') {
        return "IfNotPresent";
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.split_once(':') {
        Some((_, tag)) if tag != "latest" => "IfNotPresent",
        _ => "Always",
    }
}

/// Whether a claim uses `volumeAttributesClassName` (the registry keeps it then even with
/// the VolumeAttributesClass gate off).
pub fn uses_volume_attributes_class(object: &Value) -> bool {
    object
        .pointer("/spec/volumeAttributesClassName")
        .is_some_and(|v| !v.is_null())
}

/// Drops `volumeAttributesClassName`, as the registry does with VolumeAttributesClass off.
pub fn drop_volume_attributes_class(object: &mut Value) {
    if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
        spec.remove("volumeAttributesClassName");
    }
}

/// `spec.volumeMode` defaults to `Filesystem` (`SetDefaults_PersistentVolumeClaimSpec`); a
/// `volumeAttributesClassName` the types lack is lost in decoding.
pub fn default_pvc(object: &mut Value, config: &FakeApiConfig) {
    if !config.claim_volume_attributes_class_in_types {
        drop_volume_attributes_class(object);
    }
    if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
        spec.entry("volumeMode").or_insert(json!("Filesystem"));
    }
}

/// `SetDefaults_PersistentVolume` and its volume sources: `Filesystem`, `Retain`, a host
/// path's empty type.
pub fn default_pv(object: &mut Value) {
    if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
        spec.entry("volumeMode").or_insert(json!("Filesystem"));
        spec.entry("persistentVolumeReclaimPolicy")
            .or_insert(json!("Retain"));
        if let Some(host) = spec.get_mut("hostPath").and_then(Value::as_object_mut) {
            host.entry("type").or_insert(json!(""));
        }
    }
}

/// `SetDefaults_StorageClass`: `Delete`, `Immediate`.
pub fn default_storage_class(object: &mut Value) {
    if let Some(class) = object.as_object_mut() {
        class.entry("reclaimPolicy").or_insert(json!("Delete"));
        class
            .entry("volumeBindingMode")
            .or_insert(json!("Immediate"));
    }
}

/// `SetDefaults_Namespace`: the `kubernetes.io/metadata.name` label (v1.22+).
pub fn default_namespace(object: &mut Value) {
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    if name.is_empty() {
        return;
    }
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        let labels = meta.entry("labels").or_insert(json!({}));
        if let Some(labels) = labels.as_object_mut() {
            labels.insert("kubernetes.io/metadata.name".into(), json!(name));
        }
    }
}

/// `SetDefaults_Pod`: a pod's spec as a template's, and `enableServiceLinks`.
pub fn default_pod(object: &mut Value) {
    if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
        default_pod_spec(spec);
        spec.entry("enableServiceLinks").or_insert(json!(true));
    }
}

/// The admission plugins a new pod meets after the field manager: `DefaultTolerationSeconds`
/// (300 s for not-ready and unreachable nodes), `Priority` (no class: 0, and its preemption
/// policy), and the registry's `status.qosClass`.
pub fn admit_pod(object: &mut Value) {
    if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
        let tolerations = spec.entry("tolerations").or_insert(json!([]));
        if let Some(list) = tolerations.as_array_mut() {
            for key in [
                "node.kubernetes.io/not-ready",
                "node.kubernetes.io/unreachable",
            ] {
                let tolerated = list.iter().any(|t| {
                    t.get("key").and_then(Value::as_str) == Some(key)
                        || (t.get("operator") == Some(&json!("Exists")) && t.get("key").is_none())
                });
                if !tolerated {
                    list.push(
                        json!({"key": key, "operator": "Exists", "effect": "NoExecute",
                                     "tolerationSeconds": 300}),
                    );
                }
            }
        }
        if spec.get("priorityClassName").is_none_or(|c| c == "") {
            spec.entry("priority").or_insert(json!(0));
        }
        spec.entry("preemptionPolicy")
            .or_insert(json!("PreemptLowerPriority"));
    }
    let qos = qos_class(object);
    let status = object
        .as_object_mut()
        .map(|o| o.entry("status").or_insert(json!({})));
    if let Some(Value::Object(status)) = status {
        status.insert("qosClass".into(), json!(qos));
    }
}

/// `GetPodQOS`: no requests or limits anywhere → BestEffort; every container's requests
/// equal to limits for cpu and memory → Guaranteed; Burstable otherwise.
fn qos_class(pod: &Value) -> &'static str {
    let containers: Vec<&Value> = ["containers", "initContainers"]
        .iter()
        .flat_map(|list| {
            pod.pointer(&format!("/spec/{list}"))
                .and_then(Value::as_array)
        })
        .flatten()
        .collect();
    let set = |c: &Value, what: &str| {
        c.pointer(&format!("/resources/{what}"))
            .and_then(Value::as_object)
            .is_some_and(|m| !m.is_empty())
    };
    if containers
        .iter()
        .all(|c| !set(c, "requests") && !set(c, "limits"))
    {
        return "BestEffort";
    }
    let guaranteed = containers.iter().all(|c| {
        ["cpu", "memory"].iter().all(|r| {
            let limit = c.pointer(&format!("/resources/limits/{r}"));
            let request = c.pointer(&format!("/resources/requests/{r}")).or(limit);
            limit.is_some() && request == limit
        })
    });
    if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// Whether a StatefulSet uses `maxUnavailable` (the registry keeps a field already in use
/// even when its feature gate is off).
pub fn uses_max_unavailable(object: &Value) -> bool {
    object
        .pointer("/spec/updateStrategy/rollingUpdate/maxUnavailable")
        .is_some_and(|v| !v.is_null())
}

/// Drops `maxUnavailable`, as the registry does with `MaxUnavailableStatefulSet` off.
pub fn drop_max_unavailable(object: &mut Value) {
    if let Some(rolling) = object
        .pointer_mut("/spec/updateStrategy/rollingUpdate")
        .and_then(Value::as_object_mut)
    {
        rolling.remove("maxUnavailable");
    }
}

/// An `intstr.IntOrString` in a validation message.
fn render_int_or_string(value: &Value, wording: ValueWording) -> String {
    match (wording, value) {
        (ValueWording::GoStruct, Value::String(text)) => {
            format!("intstr.IntOrString{{Type:1, IntVal:0, StrVal:{text:?}}}")
        }
        (ValueWording::GoStruct, other) => format!(
            "intstr.IntOrString{{Type:0, IntVal:{}, StrVal:\"\"}}",
            other.as_i64().unwrap_or(0)
        ),
        (ValueWording::Json, other) => other.to_string(),
    }
}

/// `validation.IsValidPercent`.
fn percent(text: &str) -> Option<i64> {
    let digits = text.strip_suffix('%')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// `ValidateStatefulSetSpec`, the part the fake models: `rollingUpdate.maxUnavailable`
/// (`validateRollingUpdateStatefulSet`: `ValidatePositiveIntOrPercent`, not 0, not over 100%)
/// where the configured version validates it.
pub fn validate_statefulset(object: &Value, config: &FakeApiConfig) -> Vec<FieldError> {
    let Some(wording) = config.max_unavailable_validation else {
        return Vec::new();
    };
    let Some(value) = object
        .pointer("/spec/updateStrategy/rollingUpdate/maxUnavailable")
        .filter(|v| !v.is_null())
    else {
        return Vec::new();
    };
    let path = "spec.updateStrategy.rollingUpdate.maxUnavailable";
    let shown = render_int_or_string(value, wording);
    let mut errors = Vec::new();
    let number = match value {
        Value::String(text) => match percent(text) {
            Some(p) => p,
            None => {
                errors.push(FieldError::invalid_raw(
                    path,
                    &shown,
                    "a valid percent string must be a numeric string followed by an ending '%' \
                     (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')",
                ));
                text.parse().unwrap_or(0)
            }
        },
        other => {
            let n = other.as_i64().unwrap_or(0);
            if n < 0 {
                errors.push(FieldError::invalid_raw(
                    path,
                    &n.to_string(),
                    "must be greater than or equal to 0",
                ));
            }
            n
        }
    };
    if number == 0 {
        errors.push(FieldError::invalid_raw(path, &shown, "cannot be 0"));
    }
    if let Value::String(text) = value
        && percent(text).is_some_and(|p| p > 100)
    {
        errors.push(FieldError::invalid_raw(
            path,
            &shown,
            "must not be greater than 100%",
        ));
    }
    errors
}

/// With KEP-4650 (the synthetic `native_template_edits`): what of a claim template may change.
fn without_editable_template_fields(templates: &Value) -> Value {
    let mut templates = templates.clone();
    for template in templates.as_array_mut().into_iter().flatten() {
        if let Some(meta) = template.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("labels");
            meta.remove("annotations");
        }
        if let Some(spec) = template.get_mut("spec").and_then(Value::as_object_mut) {
            spec.remove("volumeAttributesClassName");
            if let Some(requests) = spec
                .get_mut("resources")
                .and_then(|r| r.get_mut("requests"))
                .and_then(Value::as_object_mut)
            {
                requests.remove("storage");
            }
        }
    }
    templates
}

/// `ValidateStatefulSetUpdate`: the new spec is valid, and only the configured fields change.
pub fn validate_statefulset_update(
    old: &Value,
    new: &Value,
    config: &FakeApiConfig,
) -> Vec<FieldError> {
    let mut errors = validate_statefulset(new, config);
    let frozen = |object: &Value| {
        let mut spec = object.get("spec").cloned().unwrap_or(json!({}));
        if let Some(spec) = spec.as_object_mut() {
            for field in config.statefulset_mutable_fields {
                spec.remove(*field);
            }
            if config.native_template_edits {
                spec.remove("volumeClaimUpdatePolicy");
                if let Some(templates) = spec.get_mut("volumeClaimTemplates") {
                    *templates = without_editable_template_fields(templates);
                }
            }
        }
        normalized(&spec)
    };
    if frozen(old) != frozen(new) {
        errors.push(FieldError::forbidden(
            "spec",
            &statefulset_spec_forbidden(config.statefulset_mutable_fields),
        ));
    }
    errors
}

/// `ValidatePersistentVolumeClaimUpdate` (`pkg/apis/core/validation`): the spec is immutable
/// except a bound claim's requests and `volumeAttributesClassName`, a first `volumeName`, and
/// a class set on a claim that had none (v1.25+) or whose beta annotation named it; a request
/// may not go down (below `status.capacity` with expansion recovery, not at all without).
pub fn validate_pvc_update(old: &Value, new: &Value, config: &FakeApiConfig) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let mut old_spec = old.get("spec").cloned().unwrap_or(json!({}));
    let mut new_spec = new.get("spec").cloned().unwrap_or(json!({}));
    let bound = new.pointer("/status/phase").and_then(Value::as_str) == Some("Bound");

    // A claim may be bound to a volume once.
    if old_spec
        .get("volumeName")
        .is_none_or(|v| v.as_str().unwrap_or("").is_empty())
        && let (Some(o), Some(n)) = (old_spec.as_object_mut(), new_spec.get("volumeName"))
    {
        o.insert("volumeName".into(), n.clone());
    }
    let old_class = old_spec
        .get("storageClassName")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let new_class = new_spec
        .get("storageClassName")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let old_annotation = old
        .pointer(&annotation_pointer(BETA_STORAGE_CLASS_ANNOTATION))
        .and_then(Value::as_str);
    let class_from_annotation =
        old_class.is_none() && old_annotation.is_some() && new_class.as_deref() == old_annotation;
    let class_from_nil = config.retroactive_default_class_allowed
        && old_class.is_none()
        && old_annotation.is_none()
        && new_class.is_some();
    if (class_from_annotation || class_from_nil)
        && let Some(spec) = new_spec.as_object_mut()
    {
        spec.remove("storageClassName");
    }
    if bound {
        let old_storage = old_spec.pointer("/resources/requests/storage").cloned();
        if let Some(requests) = new_spec
            .pointer_mut("/resources/requests")
            .and_then(Value::as_object_mut)
        {
            match old_storage {
                Some(storage) => requests.insert("storage".into(), storage),
                None => requests.remove("storage"),
            };
        }
        // Only a bound claim may change its VolumeAttributesClass.
        let old_vac = old_spec.get("volumeAttributesClassName").cloned();
        if let Some(spec) = new_spec.as_object_mut()
            && spec
                .get("volumeAttributesClassName")
                .is_some_and(|v| !v.is_null())
        {
            match old_vac {
                Some(vac) => spec.insert("volumeAttributesClassName".into(), vac),
                None => spec.remove("volumeAttributesClassName"),
            };
        }
    }
    if normalized(&old_spec) != normalized(&new_spec) {
        let wording = if config.claim_volume_attributes_class_in_types {
            PVC_SPEC_FORBIDDEN
        } else {
            PVC_SPEC_FORBIDDEN_V1_24
        };
        let detail = if config.claim_spec_json_diff {
            format!("{wording}\n{}", claim_spec_diff(&old_spec, &new_spec))
        } else {
            wording.to_owned()
        };
        errors.push(FieldError::forbidden("spec", &detail));
    }

    let storage = |v: &Value, p: &str| {
        v.pointer(p)
            .and_then(Value::as_str)
            .and_then(parse_quantity)
    };
    let (old_size, new_size) = (
        storage(old, "/spec/resources/requests/storage"),
        storage(new, "/spec/resources/requests/storage"),
    );
    let capacity = storage(old, "/status/capacity/storage").unwrap_or(0.0);
    if let (Some(old_size), Some(new_size)) = (old_size, new_size)
        && new_size < old_size
    {
        if !config.expansion_recovery {
            errors.push(FieldError::forbidden(
                "spec.resources.requests.storage",
                "field can not be less than previous value",
            ));
        } else if new_size <= capacity {
            // Lowering a request is recovery from a failed expansion, never a shrink below
            // what the volume has (RecoverVolumeExpansionFailure).
            errors.push(FieldError::forbidden(
                "spec.resources.requests.storage",
                "field can not be less than status.capacity",
            ));
        }
    }
    errors
}

/// A value of the internal `core.PersistentVolumeClaimSpec` as Go's `encoding/json` prints it
/// (no JSON tags: Go field names, in declaration order, nothing omitted).
fn go_claim_spec(spec: &Value) -> GoJson {
    let get = |k: &str| spec.get(k).cloned().unwrap_or(Value::Null);
    let reference = |v: Value, fields: &[(&str, &str)]| match v {
        Value::Object(map) => GoJson::Object(
            fields
                .iter()
                .map(|(go, json)| {
                    (
                        (*go).to_owned(),
                        GoJson::from(map.get(*json).cloned().unwrap_or(Value::Null)),
                    )
                })
                .collect(),
        ),
        _ => GoJson::Null,
    };
    let resources = spec.get("resources").cloned().unwrap_or(json!({}));
    GoJson::Object(vec![
        ("AccessModes".into(), GoJson::from(get("accessModes"))),
        ("Selector".into(), GoJson::from(get("selector"))),
        (
            "Resources".into(),
            GoJson::Object(vec![
                (
                    "Limits".into(),
                    GoJson::from(resources.get("limits").cloned().unwrap_or(Value::Null)),
                ),
                (
                    "Requests".into(),
                    GoJson::from(resources.get("requests").cloned().unwrap_or(Value::Null)),
                ),
            ]),
        ),
        (
            "VolumeName".into(),
            GoJson::from(spec.get("volumeName").cloned().unwrap_or(json!(""))),
        ),
        (
            "StorageClassName".into(),
            GoJson::from(get("storageClassName")),
        ),
        ("VolumeMode".into(), GoJson::from(get("volumeMode"))),
        (
            "DataSource".into(),
            reference(
                get("dataSource"),
                &[("APIGroup", "apiGroup"), ("Kind", "kind"), ("Name", "name")],
            ),
        ),
        (
            "DataSourceRef".into(),
            reference(
                get("dataSourceRef"),
                &[
                    ("APIGroup", "apiGroup"),
                    ("Kind", "kind"),
                    ("Name", "name"),
                    ("Namespace", "namespace"),
                ],
            ),
        ),
        (
            "VolumeAttributesClassName".into(),
            GoJson::from(get("volumeAttributesClassName")),
        ),
    ])
}

/// JSON with its keys in a chosen order, printed as Go's `json.MarshalIndent(v, "", " ")`.
enum GoJson {
    Null,
    Scalar(String),
    Array(Vec<GoJson>),
    Object(Vec<(String, GoJson)>),
}

impl From<Value> for GoJson {
    fn from(value: Value) -> Self {
        match value {
            Value::Null => Self::Null,
            Value::Array(items) => Self::Array(items.into_iter().map(Self::from).collect()),
            // Go sorts map keys, as serde_json's map does.
            Value::Object(map) => {
                Self::Object(map.into_iter().map(|(k, v)| (k, Self::from(v))).collect())
            }
            other => Self::Scalar(other.to_string()),
        }
    }
}

impl GoJson {
    fn write(&self, depth: usize, out: &mut String) {
        let pad = |n: usize| " ".repeat(n);
        match self {
            Self::Null => out.push_str("null"),
            Self::Scalar(text) => out.push_str(text),
            Self::Array(items) if items.is_empty() => out.push_str("[]"),
            Self::Object(fields) if fields.is_empty() => out.push_str("{}"),
            Self::Array(items) => {
                out.push_str("[\n");
                for (i, item) in items.iter().enumerate() {
                    out.push_str(&pad(depth + 1));
                    item.write(depth + 1, out);
                    out.push_str(if i + 1 < items.len() { ",\n" } else { "\n" });
                }
                out.push_str(&pad(depth));
                out.push(']');
            }
            Self::Object(fields) => {
                out.push_str("{\n");
                for (i, (key, value)) in fields.iter().enumerate() {
                    out.push_str(&pad(depth + 1));
                    out.push_str(&Value::String(key.clone()).to_string());
                    out.push_str(": ");
                    value.write(depth + 1, out);
                    out.push_str(if i + 1 < fields.len() { ",\n" } else { "\n" });
                }
                out.push_str(&pad(depth));
                out.push('}');
            }
        }
    }
}

/// `diff.Diff(oldSpec, newSpec)` of v1.35+ (`k8s.io/apimachinery/pkg/util/diff`): go-difflib's
/// unified diff, three lines of context, of the two specs printed by `json.MarshalIndent`.
pub fn claim_spec_diff(old: &Value, new: &Value) -> String {
    let print = |spec: &Value| {
        let mut out = String::new();
        go_claim_spec(spec).write(0, &mut out);
        out
    };
    unified_diff(&print(old), &print(new), 3)
}

/// go-difflib's `SplitLines`: every line keeps its newline, the last one gets one.
fn split_lines(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text.split_inclusive('\n').map(str::to_owned).collect();
    match lines.last_mut() {
        Some(last) if !last.ends_with('\n') => last.push('\n'),
        Some(_) => lines.push("\n".to_owned()),
        None => lines.push("\n".to_owned()),
    }
    lines
}

/// An opcode of Python's (and go-difflib's) `SequenceMatcher`.
type Opcode = (char, usize, usize, usize, usize);

/// `SequenceMatcher.get_matching_blocks` without junk (the inputs are far below the 200 lines
/// where autojunk starts).
fn matching_blocks(a: &[String], b: &[String]) -> Vec<(usize, usize, usize)> {
    let mut b2j: std::collections::HashMap<&str, Vec<usize>> = std::collections::HashMap::new();
    for (j, line) in b.iter().enumerate() {
        b2j.entry(line.as_str()).or_default().push(j);
    }
    let longest = |alo: usize, ahi: usize, blo: usize, bhi: usize| {
        let (mut besti, mut bestj, mut bestsize) = (alo, blo, 0);
        let mut j2len: std::collections::HashMap<usize, usize> = std::collections::HashMap::new();
        for (i, line) in a.iter().enumerate().take(ahi).skip(alo) {
            let mut next = std::collections::HashMap::new();
            for &j in b2j.get(line.as_str()).into_iter().flatten() {
                if j < blo {
                    continue;
                }
                if j >= bhi {
                    break;
                }
                let k = j
                    .checked_sub(1)
                    .and_then(|p| j2len.get(&p))
                    .copied()
                    .unwrap_or(0)
                    + 1;
                next.insert(j, k);
                if k > bestsize {
                    (besti, bestj, bestsize) = (i + 1 - k, j + 1 - k, k);
                }
            }
            j2len = next;
        }
        (besti, bestj, bestsize)
    };
    let mut queue = vec![(0, a.len(), 0, b.len())];
    let mut blocks = Vec::new();
    while let Some((alo, ahi, blo, bhi)) = queue.pop() {
        let (i, j, k) = longest(alo, ahi, blo, bhi);
        if k > 0 {
            blocks.push((i, j, k));
            if alo < i && blo < j {
                queue.push((alo, i, blo, j));
            }
            if i + k < ahi && j + k < bhi {
                queue.push((i + k, ahi, j + k, bhi));
            }
        }
    }
    blocks.sort_unstable();
    // Adjacent blocks merge.
    let mut merged: Vec<(usize, usize, usize)> = Vec::new();
    for (i, j, k) in blocks {
        match merged.last_mut() {
            Some(last) if last.0 + last.2 == i && last.1 + last.2 == j => last.2 += k,
            _ => merged.push((i, j, k)),
        }
    }
    merged.push((a.len(), b.len(), 0));
    merged
}

fn opcodes(a: &[String], b: &[String]) -> Vec<Opcode> {
    let (mut i, mut j) = (0, 0);
    let mut codes = Vec::new();
    for (ai, bj, size) in matching_blocks(a, b) {
        let tag = match (i < ai, j < bj) {
            (true, true) => Some('r'),
            (true, false) => Some('d'),
            (false, true) => Some('i'),
            (false, false) => None,
        };
        if let Some(tag) = tag {
            codes.push((tag, i, ai, j, bj));
        }
        (i, j) = (ai + size, bj + size);
        if size > 0 {
            codes.push(('e', ai, i, bj, j));
        }
    }
    codes
}

fn grouped_opcodes(a: &[String], b: &[String], n: usize) -> Vec<Vec<Opcode>> {
    let mut codes = opcodes(a, b);
    if codes.is_empty() {
        codes.push(('e', 0, 1, 0, 1));
    }
    if let Some(first) = codes.first_mut()
        && first.0 == 'e'
    {
        let (tag, i1, i2, j1, j2) = *first;
        *first = (
            tag,
            i1.max(i2.saturating_sub(n)),
            i2,
            j1.max(j2.saturating_sub(n)),
            j2,
        );
    }
    if let Some(last) = codes.last_mut()
        && last.0 == 'e'
    {
        let (tag, i1, i2, j1, j2) = *last;
        *last = (tag, i1, i2.min(i1 + n), j1, j2.min(j1 + n));
    }
    let mut groups = Vec::new();
    let mut group = Vec::new();
    for (tag, mut i1, i2, mut j1, j2) in codes {
        if tag == 'e' && i2 - i1 > 2 * n {
            group.push((tag, i1, i2.min(i1 + n), j1, j2.min(j1 + n)));
            groups.push(std::mem::take(&mut group));
            (i1, j1) = (i1.max(i2.saturating_sub(n)), j1.max(j2.saturating_sub(n)));
        }
        group.push((tag, i1, i2, j1, j2));
    }
    if !(group.is_empty() || group.len() == 1 && group[0].0 == 'e') {
        groups.push(group);
    }
    groups
}

/// `formatRangeUnified`.
fn unified_range(start: usize, stop: usize) -> String {
    let length = stop - start;
    match length {
        1 => format!("{}", start + 1),
        0 => format!("{start},0"),
        _ => format!("{},{length}", start + 1),
    }
}

/// go-difflib's `GetUnifiedDiffString` without file names.
fn unified_diff(a: &str, b: &str, context: usize) -> String {
    let (a, b) = (split_lines(a), split_lines(b));
    let mut out = String::new();
    for group in grouped_opcodes(&a, &b, context) {
        let (Some(first), Some(last)) = (group.first(), group.last()) else {
            continue;
        };
        out.push_str(&format!(
            "@@ -{} +{} @@\n",
            unified_range(first.1, last.2),
            unified_range(first.3, last.4)
        ));
        for &(tag, i1, i2, j1, j2) in &group {
            if tag == 'e' {
                for line in &a[i1..i2] {
                    out.push(' ');
                    out.push_str(line);
                }
                continue;
            }
            if tag == 'r' || tag == 'd' {
                for line in &a[i1..i2] {
                    out.push('-');
                    out.push_str(line);
                }
            }
            if tag == 'r' || tag == 'i' {
                for line in &b[j1..j2] {
                    out.push('+');
                    out.push_str(line);
                }
            }
        }
    }
    out
}

fn annotation_pointer(annotation: &str) -> String {
    format!(
        "/metadata/annotations/{}",
        annotation.replace('~', "~0").replace('/', "~1")
    )
}

/// Drops nulls and empty maps and lists, which Go's semantic equality treats as unset.
pub fn normalized(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), normalized(v)))
                .filter(|(_, v)| !is_empty(v))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(normalized).collect()),
        other => other.clone(),
    }
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Object(map) => map.is_empty(),
        Value::Array(items) => items.is_empty(),
        _ => false,
    }
}

/// Parses a resource quantity (`10Gi`, `500M`, `1.5e9`, `100m`) to a number, enough to
/// compare sizes.
pub fn parse_quantity(quantity: &str) -> Option<f64> {
    const SUFFIXES: [(&str, f64); 14] = [
        ("Ki", 1024.0),
        ("Mi", 1_048_576.0),
        ("Gi", 1_073_741_824.0),
        ("Ti", 1_099_511_627_776.0),
        ("Pi", 1_125_899_906_842_624.0),
        ("Ei", 1_152_921_504_606_846_976.0),
        ("n", 1e-9),
        ("u", 1e-6),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
    ];
    let quantity = quantity.trim();
    let (number, factor) = SUFFIXES
        .iter()
        .find_map(|(suffix, factor)| quantity.strip_suffix(suffix).map(|n| (n, *factor)))
        .or_else(|| quantity.strip_suffix('E').map(|n| (n, 1e18)))
        .unwrap_or((quantity, 1.0));
    let value: f64 = number.parse().ok()?;
    value.is_finite().then_some(value * factor)
}

/// `stringData` is written into `data` (base64) and dropped, as the v1 conversion does; the
/// type defaults to `Opaque` (`SetDefaults_Secret`).
pub fn default_secret(object: &mut Value) {
    use base64::Engine as _;
    let Some(secret) = object.as_object_mut() else {
        return;
    };
    secret.entry("type").or_insert(json!("Opaque"));
    let Some(Value::Object(strings)) = secret.remove("stringData") else {
        return;
    };
    let data = secret.entry("data").or_insert(json!({}));
    if !data.is_object() {
        *data = json!({});
    }
    if let Some(data) = data.as_object_mut() {
        for (key, value) in strings {
            let text = value.as_str().unwrap_or_default();
            let encoded = base64::engine::general_purpose::STANDARD.encode(text);
            data.insert(key, json!(encoded));
        }
    }
}

/// `ValidateSecret`, the part our Secrets meet: a `kubernetes.io/tls` Secret carries both
/// halves of the pair.
pub fn validate_secret(object: &Value) -> Vec<FieldError> {
    if object.get("type").and_then(Value::as_str) != Some("kubernetes.io/tls") {
        return Vec::new();
    }
    ["tls.crt", "tls.key"]
        .into_iter()
        .filter(|key| object.pointer(&format!("/data/{key}")).is_none())
        .map(|key| FieldError::required(&format!("data[{key}]"), ""))
        .collect()
}

/// `ValidateSecretUpdate`: the type is immutable.
pub fn validate_secret_update(old: &Value, new: &Value) -> Vec<FieldError> {
    let mut errors = validate_secret(new);
    let (old_type, new_type) = (old.get("type"), new.get("type"));
    if old_type != new_type {
        let shown = new_type.and_then(Value::as_str).unwrap_or_default();
        errors.push(FieldError::invalid("type", shown, "field is immutable"));
    }
    errors
}

/// `SetDefaults_ValidatingWebhook` / `SetDefaults_MutatingWebhook`
/// (`pkg/apis/admissionregistration/v1/defaults.go`): failure policy, match policy, empty
/// selectors, timeout, each rule's scope, a service port, and (mutating) no reinvocation.
pub fn default_webhooks(object: &mut Value, mutating: bool) {
    for webhook in object
        .get_mut("webhooks")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
    {
        webhook.entry("failurePolicy").or_insert(json!("Fail"));
        webhook.entry("matchPolicy").or_insert(json!("Equivalent"));
        webhook.entry("namespaceSelector").or_insert(json!({}));
        webhook.entry("objectSelector").or_insert(json!({}));
        webhook.entry("timeoutSeconds").or_insert(json!(10));
        if mutating {
            webhook
                .entry("reinvocationPolicy")
                .or_insert(json!("Never"));
        }
        for rule in webhook
            .get_mut("rules")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
            .filter_map(Value::as_object_mut)
        {
            rule.entry("scope").or_insert(json!("*"));
        }
        if let Some(service) = webhook
            .get_mut("clientConfig")
            .and_then(|c| c.get_mut("service"))
            .and_then(Value::as_object_mut)
        {
            service.entry("port").or_insert(json!(443));
        }
    }
}
