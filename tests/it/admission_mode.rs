//! The admission mode `warn` in the apiserver's write path (the fake API server with the
//! router as its webhook): what the rules deny is passed on unchanged with the denial as a
//! warning, and the apiserver's own validation still has its say.

use serde_json::{Value, json};
use stateful_admission::admission::{AdmissionMode, Policy, WOULD_DENY_PREFIX};

use crate::support::admission_hook::RouterHook;
use crate::support::fake_apiserver::{FakeApiServer, STATEFULSET_SPEC_FORBIDDEN};

fn set(class: &str, replicas: i64) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "web", "namespace": "db"},
        "spec": {"replicas": replicas, "serviceName": "web",
                 "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "db", "image": "db:1"}]}},
                 "volumeClaimTemplates": [{"metadata": {"name": "data"},
                     "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class,
                              "resources": {"requests": {"storage": "1Gi"}}}}]}})
}

/// PUTs `object` over the wire: the status code, the warnings and the body.
async fn put(api: &FakeApiServer, object: &Value) -> (u16, Vec<String>, Value) {
    let url = format!("{}/apis/apps/v1/namespaces/db/statefulsets/web", api.url());
    let response = reqwest::Client::new()
        .put(url)
        .json(object)
        .send()
        .await
        .expect("answer");
    let code = response.status().as_u16();
    let warnings = response
        .headers()
        .get_all("warning")
        .iter()
        .map(|v| stateful_admission::check::gather::warning_text(v.to_str().expect("ascii")))
        .collect();
    (code, warnings, response.json().await.expect("json"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_warn_mode_a_denied_template_edit_reaches_the_apiserver_validation_with_our_warning() {
    for mode in [AdmissionMode::Enforce, AdmissionMode::Warn] {
        let api = FakeApiServer::start().await;
        api.put_object(set("standard", 1));
        let policy = Policy {
            admission_mode: mode,
            ..Policy::default()
        };
        api.add_admission_hook(RouterHook::watching_with(&api, policy).await);
        let mut edit = api
            .get_object(
                &crate::support::fake_apiserver::resources::STATEFULSETS,
                "db",
                "web",
            )
            .expect("stored");
        edit["spec"]["volumeClaimTemplates"][0]["spec"]["storageClassName"] = json!("fast");
        let (code, warnings, body) = put(&api, &edit).await;
        let message = body["message"].as_str().unwrap_or_default().to_owned();
        match mode {
            AdmissionMode::Enforce => {
                // Our webhook denies, naming the field.
                assert!(message.contains("denied the request"), "{body}");
                assert!(
                    message.contains("spec.volumeClaimTemplates[0].spec.storageClassName"),
                    "{body}"
                );
                assert!(warnings.is_empty(), "{warnings:?}");
            }
            AdmissionMode::Warn => {
                // Let through unchanged, the apiserver refuses the template change itself,
                // and the client sees what our webhook would have said.
                assert_eq!(code, 422, "{body}");
                assert!(message.contains(STATEFULSET_SPEC_FORBIDDEN), "{body}");
                assert!(
                    warnings.iter().any(|w| w.starts_with(WOULD_DENY_PREFIX)
                        && w.contains("spec.volumeClaimTemplates[0].spec.storageClassName")),
                    "{warnings:?}"
                );
            }
        }
        // Nothing changed either way.
        let stored = api
            .get_object(
                &crate::support::fake_apiserver::resources::STATEFULSETS,
                "db",
                "web",
            )
            .expect("stored");
        assert_eq!(
            stored["spec"]["volumeClaimTemplates"][0]["spec"]["storageClassName"],
            "standard"
        );
    }
}
