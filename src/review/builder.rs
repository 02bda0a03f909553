//! Builds AdmissionReview requests shaped like the apiserver's, for tests, benchmarks and
//! examples: the same envelope as the captures in `tests/fixtures/apiserver/`.

use kube::core::DynamicObject;
use kube::core::admission::AdmissionRequest;
use serde_json::{Value, json};

use super::BadReview;
use super::offline::decode_request;

/// An AdmissionReview under construction, kept as JSON so that it can also be sent over HTTP.
#[derive(Debug, Clone)]
pub struct ReviewBuilder {
    review: Value,
}

impl ReviewBuilder {
    /// A request for `operation` (`CREATE`, `UPDATE`, …) on a resource of the given
    /// group/version/resource and kind; namespace and name come from the object when set.
    pub fn new(operation: &str, group: &str, version: &str, resource: &str, kind: &str) -> Self {
        let gvk = json!({"group": group, "version": version, "kind": kind});
        let gvr = json!({"group": group, "version": version, "resource": resource});
        let options_kind = match operation {
            "CREATE" => "CreateOptions",
            "UPDATE" => "UpdateOptions",
            "DELETE" => "DeleteOptions",
            _ => "CreateOptions",
        };
        Self {
            review: json!({
                "kind": "AdmissionReview",
                "apiVersion": "admission.k8s.io/v1",
                "request": {
                    "uid": "00000000-0000-4000-8000-000000000000",
                    "kind": gvk,
                    "resource": gvr,
                    "requestKind": gvk,
                    "requestResource": gvr,
                    "name": "",
                    "namespace": "default",
                    "operation": operation,
                    "userInfo": {"username": "admin", "groups": ["system:masters", "system:authenticated"]},
                    "object": null,
                    "oldObject": null,
                    "dryRun": false,
                    "options": {"kind": options_kind, "apiVersion": "meta.k8s.io/v1"}
                }
            }),
        }
    }

    pub fn statefulset(operation: &str) -> Self {
        Self::new(operation, "apps", "v1", "statefulsets", "StatefulSet")
    }

    pub fn claim(operation: &str) -> Self {
        Self::new(
            operation,
            "",
            "v1",
            "persistentvolumeclaims",
            "PersistentVolumeClaim",
        )
    }

    /// Sets `request.object`, and the request's name and namespace from its metadata.
    pub fn object(mut self, object: Value) -> Self {
        if let Some(name) = object.pointer("/metadata/name").and_then(Value::as_str) {
            self.review["request"]["name"] = Value::from(name);
        }
        if let Some(ns) = object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
        {
            self.review["request"]["namespace"] = Value::from(ns);
        }
        self.review["request"]["object"] = object;
        self
    }

    pub fn old_object(mut self, object: Value) -> Self {
        self.review["request"]["oldObject"] = object;
        self
    }

    pub fn uid(mut self, uid: &str) -> Self {
        self.review["request"]["uid"] = Value::from(uid);
        self
    }

    pub fn sub_resource(mut self, sub: &str) -> Self {
        self.review["request"]["subResource"] = Value::from(sub);
        self.review["request"]["requestSubResource"] = Value::from(sub);
        self
    }

    pub fn dry_run(mut self) -> Self {
        self.review["request"]["dryRun"] = Value::from(true);
        self
    }

    pub fn username(mut self, user: &str) -> Self {
        self.review["request"]["userInfo"]["username"] = Value::from(user);
        self
    }

    /// The AdmissionReview JSON.
    pub fn json(&self) -> &Value {
        &self.review
    }

    pub fn into_json(self) -> Value {
        self.review
    }

    /// The decoded request, as the server hands it to the rules.
    pub fn request(&self) -> Result<AdmissionRequest<DynamicObject>, BadReview> {
        decode_request(&self.review)
    }
}
