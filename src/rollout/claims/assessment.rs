//! What one claim needs to follow its template: the planner's assessment, which the claim
//! status summarises.

use serde_json::Value;

/// What one claim needs.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Assessment {
    /// Compatible with the template as the KEP defines it.
    Compatible,
    /// Patched already; the volume has not caught up (expansion or modification).
    Updating,
    /// A patch makes (or moves) it towards compatible.
    Patch(ClaimPatch),
    /// Can never become compatible in place.
    Incompatible(String),
    /// Not compatible, and nothing can be done now (e.g. an unbound claim).
    Waiting(String),
}

/// A JSON merge patch for one claim, and what it changes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ClaimPatch {
    /// Merge patch with the claim's resourceVersion as a precondition.
    pub body: Value,
    /// Human-readable changes, e.g. `storage 1Gi -> 2Gi`.
    pub changes: Vec<String>,
    /// Whether the patch starts an expansion or modification (makes the claim updating).
    pub starts_update: bool,
}
