//! What a cluster does, as the suite finds out by asking it: discovery, the OpenAPI document,
//! server-side dry runs, and one scratch claim in the release namespace (which no webhook of
//! ours covers). Scenarios take every apiVersion, field spelling and expected message from
//! here, never from a version number; the `gitVersion` is only named in skip reasons.
//!
//! A scenario states what it [`Need`]s; it runs on the first cluster of the environment that
//! has it ([`choose`]) and is skipped, naming what each cluster lacks, where none does.

use std::collections::BTreeMap;

use anyhow::Context as _;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::api::{GroupVersionKind, PostParams};
use kube::core::Version;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Cluster, USER, install};

/// The annotation a user writes maxUnavailable in where the API has no field for it.
pub const MAX_UNAVAILABLE_ANNOTATION: &str = "stateful-admission.io/max-unavailable";

/// The OpenAPI definition of `spec.updateStrategy.rollingUpdate`.
const ROLLING_UPDATE_DEFINITION: &str = "io.k8s.api.apps.v1.RollingUpdateStatefulSetStrategy";
const CLAIM_SPEC_DEFINITION: &str = "io.k8s.api.core.v1.PersistentVolumeClaimSpec";

/// Label on the scratch claim, so that one left by an interrupted run is removed by the next.
const PROBE_LABEL: &str = "e2e.stateful-admission.io/caps-probe";

/// What one cluster does, where the scenarios differ by it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caps {
    /// `gitVersion` from `/version`: named in skip reasons, never compared.
    pub git_version: String,
    /// The OpenAPI document lists `RollingUpdateStatefulSetStrategy.maxUnavailable`, so kubectl
    /// sends the field (where it does not, kubectl refuses `unknown field "maxUnavailable"`).
    pub mu_field: bool,
    /// A dry-run StatefulSet create keeps `maxUnavailable: 2` (`MaxUnavailableStatefulSet` on):
    /// the built-in controller honours the field and our driver stands down.
    pub mu_kept: bool,
    /// The newest storage.k8s.io version whose resources list `volumeattributesclasses`.
    pub vac_version: Option<String>,
    /// A dry-run claim create keeps `spec.volumeAttributesClassName`.
    pub claim_vac_kept: bool,
    /// The OpenAPI document lists `PersistentVolumeClaimSpec.volumeAttributesClassName` (so a
    /// StatefulSet's claim templates keep it even where claims drop it).
    pub claim_vac_field: bool,
    /// A claim created without a class may be given one afterwards (KEP-3333, which also lets
    /// the PV controller give such claims a new cluster default). `None`: the cluster could not
    /// tell, as a default StorageClass gave the scratch claim a class at creation.
    pub class_from_unset: Option<bool>,
}

/// A behaviour a scenario cannot run without.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// StatefulSets have `spec.updateStrategy.rollingUpdate.maxUnavailable` in their API.
    MuField,
    /// The apiserver drops that field: our driver keeps the budget.
    MuDropped,
    /// The apiserver keeps the field (so the API has it): the built-in controller drives.
    MuKept,
    /// VolumeAttributesClasses are served, and claims keep `spec.volumeAttributesClassName`.
    Vac,
    /// Claims have `spec.volumeAttributesClassName` in their API, and the apiserver drops it
    /// (the VolumeAttributesClass gate off): templates keep a class that claims never get.
    VacDropped,
}

/// Where a scenario runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    /// On the cluster at this index of those given to [`choose`].
    Run(usize),
    /// Nowhere: why.
    Skip(String),
}

/// The first of `clusters` (`(where it comes from, what it does)`, in the environment's order)
/// that has every one of `needs`; else why none does. With one cluster the reason also says
/// that a second could have run it.
pub fn choose(needs: &[Need], clusters: &[(&str, &Caps)]) -> Choice {
    let mut reasons = Vec::new();
    for (index, (source, caps)) in clusters.iter().enumerate() {
        let missing: Vec<String> = needs.iter().filter_map(|n| caps.missing(*n)).collect();
        if missing.is_empty() {
            return Choice::Run(index);
        }
        let missing = missing.join(", and ");
        reasons.push(if clusters.len() == 1 {
            format!("{}: {missing}", caps.git_version)
        } else {
            format!("{source} ({}): {missing}", caps.git_version)
        });
    }
    if clusters.len() == 1 {
        reasons.push(format!(
            "no second cluster to run it on ({} is not set)",
            super::GATES_KUBECONFIG
        ));
    }
    Choice::Skip(reasons.join("; "))
}

/// How a user writes maxUnavailable on a cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spelling {
    /// `updateStrategy: {type: RollingUpdate, rollingUpdate: {maxUnavailable: N}}`
    Field,
    /// `stateful-admission.io/max-unavailable: "N"` with `updateStrategy: {type: RollingUpdate}`
    Annotation,
}

impl Spelling {
    /// The part of a StatefulSet (an `extra` of `objects::statefulset`) that sets
    /// maxUnavailable to `value` in this spelling, beside the other `rollingUpdate` fields
    /// given (`{}` for none: then the annotation comes with `type: RollingUpdate` alone).
    pub fn strategy(self, value: &Value, rolling_update: Value) -> Value {
        match self {
            Spelling::Field => {
                let mut block = rolling_update;
                block["maxUnavailable"] = value.clone();
                json!({"spec": {"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": block}}})
            }
            Spelling::Annotation => {
                let text = match value {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                let mut strategy = json!({"type": "RollingUpdate"});
                if rolling_update.as_object().is_some_and(|o| !o.is_empty()) {
                    strategy["rollingUpdate"] = rolling_update;
                }
                json!({"metadata": {"annotations": {MAX_UNAVAILABLE_ANNOTATION: text}},
                       "spec": {"updateStrategy": strategy}})
            }
        }
    }
}

impl Caps {
    /// Why this cluster cannot run a scenario that needs `need`; `None` when it can.
    pub fn missing(&self, need: Need) -> Option<String> {
        const NO_FIELD: &str = "StatefulSets have no spec.updateStrategy.rollingUpdate.maxUnavailable \
             (not in the apiserver's OpenAPI; kubectl refuses the field)";
        match need {
            Need::MuField if !self.mu_field => Some(NO_FIELD.to_owned()),
            Need::MuDropped if self.mu_kept => Some(
                "the apiserver keeps spec.updateStrategy.rollingUpdate.maxUnavailable \
                 (MaxUnavailableStatefulSet on): the built-in controller drives, ours stands down"
                    .to_owned(),
            ),
            Need::MuKept if !self.mu_field => Some(NO_FIELD.to_owned()),
            Need::MuKept if !self.mu_kept => Some(
                "the apiserver drops spec.updateStrategy.rollingUpdate.maxUnavailable \
                 (MaxUnavailableStatefulSet off)"
                    .to_owned(),
            ),
            Need::Vac if self.vac_version.is_none() => Some(
                "no storage.k8s.io version serves volumeattributesclasses \
                 (VolumeAttributesClass not served)"
                    .to_owned(),
            ),
            Need::Vac if !self.claim_vac_kept => Some(
                "claims drop spec.volumeAttributesClassName (VolumeAttributesClass off)".to_owned(),
            ),
            Need::VacDropped if !self.claim_vac_field => Some(
                "claims have no spec.volumeAttributesClassName (not in the apiserver's OpenAPI)"
                    .to_owned(),
            ),
            Need::VacDropped if self.claim_vac_kept => Some(
                "claims keep spec.volumeAttributesClassName (VolumeAttributesClass on)".to_owned(),
            ),
            _ => None,
        }
    }

    /// How a user writes maxUnavailable here: the field where the API has it, else the
    /// annotation.
    pub fn mu_spelling(&self) -> Spelling {
        if self.mu_field {
            Spelling::Field
        } else {
            Spelling::Annotation
        }
    }

    /// What the refusal of maxUnavailable 0 (in [`Caps::mu_spelling`]) must say, in parts.
    /// Where the apiserver keeps the field, its own validation may answer before the webhook,
    /// in its own rendering of the value; both name the field and "cannot be 0".
    pub fn zero_max_unavailable_denial(&self) -> Vec<&'static str> {
        match (self.mu_spelling(), self.mu_kept) {
            (Spelling::Annotation, _) => vec![
                "metadata.annotations[stateful-admission.io/max-unavailable]: Invalid value: 0: cannot be 0",
            ],
            (Spelling::Field, false) => {
                vec![
                    "spec.updateStrategy.rollingUpdate.maxUnavailable: Invalid value: 0: cannot be 0",
                ]
            }
            (Spelling::Field, true) => vec![
                "spec.updateStrategy.rollingUpdate.maxUnavailable: Invalid value: ",
                ": cannot be 0",
            ],
        }
    }

    /// `apiVersion` of VolumeAttributesClass objects here, where they are served.
    pub fn vac_api_version(&self) -> Option<String> {
        self.vac_version
            .as_ref()
            .map(|v| format!("storage.k8s.io/{v}"))
    }

    /// Whether the cluster gives class-less claims a default class itself (KEP-3333), so that
    /// our part is turned off as the runbook advises.
    pub fn retroactive_default_class_native(&self) -> bool {
        self.class_from_unset == Some(true)
    }

    /// `--flag=false` arguments that turn off a part of ours the cluster does not do itself:
    /// advice to pass one of them here is wrong.
    pub fn wrong_to_turn_off(&self) -> Vec<&'static str> {
        let mut flags = Vec::new();
        if !self.mu_kept {
            flags.extend([
                "--max-unavailable-driver=false",
                "--max-unavailable-fallback=false",
            ]);
        }
        if self.class_from_unset == Some(false) {
            flags.push("--retroactive-default-class=false");
        }
        flags
    }

    /// The checks of a `stateful-admission check -o json` report whose message or hint
    /// advises one of [`Caps::wrong_to_turn_off`], as `name: message hint`.
    pub fn wrong_advice(&self, report: &Value) -> Vec<String> {
        let flags = self.wrong_to_turn_off();
        report["checks"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| {
                let text = format!(
                    "{} {}",
                    c["message"].as_str().unwrap_or_default(),
                    c["hint"].as_str().unwrap_or_default()
                );
                flags.iter().any(|f| text.contains(f)).then(|| {
                    format!(
                        "{}: {}",
                        c["name"].as_str().unwrap_or_default(),
                        text.trim()
                    )
                })
            })
            .collect()
    }

    /// Asks the cluster. Writes nothing but one scratch claim in the release namespace,
    /// removed again; everything else is a read or a dry run.
    pub async fn probe(cluster: &Cluster) -> anyhow::Result<Self> {
        let client = &cluster.client;
        install::ensure_namespace(cluster).await?;
        let definitions = openapi_definitions(client).await?;
        let mu_field = lists_property(&definitions, ROLLING_UPDATE_DEFINITION, "maxUnavailable");
        let claim_vac_field = lists_property(
            &definitions,
            CLAIM_SPEC_DEFINITION,
            "volumeAttributesClassName",
        );
        let mu_kept = keeps_max_unavailable(client)
            .await
            .context("dry-run StatefulSet create with maxUnavailable")?;
        let vac_version = vac_version(client)
            .await
            .context("discovery of storage.k8s.io")?;
        let claim_vac_kept = keeps_claim_vac(client)
            .await
            .context("dry-run claim create with volumeAttributesClassName")?;
        let class_from_unset = class_from_unset(client)
            .await
            .context("a class for a claim created without one (scratch claim)")?;
        Ok(Self {
            git_version: cluster.version.clone(),
            mu_field,
            mu_kept,
            vac_version,
            claim_vac_kept,
            claim_vac_field,
            class_from_unset,
        })
    }

    /// One line for the log: what the suite found.
    pub fn summary(&self) -> String {
        format!(
            "{}: maxUnavailable field {}, {}; VolumeAttributesClass {}, claims {} it; class for a class-less claim {}",
            self.git_version,
            if self.mu_field {
                "in the API"
            } else {
                "absent"
            },
            if self.mu_kept { "kept" } else { "dropped" },
            self.vac_api_version()
                .unwrap_or_else(|| "not served".to_owned()),
            if self.claim_vac_kept { "keep" } else { "drop" },
            match self.class_from_unset {
                Some(true) => "allowed",
                Some(false) => "refused",
                None => "unknown (a default StorageClass exists)",
            }
        )
    }
}

/// An OpenAPI schema, its property names only.
#[derive(Debug, Default, Deserialize)]
pub struct Schema {
    #[serde(default)]
    pub properties: BTreeMap<String, serde::de::IgnoredAny>,
}

#[derive(Deserialize)]
struct OpenApiV2 {
    #[serde(default)]
    definitions: BTreeMap<String, Schema>,
}

#[derive(Deserialize)]
struct OpenApiV3 {
    #[serde(default)]
    components: Components,
}

#[derive(Default, Deserialize)]
struct Components {
    #[serde(default)]
    schemas: BTreeMap<String, Schema>,
}

/// The definitions of `/openapi/v2`, else of `/openapi/v3/apis/apps/v1` where v2 is not
/// served.
async fn openapi_definitions(client: &kube::Client) -> anyhow::Result<BTreeMap<String, Schema>> {
    let get = |path: &str| {
        axum::http::Request::get(path)
            .header("Accept", "application/json")
            .body(Vec::new())
    };
    match client.request::<OpenApiV2>(get("/openapi/v2")?).await {
        Ok(doc) => Ok(doc.definitions),
        Err(v2) => {
            let doc: OpenApiV3 = client
                .request(get("/openapi/v3/apis/apps/v1")?)
                .await
                .with_context(|| format!("/openapi/v3/apis/apps/v1 (and /openapi/v2: {v2})"))?;
            Ok(doc.components.schemas)
        }
    }
}

/// Whether `definition` lists `property`.
pub fn lists_property(
    definitions: &BTreeMap<String, Schema>,
    definition: &str,
    property: &str,
) -> bool {
    definitions
        .get(definition)
        .is_some_and(|d| d.properties.contains_key(property))
}

fn dry_run() -> PostParams {
    PostParams {
        dry_run: true,
        field_manager: Some(USER.into()),
    }
}

async fn keeps_max_unavailable(client: &kube::Client) -> anyhow::Result<bool> {
    let sets: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        install::NAMESPACE,
        &ApiResource::erase::<StatefulSet>(&()),
    );
    let set: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "e2e-caps-probe"},
        "spec": {
            "replicas": 0,
            "serviceName": "e2e-caps-probe",
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": "e2e-caps-probe"}},
            "template": {
                "metadata": {"labels": {"app": "e2e-caps-probe"}},
                "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]},
            },
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 2}},
        },
    }))?;
    let created = sets.create(&dry_run(), &set).await?;
    Ok(created
        .data
        .pointer("/spec/updateStrategy/rollingUpdate/maxUnavailable")
        .is_some_and(|v| v == &json!(2)))
}

/// The newest of the storage.k8s.io versions that list `volumeattributesclasses`.
async fn vac_version(client: &kube::Client) -> anyhow::Result<Option<String>> {
    let groups = client.list_api_groups().await?;
    let Some(storage) = groups.groups.iter().find(|g| g.name == "storage.k8s.io") else {
        return Ok(None);
    };
    let mut serving = Vec::new();
    for version in &storage.versions {
        let resources = client
            .list_api_group_resources(&version.group_version)
            .await?;
        if resources
            .resources
            .iter()
            .any(|r| r.name == "volumeattributesclasses")
        {
            serving.push(version.version.clone());
        }
    }
    Ok(newest(&serving))
}

/// The most stable, highest of Kubernetes API versions (`v1` over `v1beta1` over `v1alpha1`).
pub fn newest(versions: &[String]) -> Option<String> {
    versions
        .iter()
        .max_by_key(|v| Version::parse(v).priority())
        .cloned()
}

fn claim(name: &str, extra: Value) -> anyhow::Result<PersistentVolumeClaim> {
    let mut claim = json!({
        "metadata": {"name": name, "labels": {PROBE_LABEL: "true"}},
        "spec": {"accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": "1Gi"}}},
    });
    super::objects::merge(&mut claim, extra);
    Ok(serde_json::from_value(claim)?)
}

async fn keeps_claim_vac(client: &kube::Client) -> anyhow::Result<bool> {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), install::NAMESPACE);
    let created = claims
        .create(
            &dry_run(),
            &claim(
                "e2e-caps-probe-vac",
                json!({"spec": {"volumeAttributesClassName": "e2e-caps-probe"}}),
            )?,
        )
        .await?;
    Ok(created
        .spec
        .and_then(|s| s.volume_attributes_class_name)
        .is_some())
}

/// A scratch claim created without a class, then a dry-run merge patch giving it one.
async fn class_from_unset(client: &kube::Client) -> anyhow::Result<Option<bool>> {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), install::NAMESPACE);
    let by_label = ListParams::default().labels(PROBE_LABEL);
    let _ = claims
        .delete_collection(&DeleteParams::default(), &by_label)
        .await;
    let name = format!("e2e-caps-probe-{:04x}", super::rand_u16());
    let created = claims
        .create(
            &PostParams {
                field_manager: Some(USER.into()),
                ..PostParams::default()
            },
            &claim(&name, json!({}))?,
        )
        .await?;
    let answer = if created
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.as_ref())
        .is_some()
    {
        // A default StorageClass filled it in at creation.
        Ok(None)
    } else {
        let patched = claims
            .patch(
                &name,
                &PatchParams {
                    dry_run: true,
                    field_manager: Some(USER.into()),
                    ..PatchParams::default()
                },
                &Patch::Merge(json!({"spec": {"storageClassName": "e2e-caps-probe"}})),
            )
            .await;
        match patched {
            Ok(_) => Ok(Some(true)),
            Err(kube::Error::Api(status)) if status.code == 422 => Ok(Some(false)),
            Err(e) => Err(e.into()),
        }
    };
    let _ = claims.delete(&name, &DeleteParams::default()).await;
    answer
}

/// VolumeAttributesClass objects as this cluster serves them.
pub fn vac_resource(version: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("storage.k8s.io", version, "VolumeAttributesClass"),
        "volumeattributesclasses",
    )
}
