//! The rollout model: pure (no API client, no metrics, no clock of its own), read by the
//! controller, which plans from it and acts through its executor, and by `status`, which shows
//! what the controller will do. Nothing here imports [`crate::controller`].
//!
//! - [`claims`]: the claim rollout (KEP-4650): the desired templates and the set-wide inputs,
//!   the planner and its assessment of each claim, the claim status per template;
//! - [`journal`]: the convergence journal's codec and the convergence state machine's steps;
//! - [`progress`]: the rollout's progress record and the conditions it leads to;
//! - [`max_unavailable`]: one maxUnavailable step of a set, and the batch notes it leaves;
//! - [`health`]: a pod's availability as the StatefulSet controller judges it;
//! - [`restart`]: which replica's pod to restart for a resize that waits for one (offline
//!   expansion), within the set's one budget shared with the rolling update of its pod template.
//! - [`hold`]: the coordinated rollout, where one update changes the pod template and grows the
//!   claims: the rolling update held so that each pod is re-created once, after its claims.

pub(crate) mod claims;
pub(crate) mod health;
pub(crate) mod hold;
pub mod journal;
pub(crate) mod max_unavailable;
pub(crate) mod progress;
pub(crate) mod restart;
