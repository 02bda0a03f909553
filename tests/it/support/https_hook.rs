//! Admission as kube-apiserver calls webhooks: from the webhook configurations stored in the
//! fake API server, over HTTPS to the Service they name, trusting only their `caBundle`.
//! Services are mapped to loopback addresses the test gives (no DNS, no kube-proxy); the TLS
//! server name is `<service>.<namespace>.svc`, as the apiserver dials it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;

use base64::Engine as _;
use futures::future::BoxFuture;
use serde_json::Value;

use super::fake_apiserver::StoreView;
use super::fake_apiserver::admission::{
    AdmissionHook, Attributes, CallError, FailurePolicy, Operation, Phase, Webhook,
};
use super::fake_apiserver::resources::{
    MUTATING_WEBHOOK_CONFIGURATIONS, VALIDATING_WEBHOOK_CONFIGURATIONS,
};

/// How to reach one webhook, found in its configuration.
#[derive(Debug, Clone)]
struct Target {
    host: String,
    addr: Option<SocketAddr>,
    url: String,
    ca_bundle: Vec<u8>,
}

pub struct HttpsHook {
    /// `(namespace, name, port)` of a Service → where it listens.
    services: HashMap<(String, String, i64), SocketAddr>,
    targets: Mutex<HashMap<String, Target>>,
}

impl HttpsHook {
    pub fn new(services: impl IntoIterator<Item = ((String, String, i64), SocketAddr)>) -> Self {
        Self {
            services: services.into_iter().collect(),
            targets: Mutex::new(HashMap::new()),
        }
    }
}

fn strings(v: Option<&Value>) -> Vec<&str> {
    v.and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

impl AdmissionHook for HttpsHook {
    fn webhooks(
        &self,
        phase: Phase,
        attributes: &Attributes<'_>,
        store: &StoreView<'_>,
    ) -> Vec<Webhook> {
        if attributes.sub_resource.is_some() {
            return Vec::new();
        }
        let kind = match phase {
            Phase::Mutating => &MUTATING_WEBHOOK_CONFIGURATIONS,
            Phase::Validating => &VALIDATING_WEBHOOK_CONFIGURATIONS,
        };
        let operation = match attributes.operation {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
        };
        let mut out = Vec::new();
        for config in store.list_objects(kind) {
            let webhooks = config.get("webhooks").and_then(Value::as_array);
            for webhook in webhooks.into_iter().flatten() {
                let matches = webhook
                    .get("rules")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .any(|rule| {
                        let has = |key: &str, want: &str| {
                            strings(rule.get(key))
                                .iter()
                                .any(|v| *v == want || *v == "*")
                        };
                        has("apiGroups", attributes.resource.group)
                            && has("resources", attributes.resource.plural)
                            && has("operations", operation)
                    });
                let Some(name) = webhook.get("name").and_then(Value::as_str) else {
                    continue;
                };
                if !matches {
                    continue;
                }
                let client = webhook.get("clientConfig");
                let service = client.and_then(|c| c.get("service"));
                let field = |k: &str| {
                    service
                        .and_then(|s| s.get(k))
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned()
                };
                let port = service
                    .and_then(|s| s.get("port"))
                    .and_then(Value::as_i64)
                    .unwrap_or(443);
                let (namespace, service_name) = (field("namespace"), field("name"));
                let host = format!("{service_name}.{namespace}.svc");
                let addr = self.services.get(&(namespace, service_name, port)).copied();
                let ca_bundle = client
                    .and_then(|c| c.get("caBundle"))
                    .and_then(Value::as_str)
                    .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
                    .unwrap_or_default();
                let url = format!("https://{host}:{port}{}?timeout=5s", field("path"));
                let failure_policy = match webhook.get("failurePolicy").and_then(Value::as_str) {
                    Some("Ignore") => FailurePolicy::Ignore,
                    _ => FailurePolicy::Fail,
                };
                self.targets.lock().expect("targets").insert(
                    name.to_owned(),
                    Target {
                        host,
                        addr,
                        url: url.clone(),
                        ca_bundle,
                    },
                );
                out.push(Webhook {
                    name: name.to_owned(),
                    phase,
                    endpoint: url,
                    failure_policy,
                });
            }
        }
        out
    }

    fn call(
        &self,
        webhook: &Webhook,
        review: Value,
    ) -> BoxFuture<'static, Result<Value, CallError>> {
        let target = self
            .targets
            .lock()
            .expect("targets")
            .get(&webhook.name)
            .cloned();
        Box::pin(async move {
            let target = target.ok_or_else(|| CallError("no such webhook".to_owned()))?;
            let addr = target.addr.ok_or_else(|| {
                CallError(format!("dial tcp: lookup {}: no such host", target.host))
            })?;
            let mut builder = reqwest::Client::builder()
                .tls_built_in_root_certs(false)
                .resolve(&target.host, addr)
                .timeout(std::time::Duration::from_secs(5));
            let roots = reqwest::Certificate::from_pem_bundle(&target.ca_bundle)
                .map_err(|e| CallError(format!("caBundle: {e}")))?;
            for root in roots {
                builder = builder.add_root_certificate(root);
            }
            let client = builder.build().map_err(|e| CallError(e.to_string()))?;
            let response = client
                .post(&target.url)
                .json(&review)
                .send()
                .await
                .map_err(|e| CallError(format!("failed calling webhook: {e:?}")))?;
            if !response.status().is_success() {
                return Err(CallError(format!(
                    "the server responded with {}",
                    response.status()
                )));
            }
            response.json().await.map_err(|e| CallError(e.to_string()))
        })
    }
}
