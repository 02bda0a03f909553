//! What happened to the StatefulSets of a namespace, as a watch saw it: every object (uid) and
//! every deletion, so that a scenario can count re-creates exactly.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::Api;
use kube::runtime::watcher;

use super::Scope;

/// One set's history.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    pub uids: BTreeSet<String>,
    pub deletions: usize,
    /// The conditions of each version seen (`type=status/reason: message`, joined with
    /// `; `), a change each: what a user watching the set read, however briefly.
    pub conditions: Vec<String>,
}

#[derive(Clone)]
pub struct SetHistory(Arc<Mutex<HashMap<String, Seen>>>);

impl SetHistory {
    /// Watches the sets of `ns` until the scenario ends.
    pub fn watch(scope: &Scope, ns: &str) -> Self {
        let history = Self(Arc::default());
        let api: Api<StatefulSet> = Api::namespaced(scope.client(), ns);
        let seen = history.clone();
        let stop = scope.stop.clone();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(watcher(api, watcher::Config::default()));
            loop {
                let event = tokio::select! {
                    _ = stop.cancelled() => return,
                    event = stream.next() => event,
                };
                let Some(event) = event else { return };
                match event {
                    Ok(watcher::Event::Apply(set) | watcher::Event::InitApply(set)) => {
                        seen.note(&set, false)
                    }
                    Ok(watcher::Event::Delete(set)) => seen.note(&set, true),
                    _ => {}
                }
            }
        });
        history
    }

    fn note(&self, set: &StatefulSet, deleted: bool) {
        let (Some(name), Some(uid)) = (set.metadata.name.clone(), set.metadata.uid.clone()) else {
            return;
        };
        let mut all = self.0.lock().expect("history");
        let entry = all.entry(name).or_default();
        entry.uids.insert(uid);
        let conditions = set
            .status
            .iter()
            .flat_map(|s| s.conditions.iter().flatten())
            .map(|c| {
                let kind = c.type_.as_deref().unwrap_or_default();
                let status = c.status.as_deref().unwrap_or_default();
                let reason = c.reason.as_deref().unwrap_or_default();
                let message = c.message.as_deref().unwrap_or_default();
                format!("{kind}={status}/{reason}: {message}")
            })
            .collect::<Vec<_>>()
            .join("; ");
        if entry.conditions.last() != Some(&conditions) {
            entry.conditions.push(conditions);
        }
        if deleted {
            entry.deletions += 1;
        }
    }

    pub fn of(&self, name: &str) -> Seen {
        self.0
            .lock()
            .expect("history")
            .get(name)
            .cloned()
            .unwrap_or_default()
    }
}
