//! What clients asked for, for assertions such as "no write at steady state", and the
//! failures tests inject.

use std::collections::VecDeque;
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::watch;

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    pub method: String,
    pub path: String,
    /// The raw query string, `""` if none.
    pub query: String,
    pub content_type: Option<String>,
    /// The body as JSON; a body that is not JSON is kept as a JSON string.
    pub body: Option<Value>,
    /// The HTTP status of the response (200 for a watch that opened).
    pub code: u16,
}

impl RecordedRequest {
    /// Whether this is a watch (`watch=true` or `watch=1`).
    pub fn is_watch(&self) -> bool {
        self.query
            .split('&')
            .any(|kv| kv == "watch=true" || kv == "watch=1")
    }

    /// Whether this request could change state (anything but GET).
    pub fn is_write(&self) -> bool {
        self.method != "GET"
    }

    /// Whether the request was a dry run (`dryRun=All` in the query or a DeleteOptions body).
    pub fn is_dry_run(&self) -> bool {
        self.query.split('&').any(|kv| kv == "dryRun=All")
            || self
                .body
                .as_ref()
                .and_then(|b| b.get("dryRun"))
                .and_then(Value::as_array)
                .is_some_and(|modes| modes.iter().any(|m| m == "All"))
    }

    /// The `propagationPolicy` a DELETE asked for, from its body or query.
    pub fn propagation_policy(&self) -> Option<String> {
        self.body
            .as_ref()
            .and_then(|b| b.get("propagationPolicy"))
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| {
                self.query
                    .split('&')
                    .find_map(|kv| kv.strip_prefix("propagationPolicy="))
                    .map(str::to_owned)
            })
    }
}

/// The request log, capped so a long test cannot grow it without bound.
pub struct RequestLog {
    entries: VecDeque<RecordedRequest>,
    limit: usize,
}

impl RequestLog {
    pub fn new(limit: usize) -> Self {
        Self {
            entries: VecDeque::new(),
            limit: limit.max(1),
        }
    }

    pub fn push(&mut self, entry: RecordedRequest) {
        if self.entries.len() == self.limit {
            self.entries.pop_front();
        }
        self.entries.push_back(entry);
    }

    pub fn snapshot(&self) -> Vec<RecordedRequest> {
        self.entries.iter().cloned().collect()
    }

    pub fn clear(&mut self) {
        self.entries.clear();
    }
}

/// A failure to inject into the next matching requests.
#[derive(Debug, Clone)]
pub struct Fault {
    pub method: String,
    /// Matched against the path and query, e.g. `/persistentvolumeclaims/data-web-0` or `watch=true`.
    pub path_substring: String,
    pub code: u16,
    pub remaining: usize,
}

/// Takes one use of the first fault matching a request, if any, and returns its code.
pub fn take_fault(faults: &mut Vec<Fault>, method: &str, path_and_query: &str) -> Option<u16> {
    let index = faults.iter().position(|f| {
        f.remaining > 0
            && f.method.eq_ignore_ascii_case(method)
            && path_and_query.contains(&f.path_substring)
    })?;
    let fault = &mut faults[index];
    fault.remaining -= 1;
    let code = fault.code;
    if fault.remaining == 0 {
        faults.remove(index);
    }
    Some(code)
}

/// Requests to hold back until a test releases them (see `FakeApiServer::hold_next`).
pub struct HoldRule {
    pub method: String,
    pub path_substring: String,
    pub remaining: usize,
    /// Counts the requests waiting.
    pub arrived: Arc<watch::Sender<usize>>,
    pub released: watch::Receiver<bool>,
}

/// Takes one use of the first hold matching a request, if any: the counter to bump and the
/// signal to wait for.
pub fn take_hold(
    holds: &mut Vec<HoldRule>,
    method: &str,
    path_and_query: &str,
) -> Option<(Arc<watch::Sender<usize>>, watch::Receiver<bool>)> {
    let index = holds.iter().position(|h| {
        h.remaining > 0
            && h.method.eq_ignore_ascii_case(method)
            && path_and_query.contains(&h.path_substring)
    })?;
    let hold = &mut holds[index];
    hold.remaining -= 1;
    let taken = (Arc::clone(&hold.arrived), hold.released.clone());
    if hold.remaining == 0 {
        holds.remove(index);
    }
    Some(taken)
}
