//! The parts of the built-in registries' defaulting and validation our tests depend on,
//! with the messages of `pkg/apis/apps/validation` and `pkg/apis/core/validation`.

use serde_json::{Value, json};

use super::errors::FieldError;

/// The apiserver's message when a StatefulSet update touches an immutable spec field.
pub const STATEFULSET_SPEC_FORBIDDEN: &str = "updates to statefulset spec for fields other than 'replicas', 'ordinals', \
     'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden";

/// The apiserver's message when a PVC update touches an immutable spec field.
pub const PVC_SPEC_FORBIDDEN: &str = "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims";

/// The annotation older clients use instead of `spec.storageClassName`.
const BETA_STORAGE_CLASS_ANNOTATION: &str = "volume.beta.kubernetes.io/storage-class";

/// `metadata.name` must be a DNS-1123 subdomain for every type we serve.
pub fn validate_name(name: &str) -> Vec<FieldError> {
    let label_ok = |label: &str| {
        !label.is_empty()
            && label
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    };
    if name.len() <= 253 && name.split('.').all(label_ok) {
        return Vec::new();
    }
    vec![FieldError::invalid(
        "metadata.name",
        name,
        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', \
         and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is \
         '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
    )]
}

/// Fields the apiserver fills in when a StatefulSet is written (`SetDefaults_StatefulSet`),
/// including the defaulted claim templates the captured requests show.
pub fn default_statefulset(object: &mut Value) {
    let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    spec.entry("replicas").or_insert(json!(1));
    spec.entry("podManagementPolicy")
        .or_insert(json!("OrderedReady"));
    spec.entry("revisionHistoryLimit").or_insert(json!(10));
    spec.entry("persistentVolumeClaimRetentionPolicy")
        .or_insert(json!({"whenDeleted": "Retain", "whenScaled": "Retain"}));
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
        }
    }
    if let Some(template) = spec.get_mut("template").and_then(Value::as_object_mut) {
        // The zero creationTimestamp of an embedded ObjectMeta prints as null.
        let meta = template.entry("metadata").or_insert(json!({}));
        if let Some(meta) = meta.as_object_mut() {
            meta.entry("creationTimestamp").or_insert(Value::Null);
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
                meta.entry("creationTimestamp").or_insert(Value::Null);
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

/// `spec.volumeMode` defaults to `Filesystem` (`SetDefaults_PersistentVolumeClaimSpec`).
pub fn default_pvc(object: &mut Value) {
    if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
        spec.entry("volumeMode").or_insert(json!("Filesystem"));
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

/// `ValidateStatefulSetUpdate`: only some spec fields may change.
pub fn validate_statefulset_update(old: &Value, new: &Value) -> Vec<FieldError> {
    const MUTABLE: [&str; 6] = [
        "replicas",
        "ordinals",
        "template",
        "updateStrategy",
        "persistentVolumeClaimRetentionPolicy",
        "minReadySeconds",
    ];
    let frozen = |object: &Value| {
        let mut spec = object.get("spec").cloned().unwrap_or(json!({}));
        if let Some(spec) = spec.as_object_mut() {
            for field in MUTABLE {
                spec.remove(field);
            }
        }
        normalized(&spec)
    };
    if frozen(old) == frozen(new) {
        Vec::new()
    } else {
        vec![FieldError::forbidden("spec", STATEFULSET_SPEC_FORBIDDEN)]
    }
}

/// Knobs of PVC update validation that differ between apiserver versions.
pub struct PvcUpdateRules {
    /// Kubernetes 1.25+ (KEP-3333) lets `spec.storageClassName` go from unset to a value.
    pub retroactive_default_class_allowed: bool,
}

/// `ValidatePersistentVolumeClaimUpdate`: the spec is immutable except a bound claim's
/// requests, `volumeAttributesClassName`, a first `volumeName`, and a class set on a
/// claim that had none.
pub fn validate_pvc_update(old: &Value, new: &Value, rules: &PvcUpdateRules) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let mut old_spec = old.get("spec").cloned().unwrap_or(json!({}));
    let mut new_spec = new.get("spec").cloned().unwrap_or(json!({}));
    let bound = new.pointer("/status/phase").and_then(Value::as_str) == Some("Bound");

    for spec in [&mut old_spec, &mut new_spec] {
        if let Some(spec) = spec.as_object_mut() {
            spec.remove("volumeAttributesClassName");
        }
    }
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
    let class_from_nil = rules.retroactive_default_class_allowed
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
    }
    if normalized(&old_spec) != normalized(&new_spec) {
        errors.push(FieldError::forbidden("spec", PVC_SPEC_FORBIDDEN));
    }

    // Shrinking is allowed only while recovering from a failed expansion, and never to or
    // below the capacity the volume already has (RecoverVolumeExpansionFailure, GA in 1.34).
    let storage = |v: &Value, p: &str| {
        v.pointer(p)
            .and_then(Value::as_str)
            .and_then(parse_quantity)
    };
    let (old_size, new_size) = (
        storage(old, "/spec/resources/requests/storage"),
        storage(new, "/spec/resources/requests/storage"),
    );
    let capacity = storage(old, "/status/capacity/storage");
    if let (Some(old_size), Some(new_size)) = (old_size, new_size)
        && new_size < old_size
        && capacity.is_some_and(|c| new_size <= c)
    {
        errors.push(FieldError::forbidden(
            "spec.resources.requests.storage",
            "field can not be less than status.capacity",
        ));
    }
    errors
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
