//! What the view keeps of each kind, decided while decoding: the lite types below deserialize
//! only the fields the view's readers use, so serde skips the rest (managedFields, pod specs
//! and templates, foreign annotations such as kubectl's last-applied-configuration) without
//! building it. Both sources of the view decode through them: the watches (kube lists and
//! watches the lite types directly) and the `--state` file.
//!
//! A lite object serialises to JSON that decodes into its k8s-openapi type (fields it does
//! not hold are absent, and the type's defaults fill them), which is how the view stores it
//! and hands it to readers.
//!
//! The readers, by kind:
//! - StatefulSet: the claim rules (which set owns a claim name, its claim templates and the
//!   project's annotations) and every controller feature (identity, generation, replicas,
//!   ordinals, update strategy, pod management, minReadySeconds, templates, status), and who
//!   owns `maxUnavailable` in its managedFields (the gate's evidence). The pod
//!   template and selector are not read by anyone.
//! - PersistentVolumeClaim: read nearly whole (the claim controller compares labels,
//!   annotations, spec and status with the templates); managedFields, finalizers, owners and
//!   the control plane's own annotations (binding, provisioning, kubectl's copy) go.
//! - Pod: the claim rollout and the maxUnavailable driver read identity, the revision
//!   label, the controlling owner, creation and deletion timestamps, the phase and
//!   the Ready condition.
//! - Journal ConfigMaps: the controller finds them by name and reads whom they are about
//!   (their annotations); it reads the journal's content from the API when acting on it.

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use k8s_openapi::api::apps::v1::{
    StatefulSet, StatefulSetOrdinals, StatefulSetStatus, StatefulSetUpdateStrategy,
};
use k8s_openapi::api::core::v1::{
    ConfigMap, Namespace, PersistentVolumeClaim, PersistentVolumeClaimSpec,
    PersistentVolumeClaimStatus, Pod,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    FieldsV1, ManagedFieldsEntry, ObjectMeta, OwnerReference, Time,
};
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

use super::feed::{Change, Kind};
use crate::names;

/// Which keys of a label or annotation map are kept.
pub trait Keys {
    fn keep(key: &str) -> bool;
}

/// Every key.
pub enum AllKeys {}
/// The project's keys (`stateful-admission.io/…`).
pub enum OurKeys {}
/// The labels read off a pod: its revision.
pub enum PodLabelKeys {}
/// No key.
pub enum NoKeys {}
/// A claim's annotations but those the control plane keeps on it for itself: the binding
/// and provisioning records (`pv.kubernetes.io/…`, `volume.kubernetes.io/…`, the beta
/// provisioner) and kubectl's last-applied copy. No reader looks at them, and they are a
/// quarter of a bound claim's metadata.
pub enum ClaimAnnotationKeys {}

impl Keys for AllKeys {
    fn keep(_: &str) -> bool {
        true
    }
}

impl Keys for OurKeys {
    fn keep(key: &str) -> bool {
        key.starts_with(names::PREFIX)
    }
}

impl Keys for PodLabelKeys {
    fn keep(key: &str) -> bool {
        // The pod-name label only repeats the name (the watch selects pods by it).
        key == names::CONTROLLER_REVISION_HASH_LABEL
    }
}

impl Keys for NoKeys {
    fn keep(_: &str) -> bool {
        false
    }
}

impl Keys for ClaimAnnotationKeys {
    fn keep(key: &str) -> bool {
        claim_annotation_kept(key)
    }
}

/// Whether the view keeps a claim annotation (see [`ClaimAnnotationKeys`]); a template
/// annotation the view does not keep is the control plane's, not the user's to roll out.
pub fn claim_annotation_kept(key: &str) -> bool {
    !(key.starts_with("pv.kubernetes.io/")
        || key.starts_with("volume.kubernetes.io/")
        || key == "volume.beta.kubernetes.io/storage-provisioner"
        || key == "kubectl.kubernetes.io/last-applied-configuration")
}

/// A string map of which only the keys `F` keeps are built; the values of the others are
/// skipped unread. An empty result is `None`, as the apiserver omits empty maps.
struct Filtered<F>(Option<BTreeMap<String, String>>, PhantomData<F>);

impl<F> Default for Filtered<F> {
    fn default() -> Self {
        Self(None, PhantomData)
    }
}

impl<'de, F: Keys> Deserialize<'de> for Filtered<F> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_option(FilteredVisitor::<F>(PhantomData))
            .map(|m| Self(m, PhantomData))
    }
}

struct FilteredVisitor<F>(PhantomData<F>);

impl<'de, F: Keys> Visitor<'de> for FilteredVisitor<F> {
    type Value = Option<BTreeMap<String, String>>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a map of strings")
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut kept = BTreeMap::new();
        while let Some(key) = map.next_key_seed(KeptKey::<F>(PhantomData))? {
            match key {
                Some(key) => {
                    kept.insert(key, map.next_value::<String>()?);
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok((!kept.is_empty()).then_some(kept))
    }
}

/// A map key, allocated only when `F` keeps it.
struct KeptKey<F>(PhantomData<F>);

impl<'de, F: Keys> DeserializeSeed<'de> for KeptKey<F> {
    type Value = Option<String>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de, F: Keys> Visitor<'de> for KeptKey<F> {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string key")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<Self::Value, E> {
        Ok(F::keep(key).then(|| key.to_owned()))
    }
}

/// What a kind keeps of its metadata besides its identity (name, generateName, namespace,
/// uid, resourceVersion, generation, creation and deletion timestamps and grace period,
/// which every kind keeps).
pub trait MetaRules {
    type Labels: Keys;
    type Annotations: Keys;
    const OWNERS: Owners;
    /// Whether finalizers are kept.
    const FINALIZERS: bool;
    /// Whether the managedFields entries that own a StatefulSet's
    /// `spec.updateStrategy.rollingUpdate.maxUnavailable` are kept (reduced to that field):
    /// where the apiserver drops the field (its gate off) the ownership stays, which tells the
    /// maxUnavailable driver the gate's state before any probe.
    const MAX_UNAVAILABLE_OWNERS: bool = false;
}

/// Which owner references are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owners {
    All,
    /// The one with `controller: true`.
    Controller,
    None,
}

/// The metadata as decoded; managedFields and selfLink are never read.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", bound = "")]
struct MetaLite<R: MetaRules> {
    name: Option<String>,
    generate_name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    generation: Option<i64>,
    creation_timestamp: Option<Time>,
    deletion_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    #[serde(default)]
    labels: Filtered<R::Labels>,
    #[serde(default)]
    annotations: Filtered<R::Annotations>,
    owner_references: Option<Vec<OwnerReference>>,
    finalizers: Option<Vec<String>>,
    #[serde(default, deserialize_with = "max_unavailable_owners::<R, _>")]
    managed_fields: Option<Vec<ManagedFieldsEntry>>,
    #[serde(skip)]
    rules: PhantomData<R>,
}

/// The path of `spec.updateStrategy.rollingUpdate.maxUnavailable` in a managedFields entry's
/// `fieldsV1`; every other key is skipped unread.
#[derive(Deserialize)]
struct OwnsSpec {
    #[serde(rename = "f:spec")]
    spec: Option<OwnsStrategy>,
}

#[derive(Deserialize)]
struct OwnsStrategy {
    #[serde(rename = "f:updateStrategy")]
    strategy: Option<OwnsRollingUpdate>,
}

#[derive(Deserialize)]
struct OwnsRollingUpdate {
    #[serde(rename = "f:rollingUpdate")]
    rolling_update: Option<OwnsMaxUnavailable>,
}

#[derive(Deserialize)]
struct OwnsMaxUnavailable {
    #[serde(rename = "f:maxUnavailable")]
    max_unavailable: Option<IgnoredAny>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ManagedLite {
    manager: Option<String>,
    operation: Option<String>,
    #[serde(rename = "fieldsV1")]
    fields: Option<OwnsSpec>,
}

/// The entries owning maxUnavailable, reduced to it, where `R` keeps them; else skipped.
fn max_unavailable_owners<'de, R: MetaRules, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Vec<ManagedFieldsEntry>>, D::Error> {
    if !R::MAX_UNAVAILABLE_OWNERS {
        IgnoredAny::deserialize(d)?;
        return Ok(None);
    }
    let entries = Option::<Vec<ManagedLite>>::deserialize(d)?.unwrap_or_default();
    let owners: Vec<ManagedFieldsEntry> = entries
        .into_iter()
        .filter(|e| {
            e.fields
                .as_ref()
                .and_then(|f| f.spec.as_ref())
                .and_then(|s| s.strategy.as_ref())
                .and_then(|s| s.rolling_update.as_ref())
                .is_some_and(|r| r.max_unavailable.is_some())
        })
        .map(|e| ManagedFieldsEntry {
            manager: e.manager,
            operation: e.operation,
            fields_type: Some("FieldsV1".to_owned()),
            fields_v1: Some(FieldsV1(
                serde_json::json!({"f:spec": {"f:updateStrategy": {
                "f:rollingUpdate": {"f:maxUnavailable": {}}}}}),
            )),
            ..ManagedFieldsEntry::default()
        })
        .collect();
    Ok((!owners.is_empty()).then_some(owners))
}

/// Decodes metadata under the rules `R` into a plain `ObjectMeta`.
fn meta<'de, R: MetaRules, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    let m = MetaLite::<R>::deserialize(d)?;
    let owner_references = m
        .owner_references
        .filter(|_| R::OWNERS != Owners::None)
        .map(|owners| {
            owners
                .into_iter()
                .filter(|o| R::OWNERS == Owners::All || o.controller == Some(true))
                .map(|o| OwnerReference {
                    block_owner_deletion: None,
                    ..o
                })
                .collect::<Vec<_>>()
        })
        .filter(|owners| !owners.is_empty());
    Ok(ObjectMeta {
        name: m.name,
        generate_name: m.generate_name,
        namespace: m.namespace,
        uid: m.uid,
        resource_version: m.resource_version,
        generation: m.generation,
        creation_timestamp: m.creation_timestamp,
        deletion_timestamp: m.deletion_timestamp,
        deletion_grace_period_seconds: m.deletion_grace_period_seconds,
        labels: m.labels.0,
        annotations: m.annotations.0,
        owner_references,
        finalizers: m.finalizers.filter(|_| R::FINALIZERS),
        managed_fields: m.managed_fields,
        self_link: None,
    })
}

/// Objects the view watches: how they are trimmed (beyond what their type decodes) and
/// what their change tells the feed.
pub trait Watched:
    kube::Resource<DynamicType = ()>
    + Clone
    + fmt::Debug
    + serde::de::DeserializeOwned
    + Send
    + Sync
    + 'static
{
    const KIND: Kind;

    /// Drops what readers do not use from an object decoded whole (the typed kinds).
    fn trim(&mut self) {}

    /// The change this object's arrival, update or deletion is.
    fn change(&self) -> Change;
}

/// A watched kind the view stores as compact JSON and decodes into `Full` when read.
pub trait Lite: Watched + Serialize {
    type Full: serde::de::DeserializeOwned + Send + Sync + 'static;
}

fn name_of(meta: &ObjectMeta) -> String {
    meta.name.clone().unwrap_or_default()
}

fn namespace_of(meta: &ObjectMeta) -> String {
    meta.namespace.clone().unwrap_or_default()
}

/// Implements `kube::Resource` for a lite type as for its full type: same kind, group,
/// version, plural and scope, so that `Api<Lite>` lists and watches the full type's URLs.
macro_rules! lite_resource {
    ($lite:ty, $full:ty) => {
        impl kube::Resource for $lite {
            type DynamicType = ();
            type Scope = <$full as kube::Resource>::Scope;

            fn kind(dt: &()) -> std::borrow::Cow<'_, str> {
                <$full as kube::Resource>::kind(dt)
            }
            fn group(dt: &()) -> std::borrow::Cow<'_, str> {
                <$full as kube::Resource>::group(dt)
            }
            fn version(dt: &()) -> std::borrow::Cow<'_, str> {
                <$full as kube::Resource>::version(dt)
            }
            fn api_version(dt: &()) -> std::borrow::Cow<'_, str> {
                <$full as kube::Resource>::api_version(dt)
            }
            fn plural(dt: &()) -> std::borrow::Cow<'_, str> {
                <$full as kube::Resource>::plural(dt)
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

// --- StatefulSet ---

/// A set's metadata: identity and the project's annotations.
pub enum SetMeta {}

impl MetaRules for SetMeta {
    type Labels = NoKeys;
    type Annotations = OurKeys;
    const OWNERS: Owners = Owners::None;
    const FINALIZERS: bool = false;
    const MAX_UNAVAILABLE_OWNERS: bool = true;
}

/// A StatefulSet as the view keeps it (see the module for its readers).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct SetLite {
    #[serde(default, deserialize_with = "meta::<SetMeta, _>")]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: SetSpecLite,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<StatefulSetStatus>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SetSpecLite {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ordinals: Option<StatefulSetOrdinals>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_management_policy: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub update_strategy: Option<StatefulSetUpdateStrategy>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_ready_seconds: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volume_claim_templates: Option<Vec<TemplateLite>>,
}

/// A claim template: its metadata and spec, whole; not its status (which the apiserver
/// keeps and nobody reads) nor its type fields.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct TemplateLite {
    #[serde(default, deserialize_with = "meta::<ClaimMeta, _>")]
    pub metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<PersistentVolumeClaimSpec>,
}

lite_resource!(SetLite, StatefulSet);

impl Watched for SetLite {
    const KIND: Kind = Kind::StatefulSet;
    fn change(&self) -> Change {
        Change::StatefulSet {
            namespace: namespace_of(&self.metadata),
            name: name_of(&self.metadata),
        }
    }
}

impl Lite for SetLite {
    type Full = StatefulSet;
}

// --- PersistentVolumeClaim ---

/// A claim's metadata: all of it (but managedFields).
pub enum ClaimMeta {}

impl MetaRules for ClaimMeta {
    type Labels = AllKeys;
    type Annotations = ClaimAnnotationKeys;
    const OWNERS: Owners = Owners::None;
    const FINALIZERS: bool = false;
}

/// A claim as the view keeps it: whole, without managedFields.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct ClaimLite {
    #[serde(default, deserialize_with = "meta::<ClaimMeta, _>")]
    pub metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<PersistentVolumeClaimSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<PersistentVolumeClaimStatus>,
}

lite_resource!(ClaimLite, PersistentVolumeClaim);

impl Watched for ClaimLite {
    const KIND: Kind = Kind::Claim;
    fn change(&self) -> Change {
        Change::Claim {
            namespace: namespace_of(&self.metadata),
            name: name_of(&self.metadata),
        }
    }
}

impl Lite for ClaimLite {
    type Full = PersistentVolumeClaim;
}

// --- Pod ---

/// A pod's metadata: identity, the revision and pod-name labels, the controlling owner.
pub enum PodMeta {}

impl MetaRules for PodMeta {
    type Labels = PodLabelKeys;
    type Annotations = NoKeys;
    const OWNERS: Owners = Owners::Controller;
    const FINALIZERS: bool = false;
}

/// A pod of a StatefulSet as the view keeps it; no spec.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct PodLite {
    #[serde(default, deserialize_with = "meta::<PodMeta, _>")]
    pub metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<PodStatusLite>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct PodStatusLite {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// The Ready condition only.
    #[serde(
        default,
        deserialize_with = "ready_only",
        skip_serializing_if = "Option::is_none"
    )]
    pub conditions: Option<Vec<PodConditionLite>>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodConditionLite {
    #[serde(default, rename = "type")]
    pub type_: String,
    #[serde(default)]
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
}

fn ready_only<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<PodConditionLite>>, D::Error> {
    let conditions = Option::<Vec<PodConditionLite>>::deserialize(d)?;
    Ok(conditions
        .map(|c| {
            c.into_iter()
                .filter(|c| c.type_ == "Ready")
                .collect::<Vec<_>>()
        })
        .filter(|c| !c.is_empty()))
}

lite_resource!(PodLite, Pod);

impl PodLite {
    /// The StatefulSet that controls this pod, by name.
    fn owner(&self) -> Option<String> {
        self.metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true) && o.kind == "StatefulSet")
            .map(|o| o.name.clone())
    }
}

impl Watched for PodLite {
    const KIND: Kind = Kind::Pod;
    fn change(&self) -> Change {
        Change::Pod {
            namespace: namespace_of(&self.metadata),
            name: name_of(&self.metadata),
            owner: self.owner(),
        }
    }
}

impl Lite for PodLite {
    type Full = Pod;
}

// --- Journal ConfigMaps ---

/// A journal's metadata: identity, the project's labels and annotations.
pub enum JournalMeta {}

impl MetaRules for JournalMeta {
    type Labels = OurKeys;
    type Annotations = OurKeys;
    const OWNERS: Owners = Owners::None;
    const FINALIZERS: bool = false;
}

/// A convergence journal as the view keeps it: its metadata, not its content.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct JournalLite {
    #[serde(default, deserialize_with = "meta::<JournalMeta, _>")]
    pub metadata: ObjectMeta,
}

lite_resource!(JournalLite, ConfigMap);

impl JournalLite {
    /// The StatefulSet the journal is about, from its annotations.
    fn owner(&self) -> Option<(String, String)> {
        let a = self.metadata.annotations.as_ref()?;
        let namespace = a.get(names::JOURNAL_SET_NAMESPACE)?;
        let name = a.get(names::JOURNAL_SET_NAME)?;
        (!namespace.is_empty() && !name.is_empty()).then(|| (namespace.clone(), name.clone()))
    }
}

impl Watched for JournalLite {
    const KIND: Kind = Kind::Journal;
    fn change(&self) -> Change {
        Change::Journal {
            name: name_of(&self.metadata),
            owner: self.owner(),
        }
    }
}

impl Lite for JournalLite {
    type Full = ConfigMap;
}

// --- StorageClass and Namespace: few, decoded whole and trimmed ---

impl Watched for StorageClass {
    const KIND: Kind = Kind::StorageClass;
    fn trim(&mut self) {
        self.metadata.managed_fields = None;
    }
    fn change(&self) -> Change {
        Change::StorageClass(name_of(&self.metadata))
    }
}

/// A namespace keeps its identity, labels (the opt-out) and the project's annotations (its
/// default class).
impl Watched for Namespace {
    const KIND: Kind = Kind::Namespace;
    fn trim(&mut self) {
        let meta = &mut self.metadata;
        meta.managed_fields = None;
        meta.owner_references = None;
        meta.finalizers = None;
        meta.annotations = meta
            .annotations
            .take()
            .map(|a| {
                a.into_iter()
                    .filter(|(k, _)| OurKeys::keep(k))
                    .collect::<BTreeMap<_, _>>()
            })
            .filter(|a| !a.is_empty());
        self.spec = None;
        self.status = None;
    }
    fn change(&self) -> Change {
        Change::Namespace(name_of(&self.metadata))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// kubectl's record of the last applied object: often tens of KB, never kept.
    fn last_applied() -> String {
        format!("{{\"spec\":{{\"x\":\"{}\"}}}}", "y".repeat(40_000))
    }

    fn managed_fields() -> Value {
        json!([{"manager": "kubectl", "operation": "Update", "apiVersion": "v1",
                "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {}}}}])
    }

    /// Decodes `input` as `L`, and checks the JSON the view stores (`want`) and that it
    /// decodes into the full type as the same object.
    fn keeps<L: Lite + PartialEq>(input: Value, want: Value) -> L::Full
    where
        L::Full: Serialize,
    {
        let lite: L = serde_json::from_value(input).expect("decodes as the lite type");
        let stored = serde_json::to_vec(&lite).expect("serialises");
        assert_eq!(
            serde_json::from_slice::<Value>(&stored).expect("json"),
            want,
            "what the view stores"
        );
        let full: L::Full = serde_json::from_slice(&stored).expect("decodes as the full type");
        // Nothing is lost between the stored JSON and the full type.
        let again: L = serde_json::from_value(serde_json::to_value(&full).expect("json"))
            .expect("the full type decodes back");
        assert_eq!(again, lite);
        full
    }

    #[test]
    fn a_set_keeps_who_owns_max_unavailable_and_no_other_managed_field() {
        // As a v1.32 apiserver with the gate off stores an applied `maxUnavailable: 2`: the
        // field dropped, its ownership kept.
        let input = json!({"metadata": {"name": "db", "namespace": "team", "managedFields": [
            {"manager": "kubectl", "operation": "Apply", "apiVersion": "apps/v1",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {},
                "f:updateStrategy": {"f:rollingUpdate": {"f:maxUnavailable": {}}, "f:type": {}}}}},
            {"manager": "kube-controller-manager", "operation": "Update", "subresource": "status",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:replicas": {}}}},
            {"manager": "helm", "operation": "Apply",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:updateStrategy": {
                "f:rollingUpdate": {"f:partition": {}}}}}}
        ]}, "spec": {"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}}});
        let set: StatefulSet = keeps::<SetLite>(
            input,
            json!({"metadata": {"name": "db", "namespace": "team", "managedFields": [
                {"manager": "kubectl", "operation": "Apply", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:spec": {"f:updateStrategy": {"f:rollingUpdate": {"f:maxUnavailable": {}}}}}}
            ]}, "spec": {"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}}}),
        );
        assert_eq!(set.metadata.managed_fields.map(|m| m.len()), Some(1));
        // Claims keep none.
        let claim: ClaimLite = serde_json::from_value(json!({"metadata": {"name": "c",
            "managedFields": managed_fields()}}))
        .expect("a claim");
        assert_eq!(claim.metadata.managed_fields, None);
    }

    #[test]
    fn a_set_keeps_identity_our_annotations_the_spec_its_readers_use_and_status() {
        let set: StatefulSet = keeps::<SetLite>(
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {
                "name": "db", "namespace": "team", "uid": "u-1", "resourceVersion": "7", "generation": 3,
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "labels": {"app": "db"},
                "annotations": {
                    "stateful-admission.io/desired-volume-claim-templates": "[]",
                    "stateful-admission.io/max-unavailable": "2",
                    "kubectl.kubernetes.io/last-applied-configuration": last_applied(),
                    "meta.helm.sh/release-name": "db"
                },
                "ownerReferences": [{"apiVersion": "x/v1", "kind": "Db", "name": "db", "uid": "o", "controller": true}],
                "finalizers": ["x"],
                "managedFields": managed_fields()
            }, "spec": {
                "replicas": 3, "ordinals": {"start": 2}, "serviceName": "db",
                "podManagementPolicy": "Parallel", "minReadySeconds": 5, "revisionHistoryLimit": 4,
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 1, "maxUnavailable": "50%"}},
                "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain"},
                "selector": {"matchLabels": {"app": "db"}},
                "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{"name": "db", "image": "x"}]}},
                "volumeClaimTemplates": [
                    {"metadata": {"name": "data", "labels": {"a": "b"}, "annotations": {"c": "d"}},
                     "spec": {"storageClassName": "gold", "resources": {"requests": {"storage": "1Gi"}}}},
                    {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "wal"}, "status": {"phase": "Pending"}}
                ]
            }, "status": {
                "observedGeneration": 3, "replicas": 3, "readyReplicas": 2, "availableReplicas": 2,
                "updatedReplicas": 1, "currentReplicas": 2, "currentRevision": "db-1", "updateRevision": "db-2",
                "collisionCount": 0,
                "conditions": [{"type": "Available", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]
            }}),
            json!({"metadata": {
                "name": "db", "namespace": "team", "uid": "u-1", "resourceVersion": "7", "generation": 3,
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "annotations": {
                    "stateful-admission.io/desired-volume-claim-templates": "[]",
                    "stateful-admission.io/max-unavailable": "2"
                }
            }, "spec": {
                "replicas": 3, "ordinals": {"start": 2}, "serviceName": "db",
                "podManagementPolicy": "Parallel", "minReadySeconds": 5,
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 1, "maxUnavailable": "50%"}},
                "volumeClaimTemplates": [
                    {"metadata": {"name": "data", "labels": {"a": "b"}, "annotations": {"c": "d"}},
                     "spec": {"storageClassName": "gold", "resources": {"requests": {"storage": "1Gi"}}}},
                    {"metadata": {"name": "wal"}}
                ]
            }, "status": {
                "observedGeneration": 3, "replicas": 3, "readyReplicas": 2, "availableReplicas": 2,
                "updatedReplicas": 1, "currentReplicas": 2, "currentRevision": "db-1", "updateRevision": "db-2",
                "collisionCount": 0,
                "conditions": [{"type": "Available", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]
            }}),
        );
        // The required fields nobody reads come back empty.
        assert_eq!(set.spec.selector, Default::default());
        assert_eq!(set.spec.template, Default::default());
        assert_eq!(set.metadata.managed_fields, None);
    }

    #[test]
    fn a_claim_keeps_all_but_the_control_planes_bookkeeping() {
        let claim = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {
            "name": "data-db-0", "namespace": "team", "uid": "u-2", "resourceVersion": "9",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"app": "db"},
            "annotations": {"team.example.com/owner": "db", "volume.beta.kubernetes.io/storage-class": "gold"},
        }, "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "gold", "volumeName": "pv-1",
                    "volumeMode": "Filesystem", "resources": {"requests": {"storage": "1Gi"}}},
           "status": {"phase": "Bound", "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"}}});
        // As the apiserver returns it: managedFields, binding and provisioning annotations,
        // kubectl's copy, the protection finalizer, the retention policy's owner.
        let mut stored = claim.clone();
        stored["metadata"]["managedFields"] = managed_fields();
        let annotations = &mut stored["metadata"]["annotations"];
        for (k, v) in [
            ("pv.kubernetes.io/bind-completed", "yes"),
            ("pv.kubernetes.io/bound-by-controller", "yes"),
            ("volume.kubernetes.io/selected-node", "node-1"),
            (
                "volume.kubernetes.io/storage-provisioner",
                "ebs.csi.aws.com",
            ),
            (
                "volume.beta.kubernetes.io/storage-provisioner",
                "ebs.csi.aws.com",
            ),
            ("kubectl.kubernetes.io/last-applied-configuration", "{}"),
        ] {
            annotations[k] = json!(v);
        }
        stored["metadata"]["ownerReferences"] =
            json!([{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": "u-1"}]);
        stored["metadata"]["finalizers"] = json!(["kubernetes.io/pvc-protection"]);
        let mut want = claim.clone();
        if let Some(o) = want.as_object_mut() {
            o.remove("apiVersion");
            o.remove("kind");
        }
        let full = keeps::<ClaimLite>(stored, want);
        let expected: PersistentVolumeClaim = serde_json::from_value(claim).expect("a claim");
        assert_eq!(full, expected);
        assert!(!claim_annotation_kept("pv.kubernetes.io/bind-completed"));
        assert!(claim_annotation_kept(
            "volume.beta.kubernetes.io/storage-class"
        ));
    }

    #[test]
    fn a_pod_keeps_identity_its_revision_its_controller_phase_and_readiness() {
        let pod: Pod = keeps::<PodLite>(
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": "db-0", "namespace": "team", "uid": "u-3", "resourceVersion": "11",
                "generateName": "db-", "creationTimestamp": "2026-01-01T00:00:00Z",
                "deletionTimestamp": "2026-01-02T00:00:00Z", "deletionGracePeriodSeconds": 30,
                "labels": {"app": "db", "controller-revision-hash": "db-2",
                           "statefulset.kubernetes.io/pod-name": "db-0",
                           "apps.kubernetes.io/pod-index": "0"},
                "annotations": {"kubectl.kubernetes.io/restartedAt": "now", "big": last_applied()},
                "ownerReferences": [
                    {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": "u-1", "controller": true, "blockOwnerDeletion": true},
                    {"apiVersion": "v1", "kind": "ConfigMap", "name": "other", "uid": "u-9"}
                ],
                "finalizers": ["x"],
                "managedFields": managed_fields()
            }, "spec": {"containers": [{"name": "db", "image": "postgres", "env": [{"name": "A", "value": "B"}]}],
                        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0"}}]},
               "status": {"phase": "Running", "podIP": "10.0.0.1", "startTime": "2026-01-01T00:00:00Z",
                          "conditions": [
                              {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                              {"type": "Ready", "status": "True", "lastProbeTime": null, "reason": "r", "message": "m",
                               "lastTransitionTime": "2026-01-01T00:00:05Z"}
                          ],
                          "containerStatuses": [{"name": "db", "ready": true, "restartCount": 0, "image": "postgres", "imageID": "x"}]}}),
            json!({"metadata": {
                "name": "db-0", "namespace": "team", "uid": "u-3", "resourceVersion": "11",
                "generateName": "db-", "creationTimestamp": "2026-01-01T00:00:00Z",
                "deletionTimestamp": "2026-01-02T00:00:00Z", "deletionGracePeriodSeconds": 30,
                "labels": {"controller-revision-hash": "db-2"},
                "ownerReferences": [
                    {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": "u-1", "controller": true}
                ]
            }, "status": {"phase": "Running",
                          "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:05Z"}]}}),
        );
        assert_eq!(pod.spec, None, "no pod spec");
        let lite: PodLite = serde_json::from_value(json!({"metadata": {"name": "db-0", "namespace": "team",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": "u-1", "controller": true}]}}))
            .expect("pod");
        assert_eq!(
            lite.change(),
            Change::Pod {
                namespace: "team".into(),
                name: "db-0".into(),
                owner: Some("db".into())
            }
        );
    }

    #[test]
    fn a_journal_keeps_its_metadata_not_its_content() {
        let journal: ConfigMap = keeps::<JournalLite>(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
                "name": "sa-journal.team.db", "namespace": "sa", "uid": "u-4", "resourceVersion": "12",
                "labels": {"stateful-admission.io/journal": "true", "other": "x"},
                "annotations": {"stateful-admission.io/journal-namespace": "team",
                                "stateful-admission.io/journal-name": "db",
                                "stateful-admission.io/journal-step": "journaled"},
                "managedFields": managed_fields()
            }, "data": {"statefulset": last_applied()}}),
            json!({"metadata": {
                "name": "sa-journal.team.db", "namespace": "sa", "uid": "u-4", "resourceVersion": "12",
                "labels": {"stateful-admission.io/journal": "true"},
                "annotations": {"stateful-admission.io/journal-namespace": "team",
                                "stateful-admission.io/journal-name": "db",
                                "stateful-admission.io/journal-step": "journaled"}
            }}),
        );
        assert_eq!(journal.data, None);
        let lite: JournalLite =
            serde_json::from_value(serde_json::to_value(&journal).expect("json")).expect("journal");
        assert_eq!(
            lite.change(),
            Change::Journal {
                name: "sa-journal.team.db".into(),
                owner: Some(("team".into(), "db".into()))
            }
        );
    }

    #[test]
    fn namespaces_and_classes_are_trimmed_after_decoding() {
        let mut ns: Namespace = serde_json::from_value(json!({"metadata": {
            "name": "team", "labels": {"stateful-admission.io/ignore": "true", "kubernetes.io/metadata.name": "team"},
            "annotations": {"stateful-admission.io/default-storage-class": "fast", "kubectl.kubernetes.io/last-applied-configuration": last_applied()},
            "managedFields": managed_fields()
        }, "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}))
        .expect("namespace");
        ns.trim();
        assert_eq!(
            serde_json::to_value(&ns).expect("json"),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {
                "name": "team", "labels": {"stateful-admission.io/ignore": "true", "kubernetes.io/metadata.name": "team"},
                "annotations": {"stateful-admission.io/default-storage-class": "fast"}
            }})
        );
        let mut class: StorageClass = serde_json::from_value(json!({"metadata": {
            "name": "gold", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
            "managedFields": managed_fields()
        }, "provisioner": "x", "allowVolumeExpansion": true}))
        .expect("class");
        class.trim();
        assert_eq!(class.metadata.managed_fields, None);
        assert_eq!(class.allow_volume_expansion, Some(true));
        assert!(class.metadata.annotations.is_some());
    }

    #[test]
    fn bad_values_of_kept_fields_are_refused_and_of_skipped_ones_ignored() {
        // A skipped annotation may hold anything; a kept one must be a string, as in the full type.
        let ok: Result<SetLite, _> = serde_json::from_value(json!({"metadata": {"name": "a",
            "annotations": {"other": {"not": "a string"}}}}));
        assert!(ok.is_ok());
        let bad: Result<SetLite, _> = serde_json::from_value(json!({"metadata": {"name": "a",
            "annotations": {"stateful-admission.io/x": 5}}}));
        assert!(bad.is_err());
        let bad: Result<SetLite, _> = serde_json::from_value(
            json!({"metadata": {"name": "a"}, "spec": {"replicas": "many"}}),
        );
        assert!(bad.is_err());
        // Fields the full type requires but the lite one can do without.
        let pod: PodLite = serde_json::from_value(json!({"metadata": {"name": "a"},
            "status": {"conditions": [{"type": "Ready"}, {"status": "True"}]}}))
        .expect("lenient");
        let full: Pod =
            serde_json::from_slice(&serde_json::to_vec(&pod).expect("json")).expect("pod");
        assert_eq!(
            full.status.and_then(|s| s.conditions).map(|c| c.len()),
            Some(1)
        );
    }
}
