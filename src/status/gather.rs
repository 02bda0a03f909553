//! The thin shell of `status`: the API calls, and nothing to judge. Read-only by construction:
//! every request is a list or a watch (kube's `watcher`), so a user who may only get, list and
//! watch in a namespace can run it.
//!
//! One watch per kind feeds [`Inputs`]: StatefulSets (one, by `metadata.name`, when a name is
//! given), claims and the pods of StatefulSets of the namespace (or all), the journals in the
//! controller's namespace, Events of ours (`reportingController=stateful-admission`), and
//! StorageClasses. Sets and claims must be readable; the others are optional: when their first
//! list is refused, that source is marked unreadable (the model then judges without it) and its
//! watch ends. With `--wait` a first list of sets or claims that failed for a while (5xx, 429,
//! the apiserver not reached) is tried again until the timeout; a refusal ends the run. Objects
//! are trimmed on arrival to what the model reads.

use futures::StreamExt;
use futures::stream::{BoxStream, SelectAll};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, PodTemplateSpec};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::ObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};

use super::model::{Inputs, Key, Selection, Source, trim_managed_fields};
use crate::names;

/// Objects per page of an initial list (as kubectl and client-go informers page).
const PAGE_SIZE: u32 = 500;

/// The kinds read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Sets,
    Claims,
    Pods,
    Journals,
    Events,
    Classes,
}

impl Kind {
    pub(crate) const ALL: [Kind; 6] = [
        Kind::Sets,
        Kind::Claims,
        Kind::Pods,
        Kind::Journals,
        Kind::Events,
        Kind::Classes,
    ];

    /// Whether the report cannot be made without it.
    pub(crate) fn required(self) -> bool {
        matches!(self, Kind::Sets | Kind::Claims)
    }

    pub(crate) fn resource(self) -> &'static str {
        match self {
            Kind::Sets => "statefulsets",
            Kind::Claims => "persistentvolumeclaims",
            Kind::Pods => "pods",
            Kind::Journals => "configmaps",
            Kind::Events => "events.events.k8s.io",
            Kind::Classes => "storageclasses",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// One object of any kind read.
#[derive(Debug, Clone)]
pub(crate) enum Object {
    Set(StatefulSet),
    Claim(PersistentVolumeClaim),
    Pod(Pod),
    Journal(ConfigMap),
    Event(Event),
    Class(StorageClass),
}

/// What a watch reports.
#[derive(Debug)]
pub(crate) enum Update {
    Event(Kind, Box<watcher::Event<Object>>),
    /// The first list failed: the source cannot be read (its watch has ended).
    Failed(Kind, String),
    /// A later error, or a transient one on the first list where that is retried; the watch
    /// retries with backoff and relists.
    Retrying(Kind, String),
}

/// Every watch of one run, merged.
pub(crate) struct Feed {
    streams: SelectAll<BoxStream<'static, Update>>,
}

impl Feed {
    /// Starts the watches for `selection`; `retry_first_list`: a transient failure of the
    /// first list of sets or claims is retried rather than the end of the run.
    pub(crate) fn start(client: &Client, selection: &Selection, retry_first_list: bool) -> Self {
        let scoped = |client: &Client| -> (
            Api<StatefulSet>,
            Api<PersistentVolumeClaim>,
            Api<Pod>,
            Api<Event>,
        ) {
            match &selection.namespace {
                Some(ns) => (
                    Api::namespaced(client.clone(), ns),
                    Api::namespaced(client.clone(), ns),
                    Api::namespaced(client.clone(), ns),
                    Api::namespaced(client.clone(), ns),
                ),
                None => (
                    Api::all(client.clone()),
                    Api::all(client.clone()),
                    Api::all(client.clone()),
                    Api::all(client.clone()),
                ),
            }
        };
        let (sets, claims, pods, events) = scoped(client);
        let config = || watcher::Config::default().page_size(PAGE_SIZE);
        let set_config = match &selection.name {
            Some(name) => config().fields(&format!("metadata.name={name}")),
            None => config(),
        };
        let mut streams = SelectAll::new();
        streams.push(source(
            Kind::Sets,
            retry_first_list,
            sets,
            set_config,
            |mut s: StatefulSet| {
                trim_set(&mut s);
                Object::Set(s)
            },
        ));
        streams.push(source(
            Kind::Claims,
            retry_first_list,
            claims,
            config(),
            |mut c: PersistentVolumeClaim| {
                c.metadata.managed_fields = None;
                Object::Claim(c)
            },
        ));
        streams.push(source(
            Kind::Pods,
            retry_first_list,
            pods,
            config().labels(names::POD_NAME_LABEL),
            |p: Pod| Object::Pod(trim_pod(p)),
        ));
        streams.push(source(
            Kind::Journals,
            retry_first_list,
            Api::namespaced(client.clone(), &selection.controller_namespace),
            config().labels(names::JOURNAL_LABEL),
            |mut j: ConfigMap| {
                j.metadata.managed_fields = None;
                Object::Journal(j)
            },
        ));
        streams.push(source(
            Kind::Events,
            retry_first_list,
            events,
            config().fields(&format!("reportingController={}", names::CONTROLLER_NAME)),
            |mut e: Event| {
                e.metadata.managed_fields = None;
                Object::Event(e)
            },
        ));
        streams.push(source(
            Kind::Classes,
            retry_first_list,
            Api::all(client.clone()),
            config(),
            |mut c: StorageClass| {
                c.metadata.managed_fields = None;
                Object::Class(c)
            },
        ));
        Self { streams }
    }

    /// The next update; `None` once every watch has ended (they do not, unless refused).
    pub(crate) async fn next(&mut self) -> Option<Update> {
        self.streams.next().await
    }
}

/// A watch of one kind, its objects lifted into [`Object`]. Ends after a failed first list,
/// unless the kind is required, `retry_first_list` is set and the failure is transient.
fn source<K>(
    kind: Kind,
    retry_first_list: bool,
    api: Api<K>,
    config: watcher::Config,
    lift: fn(K) -> Object,
) -> BoxStream<'static, Update>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    #[derive(PartialEq)]
    enum Phase {
        Listing,
        Synced,
        Ended,
    }
    let retry = retry_first_list && kind.required();
    // kube's backoff starts at 0.8 s; each list attempt opens with `Init`, which resets it, so
    // a failing first list is tried again about every second.
    watcher(api, config)
        .default_backoff()
        .scan(Phase::Listing, move |phase, item| {
            let update = match (item, &*phase) {
                (_, Phase::Ended) => None,
                (Ok(event), _) => {
                    if matches!(event, watcher::Event::InitDone) {
                        *phase = Phase::Synced;
                    }
                    Some(Update::Event(kind, Box::new(lift_event(event, lift))))
                }
                (Err(error), Phase::Listing) if retry && transient(&error) => {
                    Some(Update::Retrying(kind, describe(&error)))
                }
                (Err(error), Phase::Listing) => {
                    *phase = Phase::Ended;
                    Some(Update::Failed(kind, describe(&error)))
                }
                (Err(error), Phase::Synced) => Some(Update::Retrying(kind, describe(&error))),
            };
            futures::future::ready(update)
        })
        .boxed()
}

fn lift_event<K>(event: watcher::Event<K>, lift: fn(K) -> Object) -> watcher::Event<Object> {
    match event {
        watcher::Event::Apply(o) => watcher::Event::Apply(lift(o)),
        watcher::Event::Delete(o) => watcher::Event::Delete(lift(o)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(o) => watcher::Event::InitApply(lift(o)),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

/// Whether a failed request may succeed when sent again: the apiserver failing or
/// overloaded (5xx, 429, as client-go's retries count them) or not reached. A refusal (401,
/// 403), a resource it does not serve (404) or a request it cannot take stays as it is.
fn transient(error: &watcher::Error) -> bool {
    let transient_code = |code: u16| code == 429 || code >= 500;
    match error {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => match e {
            kube::Error::Api(status) => transient_code(status.code),
            kube::Error::HyperError(_) | kube::Error::Service(_) => true,
            _ => false,
        },
        watcher::Error::WatchError(status) => transient_code(status.code),
        watcher::Error::NoResourceVersion => false,
    }
}

/// A watch error as one line: the apiserver's message where it answered.
fn describe(error: &watcher::Error) -> String {
    match error {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status)) => {
            format!("{} ({})", status.message, status.code)
        }
        other => other.to_string(),
    }
}

/// What a set is kept as: no pod template (nobody reads it), managedFields cut to what
/// [`trim_managed_fields`] keeps.
fn trim_set(set: &mut StatefulSet) {
    set.spec.template = PodTemplateSpec::default();
    set.metadata.managed_fields = trim_managed_fields(set.metadata.managed_fields.take());
}

/// A pod as the claim rollout judges it: identity, revision label, creation and deletion.
fn trim_pod(pod: Pod) -> Pod {
    let meta = pod.metadata;
    Pod {
        metadata: ObjectMeta {
            name: meta.name,
            namespace: meta.namespace,
            uid: meta.uid,
            creation_timestamp: meta.creation_timestamp,
            deletion_timestamp: meta.deletion_timestamp,
            labels: meta.labels.map(|l| {
                l.into_iter()
                    .filter(|(k, _)| k == names::CONTROLLER_REVISION_HASH_LABEL)
                    .collect()
            }),
            ..ObjectMeta::default()
        },
        ..Pod::default()
    }
}

/// [`Inputs`] kept current from the feed, and which kinds have been listed.
#[derive(Debug, Default)]
pub(crate) struct Store {
    pub inputs: Inputs,
    listed: [bool; 6],
    /// Objects of a relist in progress, by kind (swapped in when it completes).
    relist: [Option<Vec<Object>>; 6],
    /// Why the last attempt at a first list failed, while it is retried.
    retrying: Option<String>,
}

/// How an update left the store.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Applied {
    /// The inputs changed.
    Changed,
    /// Nothing visible changed (a relist in progress, a retry).
    Unchanged,
    /// A required kind cannot be read: the run cannot go on.
    Fatal(String),
}

impl Store {
    /// Whether every kind has been listed once (or found unreadable).
    pub(crate) fn synced(&self) -> bool {
        self.listed.iter().all(|l| *l)
    }

    /// Why a first list still retried failed last, if one is.
    pub(crate) fn retrying(&self) -> Option<&str> {
        self.retrying.as_deref()
    }

    pub(crate) fn apply(&mut self, update: Update) -> Applied {
        match update {
            Update::Failed(kind, why) => {
                if kind.required() {
                    return Applied::Fatal(format!("cannot list {}: {why}", kind.resource()));
                }
                self.listed[kind.index()] = true;
                self.clear(kind, Some(why));
                Applied::Changed
            }
            Update::Retrying(kind, why) => {
                if !self.listed[kind.index()] {
                    self.retrying = Some(format!("cannot list {}: {why}", kind.resource()));
                }
                Applied::Unchanged
            }
            Update::Event(kind, event) => match *event {
                watcher::Event::Init => {
                    self.relist[kind.index()] = Some(Vec::new());
                    Applied::Unchanged
                }
                watcher::Event::InitApply(object) => {
                    self.relist[kind.index()]
                        .get_or_insert_with(Vec::new)
                        .push(object);
                    Applied::Unchanged
                }
                watcher::Event::InitDone => {
                    let objects = self.relist[kind.index()].take().unwrap_or_default();
                    self.clear(kind, None);
                    for object in objects {
                        self.put(object);
                    }
                    self.listed[kind.index()] = true;
                    if Kind::ALL
                        .iter()
                        .all(|k| !k.required() || self.listed[k.index()])
                    {
                        self.retrying = None;
                    }
                    Applied::Changed
                }
                watcher::Event::Apply(object) => {
                    self.put(object);
                    Applied::Changed
                }
                watcher::Event::Delete(object) => {
                    self.remove(&object);
                    Applied::Changed
                }
            },
        }
    }

    fn clear(&mut self, kind: Kind, unreadable: Option<String>) {
        fn reset<T>(source: &mut Source<T>, unreadable: Option<String>) {
            source.objects.clear();
            source.unreadable = unreadable;
        }
        let i = &mut self.inputs;
        match kind {
            Kind::Sets => reset(&mut i.sets, unreadable),
            Kind::Claims => reset(&mut i.claims, unreadable),
            Kind::Pods => reset(&mut i.pods, unreadable),
            Kind::Journals => reset(&mut i.journals, unreadable),
            Kind::Events => reset(&mut i.events, unreadable),
            Kind::Classes => reset(&mut i.classes, unreadable),
        }
    }

    fn put(&mut self, object: Object) {
        let i = &mut self.inputs;
        match object {
            Object::Set(o) => insert(&mut i.sets, o),
            Object::Claim(o) => insert(&mut i.claims, o),
            Object::Pod(o) => insert(&mut i.pods, o),
            Object::Journal(o) => insert(&mut i.journals, o),
            Object::Event(o) => insert(&mut i.events, o),
            Object::Class(o) => insert(&mut i.classes, o),
        }
    }

    fn remove(&mut self, object: &Object) {
        let i = &mut self.inputs;
        match object {
            Object::Set(o) => i.sets.objects.remove(&key(o)).map(drop),
            Object::Claim(o) => i.claims.objects.remove(&key(o)).map(drop),
            Object::Pod(o) => i.pods.objects.remove(&key(o)).map(drop),
            Object::Journal(o) => i.journals.objects.remove(&key(o)).map(drop),
            Object::Event(o) => i.events.objects.remove(&key(o)).map(drop),
            Object::Class(o) => i.classes.objects.remove(&key(o)).map(drop),
        };
    }
}

fn key<K: Resource>(o: &K) -> Key {
    (
        o.meta().namespace.clone().unwrap_or_default(),
        o.meta().name.clone().unwrap_or_default(),
    )
}

fn insert<K: Resource>(source: &mut Source<K>, o: K) {
    source.objects.insert(key(&o), o);
}

#[cfg(test)]
mod tests {
    use kube::core::Status;

    use super::*;

    fn list_failed(code: u16) -> watcher::Error {
        watcher::Error::InitialListFailed(kube::Error::Api(
            Status::failure("injected", "x").with_code(code).boxed(),
        ))
    }

    #[test]
    fn apiserver_failures_are_transient_and_refusals_are_not() {
        for (code, want) in [
            (500, true),
            (502, true),
            (503, true),
            (429, true),
            (401, false),
            (403, false),
            (404, false),
            (400, false),
        ] {
            assert_eq!(transient(&list_failed(code)), want, "{code}");
        }
        assert!(!transient(&watcher::Error::NoResourceVersion));
    }

    #[test]
    fn a_retried_first_list_is_remembered_until_it_succeeds_and_refusals_end_the_run() {
        let mut store = Store::default();
        let retrying = Update::Retrying(Kind::Sets, "injected (500)".into());
        assert_eq!(store.apply(retrying), Applied::Unchanged);
        assert_eq!(
            store.retrying(),
            Some("cannot list statefulsets: injected (500)")
        );
        for kind in [Kind::Sets, Kind::Claims] {
            let done = Update::Event(kind, Box::new(watcher::Event::InitDone));
            assert_eq!(store.apply(done), Applied::Changed);
        }
        assert_eq!(store.retrying(), None);
        // A later error is the watch's to retry; it says nothing about the first list.
        let later = Update::Retrying(Kind::Sets, "injected (500)".into());
        assert_eq!(store.apply(later), Applied::Unchanged);
        assert_eq!(store.retrying(), None);
        let refused = Update::Failed(Kind::Claims, "forbidden (403)".into());
        assert_eq!(
            Store::default().apply(refused),
            Applied::Fatal("cannot list persistentvolumeclaims: forbidden (403)".into())
        );
    }
}
