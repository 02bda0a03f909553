//! The Events of ours, indexed by the object they are about.

use super::*;

/// When an Event was last seen.
pub(super) fn event_time(e: &Event) -> Option<Timestamp> {
    e.series
        .as_ref()
        .map(|s| s.last_observed_time.0)
        .or_else(|| e.event_time.as_ref().map(|t| t.0))
        .or_else(|| e.deprecated_last_timestamp.as_ref().map(|t| t.0))
        .or_else(|| e.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

fn object_key(namespace: &str, kind: &str, name: &str) -> String {
    format!("{namespace}/{kind}/{name}")
}

/// Events of ours, by the object they are about.
pub(super) struct EventIndex<'a> {
    /// By `namespace/kind/name` of the object.
    by_object: HashMap<String, Vec<&'a Event>>,
    by_uid: HashMap<&'a str, Vec<&'a Event>>,
}

impl<'a> EventIndex<'a> {
    pub(super) fn new(events: &'a Source<Event>) -> Self {
        let mut by_object: HashMap<String, Vec<&Event>> = HashMap::new();
        let mut by_uid: HashMap<&str, Vec<&Event>> = HashMap::new();
        for event in events.objects.values() {
            let ours = event.reporting_controller.as_deref() == Some(names::CONTROLLER_NAME)
                || event
                    .deprecated_source
                    .as_ref()
                    .and_then(|s| s.component.as_deref())
                    == Some(names::CONTROLLER_NAME);
            let Some(regarding) = event.regarding.as_ref().filter(|_| ours) else {
                continue;
            };
            let namespace = regarding
                .namespace
                .as_deref()
                .or(event.metadata.namespace.as_deref())
                .unwrap_or_default();
            by_object
                .entry(object_key(
                    namespace,
                    regarding.kind.as_deref().unwrap_or_default(),
                    regarding.name.as_deref().unwrap_or_default(),
                ))
                .or_default()
                .push(event);
            if let Some(uid) = regarding.uid.as_deref() {
                by_uid.entry(uid).or_default().push(event);
            }
        }
        for list in by_object.values_mut().chain(by_uid.values_mut()) {
            list.sort_by_key(|e| event_time(e));
        }
        Self { by_object, by_uid }
    }

    pub(super) fn of(&self, namespace: &str, kind: &str, name: &str) -> &[&'a Event] {
        self.by_object
            .get(&object_key(namespace, kind, name))
            .map_or(&[], Vec::as_slice)
    }

    /// The newest Events about set `name` (any uid: its history across re-creates) and the
    /// claims with `claim_uids`, oldest first.
    pub(super) fn about(
        &self,
        namespace: &str,
        name: &str,
        claim_uids: &[&str],
    ) -> Vec<EventSummary> {
        let mut all: Vec<&Event> = self.of(namespace, "StatefulSet", name).to_vec();
        for uid in claim_uids {
            all.extend(self.by_uid.get(uid).into_iter().flatten().filter(|e| {
                e.regarding.as_ref().and_then(|r| r.kind.as_deref())
                    == Some("PersistentVolumeClaim")
            }));
        }
        all.sort_by_key(|e| (event_time(e), e.metadata.name.clone()));
        let skip = all.len().saturating_sub(EVENTS_SHOWN);
        all.into_iter()
            .skip(skip)
            .map(|e| {
                let regarding = e.regarding.as_ref();
                EventSummary {
                    time: event_time(e).map(format_time),
                    type_: e.type_.clone().unwrap_or_default(),
                    reason: e.reason.clone().unwrap_or_default(),
                    object: format!(
                        "{}/{}",
                        regarding
                            .and_then(|r| r.kind.as_deref())
                            .unwrap_or_default(),
                        regarding
                            .and_then(|r| r.name.as_deref())
                            .unwrap_or_default()
                    ),
                    note: e.note.clone().unwrap_or_default(),
                    count: e.series.as_ref().map_or(1, |s| s.count),
                }
            })
            .collect()
    }

    /// A refusal of the current change: a Warning of ours about this very set (uid), at or
    /// after the change was recorded (an older one was about an earlier change).
    pub(super) fn refusal(
        &self,
        namespace: &str,
        name: &str,
        uid: Option<&str>,
        recorded: Option<Timestamp>,
    ) -> Option<String> {
        let (uid, recorded) = (uid?, recorded?);
        self.of(namespace, "StatefulSet", name)
            .iter()
            .rev()
            .find(|e| {
                e.type_.as_deref() == Some("Warning")
                    && e.reason.as_deref().is_some_and(|r| REFUSALS.contains(&r))
                    && e.regarding.as_ref().and_then(|r| r.uid.as_deref()) == Some(uid)
                    && event_time(e).is_some_and(|t| t >= recorded)
            })
            .map(|e| {
                format!(
                    "{}: {}",
                    e.reason.as_deref().unwrap_or_default(),
                    e.note.as_deref().unwrap_or_default()
                )
            })
    }

    /// The controller's `VolumeClaimIncompatible` Warning about this very claim (uid).
    pub(super) fn incompatible(&self, claim: &PersistentVolumeClaim) -> Option<String> {
        let uid = claim.metadata.uid.as_deref()?;
        self.by_uid
            .get(uid)?
            .iter()
            .rev()
            .find(|e| e.reason.as_deref() == Some("VolumeClaimIncompatible"))
            .and_then(|e| e.note.clone())
    }

    /// The last `MaxUnavailableBatch` Event about this very set.
    pub(super) fn last_batch(
        &self,
        namespace: &str,
        name: &str,
        uid: Option<&str>,
    ) -> Option<&'a Event> {
        self.of(namespace, "StatefulSet", name)
            .iter()
            .rev()
            .find(|e| {
                e.reason.as_deref() == Some("MaxUnavailableBatch")
                    && e.regarding.as_ref().and_then(|r| r.uid.as_deref()) == uid
            })
            .copied()
    }
}
