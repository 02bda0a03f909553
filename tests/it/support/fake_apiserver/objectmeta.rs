//! Object metadata as kube-apiserver validates it on every create, update, patch and apply, for
//! every type the fake serves: `metadata.name` and `metadata.generateName` by the type's name
//! rule, `metadata.namespace`, label keys and values, annotation keys and their total size
//! (`k8s.io/apimachinery/pkg/api/validation.ValidateObjectMeta`, `ValidateObjectMetaUpdate`,
//! `pkg/apis/meta/v1/validation.ValidateLabels`, `pkg/util/validation`), in the wording of the
//! configured version ([`MetadataWording`]); and `generateName`'s names
//! (`apiserver/pkg/storage/names.SimpleNameGenerator`).
//!
//! Where the errors come from, and how often a cause repeats (the message lists each once):
//! - a create runs the type's strategy (`ValidateObjectMeta` with its name rule, then the type's
//!   own checks); only if that passes, the generic `ValidateObjectMetaAccessor` of
//!   `rest.BeforeCreate`, which checks names as path segments only. So the types whose strategy
//!   does not validate metadata (core/v1 Events, PodDisruptionBudgets) take any name a URL can
//!   carry, and their label errors come only when nothing else is wrong;
//! - an update runs `rest.BeforeUpdate`'s `validateCommonFields` (`ValidateObjectMetaAccessor`
//!   and `ValidateObjectMetaAccessorUpdate`), then the strategy's `ValidateUpdate`, which
//!   validates metadata once or twice more, as each type's [`update_passes`] lists. A bad label
//!   on a ConfigMap update is thus four identical causes, as the apiserver answers it.
//!
//! Not modelled: owner references, finalizers, `metadata.generation` and managedFields
//! validation.

use serde_json::{Map, Value};

use super::FakeApiConfig;
use super::errors::FieldError;
use super::registry::Target;
use super::resources::{self, ResourceType};

/// How a version words the metadata errors that changed over time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetadataWording {
    /// Up to v1.31: `field.TooLong` says `must have at most 262144 bytes`; label checks count
    /// `characters`; a key with two slashes is `a qualified name ...`.
    V1_24,
    /// v1.32 to v1.34: `field.TooLong` says `may not be more than 262144 bytes`.
    V1_32,
    /// v1.35 on: label keys and values checked by `api/validate/content`, which counts
    /// `bytes` and calls a key with two slashes `a valid label key ...`.
    V1_35,
}

/// A type's `metadata.name` rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRule {
    /// `apimachineryvalidation.NameIsDNSSubdomain`: most types.
    Subdomain,
    /// `NameIsDNSLabel`: namespaces, and StatefulSets from v1.27.
    Label,
    /// `path.ValidatePathSegmentName`: the generic check alone, for types whose strategy
    /// validates no metadata.
    PathSegment,
}

/// One metadata check an apiserver runs on a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    /// `ValidateObjectMeta`/`ValidateObjectMetaAccessor` with a name rule.
    Full(NameRule),
    /// `ValidateObjectMetaAccessorUpdate`: labels and annotations again (the immutable fields
    /// are checked where the fake keeps them).
    Update,
}

/// `validation.TotalAnnotationSizeLimitB`: 256 KiB of keys and values together.
pub const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;

/// `names.maxNameLength - names.randomLength`: a longer `generateName` is cut to this.
const MAX_GENERATED_NAME_LENGTH: usize = 63 - 5;

/// The name rule of `resource`'s strategy.
pub fn name_rule(config: &FakeApiConfig, resource: &ResourceType) -> NameRule {
    if std::ptr::eq(resource, &resources::NAMESPACES) {
        NameRule::Label
    } else if std::ptr::eq(resource, &resources::STATEFULSETS) {
        // `ValidateStatefulSetName`: a DNS label from v1.27 (kubernetes#114172).
        if config.statefulset_name_dns_label {
            NameRule::Label
        } else {
            NameRule::Subdomain
        }
    } else if std::ptr::eq(resource, &resources::CORE_EVENTS)
        || std::ptr::eq(resource, &resources::POD_DISRUPTION_BUDGETS)
    {
        // `ValidateEventCreate` checks core/v1 Events the legacy way (no ObjectMeta);
        // `ValidatePodDisruptionBudget` checks only the spec.
        NameRule::PathSegment
    } else {
        NameRule::Subdomain
    }
}

/// What the strategy's `ValidateUpdate` runs of metadata checks, per type: e.g. the namespace
/// strategy's `ValidateNamespace` then `ValidateNamespaceUpdate`, `ValidateConfigMapUpdate`'s
/// `ValidateObjectMetaUpdate` then `ValidateConfigMap`.
fn update_passes(config: &FakeApiConfig, resource: &ResourceType) -> Vec<Pass> {
    let full = Pass::Full(name_rule(config, resource));
    let is = |other: &ResourceType| std::ptr::eq(resource, other);
    if is(&resources::NAMESPACES)
        || is(&resources::STORAGE_CLASSES)
        || is(&resources::VOLUME_ATTRIBUTES_CLASSES)
        || is(&resources::VOLUME_ATTRIBUTES_CLASSES_V1BETA1)
    {
        vec![full, Pass::Update]
    } else if is(&resources::CONFIG_MAPS) || is(&resources::SECRETS) || is(&resources::PODS) {
        vec![Pass::Update, full]
    } else if is(&resources::PERSISTENT_VOLUME_CLAIMS) {
        // `ValidatePersistentVolumeClaim`, then `...Update`, which validates the claim again.
        vec![full, Pass::Update, full]
    } else if is(&resources::PERSISTENT_VOLUMES) {
        vec![full, full]
    } else if is(&resources::STATEFULSETS) {
        // From v1.27 `ValidateStatefulSetUpdate` no longer revalidates the name.
        if config.statefulset_name_dns_label {
            vec![Pass::Update]
        } else {
            vec![full, Pass::Update]
        }
    } else if is(&resources::MUTATING_WEBHOOK_CONFIGURATIONS)
        || is(&resources::VALIDATING_WEBHOOK_CONFIGURATIONS)
    {
        vec![full]
    } else if is(&resources::CORE_EVENTS) || is(&resources::POD_DISRUPTION_BUDGETS) {
        Vec::new()
    } else {
        // Deployments, Leases, events.k8s.io Events: `ValidateObjectMetaUpdate` once.
        vec![Pass::Update]
    }
}

/// The metadata errors of the strategy's `Validate` on create, before the type's own.
pub fn validate_create(
    config: &FakeApiConfig,
    resource: &ResourceType,
    object: &Value,
) -> Vec<FieldError> {
    match name_rule(config, resource) {
        NameRule::PathSegment => Vec::new(),
        rule => check(Pass::Full(rule), object, resource.namespaced, config),
    }
}

/// `rest.BeforeCreate`'s `ValidateObjectMetaAccessor` with `path.ValidatePathSegmentName`, run
/// once the strategy found nothing.
pub fn validate_create_generic(
    config: &FakeApiConfig,
    resource: &ResourceType,
    object: &Value,
) -> Vec<FieldError> {
    check(
        Pass::Full(NameRule::PathSegment),
        object,
        resource.namespaced,
        config,
    )
}

/// The metadata errors of an update (replace, patch, apply) of `target`: `validateCommonFields`,
/// then the strategy's (the status strategies' `Validate...StatusUpdate` call
/// `ValidateObjectMetaUpdate`, the budget's does not).
pub fn validate_update(
    config: &FakeApiConfig,
    resource: &ResourceType,
    target: Target,
    object: &Value,
) -> Vec<FieldError> {
    let mut passes = vec![Pass::Full(NameRule::PathSegment), Pass::Update];
    match target {
        Target::Status if std::ptr::eq(resource, &resources::POD_DISRUPTION_BUDGETS) => {}
        Target::Status => passes.push(Pass::Update),
        Target::Main | Target::Scale => passes.extend(update_passes(config, resource)),
    }
    passes
        .into_iter()
        .flat_map(|pass| check(pass, object, resource.namespaced, config))
        .collect()
}

/// `names.SimpleNameGenerator.GenerateName`: the prefix cut to 58 bytes, then the suffix.
pub fn generated_name(prefix: &str, suffix: &str) -> String {
    let mut end = prefix.len().min(MAX_GENERATED_NAME_LENGTH);
    while !prefix.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{suffix}", &prefix[..end])
}

/// One pass over `object`'s metadata.
fn check(pass: Pass, object: &Value, namespaced: bool, config: &FakeApiConfig) -> Vec<FieldError> {
    let empty = Map::new();
    let meta = object
        .get("metadata")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let text = |key: &str| meta.get(key).and_then(Value::as_str).unwrap_or("");
    let mut errors = Vec::new();
    if let Pass::Full(rule) = pass {
        // `ValidateObjectMetaAccessor`: generateName (a trailing '-' allowed), name, namespace.
        let generate_name = text("generateName");
        if !generate_name.is_empty() {
            for msg in name_messages(rule, generate_name.as_bytes(), true) {
                errors.push(FieldError::invalid(
                    "metadata.generateName",
                    generate_name,
                    &msg,
                ));
            }
        }
        let name = text("name");
        if name.is_empty() {
            errors.push(FieldError::required(
                "metadata.name",
                "name or generateName is required",
            ));
        } else {
            for msg in name_messages(rule, name.as_bytes(), false) {
                errors.push(FieldError::invalid("metadata.name", name, &msg));
            }
        }
        let namespace = text("namespace");
        if namespaced {
            if namespace.is_empty() {
                errors.push(FieldError::required("metadata.namespace", ""));
            } else {
                // `ValidateNamespaceName` is `NameIsDNSLabel`.
                for msg in dns1123_label(namespace.as_bytes()) {
                    errors.push(FieldError::invalid("metadata.namespace", namespace, &msg));
                }
            }
        } else if !namespace.is_empty() {
            errors.push(FieldError::forbidden(
                "metadata.namespace",
                "not allowed on this type",
            ));
        }
    }
    if let Some(labels) = meta.get("labels").and_then(Value::as_object) {
        errors.extend(validate_labels(labels, config.metadata_wording));
    }
    if let Some(annotations) = meta.get("annotations").and_then(Value::as_object) {
        errors.extend(validate_annotations(annotations, config.metadata_wording));
    }
    errors
}

/// `metav1validation.ValidateLabels`: each key a qualified name, each value a label value; one
/// error per message (Go walks the map in random order; the fake in key order).
fn validate_labels(labels: &Map<String, Value>, wording: MetadataWording) -> Vec<FieldError> {
    let mut keys: Vec<&String> = labels.keys().collect();
    keys.sort();
    let mut errors = Vec::new();
    for key in keys {
        for msg in qualified_name(key.as_bytes(), wording) {
            errors.push(FieldError::invalid("metadata.labels", key, &msg));
        }
        let Some(value) = labels.get(key).and_then(Value::as_str) else {
            continue;
        };
        for msg in label_value(value.as_bytes(), wording) {
            errors.push(FieldError::invalid("metadata.labels", value, &msg));
        }
    }
    errors
}

/// `apimachineryvalidation.ValidateAnnotations`: keys are qualified names once lowercased; keys
/// and values together at most 256 KiB (`ValidateAnnotationsSize`).
fn validate_annotations(
    annotations: &Map<String, Value>,
    wording: MetadataWording,
) -> Vec<FieldError> {
    let mut keys: Vec<&String> = annotations.keys().collect();
    keys.sort();
    let mut errors = Vec::new();
    for key in &keys {
        for msg in qualified_name(key.to_lowercase().as_bytes(), wording) {
            errors.push(FieldError::invalid("metadata.annotations", key, &msg));
        }
    }
    let total: usize = keys
        .iter()
        .map(|key| {
            key.len()
                + annotations
                    .get(*key)
                    .and_then(Value::as_str)
                    .map_or(0, str::len)
        })
        .sum();
    if total > TOTAL_ANNOTATION_SIZE_LIMIT {
        // `field.TooLong`, worded as `field/errors.go` of the version.
        let detail = match wording {
            MetadataWording::V1_24 => {
                format!("must have at most {TOTAL_ANNOTATION_SIZE_LIMIT} bytes")
            }
            MetadataWording::V1_32 | MetadataWording::V1_35 => {
                format!("may not be more than {TOTAL_ANNOTATION_SIZE_LIMIT} bytes")
            }
        };
        errors.push(FieldError::too_long("metadata.annotations", &detail));
    }
    errors
}

/// The messages of a name (or, with `prefix`, a generateName) under `rule`.
fn name_messages(rule: NameRule, name: &[u8], prefix: bool) -> Vec<String> {
    match rule {
        NameRule::Subdomain if prefix => dns1123_subdomain(&mask_trailing_dash(name), NAME_UNIT),
        NameRule::Subdomain => dns1123_subdomain(name, NAME_UNIT),
        NameRule::Label if prefix => dns1123_label(&mask_trailing_dash(name)),
        NameRule::Label => dns1123_label(name),
        NameRule::PathSegment => path_segment(name, prefix),
    }
}

/// `maskTrailingDash`: a prefix's final '-' is allowed (the suffix follows it); Go drops the
/// last two bytes and appends an `a`.
fn mask_trailing_dash(name: &[u8]) -> Vec<u8> {
    if name.len() > 1 && name.ends_with(b"-") {
        let mut masked = name[..name.len() - 2].to_vec();
        masked.push(b'a');
        masked
    } else {
        name.to_vec()
    }
}

/// `path.ValidatePathSegmentName` / `IsValidPathSegmentPrefix`.
fn path_segment(name: &[u8], prefix: bool) -> Vec<String> {
    if !prefix {
        for illegal in [&b"."[..], &b".."[..]] {
            if name == illegal {
                return vec![format!("may not be '{}'", String::from_utf8_lossy(illegal))];
            }
        }
    }
    [b'/', b'%']
        .into_iter()
        .filter(|c| name.contains(c))
        .map(|c| format!("may not contain '{}'", char::from(c)))
        .collect()
}

/// How `MaxLenError` counts: `util/validation` says characters, `api/validate/content`
/// (v1.35+ label checks) bytes.
#[derive(Clone, Copy)]
enum Unit {
    Characters,
    Bytes,
}

/// `metadata.name` is checked by `util/validation`, in characters in every version.
const NAME_UNIT: Unit = Unit::Characters;

fn max_len_error(length: usize, unit: Unit) -> String {
    match unit {
        Unit::Characters => format!("must be no more than {length} characters"),
        Unit::Bytes => format!("must be no more than {length} bytes"),
    }
}

/// `validation.RegexError`: `msg (e.g. 'a',  or 'b', regex used for validation is 'fmt')`.
fn regex_error(msg: &str, format: &str, examples: &[&str]) -> String {
    let mut out = msg.to_owned();
    if examples.is_empty() {
        out.push_str(&format!(" (regex used for validation is '{format}')"));
        return out;
    }
    out.push_str(" (e.g. ");
    for (i, example) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push_str(&format!("'{example}', "));
    }
    out.push_str(&format!("regex used for validation is '{format}')"));
    out
}

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_LABEL_ERR: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_ERR: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_ERR: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_ERR: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

/// `^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
fn is_label_format(value: &[u8]) -> bool {
    let edge = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    value.first().is_some_and(edge)
        && value.last().is_some_and(edge)
        && value.iter().all(|b| edge(b) || *b == b'-')
}

/// `^<label>(\.<label>)*$`
fn is_subdomain_format(value: &[u8]) -> bool {
    value.split(|b| *b == b'.').all(is_label_format)
}

/// `^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`
fn is_qualified_name_format(value: &[u8]) -> bool {
    value.first().is_some_and(u8::is_ascii_alphanumeric)
        && value.last().is_some_and(u8::is_ascii_alphanumeric)
        && value
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// `validation.IsDNS1123Label` (max 63).
fn dns1123_label(value: &[u8]) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 63 {
        errs.push(max_len_error(63, NAME_UNIT));
    }
    if !is_label_format(value) {
        if is_subdomain_format(value) {
            errs.push("must not contain dots".to_owned());
        } else {
            errs.push(regex_error(
                DNS1123_LABEL_ERR,
                DNS1123_LABEL_FMT,
                &["my-name", "123-abc"],
            ));
        }
    }
    errs
}

/// `validation.IsDNS1123Subdomain` (max 253).
fn dns1123_subdomain(value: &[u8], unit: Unit) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 253 {
        errs.push(max_len_error(253, unit));
    }
    if !is_subdomain_format(value) {
        errs.push(regex_error(
            DNS1123_SUBDOMAIN_ERR,
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

/// `validation.IsQualifiedName` (v1.35+ `content.IsLabelKey`): an optional DNS subdomain
/// prefix and '/', then a name of at most 63.
fn qualified_name(value: &[u8], wording: MetadataWording) -> Vec<String> {
    let unit = label_unit(wording);
    let parts: Vec<&[u8]> = value.split(|b| *b == b'/').collect();
    let mut errs = Vec::new();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_owned());
            } else {
                errs.extend(
                    dns1123_subdomain(prefix, unit)
                        .into_iter()
                        .map(|msg| format!("prefix part {msg}")),
                );
            }
            *name
        }
        _ => {
            let what = match wording {
                MetadataWording::V1_24 | MetadataWording::V1_32 => "a qualified name",
                MetadataWording::V1_35 => "a valid label key",
            };
            return vec![format!(
                "{what} {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(
                    QUALIFIED_NAME_ERR,
                    QUALIFIED_NAME_FMT,
                    &["MyName", "my.name", "123-abc"]
                )
            )];
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_owned());
    } else if name.len() > 63 {
        errs.push(format!("name part {}", max_len_error(63, unit)));
    }
    if !is_qualified_name_format(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_ERR,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// `validation.IsValidLabelValue` (v1.35+ `content.IsLabelValue`): empty, or a name of at most 63.
fn label_value(value: &[u8], wording: MetadataWording) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 63 {
        errs.push(max_len_error(63, label_unit(wording)));
    }
    if !(value.is_empty() || is_qualified_name_format(value)) {
        errs.push(regex_error(
            LABEL_VALUE_ERR,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

fn label_unit(wording: MetadataWording) -> Unit {
    match wording {
        MetadataWording::V1_24 | MetadataWording::V1_32 => Unit::Characters,
        MetadataWording::V1_35 => Unit::Bytes,
    }
}
