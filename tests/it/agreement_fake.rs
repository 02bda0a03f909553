//! The agreement bodies (tests/agreement) against the fake API server, once per profile of
//! the fake (one per captured apiserver version), each body told what that version does
//! ([`Expect::from_profile`]): the same bodies run against a real apiserver in the real-cluster
//! suite (`agreement_<body>`, told what discovery and dry runs find), so that where the fake
//! and the apiserver differ a test fails on one side.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use crate::agreement::{self, Expect, Fate};
use crate::support::fake_apiserver::{FakeApiConfig, FakeApiServer, Profile, profile};

/// The namespace each body works in.
const NS: &str = "agreement";

impl Expect {
    /// What the fake's `profile` does, read from its switches.
    pub fn from_profile(profile: Profile) -> Expect {
        let config = FakeApiConfig::profile(profile);
        let fate = |in_types: bool, dropped: bool| match (in_types, dropped) {
            (false, _) => Fate::Absent,
            (true, true) => Fate::Dropped,
            (true, false) => Fate::Kept,
        };
        Expect {
            git_version: config.git_version.clone(),
            statefulset_mutable: config
                .statefulset_mutable_fields
                .iter()
                .map(|f| (*f).to_owned())
                .collect(),
            max_unavailable: fate(
                config.statefulset_max_unavailable_in_types,
                config.drop_statefulset_max_unavailable,
            ),
            max_unavailable_default_one: config.max_unavailable_default_one,
            max_unavailable_validated: config.max_unavailable_validation.is_some(),
            claim_vac: fate(
                config.claim_volume_attributes_class_in_types,
                config.drop_claim_volume_attributes_class,
            ),
            vac_api: profile::volume_attributes_class_version(&config).map(str::to_owned),
            pvc_forbidden: if config.claim_volume_attributes_class_in_types {
                agreement::PVC_SPEC_FORBIDDEN.to_owned()
            } else {
                agreement::PVC_SPEC_FORBIDDEN_V1_24.to_owned()
            },
            class_from_unset: config.retroactive_default_class_allowed,
            expansion_recovery: config.expansion_recovery,
            retention_default: config.statefulset_retention_policy,
            embedded_creation_timestamp_null: config.zero_creation_timestamp_null,
        }
    }
}

/// A fake as `profile`, and a client for it with the body's namespace created.
async fn fake(profile: Profile) -> (FakeApiServer, kube::Client) {
    let api = FakeApiServer::start_with(FakeApiConfig::profile(profile)).await;
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

/// Runs one body on one profile.
async fn run(body: &str, profile: Profile) {
    let (_api, client) = fake(profile).await;
    let (_, run) = agreement::all()
        .into_iter()
        .find(|(name, _)| *name == body)
        .unwrap_or_else(|| panic!("no body {body}"));
    run(
        client,
        NS.to_owned(),
        Arc::new(Expect::from_profile(profile)),
    )
    .await
    .unwrap_or_else(|e| panic!("{body} on {}: {e:#}", profile.label()));
}

macro_rules! agreement_tests {
    ($($body:ident),* $(,)?) => {
        $(
            /// One test per profile.
            mod $body {
                use super::{Profile, run};

                #[tokio::test(flavor = "multi_thread")]
                async fn v1_24() {
                    run(stringify!($body), Profile::V1_24).await;
                }

                #[tokio::test(flavor = "multi_thread")]
                async fn v1_32() {
                    run(stringify!($body), Profile::V1_32).await;
                }

                #[tokio::test(flavor = "multi_thread")]
                async fn v1_32_gates_on() {
                    run(stringify!($body), Profile::V1_32GatesOn).await;
                }

                #[tokio::test(flavor = "multi_thread")]
                async fn v1_35() {
                    run(stringify!($body), Profile::V1_35).await;
                }

                #[tokio::test(flavor = "multi_thread")]
                async fn v1_35_maxunavailable_on() {
                    run(stringify!($body), Profile::V1_35MaxUnavailableOn).await;
                }

                #[tokio::test(flavor = "multi_thread")]
                async fn v1_36() {
                    run(stringify!($body), Profile::V1_36).await;
                }
            }
        )*

        /// Every body of the shared list has its tests here.
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

/// What each profile tells the bodies is what its apiserver answered in the captures.
#[test]
fn every_profile_expects_what_its_captures_show() {
    for profile in Profile::ALL {
        let captured = Expect::captured(profile.label()).expect("the captures");
        let configured = Expect::from_profile(profile);
        assert_eq!(
            configured.differences(&captured),
            Vec::<String>::new(),
            "{}: profile vs captures",
            profile.label()
        );
    }
    assert_eq!(
        Expect::LABELS.to_vec(),
        Profile::ALL.map(Profile::label).to_vec()
    );
}

/// Discovery, OpenAPI and dry runs find in each profile what it is configured to do, and
/// the captured version it answers as is its own.
#[tokio::test(flavor = "multi_thread")]
async fn discovery_finds_what_each_profile_does() {
    for profile in Profile::ALL {
        let (_api, client) = fake(profile).await;
        let found = Expect::discover(&client, NS).await.expect("discover");
        assert_eq!(
            found.differences(&Expect::from_profile(profile)),
            Vec::<String>::new(),
            "{}: discovered vs configured",
            profile.label()
        );
        // What the real-cluster suite's `agreement_expectations_match_a_profile` concludes.
        assert_eq!(
            found.matching_capture().expect("the captures"),
            (profile.label(), Vec::new())
        );
    }
}
