//! A set's pods as a watch sees them during a rollout: how many replicas were unavailable at
//! once (at most), and every pod object (uid) each ordinal had, so a scenario can tell that each
//! pod was deleted exactly once.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::watcher;

use super::Scope;

#[derive(Default)]
struct State {
    /// The first list is complete: counting starts.
    listed: bool,
    live: HashMap<String, Pod>,
    uids: BTreeMap<String, BTreeSet<String>>,
    max_unavailable: usize,
    /// What each event changed, for a failure's message.
    timeline: Vec<String>,
}

#[derive(Clone)]
pub struct PodTracker(Arc<Mutex<State>>);

impl PodTracker {
    /// Watches the pods of set `set` (label `app=<set>`) with `replicas` replicas until the
    /// scenario ends.
    pub fn watch(scope: &Scope, ns: &str, set: &str, replicas: usize) -> Self {
        let tracker = Self(Arc::default());
        let api: Api<Pod> = Api::namespaced(scope.client(), ns);
        let config = watcher::Config::default().labels(&format!("app={set}"));
        let state = tracker.0.clone();
        let stop = scope.stop.clone();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(watcher(api, config));
            loop {
                let event = tokio::select! {
                    _ = stop.cancelled() => return,
                    event = stream.next() => event,
                };
                let Some(event) = event else { return };
                let mut s = state.lock().expect("pods");
                match event {
                    Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => {
                        let name = pod.metadata.name.clone().unwrap_or_default();
                        if let Some(uid) = &pod.metadata.uid {
                            s.uids.entry(name.clone()).or_default().insert(uid.clone());
                        }
                        s.live.insert(name, pod);
                    }
                    Ok(watcher::Event::Delete(pod)) => {
                        s.live
                            .remove(&pod.metadata.name.clone().unwrap_or_default());
                    }
                    Ok(watcher::Event::Init) => s.live.clear(),
                    Ok(watcher::Event::InitDone) => s.listed = true,
                    Err(_) => continue,
                }
                if !s.listed {
                    continue;
                }
                let available_now = s.live.values().filter(|p| available(p)).count();
                let unavailable = replicas.saturating_sub(available_now);
                s.max_unavailable = s.max_unavailable.max(unavailable);
                let mut pods: Vec<String> = s
                    .live
                    .iter()
                    .map(|(name, p)| {
                        let uid = p.metadata.uid.as_deref().unwrap_or("");
                        let state = if p.metadata.deletion_timestamp.is_some() {
                            "deleting"
                        } else if available(p) {
                            "ready"
                        } else {
                            "unready"
                        };
                        format!("{name}({}):{state}", &uid[..uid.len().min(4)])
                    })
                    .collect();
                pods.sort();
                let line = format!(
                    "{} unavailable {unavailable}: {}",
                    jiff::Timestamp::now().strftime("%H:%M:%S%.3f"),
                    pods.join(" ")
                );
                s.timeline.push(line);
            }
        });
        tracker
    }

    /// Whether the first list is in.
    pub fn listed(&self) -> bool {
        self.0.lock().expect("pods").listed
    }

    pub fn max_unavailable(&self) -> usize {
        self.0.lock().expect("pods").max_unavailable
    }

    /// The tracker's view after each event, one line each.
    pub fn timeline(&self) -> String {
        self.0.lock().expect("pods").timeline.join("\n")
    }

    /// Every pod object each pod name had, since the watch began.
    pub fn uids(&self) -> BTreeMap<String, BTreeSet<String>> {
        self.0.lock().expect("pods").uids.clone()
    }
}

/// Ready and not being deleted (minReadySeconds 0: ready is available).
fn available(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}
