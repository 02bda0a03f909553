//! `/version` and `SelfSubjectAccessReview` (authorization.k8s.io/v1), with an access policy
//! and an impersonation switch the test sets ([`super::FakeApiConfig::denied_access`],
//! [`super::FakeApiConfig::impersonation_allowed`]). Everything not denied is allowed.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::Shared;
use super::errors::ApiError;

/// An access the policy refuses to `user`: `verb` on `resource` (`statefulsets`,
/// `statefulsets/status`) of any group and namespace, and only the object `name` when set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeniedAccess {
    pub user: String,
    pub verb: String,
    pub resource: String,
    pub name: Option<String>,
}

impl DeniedAccess {
    pub fn new(user: &str, verb: &str, resource: &str) -> Self {
        Self {
            user: user.to_owned(),
            verb: verb.to_owned(),
            resource: resource.to_owned(),
            name: None,
        }
    }

    /// Refused for the object `name` only.
    pub fn named(user: &str, verb: &str, resource: &str, name: &str) -> Self {
        Self {
            name: Some(name.to_owned()),
            ..Self::new(user, verb, resource)
        }
    }
}

/// `GET /version`: the `version.Info` of the configured `gitVersion`.
pub(super) async fn version(State(shared): State<Arc<Shared>>) -> Response {
    let config = shared.config();
    let (git_version, git_commit) = (config.git_version, config.git_commit);
    let mut parts = git_version.trim_start_matches('v').split('.');
    let major = parts.next().unwrap_or("1").to_owned();
    let minor = parts.next().unwrap_or("0").to_owned();
    axum::Json(json!({
        "major": major, "minor": minor, "gitVersion": git_version,
        "gitCommit": git_commit, "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.24.0", "compiler": "gc",
        "platform": "linux/amd64"
    }))
    .into_response()
}

/// `POST .../selfsubjectaccessreviews` as the impersonated user (or the admin).
pub(super) async fn self_subject_access_review(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let config = shared.config();
    let impersonated = headers
        .get("impersonate-user")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if impersonated.is_some() && !config.impersonation_allowed {
        // What kube-apiserver's impersonation filter answers a user without the right.
        let status = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": format!("users {:?} is forbidden: User \"admin\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope",
                impersonated.as_deref().unwrap_or("")),
            "reason": "Forbidden", "code": 403
        });
        return (StatusCode::FORBIDDEN, axum::Json(status)).into_response();
    }
    let user = impersonated.unwrap_or_else(|| "kubernetes-admin".to_owned());
    let Ok(mut review) = serde_json::from_slice::<Value>(&body) else {
        return ApiError::bad_request("not a SelfSubjectAccessReview").into_response();
    };
    let attributes = review
        .pointer("/spec/resourceAttributes")
        .cloned()
        .unwrap_or(Value::Null);
    let field = |k: &str| attributes.get(k).and_then(Value::as_str).unwrap_or("");
    let resource = match field("subresource") {
        "" => field("resource").to_owned(),
        sub => format!("{}/{sub}", field("resource")),
    };
    let denied = config.denied_access.iter().any(|d| {
        d.user == user
            && d.verb == field("verb")
            && d.resource == resource
            && d.name.as_deref().is_none_or(|name| name == field("name"))
    });
    review["status"] = if denied {
        json!({"allowed": false, "reason": "no RBAC policy matched"})
    } else {
        json!({"allowed": true, "reason": "allowed by the fake's policy"})
    };
    (StatusCode::CREATED, axum::Json(review)).into_response()
}
