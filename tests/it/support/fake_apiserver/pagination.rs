//! Lists as kube-apiserver serves them, with `limit` and `continue`.
//!
//! Where a list is served from decides whether it is paged (kube-apiserver's
//! `shouldDelegateList` in `storage/cacher`, 1.32):
//!
//! - no `limit`, or `resourceVersion=0`: the watch cache answers with the complete list at the
//!   current revision, whatever the `limit` (the watch cache cannot continue; paging from it
//!   came with the snapshottable cache, KEP-4988). kube's `ListParams` drops
//!   `resourceVersion=0` when a `limit` is set, so kube-runtime's watcher, which lists with
//!   `limit=500`, is paged;
//! - a `limit` with `resourceVersion` unset, or with `resourceVersionMatch=NotOlderThan`: etcd
//!   answers, paged, from a snapshot at the current revision;
//! - a `limit` with an exact `resourceVersion` (`resourceVersionMatch=Exact`, or a version
//!   without a match, the legacy form): paged from the snapshot at that revision;
//! - `continue`: the next page from the same snapshot. The token is opaque to clients and
//!   encoded as the apiserver's (`storage.EncodeContinue`): URL-safe base64 of
//!   `{"v":"meta.k8s.io/v1","rv":REVISION,"start":"KEY\u0000"}`, KEY being the last key
//!   returned (`namespace/name`, or `name` in a namespaced or cluster-scoped list). A
//!   `resourceVersion` beside it is refused (400), as is a token that does not decode.
//!
//! A snapshot is the store with the retained history rolled back (every change after the
//! snapshot's revision undone). Once the history no longer reaches back to it (it was capped
//! at `FakeApiConfig::watch_history_limit`, or `compact_history` ran), a continuation gets 410
//! `Expired` with a token to go on inconsistently at the current revision, as etcd's
//! compaction makes the apiserver answer.
//!
//! `metadata.remainingItemCount` is set on a page with more to come when the list has no
//! selector (the apiserver cannot count what a selector keeps). As from etcd, a full page
//! with keys left after it carries a token even when no later key matches the selector: the
//! next page is then empty.

use std::collections::BTreeMap;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};

use super::errors::ApiError;
use super::resources::ResourceType;
use super::selectors::Selection;
use super::store::Store;

/// A list request's paging parameters.
pub struct ListRequest<'a> {
    pub resource: &'static ResourceType,
    pub namespace: Option<&'a str>,
    pub selection: &'a Selection,
    /// Whether the request had a label or field selector.
    pub selective: bool,
    pub limit: Option<&'a str>,
    pub continue_token: Option<&'a str>,
    pub resource_version: Option<&'a str>,
    pub resource_version_match: Option<&'a str>,
}

impl ListRequest<'_> {
    /// Whether this request continues a list (for the request counts).
    pub fn is_continuation(&self) -> bool {
        self.continue_token.is_some_and(|t| !t.is_empty())
    }
}

/// The revision a page is read at.
enum At {
    Current,
    Revision(u64),
}

/// Serves one list request (one page).
pub fn list(store: &Store, request: &ListRequest<'_>) -> Result<Response, ApiError> {
    let rv = request.resource_version.filter(|v| !v.is_empty());
    let limit = match request.limit.filter(|l| !l.is_empty()) {
        None => 0,
        Some(text) => text.parse::<i64>().map_err(|_| {
            ApiError::bad_request(format!(
                "limit: Invalid value: {text:?}: must be an integer"
            ))
        })?,
    };
    let limit = usize::try_from(limit).unwrap_or(0);
    if let Some(token) = request.continue_token.filter(|t| !t.is_empty()) {
        if rv.is_some() {
            return Err(ApiError::bad_request(
                "specifying resource version is not allowed when using continue",
            ));
        }
        let (revision, after) = decode(token)?;
        let at = if revision == -1 {
            At::Current
        } else {
            At::Revision(u64::try_from(revision).unwrap_or(0))
        };
        let after = split_key(&after, request.namespace, request.resource);
        return page(store, request, at, Some(after), limit);
    }
    let exact = matches!(request.resource_version_match, Some("Exact"))
        || (request.resource_version_match.is_none() && rv.is_some_and(|v| v != "0"));
    match rv {
        _ if limit == 0 => Ok(complete(store, request)),
        Some("0") => Ok(complete(store, request)),
        Some(v) if exact => {
            let revision = v.parse::<u64>().map_err(|_| {
                ApiError::bad_request(format!(
                    "resourceVersion: Invalid value: {v:?}: must be a valid resourceVersion"
                ))
            })?;
            page(store, request, At::Revision(revision), None, limit)
        }
        _ => page(store, request, At::Current, None, limit),
    }
}

/// The whole list at the current revision, in one response, as the watch cache serves it.
fn complete(store: &Store, request: &ListRequest<'_>) -> Response {
    let items: Vec<ListItem<'_>> = store
        .list(request.resource, request.namespace)
        .filter(|o| request.selection.matches(o))
        .map(ListItem)
        .collect();
    list_response(request.resource, store.revision(), items, None, None)
}

/// A stored object as a list item: without apiVersion and kind, as from the real apiserver.
/// Serialized straight from the store (no copy of the object: a list of 50,000 claims would
/// otherwise clone and free every one of them under the store lock).
struct ListItem<'a>(&'a Value);

impl serde::Serialize for ListItem<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let Some(map) = self.0.as_object() else {
            return self.0.serialize(serializer);
        };
        let fields = map
            .iter()
            .filter(|(k, _)| *k != "apiVersion" && *k != "kind");
        let mut out = serializer.serialize_map(None)?;
        for (k, v) in fields {
            out.serialize_entry(k, v)?;
        }
        out.end()
    }
}

fn list_response(
    resource: &ResourceType,
    revision: u64,
    items: Vec<ListItem<'_>>,
    continue_token: Option<String>,
    remaining: Option<usize>,
) -> Response {
    let mut metadata = json!({"resourceVersion": revision.to_string()});
    if let Some(token) = continue_token {
        metadata["continue"] = json!(token);
    }
    if let Some(remaining) = remaining {
        metadata["remainingItemCount"] = json!(remaining);
    }
    #[derive(serde::Serialize)]
    #[serde(rename_all = "camelCase")]
    struct List<'a> {
        kind: String,
        api_version: String,
        metadata: Value,
        items: Vec<ListItem<'a>>,
    }
    let list = List {
        kind: format!("{}List", resource.kind),
        api_version: resource.api_version(),
        metadata,
        items,
    };
    match serde_json::to_vec(&list) {
        Ok(body) => (
            StatusCode::OK,
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response(),
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, error.to_string()).into_response(),
    }
}

type Key = (String, String);

/// One page of at most `limit` matching objects after `after`, at a revision.
fn page(
    store: &Store,
    request: &ListRequest<'_>,
    at: At,
    after: Option<Key>,
    limit: usize,
) -> Result<Response, ApiError> {
    let revision = match at {
        At::Current => store.revision(),
        At::Revision(revision) if revision > store.revision() => {
            return Err(too_large(revision, store.revision()));
        }
        At::Revision(revision) if revision < store.history_floor() => {
            return Ok(expired(request, after.as_ref(), revision));
        }
        At::Revision(revision) => revision,
    };
    // Objects changed since the snapshot, with their state at it (None: did not exist yet).
    let mut rolled_back: BTreeMap<Key, Option<&Value>> = BTreeMap::new();
    for change in store.history_since(revision) {
        if !std::ptr::eq(change.resource, request.resource) {
            continue;
        }
        let ns = meta(&change.object, "namespace");
        if request.namespace.is_some_and(|n| n != ns) {
            continue;
        }
        let key = (ns.to_owned(), meta(&change.object, "name").to_owned());
        // The oldest change after the snapshot holds the state at it.
        rolled_back
            .entry(key)
            .or_insert_with(|| change.previous.as_ref());
    }
    let after_ref = after
        .as_ref()
        .map(|(ns, name)| (ns.as_str(), name.as_str()));
    let live = store
        .range(request.resource, request.namespace, after_ref)
        .filter(|(ns, name, _)| !rolled_back.contains_key(&((*ns).to_owned(), (*name).to_owned())))
        .map(|(ns, name, v)| ((ns, name), v));
    let restored = rolled_back
        .iter()
        .filter(|(key, _)| after.as_ref().is_none_or(|a| *key > a))
        .filter_map(|((ns, name), v)| v.map(|v| ((ns.as_str(), name.as_str()), v)));
    let mut snapshot = merge(live, restored);

    let mut items = Vec::new();
    let mut last = None;
    for ((ns, name), object) in snapshot.by_ref() {
        if request.selection.matches(object) {
            items.push(ListItem(object));
        }
        last = Some((ns.to_owned(), name.to_owned()));
        if limit > 0 && items.len() == limit {
            break;
        }
    }
    let remaining = snapshot.count();
    let token = match (&last, remaining) {
        (Some(key), 1..) => Some(encode(revision as i64, key, request.namespace)),
        _ => None,
    };
    let count = (token.is_some() && !request.selective).then_some(remaining);
    Ok(list_response(
        request.resource,
        revision,
        items,
        token,
        count,
    ))
}

/// Two key-ordered sequences as one.
fn merge<'a>(
    a: impl Iterator<Item = ((&'a str, &'a str), &'a Value)>,
    b: impl Iterator<Item = ((&'a str, &'a str), &'a Value)>,
) -> impl Iterator<Item = ((&'a str, &'a str), &'a Value)> {
    let (mut a, mut b) = (a.peekable(), b.peekable());
    std::iter::from_fn(move || match (a.peek(), b.peek()) {
        (Some((ka, _)), Some((kb, _))) if kb < ka => b.next(),
        (Some(_), _) => a.next(),
        (None, _) => b.next(),
    })
}

fn meta<'a>(object: &'a Value, field: &str) -> &'a str {
    object
        .get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// The apiserver's continue token for the key after `last`.
fn encode(revision: i64, (ns, name): &Key, namespace: Option<&str>) -> String {
    let key = if namespace.is_some() || ns.is_empty() {
        name.clone()
    } else {
        format!("{ns}/{name}")
    };
    let token = json!({"v": "meta.k8s.io/v1", "rv": revision, "start": format!("{key}\u{0}")});
    URL_SAFE_NO_PAD.encode(token.to_string())
}

/// The revision and the start key of a continue token.
fn decode(token: &str) -> Result<(i64, String), ApiError> {
    let invalid = |why: &str| ApiError::bad_request(format!("invalid continue token: {why}"));
    let bytes = URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|e| invalid(&e.to_string()))?;
    let parsed: Value = serde_json::from_slice(&bytes).map_err(|e| invalid(&e.to_string()))?;
    if parsed.get("v").and_then(Value::as_str) != Some("meta.k8s.io/v1") {
        return Err(invalid("server does not recognize this encoded version"));
    }
    let revision = parsed.get("rv").and_then(Value::as_i64).unwrap_or(0);
    if revision == 0 {
        return Err(invalid(
            "incorrect encoded start resourceVersion (version meta.k8s.io/v1)",
        ));
    }
    let start = parsed.get("start").and_then(Value::as_str).unwrap_or("");
    let Some(key) = start.strip_suffix('\u{0}').filter(|k| !k.is_empty()) else {
        return Err(invalid("encoded start key empty (version meta.k8s.io/v1)"));
    };
    Ok((revision, key.to_owned()))
}

/// The (namespace, name) a token's key stands for in this list.
fn split_key(key: &str, namespace: Option<&str>, resource: &ResourceType) -> Key {
    match namespace {
        Some(ns) => (ns.to_owned(), key.to_owned()),
        None if !resource.namespaced => (String::new(), key.to_owned()),
        None => match key.split_once('/') {
            Some((ns, name)) => (ns.to_owned(), name.to_owned()),
            None => (key.to_owned(), String::new()),
        },
    }
}

/// The 410 of a continuation whose snapshot was compacted away (etcd3 store's
/// `handleCompactedErrorForPaging`): the Status carries a token to go on at the current
/// revision.
fn expired(request: &ListRequest<'_>, after: Option<&Key>, revision: u64) -> Response {
    let mut status = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "The provided continue parameter is too old to display a consistent list result. \
            You can start a new list without the continue parameter, or use the continue token in \
            this response to retrieve the remainder of the results. Continuing with the provided \
            token results in an inconsistent list - objects that were created, modified, or deleted \
            between the time the first chunk was returned and now may show up in the list.",
        "reason": "Expired",
        "code": 410,
    });
    match after {
        Some(key) => status["metadata"]["continue"] = json!(encode(-1, key, request.namespace)),
        // A first page at a compacted exact revision.
        None => {
            status["message"] = json!(format!(
                "The resourceVersion for the provided list is too old. ({revision})"
            ));
        }
    }
    (StatusCode::GONE, axum::Json(status)).into_response()
}

/// A revision the store has not reached (the apiserver's `NewTooLargeResourceVersionError`).
fn too_large(requested: u64, current: u64) -> ApiError {
    ApiError {
        code: 504,
        reason: "Timeout",
        message: format!("Too large resource version: {requested}, current: {current}"),
        details: Some(
            json!({"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}], "retryAfterSeconds": 1}),
        ),
        warnings: Vec::new(),
    }
}
