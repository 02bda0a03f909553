//! One profile per apiserver the project supports, built from what a real one answered
//! (`tests/fixtures/apiserver-behaviour/<label>/`, captured from real control planes): its
//! `/version`, its discovery documents and the property names its OpenAPI lists, read from the
//! captures at test time, and the behaviour switches of [`FakeApiConfig`] that make the fake
//! answer every captured probe as that apiserver did (`tests/it/apiserver_replay.rs` checks it).
//!
//! [`FakeApiConfig::default`] has no profile of its own: it serves the documents of
//! [`Profile::V1_32GatesOn`] (both gates on, as its switches are) under its own `gitVersion`.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::{Value, json};

use super::{FakeApiConfig, MetadataWording, ValueWording};

/// An apiserver build and feature-gate setting the captures cover.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Profile {
    /// v1.24.0-alpha.1: no `maxUnavailable` nor claim `volumeAttributesClassName` in the types,
    /// no retention policy (its gate is alpha), no recovery from a failed expansion.
    V1_24,
    /// v1.32.0 as shipped: `MaxUnavailableStatefulSet` and `VolumeAttributesClass` off.
    V1_32,
    /// v1.32.0 with both gates on and `storage.k8s.io/v1beta1` served.
    V1_32GatesOn,
    /// v1.35.3 as shipped: VolumeAttributesClass GA, `MaxUnavailableStatefulSet` off.
    V1_35,
    /// v1.35.3 with `MaxUnavailableStatefulSet` on.
    V1_35MaxUnavailableOn,
    /// v1.36.2 as shipped (answers as v1.35 does; only `/version` differs).
    V1_36,
}

/// The fields a StatefulSet update may change, in the order the apiserver's message names them
/// (`pkg/apis/apps/validation.ValidateStatefulSetUpdate`): v1.24.
pub const STATEFULSET_MUTABLE_V1_24: &[&str] = &[
    "replicas",
    "template",
    "updateStrategy",
    "persistentVolumeClaimRetentionPolicy",
    "minReadySeconds",
];

/// v1.26 to v1.34: `ordinals` joins.
pub const STATEFULSET_MUTABLE_V1_32: &[&str] = &[
    "replicas",
    "ordinals",
    "template",
    "updateStrategy",
    "persistentVolumeClaimRetentionPolicy",
    "minReadySeconds",
];

/// v1.35 on: `revisionHistoryLimit` too.
pub const STATEFULSET_MUTABLE_V1_35: &[&str] = &[
    "replicas",
    "ordinals",
    "template",
    "updateStrategy",
    "revisionHistoryLimit",
    "persistentVolumeClaimRetentionPolicy",
    "minReadySeconds",
];

impl Profile {
    pub const ALL: [Profile; 6] = [
        Profile::V1_24,
        Profile::V1_32,
        Profile::V1_32GatesOn,
        Profile::V1_35,
        Profile::V1_35MaxUnavailableOn,
        Profile::V1_36,
    ];

    /// The folder of its captures.
    pub fn label(self) -> &'static str {
        match self {
            Self::V1_24 => "v1.24",
            Self::V1_32 => "v1.32",
            Self::V1_32GatesOn => "v1.32-gates-on",
            Self::V1_35 => "v1.35",
            Self::V1_35MaxUnavailableOn => "v1.35-maxunavailable-on",
            Self::V1_36 => "v1.36",
        }
    }

    /// The profile of a folder name.
    pub fn from_label(label: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.label() == label)
    }

    /// `tests/fixtures/apiserver-behaviour/<label>`.
    pub fn dir(self) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/apiserver-behaviour")
            .join(self.label())
    }

    /// What the captures say, read once per test binary.
    ///
    /// # Panics
    /// If the captures cannot be read: the test data is missing.
    pub fn data(self) -> Arc<ProfileData> {
        static CACHE: OnceLock<Mutex<HashMap<Profile, Arc<ProfileData>>>> = OnceLock::new();
        let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
        let mut cache = cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(
            cache
                .entry(self)
                .or_insert_with(|| Arc::new(ProfileData::load(self))),
        )
    }

    /// Every captured record of `probes.json`, in order.
    ///
    /// # Panics
    /// If the file is missing or not JSON.
    pub fn probes(self) -> Vec<Value> {
        let path = self.dir().join("probes.json");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        let records: Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("parse {}: {e}", path.display()));
        records
            .as_array()
            .cloned()
            .unwrap_or_else(|| panic!("{} is not a list", path.display()))
    }

    /// One captured AdmissionReview, by file name as a probe record lists it
    /// (`reviews/01-statefulsets-CREATE-mutate.json`).
    ///
    /// # Panics
    /// If the file is missing or not JSON.
    pub fn review(self, file: &str) -> Value {
        let path = self.dir().join(file);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("parse {}: {e}", path.display()))
    }
}

/// `/version`, discovery and OpenAPI property names as captured for one profile.
#[derive(Debug, Clone)]
pub struct ProfileData {
    pub git_version: String,
    pub git_commit: String,
    /// `(group, [groupVersion, ...] preferred first)` of `/apis`, in its order.
    pub groups: Vec<(String, Vec<String>)>,
    /// Captured resource lists by groupVersion (`v1`, `apps/v1`, `storage.k8s.io/v1`):
    /// `[{name, kind, namespaced, verbs}]`.
    pub resources: BTreeMap<String, Vec<Value>>,
    /// OpenAPI definition name → property names (`None`: the definition does not exist).
    pub definitions: BTreeMap<String, Option<Vec<String>>>,
}

impl ProfileData {
    fn load(profile: Profile) -> Self {
        let mut data = Self {
            git_version: String::new(),
            git_commit: String::new(),
            groups: Vec::new(),
            resources: BTreeMap::new(),
            definitions: BTreeMap::new(),
        };
        for record in profile.probes() {
            let id = record["id"].as_str().unwrap_or("");
            let path = record["request"]["path"].as_str().unwrap_or("");
            let body = &record["response"]["body"];
            if record["request"]["method"] != "GET" || !id.starts_with("01") {
                continue;
            }
            match path {
                "/version" => {
                    data.git_version = body["gitVersion"].as_str().unwrap_or("").to_owned();
                    data.git_commit = body["gitCommit"].as_str().unwrap_or("").to_owned();
                }
                "/apis" => {
                    for group in body["groups"].as_array().into_iter().flatten() {
                        let name = group["name"].as_str().unwrap_or("").to_owned();
                        let preferred = group["preferredVersion"].as_str().unwrap_or("");
                        let mut versions: Vec<String> = group["versions"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(Value::as_str)
                            .map(str::to_owned)
                            .collect();
                        // The preferred version first, as the apiserver lists it.
                        versions.sort_by_key(|v| v != preferred);
                        data.groups.push((name, versions));
                    }
                }
                "/openapi/v2" => {
                    for (name, properties) in body.as_object().into_iter().flatten() {
                        let names = properties.as_array().map(|list| {
                            list.iter()
                                .filter_map(Value::as_str)
                                .map(str::to_owned)
                                .collect()
                        });
                        data.definitions.insert(name.clone(), names);
                    }
                }
                _ if body["kind"] == "APIResourceList" => {
                    let group_version = body["groupVersion"].as_str().unwrap_or("").to_owned();
                    let resources = body["resources"].as_array().cloned().unwrap_or_default();
                    data.resources.insert(group_version, resources);
                }
                _ => {}
            }
        }
        assert!(
            !data.git_version.is_empty() && !data.groups.is_empty(),
            "the captures of {} hold /version and /apis",
            profile.label()
        );
        data
    }
}

impl FakeApiConfig {
    /// The fake as the apiserver of `profile`: its version and documents, and every
    /// behaviour the captures show (see the README of the captures, "Differences that matter").
    pub fn profile(profile: Profile) -> FakeApiConfig {
        let data = profile.data();
        let base = FakeApiConfig {
            git_version: data.git_version.clone(),
            git_commit: data.git_commit.clone(),
            documents: profile,
            claim_resize_admission: true,
            ..FakeApiConfig::default()
        };
        // v1.32 as shipped: both gates off; the rest of the switches as the default has them.
        let v1_32 = FakeApiConfig {
            drop_statefulset_max_unavailable: true,
            drop_claim_volume_attributes_class: true,
            volume_attributes_class_api: None,
            service_account_credential_id: true,
            pod_index_label: true,
            ..base.clone()
        };
        // v1.35 as shipped: VolumeAttributesClass GA; revisionHistoryLimit mutable; embedded
        // ObjectMeta no longer prints a zero creationTimestamp; diffs as JSON.
        let v1_35 = FakeApiConfig {
            drop_claim_volume_attributes_class: false,
            volume_attributes_class_api: Some("v1"),
            volume_attributes_class_protection: true,
            statefulset_mutable_fields: STATEFULSET_MUTABLE_V1_35,
            zero_creation_timestamp_null: false,
            claim_spec_json_diff: true,
            pod_generation: true,
            metadata_wording: MetadataWording::V1_35,
            ..v1_32.clone()
        };
        match profile {
            Profile::V1_24 => FakeApiConfig {
                statefulset_max_unavailable_in_types: false,
                claim_volume_attributes_class_in_types: false,
                statefulset_retention_policy: false,
                statefulset_mutable_fields: STATEFULSET_MUTABLE_V1_24,
                expansion_recovery: false,
                retroactive_default_class_allowed: false,
                service_account_credential_id: false,
                pod_index_label: false,
                volume_last_phase_transition_time: false,
                volume_claim_ref_granular: false,
                pod_disruption_conditions: false,
                unhealthy_pod_eviction_policy: false,
                metadata_wording: MetadataWording::V1_24,
                statefulset_name_dns_label: false,
                ..v1_32
            },
            Profile::V1_32 => v1_32,
            Profile::V1_32GatesOn => FakeApiConfig {
                drop_statefulset_max_unavailable: false,
                max_unavailable_default_one: true,
                max_unavailable_validation: Some(ValueWording::GoStruct),
                drop_claim_volume_attributes_class: false,
                volume_attributes_class_api: Some("v1beta1"),
                ..v1_32
            },
            Profile::V1_35 | Profile::V1_36 => v1_35,
            Profile::V1_35MaxUnavailableOn => FakeApiConfig {
                drop_statefulset_max_unavailable: false,
                max_unavailable_default_one: true,
                max_unavailable_validation: Some(ValueWording::Json),
                ..v1_35
            },
        }
    }
}

/// The documents the fake serves for discovery and OpenAPI: the captured ones of
/// [`FakeApiConfig::documents`], adjusted to the switches (where VolumeAttributesClasses are
/// served, which fields the types have).
pub struct Documents {
    config: FakeApiConfig,
    data: Arc<ProfileData>,
}

/// The served version of VolumeAttributesClasses, if any: only with claims keeping
/// `volumeAttributesClassName` (one gate decides both).
pub fn volume_attributes_class_version(config: &FakeApiConfig) -> Option<&'static str> {
    config
        .volume_attributes_class_api
        .filter(|_| !config.drop_claim_volume_attributes_class)
}

fn group_version(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    }
}

fn version_of(group_version: &str) -> &str {
    group_version.rsplit('/').next().unwrap_or(group_version)
}

impl Documents {
    pub fn new(config: &FakeApiConfig) -> Self {
        Self {
            config: config.clone(),
            data: config.documents.data(),
        }
    }

    /// `(group, versions)` served, preferred version first.
    fn groups(&self) -> Vec<(String, Vec<String>)> {
        let mut groups = self.data.groups.clone();
        if let Some(version) = volume_attributes_class_version(&self.config) {
            let wanted = group_version("storage.k8s.io", version);
            for (name, versions) in &mut groups {
                if name == "storage.k8s.io" && !versions.contains(&wanted) {
                    versions.push(wanted.clone());
                }
            }
        }
        groups
    }

    fn version_entry(group_version: &str) -> Value {
        json!({"groupVersion": group_version, "version": version_of(group_version)})
    }

    fn group_entry(name: &str, versions: &[String]) -> Value {
        let listed: Vec<Value> = versions.iter().map(|v| Self::version_entry(v)).collect();
        json!({
            "name": name,
            "versions": listed,
            "preferredVersion": Self::version_entry(versions.first().map_or("", String::as_str)),
        })
    }

    /// `GET /apis`.
    pub fn group_list(&self) -> Value {
        let groups: Vec<Value> = self
            .groups()
            .iter()
            .map(|(name, versions)| Self::group_entry(name, versions))
            .collect();
        json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
    }

    /// `GET /apis/{group}`.
    pub fn group(&self, group: &str) -> Option<Value> {
        let groups = self.groups();
        let (name, versions) = groups.iter().find(|(name, _)| name == group)?;
        let mut entry = Self::group_entry(name, versions);
        entry["kind"] = json!("APIGroup");
        entry["apiVersion"] = json!("v1");
        Some(entry)
    }

    /// `GET /api`.
    pub fn core_versions(address: &str) -> Value {
        json!({"kind": "APIVersions", "versions": ["v1"],
               "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}]})
    }

    /// `GET /api/v1` (`group` empty) or `GET /apis/{group}/{version}`.
    pub fn resource_list(&self, group: &str, version: &str) -> Option<Value> {
        let gv = group_version(group, version);
        let served = group.is_empty() && version == "v1"
            || self
                .groups()
                .iter()
                .any(|(name, versions)| name == group && versions.contains(&gv));
        if !served {
            return None;
        }
        let mut resources: Vec<Value> = match self.data.resources.get(&gv) {
            Some(captured) => captured.clone(),
            // Not captured: the fake's own resources of that version.
            None => super::resources::ALL
                .iter()
                .filter(|r| r.group == group && r.version == version)
                .flat_map(|r| {
                    let verbs = json!([
                        "create",
                        "delete",
                        "deletecollection",
                        "get",
                        "list",
                        "patch",
                        "update",
                        "watch"
                    ]);
                    let mut entries = vec![json!({"name": r.plural, "kind": r.kind,
                        "namespaced": r.namespaced, "verbs": verbs})];
                    if r.status_subresource {
                        entries.push(
                            json!({"name": format!("{}/status", r.plural), "kind": r.kind,
                            "namespaced": r.namespaced, "verbs": ["get", "patch", "update"]}),
                        );
                    }
                    entries
                })
                .collect(),
        };
        if group == "storage.k8s.io" {
            let vac = "volumeattributesclasses";
            resources.retain(|r| r["name"] != vac);
            if volume_attributes_class_version(&self.config) == Some(version) {
                resources.push(json!({"name": vac, "kind": "VolumeAttributesClass", "namespaced": false,
                    "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]}));
                resources.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
            }
        }
        for resource in &mut resources {
            // kube's APIResource needs `singularName`; the apiserver leaves it empty on
            // subresources.
            let name = resource["name"].as_str().unwrap_or("");
            let singular = if name.contains('/') {
                String::new()
            } else {
                resource["kind"].as_str().unwrap_or("").to_lowercase()
            };
            resource["singularName"] = json!(singular);
        }
        Some(
            json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv,
                    "resources": resources}),
        )
    }

    /// Definition name → property names, adjusted to the switches.
    pub fn definitions(&self) -> BTreeMap<String, Vec<String>> {
        let mut definitions: BTreeMap<String, Vec<String>> = self
            .data
            .definitions
            .iter()
            .filter_map(|(name, properties)| Some((name.clone(), properties.clone()?)))
            .collect();
        let mut set = |definition: &str, property: &str, present: bool| {
            if let Some(properties) = definitions.get_mut(definition) {
                properties.retain(|p| p != property);
                if present {
                    properties.push(property.to_owned());
                    properties.sort();
                }
            }
        };
        set(
            "io.k8s.api.apps.v1.RollingUpdateStatefulSetStrategy",
            "maxUnavailable",
            self.config.statefulset_max_unavailable_in_types,
        );
        set(
            "io.k8s.api.core.v1.PersistentVolumeClaimSpec",
            "volumeAttributesClassName",
            self.config.claim_volume_attributes_class_in_types,
        );
        set(
            "io.k8s.api.apps.v1.StatefulSetSpec",
            "volumeClaimUpdatePolicy",
            self.config.native_template_edits,
        );
        definitions
    }

    fn schema(properties: &[String]) -> Value {
        let properties: serde_json::Map<String, Value> =
            properties.iter().map(|p| (p.clone(), json!({}))).collect();
        json!({"type": "object", "properties": properties})
    }

    /// `GET /openapi/v2`: the captured definitions, each with its properties.
    pub fn openapi_v2(&self) -> Value {
        let definitions: serde_json::Map<String, Value> = self
            .definitions()
            .iter()
            .map(|(name, properties)| (name.clone(), Self::schema(properties)))
            .collect();
        json!({"swagger": "2.0",
               "info": {"title": "Kubernetes", "version": self.config.git_version},
               "paths": {}, "definitions": definitions})
    }

    /// The OpenAPI v3 paths served: `api/v1` and `apis/<group>/<version>` of every served
    /// group version.
    fn v3_paths(&self) -> Vec<String> {
        let mut paths = vec!["api/v1".to_owned()];
        for (_, versions) in self.groups() {
            paths.extend(versions.into_iter().map(|gv| format!("apis/{gv}")));
        }
        paths
    }

    /// `GET /openapi/v3`: the index.
    pub fn openapi_v3_index(&self) -> Value {
        let paths: serde_json::Map<String, Value> = self
            .v3_paths()
            .into_iter()
            .map(|p| {
                let url = format!("/openapi/v3/{p}?hash=0");
                (p, json!({"serverRelativeURL": url}))
            })
            .collect();
        json!({"paths": paths})
    }

    /// `GET /openapi/v3/<path>`: the definitions of that group version, and the core ones
    /// they reference.
    pub fn openapi_v3(&self, path: &str) -> Option<Value> {
        if !self.v3_paths().iter().any(|p| p == path) {
            return None;
        }
        let prefix = match path.strip_prefix("apis/") {
            Some(gv) => {
                let (group, version) = gv.split_once('/')?;
                let short = group.split('.').next().unwrap_or(group);
                format!("io.k8s.api.{short}.{version}.")
            }
            None => "io.k8s.api.core.v1.".to_owned(),
        };
        let schemas: serde_json::Map<String, Value> = self
            .definitions()
            .iter()
            .filter(|(name, _)| {
                name.starts_with(&prefix) || name.starts_with("io.k8s.api.core.v1.")
            })
            .map(|(name, properties)| (name.clone(), Self::schema(properties)))
            .collect();
        Some(json!({"openapi": "3.0.0",
                    "info": {"title": "Kubernetes", "version": self.config.git_version},
                    "paths": {}, "components": {"schemas": schemas}}))
    }
}
