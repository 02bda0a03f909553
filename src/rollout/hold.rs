//! The coordinated rollout: one apply that changes an `InPlace` set's pod template and grows
//! its claims re-creates each pod once, for both.
//!
//! KEP-4650: "we update the PVC whenever we would re-create the Pod; we wait for the PVC to be
//! compatible whenever we would wait for the Pod to be available". On a stock apiserver the
//! built-in StatefulSet controller starts re-creating pods for the new template at once,
//! before any claim is patched; a claim that then grows offline (`FileSystemResizePending`)
//! needs its pod re-created again. So the rolling update is held, replica by replica:
//!
//! - **The webhook holds** ([`admit`]): where an update both changes `spec.template` and grows
//!   a claim template of an `InPlace` `RollingUpdate` set, it raises
//!   `spec.updateStrategy.rollingUpdate.partition` to `replicas` and records the user's
//!   partition in `stateful-admission.io/rollout-hold` (`{"partition": held,
//!   "userPartition": user's}`). While the annotation is there, every update of the set keeps
//!   the partition at `max(held, user's)`, and a partition the user writes becomes the user's.
//!   The partition is only ever changed inside an admission review: a mutating webhook's
//!   change is not counted to any field manager (the apiserver tracks managed fields before
//!   admission), so the user keeps the field and the next server-side apply of their manifest
//!   meets no conflict.
//! - **The controller lowers the hold** ([`next`]) by writing the annotation alone (the
//!   webhook moves the partition in that same request): the replica just below the hold has
//!   its claims patched first; once each has grown or waits for the node
//!   (`FileSystemResizePending`) the hold goes one lower, the built-in controller re-creates
//!   that pod, which is the restart the file system waits for; the next replica waits until
//!   that pod is available and its claims have their capacity. At the user's partition the
//!   annotation goes, and the webhook gives the user's value back.
//! - Crash safe: the state is the set itself (annotation and partition, written together).
//!   A controller that starts again reads where the hold is and goes on.
//!
//! Under `OnDelete` nothing is held (the user re-creates pods).

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::claims::state::{storage_capacity, storage_request};
use super::health::Health;
use super::restart;
use crate::names;

/// The hold, as `stateful-admission.io/rollout-hold` records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Hold {
    /// The partition the rolling update is held at.
    pub partition: i32,
    /// The partition the user asked for: given back at the end.
    pub user_partition: i32,
}

impl Hold {
    /// The hold in `annotations`: `None` where there is none, `Some(Err(_))` where it does not
    /// parse (a value no release of ours wrote).
    pub(crate) fn of(
        annotations: Option<&BTreeMap<String, String>>,
    ) -> Option<Result<Self, String>> {
        let raw = annotations?.get(names::ROLLOUT_HOLD)?;
        Some(
            serde_json::from_str::<Self>(raw)
                .map_err(|e| e.to_string())
                .and_then(|h| {
                    if h.partition < 0 || h.user_partition < 0 {
                        Err("partitions must be non-negative".to_owned())
                    } else {
                        Ok(h)
                    }
                }),
        )
    }

    pub(crate) fn render(&self) -> String {
        // A struct of two integers always serializes.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The partition the set should have while this hold stands.
    pub(crate) fn effective(&self) -> i32 {
        self.partition.max(self.user_partition)
    }
}

/// What the webhook does to the set's partition and hold annotation.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Admit {
    /// The partition to set (`spec.updateStrategy.rollingUpdate.partition`).
    pub partition: Option<i32>,
    /// The annotation to write (`Some(Some(_))`) or remove (`Some(None)`).
    pub annotation: Option<Option<String>>,
    /// The hold this request starts.
    pub started: Option<Hold>,
}

/// `spec.updateStrategy.type` is `RollingUpdate` (or unset, which the apiserver defaults to
/// it).
pub(crate) fn rolling(spec: &Value) -> bool {
    matches!(
        spec.pointer("/updateStrategy/type").and_then(Value::as_str),
        None | Some("RollingUpdate")
    )
}

/// `spec.updateStrategy.rollingUpdate.partition`, 0 where unset (the apiserver's default).
pub(crate) fn partition(spec: &Value) -> i32 {
    spec.pointer("/updateStrategy/rollingUpdate/partition")
        .and_then(Value::as_i64)
        .and_then(|p| i32::try_from(p).ok())
        .unwrap_or(0)
}

/// `spec.replicas`, 1 where unset (the apiserver's default).
pub(crate) fn replicas(spec: &Value) -> i32 {
    spec.get("replicas")
        .and_then(Value::as_i64)
        .and_then(|r| i32::try_from(r).ok())
        .unwrap_or(1)
}

/// The webhook's rule for an update of a set from `old` (its annotations and spec) to `new`;
/// `start`: this update changes the pod template and grows a claim template of an `InPlace`
/// set (the caller judges that). Pure: plain annotations and JSON specs.
pub(crate) fn admit(
    old: Option<(Option<&BTreeMap<String, String>>, &Value)>,
    new: (Option<&BTreeMap<String, String>>, &Value),
    start: bool,
) -> Admit {
    let (new_annotations, new_spec) = new;
    let new_partition = partition(new_spec);
    let old_partition = old.map(|(_, spec)| partition(spec));
    let old_hold = old.and_then(|(a, _)| Hold::of(a)).and_then(Result::ok);
    let new_hold = Hold::of(new_annotations);
    // The user's partition: what this request writes where it changes the stored value (the
    // controller's own writes never do), else what the hold recorded. The value a hold in
    // the request asks for is ours (this webhook called again after another mutated).
    let ours = new_hold
        .as_ref()
        .and_then(|h| h.as_ref().ok())
        .is_some_and(|h| h.effective() == new_partition);
    let user_wrote = old_partition.is_some_and(|p| p != new_partition) && !ours;
    let user = |recorded: Option<Hold>| match recorded {
        Some(h) if !user_wrote => h.user_partition,
        _ => new_partition,
    };
    if !rolling(new_spec) {
        // `OnDelete`: nothing is held; a hold left from before goes, with the user's value.
        return match new_hold {
            None => Admit::default(),
            Some(recorded) => {
                let user = user(recorded.ok().or(old_hold));
                Admit {
                    partition: (user != new_partition).then_some(user),
                    annotation: Some(None),
                    started: None,
                }
            }
        };
    }
    if start {
        let user = user(new_hold.clone().and_then(Result::ok).or(old_hold));
        let held = replicas(new_spec);
        if held > user {
            let hold = Hold {
                partition: held,
                user_partition: user,
            };
            let written = new_hold.as_ref().and_then(|h| h.as_ref().ok()) == Some(&hold);
            return Admit {
                partition: (hold.effective() != new_partition).then_some(hold.effective()),
                annotation: (!written).then(|| Some(hold.render())),
                started: Some(hold),
            };
        }
    }
    match new_hold {
        Some(Ok(hold)) => {
            let user = user(Some(hold));
            let kept = Hold {
                user_partition: user,
                ..hold
            };
            Admit {
                partition: (kept.effective() != new_partition).then_some(kept.effective()),
                annotation: (kept != hold).then(|| Some(kept.render())),
                started: None,
            }
        }
        // Not ours to read: left for the controller to report and remove.
        Some(Err(_)) => Admit::default(),
        None => match old_hold {
            // The hold went (the controller at its end, or an update that dropped the
            // annotation): the user's partition comes back, unless this request sets one.
            Some(hold) if !user_wrote && new_partition != hold.user_partition => Admit {
                partition: Some(hold.user_partition),
                ..Admit::default()
            },
            _ => Admit::default(),
        },
    }
}

/// One replica as the controller's hold step needs it, in the set's order (index = position).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Replica {
    pub ordinal: u32,
    /// Its pod exists, runs the update revision and is available (Ready for
    /// `minReadySeconds`).
    pub updated_and_available: bool,
    /// Every claim of the replica asks for what its template asks (its patch is done).
    pub claims_patched: bool,
    /// Every claim has grown, or waits for the node to grow its file system
    /// (`FileSystemResizePending`): the pod's re-creation finishes it.
    pub claims_ready_for_pod: bool,
    /// Every claim has the capacity it asks for (compatible).
    pub claims_compatible: bool,
}

/// The claim rollout's partition while `hold` stands: the claims of the replica just below
/// the hold are patched once every replica at and above it is through (its pod re-created and
/// available, its claims grown) — KEP-4650 updates a claim when it would re-create the pod.
pub(crate) fn claims_partition(hold: &Hold, replicas: &[Replica]) -> usize {
    let count = i32::try_from(replicas.len()).unwrap_or(i32::MAX);
    let held = hold.partition.clamp(0, count);
    let through = replicas
        .iter()
        .skip(usize::try_from(held).unwrap_or(0))
        .all(|r| r.updated_and_available && r.claims_compatible);
    let partition = if through { held - 1 } else { held };
    usize::try_from(partition.max(hold.user_partition)).unwrap_or(0)
}

/// Each replica's facts, in the set's order (`ordinals`), against the desired `templates`:
/// `pod(ordinal)` and `claim(template, ordinal)` look them up.
pub(crate) fn replicas_of<'a>(
    set: &StatefulSet,
    ordinals: &[u32],
    pod: impl Fn(u32) -> Option<&'a Pod>,
    claim: impl Fn(&str, u32) -> Option<&'a PersistentVolumeClaim>,
    templates: &[PersistentVolumeClaim],
    now: Timestamp,
) -> Vec<Replica> {
    let update_revision = set.status.as_ref().and_then(|s| s.update_revision.clone());
    restart::replicas_of(set, ordinals, pod, |_| Vec::new(), now)
        .into_iter()
        .map(|replica| {
            let ordinal = replica.ordinal;
            let (mut patched, mut ready, mut compatible) = (true, true, true);
            for template in templates {
                let name = template.metadata.name.as_deref().unwrap_or_default();
                let Some(want) = storage_request(template) else {
                    continue;
                };
                let Some(claim) = claim(name, ordinal) else {
                    // Made by the StatefulSet controller with the pod, then patched: the
                    // replica waits for it.
                    compatible = false;
                    continue;
                };
                let (request, capacity) = (storage_request(claim), storage_capacity(claim));
                let grown = capacity.is_some_and(|c| c >= want);
                let pending = matches!(
                    restart::Resize::of(claim),
                    restart::Resize::WaitsForRestart { .. }
                );
                patched &= request.is_some_and(|r| r >= want);
                ready &= grown || pending;
                compatible &= grown;
            }
            let updated_and_available = replica.pod.as_ref().is_some_and(|p| {
                p.health == Health::Available
                    && p.revision.is_some()
                    && p.revision == update_revision
            });
            Replica {
                ordinal,
                updated_and_available,
                claims_patched: patched,
                claims_ready_for_pod: ready,
                claims_compatible: compatible,
            }
        })
        .collect()
}

/// Why the hold stays where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Waiting {
    /// The pod of this replica (re-created at the held partition) is not available yet, or
    /// its claims have not all grown.
    Replica { ordinal: u32 },
    /// This replica's claims are patched or being patched; its pod is re-created once each
    /// has grown or waits for the node.
    Claims { ordinal: u32 },
    /// The StatefulSet controller has not seen the set's latest spec yet.
    NotObserved,
    /// The set's partition is not the one the hold asks for: the webhook did not apply it
    /// (it was unavailable, or the request did not reach it).
    PartitionNotApplied { want: i32, have: i32 },
}

/// The controller's step for a held set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    Wait(Waiting),
    /// Write the hold at `to`: the built-in controller re-creates the pod of `ordinal`.
    Lower {
        to: i32,
        ordinal: u32,
    },
    /// The rollout is through to the user's partition: the annotation goes.
    Release,
    /// The annotation does not parse: it goes (with a Warning).
    Discard {
        why: String,
    },
}

/// The next step of `hold` for a set whose partition is `partition` and whose replicas (in
/// the set's order) are `replicas`; `observed`: `status.observedGeneration` is at least
/// `metadata.generation`.
pub(crate) fn next(hold: &Hold, partition: i32, observed: bool, replicas: &[Replica]) -> Step {
    let count = i32::try_from(replicas.len()).unwrap_or(i32::MAX);
    let held = hold.partition.min(count);
    if held <= hold.user_partition {
        return Step::Release;
    }
    if partition != hold.effective() {
        return Step::Wait(Waiting::PartitionNotApplied {
            want: hold.effective(),
            have: partition,
        });
    }
    if !observed {
        return Step::Wait(Waiting::NotObserved);
    }
    // Replicas at and above the hold were re-created for the new template: each is
    // available with its claims grown before the next goes (upstream's rolling update waits
    // for the pod it re-created to be available; KEP-4650 for its claims as well).
    let index = |i: i32| usize::try_from(i).ok();
    for i in held..count {
        let Some(replica) = index(i).and_then(|i| replicas.get(i)) else {
            continue;
        };
        if !(replica.updated_and_available && replica.claims_compatible) {
            return Step::Wait(Waiting::Replica {
                ordinal: replica.ordinal,
            });
        }
    }
    let Some(next) = index(held - 1).and_then(|i| replicas.get(i)) else {
        return Step::Release;
    };
    if next.claims_patched && next.claims_ready_for_pod {
        Step::Lower {
            to: held - 1,
            ordinal: next.ordinal,
        }
    } else {
        Step::Wait(Waiting::Claims {
            ordinal: next.ordinal,
        })
    }
}

#[cfg(test)]
mod tests;
