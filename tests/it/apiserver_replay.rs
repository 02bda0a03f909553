//! Every request captured from a real apiserver (`tests/fixtures/apiserver-behaviour/<label>/`)
//! replayed against the fake's profile of that apiserver, in order, with the answers (and the
//! AdmissionReviews the webhook step sends) compared after the same normalization: a profile
//! cannot drift from its capture.
//!
//! The captures hold the probes, not the objects the probes start from; the harness rebuilds
//! those from what the answers show ([`setup`]), plays the components of kube-controller-manager
//! the fake does not model (the StatefulSet controller and the PersistentVolume controller,
//! [`controllers`]) through the API as they would act, and sends what kubectl sends for the
//! captured command lines ([`kubectl`]). What is not compared is listed in [`MASKS`], with why.
//!
//! What those controllers write (a StatefulSet's status and revision names, the pods and claims
//! it makes, bindings, provisioner annotations) is compared like the rest, but its values are
//! the harness's: what the comparison checks of the fake there is how it stores and answers
//! them (status subresource, defaults and admission plugins, managedFields, webhooks' reviews).

mod controllers;
mod kubectl;
mod normalize;
mod setup;

use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use serde_json::{Value, json};

use crate::support::fake_apiserver::admission::{
    AdmissionHook, Attributes, CallError, FailurePolicy, Phase, Webhook,
};
use crate::support::fake_apiserver::resources::{
    MUTATING_WEBHOOK_CONFIGURATIONS, NAMESPACES, PERSISTENT_VOLUME_CLAIMS, STATEFULSETS,
    VALIDATING_WEBHOOK_CONFIGURATIONS,
};
use crate::support::fake_apiserver::{FakeApiConfig, FakeApiServer, Profile, StoreView};

/// One value compared only up to its first line, and why.
struct Mask {
    /// The labels it applies to.
    labels: &'static [&'static str],
    probe: &'static str,
    /// In the compared document `{"response": {"status", "body"}, "reviews": [...]}`.
    pointer: &'static str,
    reason: &'static str,
}

const GO_CMP: &str = "the apiserver appends a go-cmp diff of the two claim specs; go-cmp's \
     output is not a stable format (v1.35+ prints a JSON diff, which the fake reproduces)";

/// Every value the replay does not compare whole: each is a claim immutability message of a
/// go-cmp version, compared up to the end of its sentence.
const MASKS: &[Mask] = &[
    Mask {
        labels: &["v1.24", "v1.32", "v1.32-gates-on"],
        probe: "06c-pvc-resize-unbound",
        pointer: "/response/body/message",
        reason: GO_CMP,
    },
    Mask {
        labels: &["v1.24", "v1.32", "v1.32-gates-on"],
        probe: "06c-pvc-resize-unbound",
        pointer: "/response/body/details/causes/0/message",
        reason: GO_CMP,
    },
    Mask {
        labels: &["v1.24"],
        probe: "06b-pvc-patch-class-from-unset",
        pointer: "/response/body/message",
        reason: GO_CMP,
    },
    Mask {
        labels: &["v1.24"],
        probe: "06b-pvc-patch-class-from-unset",
        pointer: "/response/body/details/causes/0/message",
        reason: GO_CMP,
    },
    Mask {
        labels: &["v1.32-gates-on"],
        probe: "06a-pvc-patch-vac",
        pointer: "/response/body/message",
        reason: GO_CMP,
    },
    Mask {
        labels: &["v1.32-gates-on"],
        probe: "06a-pvc-patch-vac",
        pointer: "/response/body/details/causes/0/message",
        reason: GO_CMP,
    },
];

/// The AdmissionReviews sent to the webhooks the probes register, as received.
#[derive(Default)]
struct Recorder {
    reviews: Mutex<Vec<(String, Value)>>,
}

impl Recorder {
    fn take(&self) -> Vec<(String, Value)> {
        std::mem::take(&mut *self.reviews.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// The webhooks of probes 11a/11b as the apiserver applies them: once registered, every
/// CREATE and UPDATE of a StatefulSet or claim (no subresource) in a namespace labelled
/// `kubernetes.io/metadata.name: reviews`; answered allowed, unchanged.
struct RecordingHook(Arc<Recorder>);

impl AdmissionHook for RecordingHook {
    fn webhooks(
        &self,
        phase: Phase,
        attributes: &Attributes<'_>,
        store: &StoreView<'_>,
    ) -> Vec<Webhook> {
        let resource = attributes.resource;
        let kind_matches = std::ptr::eq(resource, &STATEFULSETS)
            || std::ptr::eq(resource, &PERSISTENT_VOLUME_CLAIMS);
        let namespace_matches = store
            .get_object(&NAMESPACES, "", attributes.namespace)
            .and_then(|ns| ns.pointer("/metadata/labels/kubernetes.io~1metadata.name"))
            == Some(&json!("reviews"));
        let (configurations, name, path) = match phase {
            Phase::Mutating => (
                &MUTATING_WEBHOOK_CONFIGURATIONS,
                "mutate.capture.example.com",
                "/mutate",
            ),
            Phase::Validating => (
                &VALIDATING_WEBHOOK_CONFIGURATIONS,
                "validate.capture.example.com",
                "/validate",
            ),
        };
        let registered = store
            .get_object(configurations, "", "capture-behaviour")
            .is_some();
        if !(registered && kind_matches && namespace_matches && attributes.sub_resource.is_none()) {
            return Vec::new();
        }
        vec![Webhook {
            name: name.to_owned(),
            phase,
            endpoint: format!("{path}?timeout=5s"),
            failure_policy: FailurePolicy::Fail,
        }]
    }

    fn call(
        &self,
        webhook: &Webhook,
        review: Value,
    ) -> BoxFuture<'static, Result<Value, CallError>> {
        let uid = review
            .pointer("/request/uid")
            .cloned()
            .unwrap_or(Value::Null);
        self.0
            .reviews
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((webhook.endpoint.clone(), review));
        Box::pin(async move {
            Ok(
                json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                      "response": {"uid": uid, "allowed": true}}),
            )
        })
    }
}

/// Who sends a request: its user agent (the field manager when none is named) and the user
/// webhooks see.
#[derive(Debug, Clone, Copy)]
pub struct Caller {
    agent: &'static str,
    user: &'static str,
    uid: Option<&'static str>,
    groups: &'static [&'static str],
}

/// The capture's own requests: cluster-admin `admin` (token auth, `system:masters`).
pub const PROBE: Caller = Caller {
    agent: "capture-behaviour/1",
    user: "admin",
    uid: Some("admin"),
    groups: &["system:masters"],
};

/// kubectl, as `admin`.
pub const KUBECTL: Caller = Caller {
    agent: "kubectl/v1.32.0 (linux/amd64) kubernetes/70d3cc9",
    ..PROBE
};

const CONTROLLER_GROUPS: &[&str] = &[
    "system:serviceaccounts",
    "system:serviceaccounts:kube-system",
];

/// kube-controller-manager's StatefulSet controller (its own service account).
pub const STATEFULSET_CONTROLLER: Caller = Caller {
    agent: "kube-controller-manager/v1.32.0 (linux/amd64) kubernetes/70d3cc9/statefulset-controller",
    user: "system:serviceaccount:kube-system:statefulset-controller",
    uid: None,
    groups: CONTROLLER_GROUPS,
};

/// kube-controller-manager's PersistentVolume controller.
pub const VOLUME_BINDER: Caller = Caller {
    agent: "kube-controller-manager/v1.32.0 (linux/amd64) kubernetes/70d3cc9/persistent-volume-binder",
    user: "system:serviceaccount:kube-system:persistent-volume-binder",
    uid: None,
    groups: CONTROLLER_GROUPS,
};

/// The fake with one profile, and a plain HTTP client for it.
pub struct Harness {
    pub profile: Profile,
    pub api: FakeApiServer,
    http: reqwest::Client,
    recorder: Arc<Recorder>,
}

/// An HTTP answer: status and body (JSON, or the text as a string).
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub body: Value,
}

impl Answer {
    pub fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

impl Harness {
    async fn start(profile: Profile) -> Self {
        let api = FakeApiServer::start_with(FakeApiConfig::profile(profile)).await;
        let recorder = Arc::new(Recorder::default());
        api.add_admission_hook(Arc::new(RecordingHook(Arc::clone(&recorder))));
        Self {
            profile,
            api,
            http: reqwest::Client::new(),
            recorder,
        }
    }

    /// Sends one request as `who`.
    pub async fn call(
        &self,
        who: Caller,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: Option<&Value>,
    ) -> Answer {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("an HTTP method");
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.api.url()))
            .header("user-agent", who.agent)
            .header("impersonate-user", who.user);
        for group in who.groups {
            request = request.header("impersonate-group", *group);
        }
        if let Some(uid) = who.uid {
            request = request.header("impersonate-uid", uid);
        }
        if let Some(body) = body {
            request = request
                .header("content-type", content_type.unwrap_or("application/json"))
                .body(serde_json::to_vec(body).expect("a JSON body"));
        }
        let response = request.send().await.expect("the fake answers");
        let status = response.status().as_u16();
        let bytes = response.bytes().await.expect("a body");
        let body = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        Answer { status, body }
    }

    /// POSTs `object` as the capture's own client; it must be created.
    pub async fn create(&self, who: Caller, path: &str, object: Value) -> Value {
        let answer = self.call(who, "POST", path, None, Some(&object)).await;
        assert!(
            answer.ok(),
            "{} setup: create at {path}: {answer:?}",
            self.profile.label()
        );
        answer.body
    }
}

/// Replaces the placeholders of a captured request body with live values.
fn fill_request(h: &Harness, record: &Value, body: &Value) -> Value {
    let micro = controllers::now_micro();
    let path = record["request"]["path"].as_str().unwrap_or("");
    // The object a `<uid>` names: the one deleted, or the one an Event is about.
    let uid_of = |namespace: &str, name: &str| {
        h.api
            .get_object(&STATEFULSETS, namespace, name)
            .and_then(|o| o.pointer("/metadata/uid").cloned())
            .unwrap_or(Value::Null)
    };
    let mut body = body.clone();
    let reference = ["regarding", "involvedObject"]
        .into_iter()
        .find_map(|k| body.get(k).cloned());
    if let Some(reference) = reference {
        let uid = uid_of(
            reference["namespace"].as_str().unwrap_or(""),
            reference["name"].as_str().unwrap_or(""),
        );
        for key in ["regarding", "involvedObject"] {
            if body.get(key).is_some() {
                body[key]["uid"] = uid.clone();
            }
        }
    }
    if body.pointer("/preconditions/uid") == Some(&json!("<uid>")) {
        let parts: Vec<&str> = path.split('?').next().unwrap_or("").split('/').collect();
        // /apis/apps/v1/namespaces/<ns>/statefulsets/<name>
        if let [.., "namespaces", ns, _, name] = parts.as_slice() {
            body["preconditions"]["uid"] = uid_of(ns, name);
        }
    }
    normalize::replace_strings(&mut body, &|s| {
        if s == "<time>" {
            // events.k8s.io's eventTime is a MicroTime.
            Some(json!(micro))
        } else if s == "<caBundle>" {
            Some(json!("Q0E="))
        } else {
            s.contains("127.0.0.1:<port>")
                .then(|| json!(s.replace("127.0.0.1:<port>", "127.0.0.1:8443")))
        }
    });
    body
}

/// The compared document of one probe: the answer and the reviews sent meanwhile.
fn document(status: &Value, body: &Value, reviews: &[Value]) -> Value {
    json!({"response": {"status": status, "body": body}, "reviews": reviews})
}

/// Applies the masks of `(label, probe)` to a compared document.
fn masked(label: &str, probe: &str, mut doc: Value) -> Value {
    for mask in MASKS
        .iter()
        .filter(|m| m.probe == probe && m.labels.contains(&label))
    {
        if let Some(Value::String(text)) = doc.pointer_mut(mask.pointer) {
            let first = text.split('\n').next().unwrap_or("").to_owned();
            *text = first;
        }
    }
    doc
}

/// The first place two documents differ: its JSON pointer and both values.
fn first_difference(path: &str, captured: &Value, fake: &Value) -> Option<(String, Value, Value)> {
    match (captured, fake) {
        (Value::Object(a), Value::Object(b)) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            keys.into_iter().find_map(|k| {
                let child = format!("{path}/{}", k.replace('~', "~0").replace('/', "~1"));
                match (a.get(k), b.get(k)) {
                    (Some(x), Some(y)) => first_difference(&child, x, y),
                    (x, y) => Some((
                        child,
                        x.cloned().unwrap_or(json!("<absent>")),
                        y.cloned().unwrap_or(json!("<absent>")),
                    )),
                }
            })
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => a
            .iter()
            .zip(b)
            .enumerate()
            .find_map(|(i, (x, y))| first_difference(&format!("{path}/{i}"), x, y)),
        (a, b) if a == b => None,
        (a, b) => Some((path.to_owned(), a.clone(), b.clone())),
    }
}

/// Replays every probe of `profile`; answers the differences found, one line each.
async fn replay(profile: Profile) -> Vec<String> {
    let h = Harness::start(profile).await;
    let label = profile.label();
    let mut failures = Vec::new();
    setup::cluster(&h).await;
    for record in profile.probes() {
        let id = record["id"].as_str().unwrap_or("").to_owned();
        setup::before(&h, &id).await;
        h.recorder.take();
        let request = &record["request"];
        let (status, body) = if request["method"] == "kubectl" {
            let outcome = kubectl::run(&h, &record).await;
            setup::after(&h, &id, outcome.status == 0).await;
            (json!(outcome.status), json!(outcome.output))
        } else {
            let body =
                (!request["body"].is_null()).then(|| fill_request(&h, &record, &request["body"]));
            let answer = h
                .call(
                    PROBE,
                    request["method"].as_str().unwrap_or("GET"),
                    request["path"].as_str().unwrap_or("/"),
                    request["contentType"].as_str(),
                    body.as_ref(),
                )
                .await;
            let ok = answer.ok();
            setup::after(&h, &id, ok).await;
            (
                json!(answer.status),
                normalize::trimmed(&record, answer.body),
            )
        };
        let sent = h.recorder.take();
        let mut reviews: Vec<Value> = Vec::new();
        let mut wanted: Vec<Value> = Vec::new();
        for (i, (endpoint, review)) in sent.iter().enumerate() {
            let file = record["reviews"][i]["path"].as_str().unwrap_or("");
            if !file.is_empty() && file != endpoint {
                failures.push(format!(
                    "{label} {id}: review {i} went to {endpoint}, captured {file}"
                ));
            }
            reviews.push(normalize::normalized(review.clone()));
        }
        for listed in record["reviews"].as_array().into_iter().flatten() {
            let file = listed["file"].as_str().unwrap_or("");
            wanted.push(normalize::normalized(profile.review(file)));
        }
        let captured = masked(
            label,
            &id,
            document(
                &record["response"]["status"],
                &normalize::normalized(record["response"]["body"].clone()),
                &wanted,
            ),
        );
        let fake = masked(
            label,
            &id,
            document(&status, &normalize::normalized(body), &reviews),
        );
        if let Some((pointer, want, got)) = first_difference("", &captured, &fake) {
            failures.push(format!(
                "{label} {id}: first difference at {pointer}: captured {want} | fake {got}"
            ));
        }
    }
    failures
}

macro_rules! replay_tests {
    ($($name:ident => $profile:expr),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let failures = replay($profile).await;
                assert!(
                    failures.is_empty(),
                    "{} probe(s) of {} answered otherwise than captured:\n{}",
                    failures.len(),
                    $profile.label(),
                    failures.join("\n")
                );
            }
        )*
    };
}

replay_tests!(
    replay_v1_24 => Profile::V1_24,
    replay_v1_32 => Profile::V1_32,
    replay_v1_32_gates_on => Profile::V1_32GatesOn,
    replay_v1_35 => Profile::V1_35,
    replay_v1_35_maxunavailable_on => Profile::V1_35MaxUnavailableOn,
    replay_v1_36 => Profile::V1_36,
);

/// Every mask names a captured label and probe, and a value that is there to mask.
#[test]
fn every_mask_names_a_captured_value() {
    for mask in MASKS {
        assert!(!mask.reason.is_empty());
        for label in mask.labels {
            let profile = Profile::from_label(label)
                .unwrap_or_else(|| panic!("mask of {}: no label {label}", mask.probe));
            let record = profile
                .probes()
                .into_iter()
                .find(|r| r["id"] == mask.probe)
                .unwrap_or_else(|| panic!("mask: {label} has no probe {}", mask.probe));
            let doc = document(
                &record["response"]["status"],
                &record["response"]["body"],
                &[],
            );
            assert!(
                doc.pointer(mask.pointer).is_some(),
                "mask of {label} {}: nothing at {}",
                mask.probe,
                mask.pointer
            );
        }
    }
}
