//! Shared test infrastructure.

// Each test module uses a different part of the fake server's API.
#[allow(dead_code)]
pub mod admission_hook;
#[allow(dead_code)]
pub mod barrier;
pub mod churn;
#[allow(dead_code)]
pub mod controller;
#[allow(dead_code)]
pub mod fake_apiserver;
pub mod https_hook;
#[allow(dead_code)]
pub mod offline_resizer;
#[allow(dead_code)]
pub mod scale_cluster;
#[allow(dead_code)]
pub mod statefulset_sim;
