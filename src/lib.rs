//! stateful-admission: an admission webhook and companion controller that bring StatefulSet
//! and storage enhancement proposals (KEP-4650, KEP-961, KEP-3333, KEP-284, KEP-2804) to
//! clusters running a stock kube-apiserver.
//!
//! Pure core, thin shell: [`admission`] holds the rules as plain functions over a read-only
//! [`cluster::ClusterView`]; [`server`] and the command line only wire them up.

#![warn(unreachable_pub)]

pub mod admission;
pub mod allocator;
pub(crate) mod backoff;
pub mod capabilities;
pub mod certs;
pub mod check;
pub mod cli;
pub mod cluster;
pub mod connect;
pub mod controller;
pub mod field_manager;
pub mod gitops;
pub mod health;
pub mod names;
pub mod quantity;
pub mod review;
pub mod rollout;
pub mod server;
pub mod status;
pub mod telemetry;
pub(crate) mod text;
pub mod write_limit;
