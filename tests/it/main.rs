//! Integration tests: one binary, one module per area.

mod admission_mode;
#[path = "../agreement/mod.rs"]
mod agreement;
mod agreement_fake;
mod apiserver_replay;
mod capabilities;
mod captured_reviews;
mod certs;
mod certs_self_managed;
mod check;
mod claim_rollout;
mod claim_rules;
mod cluster_view;
mod command_line;
mod common;
mod controller_runtime;
mod coordinated_rollout;
mod default_class_controller;
mod docs;
mod eviction_fake;
mod executor;
mod fake_apiserver_metadata;
mod fake_apiserver_tests;
mod fencing;
#[path = "../../fuzz/harness.rs"]
mod fuzz_harness;
mod fuzz_replay;
#[path = "../gitops/mod.rs"]
mod gitops;
mod gitops_health;
mod gitops_loop;
mod max_unavailable_driver;
mod monitoring;
mod offline_expansion;
mod outage;
mod restart_pods;
mod review_cli;
mod robustness;
mod scale;
mod serve_cluster;
mod serve_tls;
mod server_router;
mod statefulset_conditions;
mod statefulset_rules;
mod status_cli;
mod support;
