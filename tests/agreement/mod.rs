//! Agreement bodies: what the product relies on the apiserver to decide, asserted the same way
//! against the in-process fake (tests/it/agreement_fake.rs) and a real kube-apiserver with its
//! controller-manager (tests/e2e, trials `agreement_<body>`). Where the two differ the real one
//! is right, and the fake is fixed.
//!
//! Each body gets a client, a namespace of its own (which exists and is empty but for what
//! the cluster puts in every namespace), and what to expect of this apiserver ([`Expect`]:
//! learned from a real one by [`Expect::discover`], given per captured version by
//! [`Expect::captured`] and, in tests/it, by the fake's profile); it writes only there, and uses
//! the kube client alone. Bodies keep StatefulSets at zero replicas unless they need pods: the
//! real StatefulSet controller creates pods and claims, the fake's simulation is not running,
//! and no body depends on either.

#![allow(clippy::too_many_lines)]

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail, ensure};
use futures::TryStreamExt;
use futures::future::BoxFuture;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{
    ConfigMap, Event as CoreEvent, ObjectReference, PersistentVolumeClaim,
};
use k8s_openapi::api::events::v1::Event as EventV1;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
    Preconditions, PropagationPolicy, WatchEvent, WatchParams,
};
use kube::core::Status;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

/// Field manager of the bodies' own writes.
pub const MANAGER: &str = "agreement";

/// A body: a client, the namespace to work in, and what to expect of the apiserver.
pub type Body = fn(Client, String, Arc<Expect>) -> BoxFuture<'static, anyhow::Result<()>>;

/// Every body by name; the real-cluster suite runs each as `agreement_<name>` (the integration
/// tests name each body in a test of its own, per profile of the fake).
pub fn all() -> Vec<(&'static str, Body)> {
    vec![
        ("statefulset_template_edit", |c, ns, e| {
            Box::pin(async move { statefulset_template_edit(c, &ns, &e).await })
        }),
        ("max_unavailable_gate_off", |c, ns, e| {
            Box::pin(async move { max_unavailable_gate_off(c, &ns, &e).await })
        }),
        ("orphan_delete_preconditions", |c, ns, e| {
            Box::pin(async move { orphan_delete_preconditions(c, &ns, &e).await })
        }),
        ("managed_fields_on_create", |c, ns, e| {
            Box::pin(async move { managed_fields_on_create(c, &ns, &e).await })
        }),
        ("statefulset_defaults", |c, ns, e| {
            Box::pin(async move { statefulset_defaults(c, &ns, &e).await })
        }),
        ("claim_updates", |c, ns, e| {
            Box::pin(async move { claim_updates(c, &ns, &e).await })
        }),
        ("write_preconditions", |c, ns, e| {
            Box::pin(async move { write_preconditions(c, &ns, &e).await })
        }),
        ("status_subresource", |c, ns, e| {
            Box::pin(async move { status_subresource(c, &ns, &e).await })
        }),
        ("events_both_apis", |c, ns, e| {
            Box::pin(async move { events_both_apis(c, &ns, &e).await })
        }),
        ("paged_lists_and_watch", |c, ns, e| {
            Box::pin(async move { paged_lists_and_watch(c, &ns, &e).await })
        }),
    ]
}

// --- what to expect ---

/// What becomes of a field a write sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Not in the types: lost in decoding, before the field manager records it.
    Absent,
    /// In the types, dropped behind a disabled feature gate after the field manager recorded
    /// who set it.
    Dropped,
    /// Stored.
    Kept,
}

/// The immutability message of a claim (v1.29+; the apiserver appends a diff of the specs).
pub const PVC_SPEC_FORBIDDEN: &str = "spec is immutable after creation except resources.requests \
     and volumeAttributesClassName for bound claims";

/// The same before v1.29.
pub const PVC_SPEC_FORBIDDEN_V1_24: &str =
    "spec is immutable after creation except resources.requests for bound claims";

/// What the bodies expect of one apiserver: what differs between the supported versions and
/// gate settings (the captures' README, "Differences that matter").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expect {
    /// `/version`'s gitVersion.
    pub git_version: String,
    /// The spec fields a StatefulSet update may change, in the order the apiserver's message
    /// names them ([`Expect::statefulset_spec_forbidden`]).
    pub statefulset_mutable: Vec<String>,
    /// `spec.updateStrategy.rollingUpdate.maxUnavailable` on a write.
    pub max_unavailable: Fate,
    /// A `rollingUpdate` without `maxUnavailable` gets 1 (`MaxUnavailableStatefulSet` on).
    pub max_unavailable_default_one: bool,
    /// `maxUnavailable: 0` is refused (`MaxUnavailableStatefulSet` on).
    pub max_unavailable_validated: bool,
    /// A claim's `spec.volumeAttributesClassName` on a write.
    pub claim_vac: Fate,
    /// The `storage.k8s.io` version serving VolumeAttributesClasses, if any.
    pub vac_api: Option<String>,
    /// The claim immutability message, without the diff that follows it.
    pub pvc_forbidden: String,
    /// A claim's `storageClassName` may go from unset to a value (KEP-3333).
    pub class_from_unset: bool,
    /// A request may go down while above `status.capacity` (RecoverVolumeExpansionFailure);
    /// without it any decrease is refused.
    pub expansion_recovery: bool,
    /// `persistentVolumeClaimRetentionPolicy` defaults to Retain/Retain.
    pub retention_default: bool,
    /// The pod template's and claim templates' zero `creationTimestamp` prints as `null`.
    pub embedded_creation_timestamp_null: bool,
}

impl Expect {
    /// The `spec: Forbidden` detail of a StatefulSet update beyond the mutable fields, joined
    /// as `pkg/apis/apps/validation.ValidateStatefulSetUpdate` words it.
    pub fn statefulset_spec_forbidden(&self) -> String {
        let quoted: Vec<String> = self
            .statefulset_mutable
            .iter()
            .map(|f| format!("'{f}'"))
            .collect();
        let listed = match quoted.split_last() {
            Some((last, [])) => last.clone(),
            Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
            None => String::new(),
        };
        format!("updates to statefulset spec for fields other than {listed} are forbidden")
    }

    /// Checks the claim immutability message is one of the two wordings the versions use.
    fn known_pvc_wording(self) -> anyhow::Result<Self> {
        ensure!(
            [PVC_SPEC_FORBIDDEN, PVC_SPEC_FORBIDDEN_V1_24].contains(&self.pvc_forbidden.as_str()),
            "a claim immutability message of no known version: {:?}",
            self.pvc_forbidden
        );
        Ok(self)
    }

    /// The field names of the message that [`Self::statefulset_spec_forbidden`] makes.
    pub fn mutable_fields_of(message: &str) -> Vec<String> {
        let Some(start) = message.find("fields other than ") else {
            return Vec::new();
        };
        let end = message.find(" are forbidden").unwrap_or(message.len());
        message[start..end]
            .split('\'')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect()
    }

    /// The fields on which two expectations differ, with both values.
    pub fn differences(&self, other: &Expect) -> Vec<String> {
        let mut out = Vec::new();
        macro_rules! field {
            ($($f:ident),*) => {$(
                if self.$f != other.$f {
                    out.push(format!("{}: {:?} vs {:?}", stringify!($f), self.$f, other.$f));
                }
            )*};
        }
        field!(
            git_version,
            statefulset_mutable,
            max_unavailable,
            max_unavailable_default_one,
            max_unavailable_validated,
            claim_vac,
            vac_api,
            pvc_forbidden,
            class_from_unset,
            expansion_recovery,
            retention_default,
            embedded_creation_timestamp_null
        );
        out
    }

    /// The captured label this apiserver answers as: the one of the same gitVersion, else the
    /// one with the fewest differences; with the differences (gitVersion aside).
    pub fn matching_capture(&self) -> anyhow::Result<(&'static str, Vec<String>)> {
        let mut best: Option<(&'static str, Vec<String>, bool)> = None;
        for label in Self::LABELS {
            let captured = Self::captured(label)?;
            let same_build = captured.git_version == self.git_version;
            let differences: Vec<String> = self
                .differences(&captured)
                .into_iter()
                .filter(|d| !d.starts_with("git_version:"))
                .collect();
            let better = match &best {
                None => true,
                Some((_, known, exact)) => {
                    (same_build && !exact)
                        || (same_build == *exact && differences.len() < known.len())
                }
            };
            if better {
                best = Some((label, differences, same_build));
            }
        }
        best.map(|(label, differences, _)| (label, differences))
            .context("no captures")
    }

    /// The labels of the captures (`tests/fixtures/apiserver-behaviour/<label>`).
    pub const LABELS: [&'static str; 6] = [
        "v1.24",
        "v1.32",
        "v1.32-gates-on",
        "v1.35",
        "v1.35-maxunavailable-on",
        "v1.36",
    ];

    /// What a real apiserver of a captured label answered, read from its captures.
    pub fn captured(label: &str) -> anyhow::Result<Expect> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/apiserver-behaviour")
            .join(label)
            .join("probes.json");
        let records: Vec<Value> = serde_json::from_str(
            &std::fs::read_to_string(&path).with_context(|| format!("read {}", path.display()))?,
        )?;
        let answer = |id: &str| -> anyhow::Result<&Value> {
            records
                .iter()
                .find(|r| r["id"] == id)
                .map(|r| &r["response"])
                .with_context(|| format!("{label}: no probe {id}"))
        };
        let text = |v: &Value, p: &str| {
            v.pointer(p)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        let openapi = &answer("01g-openapi-fields")?["body"];
        let lists = |definition: &str, property: &str| {
            openapi[definition]
                .as_array()
                .is_some_and(|p| p.iter().any(|n| n == property))
        };
        let defaults = &answer("02a-sts-create-defaults")?["body"];
        let fate = |in_types: bool, kept: bool| match (in_types, kept) {
            (false, _) => Fate::Absent,
            (true, false) => Fate::Dropped,
            (true, true) => Fate::Kept,
        };
        // The newest storage.k8s.io version whose resources list VolumeAttributesClasses.
        let vac_api = ["v1", "v1beta1", "v1alpha1"].into_iter().find(|v| {
            records.iter().any(|r| {
                r["request"]["path"] == format!("/apis/storage.k8s.io/{v}")
                    && r["response"]["body"]["resources"]
                        .as_array()
                        .is_some_and(|l| l.iter().any(|x| x["name"] == "volumeattributesclasses"))
            })
        });
        let forbidden = text(&answer("06c-pvc-resize-unbound")?["body"], "/message");
        Expect {
            git_version: text(&answer("01a-version")?["body"], "/gitVersion"),
            statefulset_mutable: Self::mutable_fields_of(&text(
                &answer("03a-forbidden-template-storage")?["body"],
                "/message",
            )),
            max_unavailable: fate(
                lists(
                    "io.k8s.api.apps.v1.RollingUpdateStatefulSetStrategy",
                    "maxUnavailable",
                ),
                answer("02b-sts-create-maxunavailable")?
                    .pointer("/body/spec/updateStrategy/rollingUpdate/maxUnavailable")
                    .is_some(),
            ),
            max_unavailable_default_one: defaults
                .pointer("/spec/updateStrategy/rollingUpdate/maxUnavailable")
                == Some(&json!(1)),
            max_unavailable_validated: answer("04a-maxunavailable-0")?["status"] == 422,
            claim_vac: fate(
                lists(
                    "io.k8s.api.core.v1.PersistentVolumeClaimSpec",
                    "volumeAttributesClassName",
                ),
                answer("05d-pvc-create-vac")?
                    .pointer("/body/spec/volumeAttributesClassName")
                    .is_some(),
            ),
            vac_api: vac_api.map(str::to_owned),
            pvc_forbidden: forbidden
                .split_once("spec: Forbidden: ")
                .map(|(_, rest)| rest.split('\n').next().unwrap_or("").to_owned())
                .unwrap_or_default(),
            class_from_unset: answer("06b-pvc-patch-class-from-unset")?["status"] == 200,
            expansion_recovery: answer("06k-pvc-shrink-above-capacity")?["status"] == 200,
            retention_default: defaults
                .pointer("/spec/persistentVolumeClaimRetentionPolicy")
                .is_some(),
            embedded_creation_timestamp_null: defaults
                .pointer("/spec/template/metadata")
                .and_then(Value::as_object)
                .is_some_and(|m| m.contains_key("creationTimestamp")),
        }
        .known_pvc_wording()
    }

    /// What a real apiserver does, learned by discovery, OpenAPI and dry runs, and by the
    /// refusals of two objects made for the purpose in `ns` (a StatefulSet of no replicas and
    /// a class-less claim, deleted before this returns). Needs a cluster without a default
    /// StorageClass (a class-less claim could not be made).
    pub async fn discover(client: &Client, ns: &str) -> anyhow::Result<Expect> {
        let git_version = client.apiserver_version().await?.git_version;
        let get = |path: String| {
            let client = client.clone();
            async move {
                let request = axum::http::Request::get(&path).body(Vec::new())?;
                let value: Value = client
                    .request(request)
                    .await
                    .with_context(|| format!("GET {path}"))?;
                anyhow::Ok(value)
            }
        };
        // OpenAPI v3 (the index, then the group versions), else v2.
        let mut definitions: serde_json::Map<String, Value> = serde_json::Map::new();
        match get("/openapi/v3".to_owned()).await {
            Ok(index) => {
                for path in ["apis/apps/v1", "api/v1"] {
                    let url = index
                        .pointer(&format!(
                            "/paths/{}/serverRelativeURL",
                            path.replace('/', "~1")
                        ))
                        .and_then(Value::as_str)
                        .with_context(|| format!("the OpenAPI v3 index lists no {path}"))?
                        .to_owned();
                    let document = get(url).await?;
                    for (name, schema) in document
                        .pointer("/components/schemas")
                        .and_then(Value::as_object)
                        .into_iter()
                        .flatten()
                    {
                        definitions.insert(name.clone(), schema.clone());
                    }
                }
            }
            Err(_) => {
                let document = get("/openapi/v2".to_owned()).await?;
                if let Some(all) = document.get("definitions").and_then(Value::as_object) {
                    definitions = all.clone();
                }
            }
        }
        let lists = |definition: &str, property: &str| {
            definitions
                .get(definition)
                .and_then(|d| d.get("properties"))
                .is_some_and(|p| p.get(property).is_some())
        };
        let max_unavailable_in_types = lists(
            "io.k8s.api.apps.v1.RollingUpdateStatefulSetStrategy",
            "maxUnavailable",
        );
        let claim_vac_in_types = lists(
            "io.k8s.api.core.v1.PersistentVolumeClaimSpec",
            "volumeAttributesClassName",
        );

        // Discovery: the newest storage.k8s.io version serving VolumeAttributesClasses.
        let storage = get("/apis/storage.k8s.io".to_owned()).await?;
        let served: Vec<String> = storage["versions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v["version"].as_str().map(str::to_owned))
            .collect();
        let mut vac_api = None;
        for version in ["v1", "v1beta1", "v1alpha1"] {
            if !served.iter().any(|v| v == version) {
                continue;
            }
            let list = get(format!("/apis/storage.k8s.io/{version}")).await?;
            if list["resources"]
                .as_array()
                .is_some_and(|l| l.iter().any(|r| r["name"] == "volumeattributesclasses"))
            {
                vac_api = Some(version.to_owned());
                break;
            }
        }

        // Dry runs.
        let sets: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<StatefulSet>(&()));
        let claims: Api<DynamicObject> = Api::namespaced_with(
            client.clone(),
            ns,
            &ApiResource::erase::<PersistentVolumeClaim>(&()),
        );
        let dry = PostParams {
            dry_run: true,
            field_manager: Some(MANAGER.into()),
        };
        let defaults = sets
            .create(
                &dry,
                &serde_json::from_value(statefulset_json("expect-defaults", 0))?,
            )
            .await?
            .data;
        let mut with = statefulset_json("expect-max-unavailable", 0);
        with["spec"]["podManagementPolicy"] = json!("Parallel");
        with["spec"]["updateStrategy"] =
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 2}});
        let kept = sets
            .create(&dry, &serde_json::from_value(with.clone())?)
            .await?
            .data
            .pointer("/spec/updateStrategy/rollingUpdate/maxUnavailable")
            .is_some();
        with["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] = json!(0);
        let zero = sets.create(&dry, &serde_json::from_value(with)?).await;
        let max_unavailable_validated =
            matches!(zero, Err(kube::Error::Api(ref s)) if s.code == 422);
        let vac_claim = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "expect-vac"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
                     "volumeAttributesClassName": "expect"}});
        let vac_kept = claims
            .create(&dry, &serde_json::from_value(vac_claim)?)
            .await?
            .data
            .pointer("/spec/volumeAttributesClassName")
            .is_some();

        // What the update validations refuse, learned from objects of our own.
        let created = sets
            .create(
                &post(),
                &serde_json::from_value(statefulset_json("expect-set", 0))?,
            )
            .await?;
        let dry_patch = PatchParams {
            dry_run: true,
            ..patch_params()
        };
        let mut templates = created.data["spec"]["volumeClaimTemplates"].clone();
        templates[0]["spec"]["resources"]["requests"]["storage"] = json!("2Gi");
        let refused = sets
            .patch(
                "expect-set",
                &dry_patch,
                &Patch::Merge(json!({"spec": {"volumeClaimTemplates": templates}})),
            )
            .await;
        sets.delete("expect-set", &DeleteParams::default()).await?;
        let statefulset_mutable = match refused {
            Err(kube::Error::Api(status)) if status.code == 422 => {
                Self::mutable_fields_of(&status.message)
            }
            other => bail!("a claim template edit was not refused: {other:?}"),
        };
        let claim = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "expect-claim"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}});
        let made = claims
            .create(&post(), &serde_json::from_value(claim)?)
            .await?;
        let class_given = made.data.pointer("/spec/storageClassName").cloned();
        let class_patch = claims
            .patch(
                "expect-claim",
                &dry_patch,
                &Patch::Merge(json!({"spec": {"storageClassName": "expect-class"}})),
            )
            .await;
        let shrink = claims
            .patch(
                "expect-claim",
                &dry_patch,
                &Patch::Merge(json!({"spec": {"resources": {"requests": {"storage": "512Mi"}}}})),
            )
            .await;
        claims
            .delete("expect-claim", &DeleteParams::default())
            .await?;
        ensure!(
            class_given.is_none(),
            "a claim without a class got {class_given:?}: a default StorageClass exists"
        );
        let shrink = failure("a shrink of an unbound claim", shrink)?;
        let found = causes(&shrink);
        let pvc_forbidden = found
            .iter()
            .find(|(_, field, _)| field == "spec")
            .and_then(|(_, _, message)| message.strip_prefix("Forbidden: "))
            .map(|m| m.split('\n').next().unwrap_or("").to_owned())
            .context("the shrink was not refused as immutable")?;
        let expansion_recovery = !found
            .iter()
            .any(|(_, _, message)| message.contains("can not be less than previous value"));

        let fate = |in_types: bool, kept: bool| match (in_types, kept) {
            (false, _) => Fate::Absent,
            (true, false) => Fate::Dropped,
            (true, true) => Fate::Kept,
        };
        Expect {
            git_version,
            statefulset_mutable,
            max_unavailable: fate(max_unavailable_in_types, kept),
            max_unavailable_default_one: defaults
                .pointer("/spec/updateStrategy/rollingUpdate/maxUnavailable")
                == Some(&json!(1)),
            max_unavailable_validated,
            claim_vac: fate(claim_vac_in_types, vac_kept),
            vac_api,
            pvc_forbidden,
            class_from_unset: class_patch.is_ok(),
            expansion_recovery,
            retention_default: defaults
                .pointer("/spec/persistentVolumeClaimRetentionPolicy")
                .is_some(),
            embedded_creation_timestamp_null: defaults
                .pointer("/spec/template/metadata")
                .and_then(Value::as_object)
                .is_some_and(|m| m.contains_key("creationTimestamp")),
        }
        .known_pvc_wording()
    }
}

// --- helpers ---

fn post() -> PostParams {
    PostParams {
        field_manager: Some(MANAGER.into()),
        ..PostParams::default()
    }
}

fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(MANAGER.into()),
        ..PatchParams::default()
    }
}

/// A StatefulSet as a chart writes it: no pods (`replicas: 0`), one claim template `data`.
fn statefulset_json(name: &str, replicas: i32) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "db", "image": "registry.k8s.io/pause:3.10"}]},
            },
            "volumeClaimTemplates": [{
                "metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
            }],
        },
    })
}

fn statefulset(name: &str, replicas: i32) -> anyhow::Result<StatefulSet> {
    Ok(serde_json::from_value(statefulset_json(name, replicas))?)
}

fn to_json<T: serde::Serialize>(object: &T) -> anyhow::Result<Value> {
    Ok(serde_json::to_value(object)?)
}

/// The `Status` of a failed call; an error naming what happened instead.
fn failure<T: std::fmt::Debug>(
    what: &str,
    result: Result<T, kube::Error>,
) -> anyhow::Result<Box<Status>> {
    match result {
        Err(kube::Error::Api(status)) => Ok(status),
        Err(other) => bail!("{what}: expected an API failure, got the error {other:#}"),
        Ok(object) => bail!("{what}: expected an API failure, got {object:?}"),
    }
}

/// Checks code, reason and message of a failure.
fn expect_failure(
    what: &str,
    status: &Status,
    code: u16,
    reason: &str,
    message: &str,
) -> anyhow::Result<()> {
    ensure!(
        status.code == code && status.reason == reason && status.message == message,
        "{what}: expected {code} {reason} {message:?}, got {} {} {:?}",
        status.code,
        status.reason,
        status.message
    );
    Ok(())
}

/// Checks `details`: name, group, kind.
fn expect_details(
    what: &str,
    status: &Status,
    name: &str,
    group: &str,
    kind: &str,
) -> anyhow::Result<()> {
    let details = status
        .details
        .as_ref()
        .with_context(|| format!("{what}: the Status has no details: {status:?}"))?;
    ensure!(
        (
            details.name.as_str(),
            details.group.as_str(),
            details.kind.as_str()
        ) == (name, group, kind),
        "{what}: expected details {name:?} {group:?} {kind:?}, got {:?} {:?} {:?}",
        details.name,
        details.group,
        details.kind
    );
    Ok(())
}

/// The causes of a failure as `(reason, field, message)`.
fn causes(status: &Status) -> Vec<(String, String, String)> {
    status
        .details
        .iter()
        .flat_map(|d| d.causes.iter())
        .map(|c| (c.reason.clone(), c.field.clone(), c.message.clone()))
        .collect()
}

/// The main-resource managedFields entries of `object` as `(manager, operation, fieldsV1)`.
fn entries(object: &Value) -> Vec<(String, String, Value)> {
    object
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|e| e.get("subresource").is_none_or(|s| s.as_str() == Some("")))
        .map(|e| {
            let text = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
            (
                text("manager"),
                text("operation"),
                e.get("fieldsV1").cloned().unwrap_or(Value::Null),
            )
        })
        .collect()
}

/// Whether `manager` (of the main resource, or of `subresource`) owns the field at `path`
/// (`f:` keys), e.g. `["f:spec", "f:replicas"]`.
fn owns(object: &Value, manager: &str, subresource: &str, path: &[&str]) -> bool {
    object
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|e| e.get("manager").and_then(Value::as_str) == Some(manager))
        .filter(|e| e.get("subresource").and_then(Value::as_str).unwrap_or("") == subresource)
        .any(|e| {
            let mut node = e.get("fieldsV1");
            for key in path {
                node = node.and_then(|n| n.get(*key));
            }
            node.is_some()
        })
}

/// Polls `probe` until it holds, every 200 ms, for at most `within`.
async fn eventually<F, Fut>(what: &str, within: Duration, mut probe: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<bool>>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if probe().await? {
            return Ok(());
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "timed out after {within:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

// --- bodies ---

/// A claim template edit is refused by the StatefulSet's update validation, with the message
/// naming the fields this version lets change; those go through and count as a new
/// generation (`revisionHistoryLimit` among them from v1.35).
pub async fn statefulset_template_edit(
    client: Client,
    ns: &str,
    expect: &Expect,
) -> anyhow::Result<()> {
    let sets: Api<StatefulSet> = Api::namespaced(client, ns);
    let created = sets.create(&post(), &statefulset("web", 0)?).await?;
    ensure!(
        created.metadata.generation == Some(1),
        "generation 1 on create: {:?}",
        created.metadata
    );

    let edit = json!([{"op": "replace", "path": "/spec/volumeClaimTemplates/0/spec/resources/requests/storage", "value": "2Gi"}]);
    let edit: json_patch::Patch = serde_json::from_value(edit)?;
    let refused = failure(
        "a JSON patch of the claim template's size",
        sets.patch("web", &patch_params(), &Patch::<()>::Json(edit))
            .await,
    )?;
    let detail = format!("Forbidden: {}", expect.statefulset_spec_forbidden());
    expect_failure(
        "template edit",
        &refused,
        422,
        "Invalid",
        &format!("StatefulSet.apps \"web\" is invalid: spec: {detail}"),
    )?;
    expect_details("template edit", &refused, "web", "apps", "StatefulSet")?;
    ensure!(
        causes(&refused)
            == [(
                "FieldValueForbidden".to_owned(),
                "spec".to_owned(),
                detail.clone()
            )],
        "template edit causes: {:?}",
        causes(&refused)
    );

    // The same edit as a merge patch of the whole template list, and as a replace.
    let mut templates = to_json(&created)?["spec"]["volumeClaimTemplates"].clone();
    templates[0]["spec"]["resources"]["requests"]["storage"] = json!("3Gi");
    let refused = failure(
        "a merge patch of the claim templates",
        sets.patch(
            "web",
            &patch_params(),
            &Patch::Merge(json!({"spec": {"volumeClaimTemplates": templates}})),
        )
        .await,
    )?;
    ensure!(
        refused.code == 422 && refused.message.ends_with(&detail),
        "merge patch: {refused:?}"
    );

    let mut replaced = None;
    for _ in 0..5 {
        let mut current = sets.get("web").await?;
        current.spec.service_name = Some("other".into());
        match sets.replace("web", &post(), &current).await {
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            other => {
                replaced = Some(failure("a replace changing serviceName", other)?);
                break;
            }
        }
    }
    let refused = replaced.context("the replace kept meeting conflicts")?;
    expect_failure(
        "serviceName edit",
        &refused,
        422,
        "Invalid",
        &format!("StatefulSet.apps \"web\" is invalid: spec: {detail}"),
    )?;

    // What may change does, and is a new generation.
    let patched = sets
        .patch(
            "web",
            &patch_params(),
            &Patch::Merge(json!({"spec": {"replicas": 0, "minReadySeconds": 3,
                "template": {"metadata": {"labels": {"app": "web", "rev": "2"}}}}})),
        )
        .await?;
    ensure!(
        patched.metadata.generation == Some(2),
        "generation after a template change: {:?}",
        patched.metadata.generation
    );
    let stored = to_json(&sets.get("web").await?)?;
    ensure!(
        stored["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"]
            == "1Gi",
        "the refused edits left the template as it was: {}",
        stored["spec"]["volumeClaimTemplates"]
    );

    // revisionHistoryLimit: mutable where the message lists it.
    let history = sets
        .patch(
            "web",
            &patch_params(),
            &Patch::Merge(json!({"spec": {"revisionHistoryLimit": 5}})),
        )
        .await;
    if expect
        .statefulset_mutable
        .iter()
        .any(|f| f == "revisionHistoryLimit")
    {
        let changed = history.context("a revisionHistoryLimit edit")?;
        ensure!(
            changed.spec.revision_history_limit == Some(5)
                && changed.metadata.generation == Some(3),
            "revisionHistoryLimit 5, a new generation: {:?} {:?}",
            changed.spec.revision_history_limit,
            changed.metadata.generation
        );
    } else {
        let refused = failure("a revisionHistoryLimit edit", history)?;
        expect_failure(
            "revisionHistoryLimit edit",
            &refused,
            422,
            "Invalid",
            &format!("StatefulSet.apps \"web\" is invalid: spec: {detail}"),
        )?;
    }
    Ok(())
}

/// `updateStrategy.rollingUpdate.maxUnavailable` on every kind of write, as this version
/// treats it ([`Expect::max_unavailable`]): with `MaxUnavailableStatefulSet` off (v1.32's
/// default, and v1.35's) the registry drops it after the field manager recorded who set it;
/// where the types lack it (v1.24.0-alpha.1) decoding loses it before; with the gate on it is
/// kept. A dry run answers the same and stores nothing.
pub async fn max_unavailable_gate_off(
    client: Client,
    ns: &str,
    expect: &Expect,
) -> anyhow::Result<()> {
    let sets: Api<StatefulSet> = Api::namespaced(client, ns);
    let path = [
        "f:spec",
        "f:updateStrategy",
        "f:rollingUpdate",
        "f:maxUnavailable",
    ];
    let with_field = |name: &str| -> anyhow::Result<Value> {
        let mut set = statefulset_json(name, 0);
        set["spec"]["updateStrategy"] =
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 2}});
        Ok(set)
    };
    let kept = expect.max_unavailable == Fate::Kept;
    // Whoever sent the field owns it, unless the types lack it.
    let recorded = expect.max_unavailable != Fate::Absent;
    let strategy = |value: i64| {
        if kept {
            json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0, "maxUnavailable": value}})
        } else {
            json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
        }
    };
    let expected_strategy = strategy(2);

    // Create.
    let created = to_json(
        &sets
            .create(&post(), &serde_json::from_value(with_field("created")?)?)
            .await?,
    )?;
    ensure!(
        created["spec"]["updateStrategy"] == expected_strategy,
        "created: {}",
        created["spec"]["updateStrategy"]
    );
    ensure!(
        owns(&created, MANAGER, "", &path) == recorded,
        "the creator owns maxUnavailable ({recorded}): {}",
        created["metadata"]["managedFields"]
    );
    ensure!(
        owns(
            &created,
            MANAGER,
            "",
            &[
                "f:spec",
                "f:updateStrategy",
                "f:rollingUpdate",
                "f:partition"
            ]
        ),
        "the creator owns the defaulted partition: {}",
        created["metadata"]["managedFields"]
    );
    let stored = to_json(&sets.get("created").await?)?;
    ensure!(
        stored["spec"]["updateStrategy"] == expected_strategy,
        "stored: {}",
        stored["spec"]["updateStrategy"]
    );

    // Server-side apply that creates. Where the types lack the field (before v1.25, which
    // brought server-side field validation), the field manager cannot type the configuration
    // and refuses the whole apply; a create or a merge patch drops the field and goes through.
    if expect.max_unavailable == Fate::Absent {
        let refused = failure(
            "an apply naming a field the types lack",
            sets.patch(
                "applied",
                &PatchParams::apply("applier"),
                &Patch::Apply(with_field("applied")?),
            )
            .await,
        )?;
        expect_failure(
            "an apply naming a field the types lack",
            &refused,
            500,
            "",
            // The namespace is the configuration's, which names none.
            "failed to create typed patch object (/applied; apps/v1, Kind=StatefulSet): \
             .spec.updateStrategy.rollingUpdate.maxUnavailable: field not declared in schema",
        )?;
        ensure!(
            sets.get_opt("applied").await?.is_none(),
            "a refused apply creates nothing"
        );
    } else {
        let applied = to_json(
            &sets
                .patch(
                    "applied",
                    &PatchParams::apply("applier"),
                    &Patch::Apply(with_field("applied")?),
                )
                .await?,
        )?;
        ensure!(
            applied["spec"]["updateStrategy"] == expected_strategy,
            "applied: {}",
            applied["spec"]["updateStrategy"]
        );
        ensure!(
            owns(&applied, "applier", "", &path) == recorded,
            "the applier owns maxUnavailable ({recorded}): {}",
            applied["metadata"]["managedFields"]
        );
        ensure!(
            !owns(
                &applied,
                "applier",
                "",
                &[
                    "f:spec",
                    "f:updateStrategy",
                    "f:rollingUpdate",
                    "f:partition"
                ]
            ),
            "defaults are nobody's: {}",
            applied["metadata"]["managedFields"]
        );
        let applier = entries(&applied);
        ensure!(
            applier.len() == 1 && applier[0].0 == "applier" && applier[0].1 == "Apply",
            "one Apply entry: {applier:?}"
        );
    }

    // A merge patch changing it (adding it, where it was dropped).
    let patched = to_json(
        &sets
            .patch(
                "created",
                &PatchParams {
                    field_manager: Some("patcher".into()),
                    ..PatchParams::default()
                },
                &Patch::Merge(
                    json!({"spec": {"updateStrategy": {"rollingUpdate": {"maxUnavailable": 3}}}}),
                ),
            )
            .await?,
    )?;
    ensure!(
        patched["spec"]["updateStrategy"] == strategy(3),
        "patched: {}",
        patched["spec"]["updateStrategy"]
    );
    let generation = if kept { 2 } else { 1 };
    ensure!(
        patched["metadata"]["generation"] == generation,
        "generation {generation} (a new one only if the field is kept): {}",
        patched["metadata"]
    );
    ensure!(
        owns(&patched, "patcher", "", &path) == recorded,
        "the patcher owns maxUnavailable ({recorded}): {}",
        patched["metadata"]["managedFields"]
    );

    // A dry-run create answers the object without the field and stores nothing.
    let dry = PostParams {
        dry_run: true,
        field_manager: Some(MANAGER.into()),
    };
    let answered = to_json(
        &sets
            .create(&dry, &serde_json::from_value(with_field("dry")?)?)
            .await?,
    )?;
    ensure!(
        answered["spec"]["updateStrategy"] == expected_strategy,
        "dry run: {}",
        answered["spec"]["updateStrategy"]
    );
    ensure!(
        answered["metadata"]["uid"].is_string(),
        "a dry run answers a uid: {}",
        answered["metadata"]
    );
    ensure!(
        answered["metadata"]
            .get("resourceVersion")
            .is_none_or(|rv| rv == "" || rv.is_null()),
        "a dry run answers no resourceVersion: {}",
        answered["metadata"]
    );
    ensure!(
        owns(&answered, MANAGER, "", &path) == recorded,
        "dry run managedFields ({recorded}): {}",
        answered["metadata"]["managedFields"]
    );
    let missing = failure("a get of the dry-run set", sets.get("dry").await)?;
    expect_failure(
        "dry run stored",
        &missing,
        404,
        "NotFound",
        "statefulsets.apps \"dry\" not found",
    )?;
    expect_details("dry run stored", &missing, "dry", "apps", "statefulsets")?;
    Ok(())
}

/// An orphan delete with a uid precondition: refused for another uid, accepted for the right
/// one; the object is marked (deletionTimestamp, `orphan` finalizer) and goes once the garbage
/// collector has orphaned its dependents.
pub async fn orphan_delete_preconditions(
    client: Client,
    ns: &str,
    _expect: &Expect,
) -> anyhow::Result<()> {
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), ns);
    let maps: Api<ConfigMap> = Api::namespaced(client, ns);
    let created = sets.create(&post(), &statefulset("web", 0)?).await?;
    let uid = created.uid().context("uid")?;
    let dependent: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "dependent", "ownerReferences": [{
            "apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": uid}]},
        "data": {"k": "v"},
    }))?;
    maps.create(&post(), &dependent).await?;

    let other = "00000000-0000-4000-8000-000000000000";
    let orphan = |uid: &str| DeleteParams {
        propagation_policy: Some(PropagationPolicy::Orphan),
        preconditions: Some(Preconditions {
            uid: Some(uid.to_owned()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    let refused = failure(
        "an orphan delete with another uid",
        sets.delete("web", &orphan(other)).await,
    )?;
    expect_failure(
        "uid precondition",
        &refused,
        409,
        "Conflict",
        &format!(
            "Operation cannot be fulfilled on StatefulSet.apps \"web\": the UID in the precondition ({other}) \
             does not match the UID in record ({uid}). The object might have been deleted and then recreated"
        ),
    )?;
    expect_details("uid precondition", &refused, "web", "apps", "StatefulSet")?;
    ensure!(
        sets.get_opt("web").await?.is_some(),
        "a refused delete leaves the set"
    );

    let answer = sets.delete("web", &orphan(&uid)).await?;
    let marked = answer
        .left()
        .context("an orphan delete answers the object, not a Status")?;
    ensure!(
        marked.metadata.deletion_timestamp.is_some(),
        "marked for deletion: {:?}",
        marked.metadata
    );
    ensure!(
        marked.finalizers().iter().any(|f| f == "orphan"),
        "the orphan finalizer: {:?}",
        marked.metadata.finalizers
    );
    ensure!(
        marked.metadata.generation == Some(2),
        "marking bumps the generation: {:?}",
        marked.metadata.generation
    );

    eventually("the set to go", Duration::from_secs(60), || async {
        Ok(sets.get_opt("web").await?.is_none())
    })
    .await?;
    let kept = maps.get("dependent").await?;
    ensure!(
        kept.metadata
            .owner_references
            .as_ref()
            .is_none_or(Vec::is_empty),
        "the dependent is orphaned: {:?}",
        kept.metadata.owner_references
    );
    let gone = failure(
        "a delete of the deleted set",
        sets.delete("web", &orphan(&uid)).await,
    )?;
    expect_failure(
        "deleted",
        &gone,
        404,
        "NotFound",
        "statefulsets.apps \"web\" not found",
    )?;
    Ok(())
}

/// managedFields sent with a create: the apiserver's field manager compares the object with
/// an empty one, so the creator owns every field and the sent entries are gone. An update that
/// changes nothing else keeps the entries it sends (how the product restores ownership after a
/// re-create); the restored owner's apply then meets no conflict, another applier does.
pub async fn managed_fields_on_create(
    client: Client,
    ns: &str,
    _expect: &Expect,
) -> anyhow::Result<()> {
    let sets: Api<StatefulSet> = Api::namespaced(client, ns);
    let helm = json!({
        "manager": "helm", "operation": "Apply", "apiVersion": "apps/v1",
        "time": "2025-01-01T00:00:00Z", "fieldsType": "FieldsV1",
        "fieldsV1": {"f:spec": {"f:replicas": {}, "f:minReadySeconds": {}}},
    });
    let mut body = statefulset_json("web", 0);
    body["spec"]["minReadySeconds"] = json!(1);
    body["metadata"]["managedFields"] = json!([helm]);
    let created = to_json(&sets.create(&post(), &serde_json::from_value(body)?).await?)?;
    let owners = entries(&created);
    ensure!(
        owners.len() == 1 && owners[0].0 == MANAGER && owners[0].1 == "Update",
        "the creator alone owns the created set: {owners:?}"
    );
    ensure!(
        owns(&created, MANAGER, "", &["f:spec", "f:replicas"]),
        "creator owns replicas"
    );
    ensure!(
        !owns(&created, "helm", "", &["f:spec"]),
        "the sent entry is gone"
    );

    // Restore: an update that changes nothing but managedFields keeps the ones it sends.
    let mut restored = Value::Null;
    for _ in 0..5 {
        let current = sets.get("web").await?;
        let rv = current.resource_version();
        let patch = json!({"metadata": {"resourceVersion": rv, "managedFields": [helm]}});
        match sets
            .patch("web", &patch_params(), &Patch::Merge(patch))
            .await
        {
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            other => {
                restored = to_json(&other?)?;
                break;
            }
        }
    }
    ensure!(!restored.is_null(), "the restore kept meeting conflicts");
    let owners = entries(&restored);
    ensure!(
        owners
            == [(
                "helm".to_owned(),
                "Apply".to_owned(),
                helm["fieldsV1"].clone()
            )],
        "the restored entries stand as sent: {owners:?}"
    );
    let time = restored
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .and_then(|l| l.iter().find(|e| e["manager"] == "helm"))
        .map(|e| e["time"].clone());
    ensure!(
        time == Some(json!("2025-01-01T00:00:00Z")),
        "the entry keeps its time: {time:?}"
    );

    // The owner's apply of a change meets no conflict.
    let mut config = statefulset_json("web", 0);
    config["spec"]["minReadySeconds"] = json!(5);
    let applied = to_json(
        &sets
            .patch("web", &PatchParams::apply("helm"), &Patch::Apply(config))
            .await?,
    )?;
    ensure!(
        applied["spec"]["minReadySeconds"] == 5,
        "helm's change is stored: {}",
        applied["spec"]
    );
    ensure!(
        owns(&applied, "helm", "", &["f:spec", "f:minReadySeconds"]),
        "helm owns it"
    );

    // Another applier of a field helm owns conflicts, naming helm; forced, it takes the field.
    let other = json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "web"},
        "spec": {"minReadySeconds": 7}});
    let refused = failure(
        "an apply of helm's field by another manager",
        sets.patch("web", &PatchParams::apply("other"), &Patch::Apply(&other))
            .await,
    )?;
    expect_failure(
        "apply conflict",
        &refused,
        409,
        "Conflict",
        "Apply failed with 1 conflict: conflict with \"helm\": .spec.minReadySeconds",
    )?;
    let conflict_causes = causes(&refused);
    ensure!(
        conflict_causes
            == [(
                "FieldManagerConflict".to_owned(),
                ".spec.minReadySeconds".to_owned(),
                "conflict with \"helm\"".to_owned()
            )],
        "apply conflict causes: {conflict_causes:?}"
    );
    let forced = to_json(
        &sets
            .patch(
                "web",
                &PatchParams::apply("other").force(),
                &Patch::Apply(&other),
            )
            .await?,
    )?;
    ensure!(
        forced["spec"]["minReadySeconds"] == 7,
        "forced: {}",
        forced["spec"]
    );
    ensure!(
        owns(&forced, "other", "", &["f:spec", "f:minReadySeconds"]),
        "the forced applier owns it"
    );
    ensure!(
        !owns(&forced, "helm", "", &["f:spec", "f:minReadySeconds"]),
        "helm lost it"
    );

    // An update manager's field conflicts too, named with its API version.
    sets.patch(
        "web",
        &patch_params(),
        &Patch::Merge(json!({"metadata": {"labels": {"tier": "db"}}})),
    )
    .await?;
    let labels = json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "web", "labels": {"tier": "cache"}}});
    let refused = failure(
        "an apply of an updater's label",
        sets.patch("web", &PatchParams::apply("helm"), &Patch::Apply(&labels))
            .await,
    )?;
    expect_failure(
        "update-manager conflict",
        &refused,
        409,
        "Conflict",
        &format!(
            "Apply failed with 1 conflict: conflict with \"{MANAGER}\" using apps/v1: .metadata.labels.tier"
        ),
    )?;

    // An apply of the very manifest a client-side apply created conflicts on the atomic claim
    // templates alone (the stored ones carry defaults the manifest lacks); the containers,
    // merged by name, keep their defaults and do not conflict.
    let manifest = statefulset_json("client-side", 0);
    sets.create(
        &PostParams {
            field_manager: Some("kubectl-client-side-apply".into()),
            ..PostParams::default()
        },
        &serde_json::from_value(manifest.clone())?,
    )
    .await?;
    let refused = failure(
        "an apply of the manifest a client-side apply created",
        sets.patch(
            "client-side",
            &PatchParams::apply("helm"),
            &Patch::Apply(&manifest),
        )
        .await,
    )?;
    expect_failure(
        "apply over client-side ownership",
        &refused,
        409,
        "Conflict",
        "Apply failed with 1 conflict: conflict with \"kubectl-client-side-apply\" using apps/v1: .spec.volumeClaimTemplates",
    )?;
    let forced = to_json(
        &sets
            .patch(
                "client-side",
                &PatchParams::apply("helm").force(),
                &Patch::Apply(&manifest),
            )
            .await?,
    )?;
    ensure!(
        forced["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] == "IfNotPresent",
        "the container keeps its defaults: {}",
        forced["spec"]["template"]["spec"]
    );
    ensure!(
        owns(&forced, "helm", "", &["f:spec", "f:volumeClaimTemplates"])
            && !owns(
                &forced,
                "kubectl-client-side-apply",
                "",
                &["f:spec", "f:volumeClaimTemplates"]
            ),
        "forced, helm took the templates: {}",
        forced["metadata"]["managedFields"]
    );
    Ok(())
}

/// A claim's class may be set once from unset (Kubernetes 1.25+), not changed; its size may
/// not change while it is unbound (and may not go down at all without expansion recovery);
/// `volumeAttributesClassName` is kept, dropped or unknown as this version has it.
pub async fn claim_updates(client: Client, ns: &str, expect: &Expect) -> anyhow::Result<()> {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client, ns);
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }))?;
    let created = to_json(&claims.create(&post(), &claim).await?)?;
    ensure!(
        created["spec"].get("storageClassName").is_none(),
        "no class without a default: {}",
        created["spec"]
    );
    ensure!(
        created["spec"]["volumeMode"] == "Filesystem",
        "volumeMode defaulted: {}",
        created["spec"]
    );
    ensure!(
        created["status"]["phase"] == "Pending",
        "Pending: {}",
        created["status"]
    );

    let forbidden = format!("Forbidden: {}", expect.pvc_forbidden);
    let prefix = format!("PersistentVolumeClaim \"data\" is invalid: spec: {forbidden}");
    let set = claims
        .patch(
            "data",
            &patch_params(),
            &Patch::Merge(json!({"spec": {"storageClassName": "gold"}})),
        )
        .await;
    let class = if expect.class_from_unset {
        let set = to_json(&set.context("a class set from unset")?)?;
        ensure!(
            set["spec"]["storageClassName"] == "gold",
            "class set from unset: {}",
            set["spec"]
        );
        json!("gold")
    } else {
        let refused = failure("a class set from unset", set)?;
        ensure!(
            refused.code == 422 && refused.message.starts_with(&prefix),
            "a class from unset is refused (before v1.25): {refused:?}"
        );
        Value::Null
    };
    let refusals = [
        (
            "a class change",
            json!({"spec": {"storageClassName": "silver"}}),
        ),
        (
            "a shrink of an unbound claim",
            json!({"spec": {"resources": {"requests": {"storage": "500Mi"}}}}),
        ),
        (
            "a growth of an unbound claim",
            json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}}),
        ),
        (
            "an access mode change",
            json!({"spec": {"accessModes": ["ReadWriteMany"]}}),
        ),
    ];
    let lower = (
        "FieldValueForbidden".to_owned(),
        "spec.resources.requests.storage".to_owned(),
        "Forbidden: field can not be less than previous value".to_owned(),
    );
    for (what, patch) in refusals {
        let refused = failure(
            what,
            claims
                .patch("data", &patch_params(), &Patch::Merge(patch))
                .await,
        )?;
        // Without expansion recovery a lower request is its own error too.
        let twice = what.contains("shrink") && !expect.expansion_recovery;
        let (head, tail) = if twice {
            (
                format!("PersistentVolumeClaim \"data\" is invalid: [spec: {forbidden}"),
                format!("{}: {}]", lower.1, lower.2),
            )
        } else {
            (prefix.clone(), String::new())
        };
        ensure!(
            refused.code == 422
                && refused.reason == "Invalid"
                && refused.message.starts_with(&head)
                && refused.message.ends_with(&tail),
            "{what}: expected 422 Invalid {head:?}...{tail:?}, got {} {} {:?}",
            refused.code,
            refused.reason,
            refused.message
        );
        expect_details(what, &refused, "data", "", "PersistentVolumeClaim")?;
        let found = causes(&refused);
        ensure!(
            found.len() == 1 + usize::from(twice)
                && found[0].0 == "FieldValueForbidden"
                && found[0].1 == "spec"
                && found[0].2.starts_with(&forbidden)
                && (!twice || found[1] == lower),
            "{what}: causes {found:?}"
        );
    }
    let stored = to_json(&claims.get("data").await?)?;
    ensure!(
        stored["spec"]
            .get("storageClassName")
            .unwrap_or(&Value::Null)
            == &class
            && stored["spec"]["resources"]["requests"]["storage"] == "1Gi",
        "refused updates changed nothing: {}",
        stored["spec"]
    );

    // `volumeAttributesClassName`: with the VolumeAttributesClass gate off (v1.32's default)
    // the registry drops it from a claim that does not use it, on create and update, after
    // the field manager recorded who set it; before v1.29 the types lack it; with the gate on
    // it is kept, and only a bound claim may change it.
    let with_vac: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "vac"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
            "volumeAttributesClassName": "fast"},
    }))?;
    let created = to_json(&claims.create(&post(), &with_vac).await?)?;
    let kept = expect.claim_vac == Fate::Kept;
    let recorded = expect.claim_vac != Fate::Absent;
    ensure!(
        created["spec"].get("volumeAttributesClassName").is_some() == kept,
        "{:?} on create: {}",
        expect.claim_vac,
        created["spec"]
    );
    ensure!(
        owns(
            &created,
            MANAGER,
            "",
            &["f:spec", "f:volumeAttributesClassName"]
        ) == recorded,
        "the creator owns the field ({recorded}): {}",
        created["metadata"]["managedFields"]
    );
    let patched = claims
        .patch(
            "data",
            &patch_params(),
            &Patch::Merge(json!({"spec": {"volumeAttributesClassName": "fast"}})),
        )
        .await;
    if kept {
        let refused = failure("a class of volume attributes for an unbound claim", patched)?;
        ensure!(
            refused.code == 422 && refused.message.starts_with(&prefix),
            "only a bound claim changes its VolumeAttributesClass: {refused:?}"
        );
    } else {
        let patched = to_json(&patched?)?;
        ensure!(
            patched["spec"].get("volumeAttributesClassName").is_none(),
            "dropped on update: {}",
            patched["spec"]
        );
    }

    // Every new claim gets the protection finalizer (an admission plugin's, after the field
    // manager: nobody owns it); deleting a claim no scheduled pod uses marks it, and the
    // protection controller lets it go.
    ensure!(
        created["metadata"]["finalizers"] == json!(["kubernetes.io/pvc-protection"]),
        "the protection finalizer: {}",
        created["metadata"]
    );
    ensure!(
        !owns(&created, MANAGER, "", &["f:metadata", "f:finalizers"]),
        "nobody owns the finalizer: {}",
        created["metadata"]["managedFields"]
    );
    let answer = claims.delete("vac", &DeleteParams::default()).await?;
    let marked = answer
        .left()
        .context("a claim's delete answers the marked claim")?;
    ensure!(
        marked.metadata.deletion_timestamp.is_some()
            && marked.finalizers() == ["kubernetes.io/pvc-protection"],
        "marked for deletion: {:?}",
        marked.metadata
    );
    eventually(
        "the unused claim to go",
        Duration::from_secs(60),
        || async { Ok(claims.get_opt("vac").await?.is_none()) },
    )
    .await?;
    Ok(())
}

/// What the apiserver fills in on a StatefulSet and a claim (raw JSON, nulls included): the
/// webhook and the controller see these defaulted objects, never the manifests.
pub async fn statefulset_defaults(client: Client, ns: &str, expect: &Expect) -> anyhow::Result<()> {
    let sets: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<StatefulSet>(&()));
    let mut manifest = statefulset_json("web", 0);
    manifest["spec"]["template"]["spec"]["containers"] = json!([
        {"name": "db", "image": "registry.k8s.io/pause:3.10", "ports": [{"containerPort": 80}]},
        {"name": "latest", "image": "busybox"},
    ]);
    manifest["spec"]["template"]["spec"]["volumes"] = json!([
        {"name": "config", "configMap": {"name": "web"}},
        {"name": "secret", "secret": {"secretName": "web"}},
    ]);
    let created = sets
        .create(&post(), &serde_json::from_value(manifest)?)
        .await?;
    let spec = created.data["spec"].clone();
    let mut expected = json!({
        "replicas": 0,
        "selector": {"matchLabels": {"app": "web"}},
        "template": {
            "metadata": {"creationTimestamp": null, "labels": {"app": "web"}},
            "spec": {
                "volumes": [
                    {"name": "config", "configMap": {"name": "web", "defaultMode": 420}},
                    {"name": "secret", "secret": {"secretName": "web", "defaultMode": 420}},
                ],
                "containers": [
                    {"name": "db", "image": "registry.k8s.io/pause:3.10",
                     "ports": [{"containerPort": 80, "protocol": "TCP"}], "resources": {},
                     "terminationMessagePath": "/dev/termination-log",
                     "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"},
                    {"name": "latest", "image": "busybox", "resources": {},
                     "terminationMessagePath": "/dev/termination-log",
                     "terminationMessagePolicy": "File", "imagePullPolicy": "Always"},
                ],
                "restartPolicy": "Always",
                "terminationGracePeriodSeconds": 30,
                "dnsPolicy": "ClusterFirst",
                "securityContext": {},
                "schedulerName": "default-scheduler",
            },
        },
        "volumeClaimTemplates": [{
            "kind": "PersistentVolumeClaim",
            "apiVersion": "v1",
            "metadata": {"name": "data", "creationTimestamp": null},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
                     "volumeMode": "Filesystem"},
            "status": {"phase": "Pending"},
        }],
        "serviceName": "web",
        "podManagementPolicy": "OrderedReady",
        "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
        "revisionHistoryLimit": 10,
        "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain", "whenScaled": "Retain"},
    });
    // What differs between versions: a zero creationTimestamp printed as null (up to v1.34),
    // the retention policy (v1.27+), maxUnavailable 1 (MaxUnavailableStatefulSet on).
    if !expect.embedded_creation_timestamp_null {
        for pointer in ["/template/metadata", "/volumeClaimTemplates/0/metadata"] {
            if let Some(meta) = expected.pointer_mut(pointer).and_then(Value::as_object_mut) {
                meta.remove("creationTimestamp");
            }
        }
    }
    if !expect.retention_default
        && let Some(spec) = expected.as_object_mut()
    {
        spec.remove("persistentVolumeClaimRetentionPolicy");
    }
    if expect.max_unavailable_default_one {
        expected["updateStrategy"]["rollingUpdate"]["maxUnavailable"] = json!(1);
    }
    ensure!(
        spec == expected,
        "the defaulted StatefulSet spec:\n{}\nexpected:\n{}",
        serde_json::to_string_pretty(&spec)?,
        serde_json::to_string_pretty(&expected)?
    );
    ensure!(
        created.data["status"] == json!({"replicas": 0, "availableReplicas": 0}),
        "the status a create answers: {}",
        created.data["status"]
    );

    // `{type: RollingUpdate}` alone gets no rollingUpdate block; OnDelete none either.
    for (name, strategy, stored) in [
        (
            "rolling",
            json!({"type": "RollingUpdate"}),
            json!({"type": "RollingUpdate"}),
        ),
        (
            "ondelete",
            json!({"type": "OnDelete"}),
            json!({"type": "OnDelete"}),
        ),
    ] {
        let mut manifest = statefulset_json(name, 0);
        manifest["spec"]["updateStrategy"] = strategy;
        let created = sets
            .create(&post(), &serde_json::from_value(manifest)?)
            .await?;
        ensure!(
            created.data["spec"]["updateStrategy"] == stored,
            "{name}: {}",
            created.data["spec"]["updateStrategy"]
        );
    }

    let claims: Api<DynamicObject> = Api::namespaced_with(
        client,
        ns,
        &ApiResource::erase::<PersistentVolumeClaim>(&()),
    );
    let claim = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}});
    let created = claims
        .create(&post(), &serde_json::from_value(claim)?)
        .await?;
    let expected = json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
        "volumeMode": "Filesystem"});
    ensure!(
        created.metadata.finalizers == Some(vec!["kubernetes.io/pvc-protection".to_owned()]),
        "the protection finalizer: {:?}",
        created.metadata.finalizers
    );
    ensure!(
        created.data["spec"] == expected && created.data["status"] == json!({"phase": "Pending"}),
        "the defaulted claim: {} {}",
        created.data["spec"],
        created.data["status"]
    );
    Ok(())
}

/// Preconditions of deletes and updates: a stale resourceVersion or another uid.
pub async fn write_preconditions(client: Client, ns: &str, _expect: &Expect) -> anyhow::Result<()> {
    let maps: Api<ConfigMap> = Api::namespaced(client, ns);
    let map: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "cfg"}, "data": {"k": "1"}}))?;
    let first = maps.create(&post(), &map).await?;
    let (uid, rv1) = (
        first.uid().context("uid")?,
        first.resource_version().context("rv")?,
    );
    let second = maps
        .patch(
            "cfg",
            &patch_params(),
            &Patch::Merge(json!({"data": {"k": "2"}})),
        )
        .await?;
    let rv2 = second.resource_version().context("rv")?;
    ensure!(rv1 != rv2, "an update moves the resourceVersion");

    // A delete with a stale resourceVersion.
    let stale = DeleteParams {
        preconditions: Some(Preconditions {
            uid: None,
            resource_version: Some(rv1.clone()),
        }),
        ..DeleteParams::default()
    };
    let refused = failure(
        "a delete with a stale resourceVersion",
        maps.delete("cfg", &stale).await,
    )?;
    expect_failure(
        "stale delete",
        &refused,
        409,
        "Conflict",
        &format!(
            "Operation cannot be fulfilled on ConfigMap \"cfg\": the ResourceVersion in the precondition ({rv1}) \
             does not match the ResourceVersion in record ({rv2}). The object might have been modified"
        ),
    )?;
    expect_details("stale delete", &refused, "cfg", "", "ConfigMap")?;

    // A merge patch carrying a stale resourceVersion.
    let refused = failure(
        "a merge patch with a stale resourceVersion",
        maps.patch(
            "cfg",
            &patch_params(),
            &Patch::Merge(json!({"metadata": {"resourceVersion": rv1}, "data": {"k": "3"}})),
        )
        .await,
    )?;
    expect_failure(
        "stale patch",
        &refused,
        409,
        "Conflict",
        "Operation cannot be fulfilled on configmaps \"cfg\": the object has been modified; please apply your \
         changes to the latest version and try again",
    )?;
    expect_details("stale patch", &refused, "cfg", "", "configmaps")?;

    // Another uid: a precondition on replace, an immutable field on patch.
    let other = "00000000-0000-4000-8000-000000000000";
    let mut replaced = second.clone();
    replaced.metadata.uid = Some(other.into());
    replaced.metadata.resource_version = None;
    let refused = failure(
        "a replace with another uid",
        maps.replace("cfg", &post(), &replaced).await,
    )?;
    expect_failure(
        "replace with another uid",
        &refused,
        409,
        "Conflict",
        &format!(
            "Operation cannot be fulfilled on configmaps \"cfg\": StorageError: invalid object, Code: 4, Key: \
             /registry/configmaps/{ns}/cfg, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in \
             precondition: {other}, UID in object meta: {uid}"
        ),
    )?;
    let refused = failure(
        "a merge patch with another uid",
        maps.patch(
            "cfg",
            &patch_params(),
            &Patch::Merge(json!({"metadata": {"uid": other}})),
        )
        .await,
    )?;
    let detail = format!("Invalid value: \"{other}\": field is immutable");
    expect_failure(
        "patch with another uid",
        &refused,
        422,
        "Invalid",
        &format!("ConfigMap \"cfg\" is invalid: metadata.uid: {detail}"),
    )?;
    let cause = (
        "FieldValueInvalid".to_owned(),
        "metadata.uid".to_owned(),
        detail,
    );
    ensure!(
        causes(&refused) == [cause.clone(), cause],
        "patch with another uid: causes {:?}",
        causes(&refused)
    );

    // The current version deletes.
    let current = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid),
            resource_version: Some(rv2),
        }),
        ..DeleteParams::default()
    };
    maps.delete("cfg", &current).await?;
    ensure!(maps.get_opt("cfg").await?.is_none(), "deleted");
    Ok(())
}

/// `/status` writes of a StatefulSet change status and metadata, never spec; writes of the main
/// resource leave status alone.
pub async fn status_subresource(client: Client, ns: &str, _expect: &Expect) -> anyhow::Result<()> {
    let sets: Api<StatefulSet> = Api::namespaced(client, ns);
    sets.create(&post(), &statefulset("web", 0)?).await?;
    let written = to_json(
        &sets
            .patch_status(
                "web",
                &patch_params(),
                &Patch::Merge(
                    json!({"spec": {"replicas": 4}, "metadata": {"labels": {"from": "status"}},
                    "status": {"collisionCount": 5}}),
                ),
            )
            .await?,
    )?;
    ensure!(
        written["status"]["collisionCount"] == 5,
        "the status write: {}",
        written["status"]
    );
    ensure!(
        written["spec"]["replicas"] == 0,
        "spec ignored on /status: {}",
        written["spec"]
    );
    // The StatefulSet's status strategy resets only the spec: metadata goes through.
    ensure!(
        written["metadata"]["labels"]["from"] == "status",
        "labels kept on /status: {}",
        written["metadata"]
    );
    ensure!(
        written["metadata"]["generation"] == 1,
        "no new generation: {}",
        written["metadata"]
    );
    ensure!(
        owns(
            &written,
            MANAGER,
            "status",
            &["f:status", "f:collisionCount"]
        ),
        "the status writer's entry: {}",
        written["metadata"]["managedFields"]
    );
    ensure!(
        owns(
            &written,
            MANAGER,
            "status",
            &["f:metadata", "f:labels", "f:from"]
        ),
        "the status writer owns the label it set: {}",
        written["metadata"]["managedFields"]
    );
    ensure!(
        !owns(&written, MANAGER, "status", &["f:spec"]),
        "nor any spec field: {}",
        written["metadata"]["managedFields"]
    );

    let written = to_json(
        &sets
            .patch(
                "web",
                &patch_params(),
                &Patch::Merge(json!({"metadata": {"labels": {"from": "main"}}, "status": {"collisionCount": 9}})),
            )
            .await?,
    )?;
    ensure!(
        written["metadata"]["labels"]["from"] == "main",
        "the main write: {}",
        written["metadata"]
    );
    ensure!(
        written["status"]["collisionCount"] != 9,
        "status ignored on the main resource: {}",
        written["status"]
    );
    ensure!(
        !owns(&written, MANAGER, "", &["f:status"]),
        "status is nobody's on the main resource: {}",
        written["metadata"]["managedFields"]
    );
    Ok(())
}

/// kube's recorder writes `events.k8s.io/v1` Events (create, then a merge patch of the
/// series); they are one collection with core/v1 Events, each API with its own field names and
/// field selectors.
pub async fn events_both_apis(client: Client, ns: &str, _expect: &Expect) -> anyhow::Result<()> {
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let map: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "regarded"}}))?;
    let map = maps.create(&post(), &map).await?;
    let reference = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("ConfigMap".into()),
        name: Some("regarded".into()),
        namespace: Some(ns.into()),
        uid: map.uid(),
        ..ObjectReference::default()
    };
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "agreement-controller".into(),
            instance: Some("agreement-0".into()),
        },
    );
    let event = Event {
        type_: EventType::Warning,
        reason: "AgreementProbe".into(),
        note: Some("first".into()),
        action: "Probe".into(),
        secondary: None,
    };
    recorder.publish(&event, &reference).await?;
    recorder.publish(&event, &reference).await?;

    let v1: Api<EventV1> = Api::namespaced(client.clone(), ns);
    let core: Api<CoreEvent> = Api::namespaced(client, ns);
    let by_reason = ListParams::default().fields("reason=AgreementProbe");
    let found = v1.list(&by_reason).await?.items;
    ensure!(found.len() == 1, "one events.k8s.io Event: {found:?}");
    let new = to_json(&found[0])?;
    ensure!(
        new["note"] == "first"
            && new["reportingController"] == "agreement-controller"
            && new["reportingInstance"] == "agreement-0"
            && new["regarding"]["name"] == "regarded"
            && new["type"] == "Warning"
            && new["action"] == "Probe"
            && new["series"]["count"] == 2,
        "the events.k8s.io view: {new}"
    );
    let found = core.list(&by_reason).await?.items;
    ensure!(found.len() == 1, "one core Event: {found:?}");
    let old = to_json(&found[0])?;
    ensure!(
        old["metadata"]["name"] == new["metadata"]["name"]
            && old["metadata"]["uid"] == new["metadata"]["uid"]
            && old["metadata"]["resourceVersion"] == new["metadata"]["resourceVersion"],
        "one object, two views: {} and {}",
        old["metadata"],
        new["metadata"]
    );
    ensure!(
        old["message"] == "first"
            && old["reportingComponent"] == "agreement-controller"
            && old["reportingInstance"] == "agreement-0"
            && old["involvedObject"]["name"] == "regarded"
            && old["involvedObject"]["kind"] == "ConfigMap"
            && old["type"] == "Warning"
            && old["action"] == "Probe"
            && old["series"]["count"] == 2
            && old["eventTime"].is_string(),
        "the core view: {old}"
    );

    for (what, fields) in [
        (
            "core involvedObject",
            "involvedObject.name=regarded,involvedObject.kind=ConfigMap",
        ),
        (
            "core reportingComponent",
            "reportingComponent=agreement-controller,type=Warning",
        ),
    ] {
        let n = core
            .list(&ListParams::default().fields(fields))
            .await?
            .items
            .len();
        ensure!(n == 1, "{what}: {n} Events");
    }
    for (what, fields) in [
        (
            "events.k8s.io regarding",
            "regarding.name=regarded,regarding.kind=ConfigMap",
        ),
        (
            "events.k8s.io reportingController",
            "reportingController=agreement-controller,type=Warning",
        ),
    ] {
        let n = v1
            .list(&ListParams::default().fields(fields))
            .await?
            .items
            .len();
        ensure!(n == 1, "{what}: {n} Events");
    }
    let none = core
        .list(&ListParams::default().fields("reason=Other"))
        .await?
        .items;
    ensure!(none.is_empty(), "another reason: {none:?}");

    let refused = failure(
        "a core list by an events.k8s.io field",
        core.list(&ListParams::default().fields("regarding.name=regarded"))
            .await,
    )?;
    expect_failure(
        "core field label",
        &refused,
        400,
        "BadRequest",
        "field label not supported: regarding.name",
    )?;
    let refused = failure(
        "an events.k8s.io list by a core field",
        v1.list(&ListParams::default().fields("involvedObject.name=regarded"))
            .await,
    )?;
    expect_failure(
        "events.k8s.io field label",
        &refused,
        400,
        "BadRequest",
        "field label not supported: involvedObject.name",
    )?;
    Ok(())
}

/// Paged lists (`limit`, `continue`) and a watch resumed from a list's resourceVersion, as
/// kube's watcher runs them.
pub async fn paged_lists_and_watch(
    client: Client,
    ns: &str,
    _expect: &Expect,
) -> anyhow::Result<()> {
    let maps: Api<ConfigMap> = Api::namespaced(client, ns);
    for i in 0..5 {
        let map: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": format!("page-{i}"),
            "labels": {"agreement/page": "yes"}}}))?;
        maps.create(&post(), &map).await?;
    }
    let selected = ListParams::default().labels("agreement/page=yes");
    let mut names = Vec::new();
    let mut token: Option<String> = None;
    let mut pages = 0;
    let mut first_rv = None;
    loop {
        let mut params = selected.clone().limit(2);
        if let Some(t) = &token {
            params = params.continue_token(t);
        }
        let page = maps.list(&params).await?;
        pages += 1;
        ensure!(
            page.items.len() <= 2,
            "a page holds at most the limit: {}",
            page.items.len()
        );
        ensure!(
            page.metadata.remaining_item_count.is_none(),
            "no remainingItemCount for a list with a selector: {:?}",
            page.metadata
        );
        first_rv.get_or_insert(page.metadata.resource_version.clone());
        ensure!(
            Some(&page.metadata.resource_version) == first_rv.as_ref(),
            "every page is read at the first page's resourceVersion: {:?}",
            page.metadata
        );
        names.extend(page.items.iter().map(ResourceExt::name_any));
        token = page.metadata.continue_.filter(|t| !t.is_empty());
        if token.is_none() {
            break;
        }
        ensure!(pages < 10, "the pages never end");
    }
    ensure!(pages == 3, "five objects in pages of two: {pages} pages");
    ensure!(
        names == ["page-0", "page-1", "page-2", "page-3", "page-4"],
        "in name order: {names:?}"
    );

    let listed = maps.list(&selected).await?;
    let rv = listed
        .metadata
        .resource_version
        .context("a list's resourceVersion")?;
    ensure!(
        listed
            .metadata
            .continue_
            .as_deref()
            .unwrap_or("")
            .is_empty(),
        "one page without a limit"
    );
    maps.patch(
        "page-1",
        &patch_params(),
        &Patch::Merge(json!({"data": {"k": "v"}})),
    )
    .await?;
    maps.delete("page-2", &DeleteParams::default()).await?;
    let watch = WatchParams::default()
        .labels("agreement/page=yes")
        .timeout(10);
    let stream = maps.watch(&watch, &rv).await?;
    let mut stream = Box::pin(stream);
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let next = tokio::time::timeout(Duration::from_secs(10), stream.try_next())
            .await
            .map_err(|_| anyhow!("no watch event within 10 s; seen {seen:?}"))??;
        match next {
            Some(WatchEvent::Added(o)) => seen.push(format!("ADDED {}", o.name_any())),
            Some(WatchEvent::Modified(o)) => seen.push(format!("MODIFIED {}", o.name_any())),
            Some(WatchEvent::Deleted(o)) => seen.push(format!("DELETED {}", o.name_any())),
            Some(WatchEvent::Bookmark(_)) => {}
            Some(WatchEvent::Error(e)) => bail!("watch error: {e:?}"),
            None => bail!("the watch ended; seen {seen:?}"),
        }
    }
    ensure!(
        seen == ["MODIFIED page-1", "DELETED page-2"],
        "the changes after the list: {seen:?}"
    );
    drop(stream);

    let refused = failure(
        "a list with a malformed continue token",
        maps.list(&selected.clone().limit(2).continue_token("not-a-token"))
            .await,
    )?;
    ensure!(
        refused.code == 400 && refused.reason == "BadRequest",
        "bad continue: {refused:?}"
    );
    Ok(())
}
