//! Integration tests: one binary, one module per area.

mod certs;
mod certs_self_managed;
mod claim_rules;
mod common;
mod controller_runtime;
mod fake_apiserver_tests;
mod review_cli;
mod serve_cluster;
mod serve_tls;
mod server_router;
mod statefulset_rules;
mod support;
