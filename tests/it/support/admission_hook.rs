//! The project's webhook in the fake API server's write path: the admission router as
//! `serve` builds it, called in-process (`tower::ServiceExt::oneshot`) for `/mutate` and
//! `/validate`, on a cluster view fed by watches on the fake server, as `serve` feeds it.
//! Which requests reach it follows the chart's webhook configurations: StatefulSet CREATE and
//! UPDATE (both webhooks), PersistentVolumeClaim CREATE (mutating) and UPDATE (validating),
//! no subresources, never `kube-system`.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use futures::future::BoxFuture;
use http_body_util::BodyExt;
use prometheus_client::registry::Registry;
use serde_json::Value;
use stateful_admission::admission::Policy;
use stateful_admission::cluster::{ClusterView, watch};
use stateful_admission::server::metrics::Metrics;
use stateful_admission::server::routes::{self, AdmissionState};
use tower::ServiceExt;

use super::fake_apiserver::admission::{
    AdmissionHook, Attributes, CallError, FailurePolicy, Operation, Phase, Webhook,
};
use super::fake_apiserver::resources::{PERSISTENT_VOLUME_CLAIMS, STATEFULSETS};
use super::fake_apiserver::{FakeApiServer, StoreView};

/// The project's two webhooks, served by its router.
pub struct RouterHook {
    router: Router,
    failure_policy: FailurePolicy,
}

impl RouterHook {
    /// The router on `view`, with the chart's default `failurePolicy: Ignore`.
    pub fn new(view: ClusterView, policy: Policy) -> Self {
        let mut registry = Registry::default();
        let metrics = Arc::new(Metrics::register(&mut registry));
        Self {
            router: routes::router(Arc::new(AdmissionState::new(view, policy, metrics))),
            failure_policy: FailurePolicy::Ignore,
        }
    }

    /// The router on a view that watches `api` (synced before this returns); the watches
    /// run until the test's runtime ends.
    pub async fn watching(api: &FakeApiServer) -> Arc<Self> {
        Self::watching_with(api, Policy::default()).await
    }

    /// [`watching`](Self::watching) with the rules' `policy`.
    pub async fn watching_with(api: &FakeApiServer, policy: Policy) -> Arc<Self> {
        let (view, driver) = watch::from_cluster(api.client(), None);
        tokio::spawn(driver);
        view.wait_synced().await.expect("the webhook's view syncs");
        Arc::new(Self::new(view, policy))
    }

    /// Puts a webhook watching `api` into its write path.
    pub async fn install(api: &FakeApiServer) -> Arc<Self> {
        let hook = Self::watching(api).await;
        api.add_admission_hook(hook.clone());
        hook
    }
}

impl AdmissionHook for RouterHook {
    fn webhooks(
        &self,
        phase: Phase,
        attributes: &Attributes<'_>,
        _store: &StoreView<'_>,
    ) -> Vec<Webhook> {
        let resource = attributes.resource;
        let matches = attributes.sub_resource.is_none()
            && attributes.namespace != "kube-system"
            && (std::ptr::eq(resource, &STATEFULSETS)
                || (std::ptr::eq(resource, &PERSISTENT_VOLUME_CLAIMS)
                    && match phase {
                        Phase::Mutating => attributes.operation == Operation::Create,
                        Phase::Validating => attributes.operation == Operation::Update,
                    }));
        if !matches {
            return Vec::new();
        }
        let (name, endpoint) = match phase {
            Phase::Mutating => ("mutate.stateful-admission.io", "/mutate"),
            Phase::Validating => ("validate.stateful-admission.io", "/validate"),
        };
        vec![Webhook {
            name: name.to_owned(),
            phase,
            endpoint: format!("{endpoint}?timeout=5s"),
            failure_policy: self.failure_policy,
        }]
    }

    fn call(
        &self,
        webhook: &Webhook,
        review: Value,
    ) -> BoxFuture<'static, Result<Value, CallError>> {
        let router = self.router.clone();
        let endpoint = webhook.endpoint.clone();
        Box::pin(async move {
            let body = serde_json::to_vec(&review).map_err(|e| CallError(e.to_string()))?;
            let request = Request::post(endpoint)
                .header("content-type", "application/json")
                .body(Body::from(body))
                .map_err(|e| CallError(e.to_string()))?;
            let response = router
                .oneshot(request)
                .await
                .map_err(|e| CallError(e.to_string()))?;
            let status = response.status();
            let bytes = response
                .into_body()
                .collect()
                .await
                .map_err(|e| CallError(e.to_string()))?
                .to_bytes();
            if status != StatusCode::OK {
                return Err(CallError(format!(
                    "the server responded with {status}: {}",
                    String::from_utf8_lossy(&bytes)
                )));
            }
            serde_json::from_slice(&bytes).map_err(|e| CallError(e.to_string()))
        })
    }
}
