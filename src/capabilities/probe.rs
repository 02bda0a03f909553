//! The requests that learn the capabilities: reads (`/version`, discovery, OpenAPI) and
//! server-side dry runs (`dryRun=All`: admitted and validated, never stored). `serve` runs them
//! in the controller's namespace and `check` in the release namespace; the chart excludes that
//! namespace from both webhooks, so an answer never waits on our own webhook. Nothing here
//! writes.

use axum::http;
use kube::api::{Api, ApiResource, DynamicObject, Patch};
use serde_json::{Value as Json, json};

use super::judge::{self, Fields};
use super::{Learned, Name, NativeField, StorageVersion, Value};
use crate::field_manager;

/// Prefix of the dry-run objects' generated names (a fixed name could collide with a real one).
pub const PROBE_NAME_PREFIX: &str = "stateful-admission-capability-probe-";
/// The class the claim dry run names: it need not exist (the claim is never stored).
pub const PROBE_VOLUME_ATTRIBUTES_CLASS: &str = "stateful-admission-probe";

/// Existing claims a dry-run patch can be tried on: what a rule about changing an existing
/// claim needs (no create can show it). Chosen from the cluster view by [`judge`]-side rules.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Candidates {
    /// A class-less, unbound claim and a class to give it.
    pub class_less: Option<ClaimChange>,
    /// A bound claim whose request is above its capacity, and a lower request still above it.
    pub expanding: Option<ClaimChange>,
}

/// A dry-run change of one claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimChange {
    pub namespace: String,
    pub name: String,
    /// The value sent (a class name, a quantity).
    pub value: String,
}

/// What one attempt to learn a capability came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Learned(Learned),
    /// The request failed (unreachable, refused, an answer that says nothing): why.
    Failed(String),
    /// Nothing to try it on, or not this caller's to try: why.
    NotTried(String),
}

/// One round of probes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Round {
    /// `gitVersion` of `/version`, or why it failed (then nothing else was asked).
    pub git_version: Result<String, String>,
    pub outcomes: Vec<(Name, Outcome)>,
}

impl Round {
    pub fn outcome(&self, name: Name) -> Option<&Outcome> {
        self.outcomes
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, o)| o)
    }
}

/// Asks the apiserver behind `client` everything not in `skip`, working in `namespace`.
pub async fn probe(
    client: &kube::Client,
    namespace: &str,
    candidates: &Candidates,
    skip: &[Name],
) -> Round {
    let git_version = match client.apiserver_version().await {
        Ok(info) => info.git_version,
        Err(error) => {
            return Round {
                git_version: Err(error.to_string()),
                outcomes: Vec::new(),
            };
        }
    };
    let wanted = |name: Name| !skip.contains(&name);
    let mut outcomes = Vec::new();

    let (apps, core) = openapi(client).await;
    let fields = Fields::from_openapi(apps.as_ref().ok(), core.as_ref().ok());
    let openapi_note = match (&apps, &core) {
        (Ok(_), Ok(_)) => String::new(),
        (Err(e), _) | (_, Err(e)) => format!("; OpenAPI not read ({e})"),
    };

    if wanted(Name::VolumeAttributesClassApi) {
        outcomes.push((
            Name::VolumeAttributesClassApi,
            volume_attributes_class_api(client).await,
        ));
    }

    let native = fields.native_template_field.flatten();
    // The StatefulSet dry run tells maxUnavailable, and the KEP-4650 field where OpenAPI lists
    // one; without such a field OpenAPI alone says the edits are not native.
    if wanted(Name::MaxUnavailable) || (wanted(Name::NativeTemplateEdits) && native.is_some()) {
        let answer = dry_run_create(client, namespace, "statefulsets", statefulset(native)).await;
        let place = format!("dry-run create of a StatefulSet in {namespace:?}");
        if wanted(Name::MaxUnavailable) {
            outcomes.push((
                Name::MaxUnavailable,
                match &answer {
                    Ok(answer) => {
                        let value = judge::max_unavailable(answer, &fields);
                        Outcome::Learned(Learned::probed(
                            value,
                            format!(
                                "{place}: spec.updateStrategy.rollingUpdate.maxUnavailable {}{openapi_note}",
                                fate_text(value)
                            ),
                        ))
                    }
                    Err(e) => unanswered(Name::MaxUnavailable, &place, e),
                },
            ));
        }
        if let (true, Some(field)) = (wanted(Name::NativeTemplateEdits), native) {
            outcomes.push((
                Name::NativeTemplateEdits,
                match &answer {
                    Ok(answer) => {
                        let value = judge::native_template_edits(answer, Some(field));
                        let property = field.property();
                        Outcome::Learned(Learned::probed(
                            value,
                            if value.is_yes() {
                                format!("{place}: spec.{property} came back: the apiserver takes volumeClaimTemplate edits itself")
                            } else {
                                format!("{place}: spec.{property}, listed by OpenAPI, was dropped (its gate is off)")
                            },
                        ))
                    }
                    Err(e) => unanswered(Name::NativeTemplateEdits, &place, e),
                },
            ));
        }
    }
    if wanted(Name::NativeTemplateEdits) && native.is_none() {
        outcomes.push((
            Name::NativeTemplateEdits,
            match &apps {
                Ok(_) => Outcome::Learned(Learned::probed(
                    Value::NotNative,
                    "OpenAPI's StatefulSetSpec has no volumeClaimUpdatePolicy or volumeClaimUpdateStrategy",
                )),
                Err(e) => Outcome::Failed(format!("OpenAPI: {e}")),
            },
        ));
    }

    if wanted(Name::ClaimVolumeAttributesClass) {
        let place = format!("dry-run create of a claim in {namespace:?}");
        outcomes.push((
            Name::ClaimVolumeAttributesClass,
            match dry_run_create(client, namespace, "persistentvolumeclaims", claim()).await {
                Ok(answer) => {
                    let value = judge::claim_volume_attributes_class(&answer, &fields);
                    Outcome::Learned(Learned::probed(
                        value,
                        format!(
                            "{place}: spec.volumeAttributesClassName {}{openapi_note}",
                            fate_text(value)
                        ),
                    ))
                }
                Err(e) => unanswered(Name::ClaimVolumeAttributesClass, &place, &e),
            },
        ));
    }

    if wanted(Name::RetroactiveDefaultClass) {
        outcomes.push((
            Name::RetroactiveDefaultClass,
            match &candidates.class_less {
                None => Outcome::NotTried(
                    "no class-less, unbound claim to try a dry-run patch on; learned at the first one"
                        .to_owned(),
                ),
                Some(change) => {
                    let patch = json!({"spec": {"storageClassName": change.value}});
                    claim_patch_outcome(client, Name::RetroactiveDefaultClass, change, patch, "giving it the class", judge::class_from_unset).await
                }
            },
        ));
    }

    if wanted(Name::ExpansionRecovery) {
        outcomes.push((
            Name::ExpansionRecovery,
            match &candidates.expanding {
                None => Outcome::NotTried(
                    "no bound claim with an expansion in flight to try a dry-run patch on; learned at the first one"
                        .to_owned(),
                ),
                Some(change) => {
                    let patch = json!({"spec": {"resources": {"requests": {"storage": change.value}}}});
                    claim_patch_outcome(client, Name::ExpansionRecovery, change, patch, "lowering its request above its capacity to", judge::lowering_above_capacity).await
                }
            },
        ));
    }

    Round {
        git_version: Ok(git_version),
        outcomes,
    }
}

fn fate_text(value: Value) -> &'static str {
    match value {
        Value::Kept => "came back",
        Value::Absent => {
            "was dropped: OpenAPI has no such field (the apiserver's types predate it)"
        }
        _ => "was dropped (its feature gate is off)",
    }
}

/// The StatefulSet of the dry run: no replicas (nothing would run even if it were stored),
/// `maxUnavailable: 2`, and the KEP-4650 field where OpenAPI lists one, at its default.
fn statefulset(native: Option<NativeField>) -> Json {
    let labels = json!({"app.kubernetes.io/name": "stateful-admission-capability-probe"});
    let mut spec = json!({
        "replicas": 0,
        "serviceName": "stateful-admission-capability-probe",
        "selector": {"matchLabels": labels},
        "template": {
            "metadata": {"labels": labels},
            "spec": {"containers": [{"name": "probe", "image": "registry.k8s.io/pause:3.10"}]}
        },
        "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0, "maxUnavailable": 2}}
    });
    match native {
        Some(NativeField::VolumeClaimUpdatePolicy) => {
            spec["volumeClaimUpdatePolicy"] = json!("OnDelete");
        }
        Some(NativeField::VolumeClaimUpdateStrategy) => {
            spec["volumeClaimUpdateStrategy"] = json!({"type": "OnDelete"});
        }
        None => {}
    }
    json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"generateName": PROBE_NAME_PREFIX, "labels": labels},
        "spec": spec
    })
}

/// The claim of the dry run: class `""` (no class, no default filled in, nothing provisioned
/// even if it were stored), a class of attributes that need not exist.
fn claim() -> Json {
    json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"generateName": PROBE_NAME_PREFIX},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "volumeAttributesClassName": PROBE_VOLUME_ATTRIBUTES_CLASS,
            "resources": {"requests": {"storage": "1Mi"}}
        }
    })
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.to_owned(),
        version: version.to_owned(),
        api_version: if group.is_empty() {
            version.to_owned()
        } else {
            format!("{group}/{version}")
        },
        kind: kind.to_owned(),
        plural: plural.to_owned(),
    }
}

/// Why a request taught nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Unanswered {
    /// Refused by authorization (RBAC, a policy): the operator may allow it or state the value.
    forbidden: bool,
    text: String,
}

impl std::fmt::Display for Unanswered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl From<kube::Error> for Unanswered {
    fn from(error: kube::Error) -> Self {
        Self {
            forbidden: matches!(&error, kube::Error::Api(status) if status.code == 403),
            text: error.to_string(),
        }
    }
}

impl From<serde_json::Error> for Unanswered {
    fn from(error: serde_json::Error) -> Self {
        Self {
            forbidden: false,
            text: error.to_string(),
        }
    }
}

/// The outcome of a request that failed, retried with backoff until it answers; where it was
/// forbidden (RBAC, a policy), saying how to state the value instead.
fn unanswered(name: Name, place: &str, why: &Unanswered) -> Outcome {
    if why.forbidden {
        Outcome::Failed(format!(
            "{place}: forbidden ({why}); allow it, or state the value with --capability {name}=…"
        ))
    } else {
        Outcome::Failed(format!("{place}: {why}"))
    }
}

/// A server-side dry-run create; the answer as JSON.
async fn dry_run_create(
    client: &kube::Client,
    namespace: &str,
    plural: &str,
    object: Json,
) -> Result<Json, Unanswered> {
    let resource = match plural {
        "statefulsets" => resource("apps", "v1", "StatefulSet", plural),
        _ => resource("", "v1", "PersistentVolumeClaim", plural),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    let object: DynamicObject = serde_json::from_value(object)?;
    let answer = api.create(&field_manager::dry_run_post(), &object).await?;
    Ok(serde_json::to_value(answer)?)
}

/// A dry-run merge patch of an existing claim, judged by `judge`.
async fn claim_patch_outcome(
    client: &kube::Client,
    name: Name,
    change: &ClaimChange,
    patch: Json,
    what: &str,
    judge: fn(u16, &str) -> Option<Value>,
) -> Outcome {
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &change.namespace,
        &resource("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims"),
    );
    let mut params = field_manager::patch();
    params.dry_run = true;
    let place = format!(
        "dry-run patch of claim {}/{} {what} {:?}",
        change.namespace, change.name, change.value
    );
    let (status, message) = match api
        .patch(&change.name, &params, &Patch::Merge(&patch))
        .await
    {
        Ok(_) => (200, String::new()),
        Err(kube::Error::Api(status)) if status.code != 403 => {
            (status.code, status.message.clone())
        }
        Err(error) => return unanswered(name, &place, &error.into()),
    };
    match judge(status, &message) {
        Some(value) => Outcome::Learned(Learned::probed(
            value,
            if value.is_yes() {
                format!("{place}: accepted")
            } else {
                format!("{place}: refused: {message}")
            },
        )),
        None => Outcome::Failed(format!("{place}: {status} {message}")),
    }
}

/// `GET path` as JSON; a 404 is `Ok(None)`.
async fn get_json(client: &kube::Client, path: &str) -> Result<Option<Json>, String> {
    let request = http::Request::get(path)
        .header(http::header::ACCEPT, "application/json")
        .body(Vec::new())
        .map_err(|e| e.to_string())?;
    match client.request::<Json>(request).await {
        Ok(json) => Ok(Some(json)),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
        Err(error) => Err(error.to_string()),
    }
}

/// The OpenAPI documents of `apps/v1` and core `v1`: v3 per group where served (small),
/// else the whole v2 document (read once for both).
async fn openapi(client: &kube::Client) -> (Result<Json, String>, Result<Json, String>) {
    let index = get_json(client, "/openapi/v3").await;
    let url = |index: &Json, path: &str| {
        index
            .pointer(&format!("/paths/{}", path.replace('/', "~1")))
            .and_then(|p| p.get("serverRelativeURL"))
            .and_then(Json::as_str)
            .map(str::to_owned)
    };
    if let Ok(Some(index)) = &index
        && let (Some(apps), Some(core)) = (url(index, "apis/apps/v1"), url(index, "api/v1"))
    {
        let fetch = |u: String| async move {
            match get_json(client, &u).await {
                Ok(Some(doc)) => Ok(doc),
                Ok(None) => Err(format!("{u}: 404")),
                Err(e) => Err(e),
            }
        };
        return (fetch(apps).await, fetch(core).await);
    }
    match get_json(client, "/openapi/v2").await {
        Ok(Some(doc)) => (Ok(doc.clone()), Ok(doc)),
        Ok(None) => (
            Err("/openapi/v2: 404".to_owned()),
            Err("/openapi/v2: 404".to_owned()),
        ),
        Err(e) => (Err(e.clone()), Err(e)),
    }
}

/// Discovery: the newest `storage.k8s.io` version listing VolumeAttributesClasses.
async fn volume_attributes_class_api(client: &kube::Client) -> Outcome {
    let group = match get_json(client, "/apis/storage.k8s.io").await {
        Ok(Some(group)) => group,
        Ok(None) => {
            return Outcome::Learned(Learned::probed(
                Value::NotServed,
                "discovery: storage.k8s.io is not served",
            ));
        }
        Err(e) => return Outcome::Failed(format!("discovery of storage.k8s.io: {e}")),
    };
    let mut lists: Vec<(StorageVersion, Json)> = Vec::new();
    for version in judge::served_versions(&group) {
        match get_json(
            client,
            &format!("/apis/storage.k8s.io/{}", version.as_str()),
        )
        .await
        {
            Ok(Some(list)) => lists.push((version, list)),
            Ok(None) => {}
            Err(e) => {
                return Outcome::Failed(format!(
                    "discovery of storage.k8s.io/{}: {e}",
                    version.as_str()
                ));
            }
        }
    }
    let value = judge::volume_attributes_class_api(&lists);
    let served: Vec<&str> = lists.iter().map(|(v, _)| v.as_str()).collect();
    Outcome::Learned(Learned::probed(
        value,
        match value {
            Value::Served(v) => format!(
                "discovery: volumeattributesclasses listed at storage.k8s.io/{} (served: {})",
                v.as_str(),
                served.join(", ")
            ),
            _ => format!(
                "discovery: no storage.k8s.io version lists volumeattributesclasses (served: {})",
                served.join(", ")
            ),
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dry_run_objects_ask_for_what_they_test_and_name_nothing_real() {
        let set = statefulset(None);
        assert_eq!(
            set.pointer("/spec/updateStrategy/rollingUpdate/maxUnavailable"),
            Some(&json!(2))
        );
        assert_eq!(set.pointer("/spec/replicas"), Some(&json!(0)));
        assert!(set.pointer("/metadata/name").is_none());
        assert!(set.pointer("/spec/volumeClaimUpdatePolicy").is_none());
        let native = statefulset(Some(NativeField::VolumeClaimUpdateStrategy));
        assert_eq!(
            native.pointer("/spec/volumeClaimUpdateStrategy/type"),
            Some(&json!("OnDelete"))
        );
        let claim = claim();
        assert_eq!(claim.pointer("/spec/storageClassName"), Some(&json!("")));
        assert!(claim.pointer("/metadata/name").is_none());
        // Both decode as the objects the API expects.
        serde_json::from_value::<k8s_openapi::api::apps::v1::StatefulSet>(set).expect("a set");
        serde_json::from_value::<k8s_openapi::api::core::v1::PersistentVolumeClaim>(claim)
            .expect("a claim");
    }

    #[test]
    fn a_refused_probe_says_how_to_state_the_value_instead() {
        let forbidden = Unanswered {
            forbidden: true,
            text: "statefulsets.apps is forbidden".into(),
        };
        let Outcome::Failed(why) = unanswered(Name::MaxUnavailable, "dry-run create", &forbidden)
        else {
            panic!("a failure, retried")
        };
        assert!(
            why.ends_with("state the value with --capability max-unavailable=…"),
            "{why}"
        );
        let down = Unanswered {
            forbidden: false,
            text: "connection refused".into(),
        };
        assert_eq!(
            unanswered(Name::MaxUnavailable, "dry-run create", &down),
            Outcome::Failed("dry-run create: connection refused".into())
        );
    }
}
