//! The agreement bodies (tests/agreement) against the fake API server, configured as a v1.32
//! apiserver with its default feature gates: the same bodies run against a real one in the
//! real-cluster suite (`agreement_<body>`), so that where the fake and the apiserver differ a
//! test fails on one side.

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use crate::agreement;
use crate::support::fake_apiserver::{FakeApiConfig, FakeApiServer};

/// The namespace each body works in.
const NS: &str = "agreement";

/// A fake configured as v1.32 with default gates (`MaxUnavailableStatefulSet` and
/// `VolumeAttributesClass` off, the retroactive default class allowed), and a client for it with the body's namespace created.
async fn v1_32() -> (FakeApiServer, kube::Client) {
    let api = FakeApiServer::start_with(FakeApiConfig {
        git_version: "v1.32.0".to_owned(),
        drop_statefulset_max_unavailable: true,
        drop_claim_volume_attributes_class: true,
        retroactive_default_class_allowed: true,
        ..FakeApiConfig::default()
    })
    .await;
    let client = api.client();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NS}})).expect("a namespace"),
        )
        .await
        .expect("the body's namespace");
    (api, client)
}

macro_rules! agreement_tests {
    ($($body:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread")]
            async fn $body() {
                let (_api, client) = v1_32().await;
                agreement::$body(client, NS)
                    .await
                    .unwrap_or_else(|e| panic!("{}: {e:#}", stringify!($body)));
            }
        )*

        /// Every body of the shared list has a test here.
        #[test]
        fn every_body_is_run() {
            let here = [$(stringify!($body)),*];
            let listed: Vec<&str> = agreement::all().into_iter().map(|(name, _)| name).collect();
            assert_eq!(listed, here);
        }
    };
}

agreement_tests!(
    statefulset_template_edit,
    max_unavailable_gate_off,
    orphan_delete_preconditions,
    managed_fields_on_create,
    statefulset_defaults,
    claim_updates,
    write_preconditions,
    status_subresource,
    events_both_apis,
    paged_lists_and_watch,
);
