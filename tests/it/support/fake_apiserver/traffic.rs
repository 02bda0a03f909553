//! What clients did, kept cheap enough for hundreds of thousands of requests, and the watch
//! lag a test injects.
//!
//! - Per resource: watch streams open now and ever opened, list requests and continued
//!   pages ([`FakeApiServer::traffic`]), to assert how often a process watches a kind.
//! - One compact [`WriteRecord`] per write (POST, PUT, PATCH, DELETE, subresources
//!   included): when, verb, resource, subresource, object, `fieldManager`, `User-Agent`,
//!   response code. Strings are interned, so 100,000 records take a few MiB, and counting
//!   ([`FakeApiServer::tally_writes`]) walks them under the lock without copying. Unlike the
//!   request log (bodies as JSON, capped at `FakeApiConfig::request_log_limit`, copied
//!   whole by `requests()`), nothing here is capped or dropped.
//! - Watch lag ([`FakeApiServer::lag_watches`]): every event of a chosen watch stream (the
//!   k-th opened on a resource, or all on it) reaches the client a fixed delay after the
//!   server produced it, in order, bookmarks included. The rule is read at each event, so it
//!   also applies to streams already open; the server buffers what waits.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use futures::Stream;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::resources::{self, ResourceType};
use super::{FakeApiServer, Shared, lock};

/// Requests of one resource type.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResourceTraffic {
    /// Watch streams open now.
    pub watches_open: usize,
    /// Watch streams opened since the server started.
    pub watches_opened: usize,
    /// List requests that started a list (no `continue`).
    pub lists: usize,
    /// List requests that continued one (`continue`).
    pub continued_pages: usize,
}

/// The Kubernetes verb of a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Verb {
    Create,
    Update,
    Patch,
    Delete,
}

impl Verb {
    fn of(method: &str) -> Option<Self> {
        match method {
            "POST" => Some(Self::Create),
            "PUT" => Some(Self::Update),
            "PATCH" => Some(Self::Patch),
            "DELETE" => Some(Self::Delete),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Create => "create",
            Self::Update => "update",
            Self::Patch => "patch",
            Self::Delete => "delete",
        }
    }
}

/// One write request as the server answered it.
#[derive(Debug, Clone)]
pub struct WriteRecord {
    /// When it arrived, from the server's start.
    pub at: Duration,
    pub verb: Verb,
    /// `None` for a path that names no served resource.
    pub resource: Option<&'static ResourceType>,
    /// `status`, or `None` for the main resource.
    pub subresource: Option<Arc<str>>,
    pub namespace: Option<Arc<str>>,
    /// The object's name; `None` for a create.
    pub name: Option<Arc<str>>,
    /// The `fieldManager` query parameter.
    pub field_manager: Option<Arc<str>>,
    /// The `User-Agent` header (kube's client sends none unless configured to).
    pub user_agent: Option<Arc<str>>,
    /// The HTTP status of the response.
    pub code: u16,
    /// `dryRun=All` in the query.
    pub dry_run: bool,
}

impl WriteRecord {
    /// `statefulsets.apps`, `statefulsets.apps/status`, or `?` for an unknown path.
    pub fn target(&self) -> String {
        let resource = self
            .resource
            .map_or_else(|| "?".to_owned(), ResourceType::qualified_resource);
        match &self.subresource {
            Some(sub) => format!("{resource}/{sub}"),
            None => resource,
        }
    }

    /// Whether it changed or could have changed state: answered 2xx and not a dry run.
    pub fn succeeded(&self) -> bool {
        (200..300).contains(&self.code) && !self.dry_run
    }
}

/// Which watch streams of a resource a lag applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchSelector {
    /// Every stream on the resource.
    Every,
    /// The k-th stream opened on the resource since the server started (1-based).
    Nth(usize),
}

#[derive(Debug, Clone)]
struct LagRule {
    resource: ResourceId,
    which: WatchSelector,
    delay: Duration,
}

/// A resource type as a map key (`group`, `plural`).
type ResourceId = (&'static str, &'static str);

fn id(resource: &ResourceType) -> ResourceId {
    (resource.group, resource.plural)
}

/// The counters, records and rules; each behind its own lock, none held across an await.
pub struct Traffic {
    started: Instant,
    counts: Mutex<HashMap<ResourceId, ResourceTraffic>>,
    writes: Mutex<Writes>,
    lags: Mutex<Vec<LagRule>>,
}

#[derive(Default)]
struct Writes {
    records: Vec<WriteRecord>,
    strings: HashSet<Arc<str>>,
}

impl Writes {
    fn intern(&mut self, text: &str) -> Arc<str> {
        if let Some(known) = self.strings.get(text) {
            return Arc::clone(known);
        }
        let new: Arc<str> = Arc::from(text);
        self.strings.insert(Arc::clone(&new));
        new
    }
}

impl Traffic {
    pub fn new() -> Self {
        Self {
            started: Instant::now(),
            counts: Mutex::new(HashMap::new()),
            writes: Mutex::new(Writes::default()),
            lags: Mutex::new(Vec::new()),
        }
    }

    /// Time since the server started: the clock of [`WriteRecord::at`].
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    fn count(&self, resource: &ResourceType, change: impl FnOnce(&mut ResourceTraffic)) {
        change(lock(&self.counts).entry(id(resource)).or_default());
    }

    /// Counts a list request.
    pub fn listed(&self, resource: &ResourceType, continued: bool) {
        self.count(resource, |c| {
            if continued {
                c.continued_pages += 1;
            } else {
                c.lists += 1;
            }
        });
    }

    /// Records a request if it is a write.
    /// Records a write answered `code` that arrived at `at` (from [`Self::elapsed`]).
    pub fn record(
        &self,
        at: Duration,
        method: &str,
        path: &str,
        query: &str,
        user_agent: Option<&str>,
        code: u16,
    ) {
        let Some(verb) = Verb::of(method) else {
            return;
        };
        let address = parse_path(path);
        let mut field_manager = None;
        let mut dry_run = false;
        for (key, value) in form_urlencoded_pairs(query) {
            match key.as_str() {
                "fieldManager" => field_manager = Some(value),
                "dryRun" => dry_run |= value == "All",
                _ => {}
            }
        }
        let mut writes = lock(&self.writes);
        let record = WriteRecord {
            at,
            verb,
            resource: address.resource,
            subresource: address.subresource.map(|s| writes.intern(s)),
            namespace: address.namespace.map(|s| writes.intern(s)),
            name: address.name.map(|s| writes.intern(s)),
            field_manager: field_manager.map(|s| writes.intern(&s)),
            user_agent: user_agent.map(|s| writes.intern(s)),
            code,
            dry_run,
        };
        writes.records.push(record);
    }
}

/// The user agent of the garbage collector stand-in's writes, as kube-controller-manager's
/// garbage collector sends it (`rest.AddUserAgent(config, "generic-garbage-collector")`).
pub const GARBAGE_COLLECTOR_AGENT: &str =
    "kube-controller-manager/v1.32.0 (linux/amd64) kubernetes/0000000/generic-garbage-collector";

impl Traffic {
    /// Records a patch the garbage collector stand-in made at `at` (no request carried it:
    /// it writes to the store as the collector's patch through the apiserver would).
    pub fn record_collector(
        &self,
        at: Duration,
        resource: &'static ResourceType,
        namespace: &str,
        name: &str,
    ) {
        let mut writes = lock(&self.writes);
        let record = WriteRecord {
            at,
            verb: Verb::Patch,
            resource: Some(resource),
            subresource: None,
            namespace: (!namespace.is_empty()).then(|| writes.intern(namespace)),
            name: Some(writes.intern(name)),
            field_manager: None,
            user_agent: Some(writes.intern(GARBAGE_COLLECTOR_AGENT)),
            code: 200,
            dry_run: false,
        };
        writes.records.push(record);
    }
}

/// A write's resource, from its URL (the routes of `http::router`).
#[derive(Default)]
struct PathAddress<'a> {
    resource: Option<&'static ResourceType>,
    namespace: Option<&'a str>,
    name: Option<&'a str>,
    subresource: Option<&'a str>,
}

fn parse_path(path: &str) -> PathAddress<'_> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match segments.as_slice() {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return PathAddress::default(),
    };
    let mut address = PathAddress::default();
    // `/api/v1/namespaces/NAME` (two segments) is the namespace itself, the second arm.
    let plural = match rest {
        ["namespaces", ns, plural, tail @ ..] => {
            address.namespace = Some(*ns);
            address.name = tail.first().copied();
            address.subresource = tail.get(1).copied();
            *plural
        }
        [plural, tail @ ..] => {
            address.name = tail.first().copied();
            address.subresource = tail.get(1).copied();
            *plural
        }
        [] => return address,
    };
    address.resource = ResourceType::find(group, version, plural);
    address
}

/// `key=value` pairs of a query string, percent-decoded.
fn form_urlencoded_pairs(query: &str) -> impl Iterator<Item = (String, String)> + '_ {
    query.split('&').filter(|kv| !kv.is_empty()).map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (percent_decode(k), percent_decode(v))
    })
}

fn percent_decode(text: &str) -> String {
    let hex = |b: u8| char::from(b).to_digit(16);
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = match bytes.get(i..i + 3) {
            Some([b'%', hi, lo]) => hex(*hi).zip(hex(*lo)),
            _ => None,
        };
        match (escaped, bytes[i]) {
            (Some((hi, lo)), _) => {
                out.push(u8::try_from(hi * 16 + lo).unwrap_or(b'?'));
                i += 3;
                continue;
            }
            (None, b'+') => out.push(b' '),
            (None, b) => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One open watch stream, counted while it lives.
pub struct WatchTicket {
    shared: Arc<Shared>,
    resource: ResourceId,
    ordinal: usize,
}

impl WatchTicket {
    /// Counts a new stream on `resource`.
    pub fn open(shared: &Arc<Shared>, resource: &ResourceType) -> Self {
        let mut ordinal = 0;
        shared.traffic.count(resource, |c| {
            c.watches_open += 1;
            c.watches_opened += 1;
            ordinal = c.watches_opened;
        });
        Self {
            shared: Arc::clone(shared),
            resource: id(resource),
            ordinal,
        }
    }

    /// The delay in force for this stream now.
    fn lag(&self) -> Duration {
        lock(&self.shared.traffic.lags)
            .iter()
            .rev()
            .find(|r| {
                r.resource == self.resource
                    && match r.which {
                        WatchSelector::Every => true,
                        WatchSelector::Nth(k) => k == self.ordinal,
                    }
            })
            .map_or(Duration::ZERO, |r| r.delay)
    }
}

impl Drop for WatchTicket {
    fn drop(&mut self) {
        if let Some(c) = lock(&self.shared.traffic.counts).get_mut(&self.resource) {
            c.watches_open = c.watches_open.saturating_sub(1);
        }
    }
}

/// The body of a watch stream: the lines the watch task produces, each held back by the lag
/// in force for the stream. A relay stamps each line when produced, so a lag delays
/// delivery without slowing the producer; the stream counts as open until it is dropped.
pub fn deliver(
    ticket: WatchTicket,
    mut lines: mpsc::Receiver<Bytes>,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static {
    let (stamped_tx, stamped_rx) = mpsc::unbounded_channel::<(Instant, Bytes)>();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                line = lines.recv() => match line {
                    Some(line) => {
                        if stamped_tx.send((Instant::now(), line)).is_err() {
                            return;
                        }
                    }
                    None => return,
                },
                () = stamped_tx.closed() => return,
            }
        }
    });
    futures::stream::unfold((stamped_rx, ticket), |(mut stamped, ticket)| async move {
        let (produced, line) = stamped.recv().await?;
        let lag = ticket.lag();
        if !lag.is_zero() {
            tokio::time::sleep_until(produced + lag).await;
        }
        Some((Ok(line), (stamped, ticket)))
    })
}

impl FakeApiServer {
    /// Watch and list counts of one resource type.
    pub fn traffic(&self, resource: &ResourceType) -> ResourceTraffic {
        lock(&self.shared.traffic.counts)
            .get(&id(resource))
            .copied()
            .unwrap_or_default()
    }

    /// Watch and list counts of every type requested so far, by qualified resource
    /// (`statefulsets.apps`, `persistentvolumeclaims`).
    pub fn traffic_by_resource(&self) -> BTreeMap<String, ResourceTraffic> {
        let counts = lock(&self.shared.traffic.counts);
        resources::ALL
            .iter()
            .filter_map(|r| counts.get(&id(r)).map(|c| (r.qualified_resource(), *c)))
            .collect()
    }

    /// Delays every event of the selected watch streams of `resource` by `delay` (zero
    /// removes the lag). The latest rule matching a stream wins.
    pub fn lag_watches(&self, resource: &ResourceType, which: WatchSelector, delay: Duration) {
        lock(&self.shared.traffic.lags).push(LagRule {
            resource: id(resource),
            which,
            delay,
        });
    }

    /// Removes every watch lag.
    pub fn clear_watch_lags(&self) {
        lock(&self.shared.traffic.lags).clear();
    }

    /// Time since the server started: the clock of [`WriteRecord::at`], to mark windows.
    pub fn uptime(&self) -> Duration {
        self.shared.traffic.started.elapsed()
    }

    /// Every write so far, oldest first (cheap: records are small and share their strings).
    pub fn write_records(&self) -> Vec<WriteRecord> {
        lock(&self.shared.traffic.writes).records.clone()
    }

    /// Counts writes by a key; `None` leaves a write out. Walks the records in place.
    pub fn tally_writes<K: Ord>(
        &self,
        mut key: impl FnMut(&WriteRecord) -> Option<K>,
    ) -> BTreeMap<K, usize> {
        let writes = lock(&self.shared.traffic.writes);
        let mut tally = BTreeMap::new();
        for record in &writes.records {
            if let Some(k) = key(record) {
                *tally.entry(k).or_insert(0) += 1;
            }
        }
        tally
    }

    /// How many writes match.
    pub fn count_writes(&self, mut matches: impl FnMut(&WriteRecord) -> bool) -> usize {
        lock(&self.shared.traffic.writes)
            .records
            .iter()
            .filter(|r| matches(r))
            .count()
    }
}
