//! HTTP front: the apiserver's URL layout on axum routes, a middleware that logs every
//! request and injects failures, and the handler that maps verbs onto the registry.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes, to_bytes};
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use serde::Deserialize;
use serde_json::Value;

use super::Shared;
use super::admission::{self, UserInfo, WriteBody, WriteRequest};
use super::apply;
use super::authz;
use super::discovery;
use super::errors::ApiError;
use super::pagination::{self, ListRequest};
use super::registry::{self, DeleteOptions, PatchKind, Target, Writer};
use super::request_log::{RecordedRequest, take_fault, take_hold};
use super::resources::ResourceType;
use super::selectors::Selection;
use super::store::meta_str;
use super::watch::{self, WatchRequest};

/// The apiserver's default request body limit.
const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

pub fn router(shared: Arc<Shared>) -> Router {
    let resource = any(serve_resource);
    Router::new()
        .route("/version", axum::routing::get(authz::version))
        .route("/api", get(discovery::core_versions))
        .route("/api/{version}", get(discovery::core_resources))
        .route("/apis", get(discovery::groups))
        .route("/apis/{group}", get(discovery::group))
        .route("/apis/{group}/{version}", get(discovery::group_resources))
        .route("/openapi/v2", get(discovery::openapi_v2))
        .route("/openapi/v3", get(discovery::openapi_v3_index))
        .route("/openapi/v3/api/{version}", get(discovery::openapi_v3_core))
        .route(
            "/openapi/v3/apis/{group}/{version}",
            get(discovery::openapi_v3_group),
        )
        .route(
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            axum::routing::post(authz::self_subject_access_review),
        )
        // The Eviction subresource has a registry of its own.
        .route(
            "/api/{version}/namespaces/{namespace}/pods/{name}/eviction",
            any(super::eviction::serve),
        )
        .route("/api/{version}/{plural}", resource.clone())
        .route("/api/{version}/{plural}/{name}", resource.clone())
        .route(
            "/api/{version}/{plural}/{name}/{subresource}",
            resource.clone(),
        )
        .route(
            "/api/{version}/namespaces/{namespace}/{plural}",
            resource.clone(),
        )
        .route(
            "/api/{version}/namespaces/{namespace}/{plural}/{name}",
            resource.clone(),
        )
        .route(
            "/api/{version}/namespaces/{namespace}/{plural}/{name}/{subresource}",
            resource.clone(),
        )
        .route("/apis/{group}/{version}/{plural}", resource.clone())
        .route("/apis/{group}/{version}/{plural}/{name}", resource.clone())
        .route(
            "/apis/{group}/{version}/{plural}/{name}/{subresource}",
            resource.clone(),
        )
        .route(
            "/apis/{group}/{version}/namespaces/{namespace}/{plural}",
            resource.clone(),
        )
        .route(
            "/apis/{group}/{version}/namespaces/{namespace}/{plural}/{name}",
            resource.clone(),
        )
        .route(
            "/apis/{group}/{version}/namespaces/{namespace}/{plural}/{name}/{subresource}",
            resource,
        )
        // `/api/v1/namespaces/{name}` has the shape of a namespaced collection; route it to
        // the namespace itself.
        .route("/api/{version}/namespaces/{name}", any(serve_namespace))
        .fallback(|| async { ApiError::unknown_path() })
        .layer(middleware::from_fn_with_state(
            Arc::clone(&shared),
            log_and_inject,
        ))
        .layer(middleware::from_fn_with_state(
            Arc::clone(&shared),
            super::outage::cut_in_flight,
        ))
        .with_state(shared)
}

/// Records each request with its response code, and answers with an injected failure
/// when one matches.
async fn log_and_inject(
    State(shared): State<Arc<Shared>>,
    request: Request,
    next: Next,
) -> Response {
    // A write's record carries when it arrived, not when it was answered.
    let arrived_at = shared.traffic.elapsed();
    let (parts, body) = request.into_parts();
    let Ok(bytes) = to_bytes(body, MAX_BODY_BYTES).await else {
        return ApiError::too_large(MAX_BODY_BYTES).into_response();
    };
    let path = parts.uri.path().to_owned();
    let query = parts.uri.query().unwrap_or("").to_owned();
    let user_agent = parts
        .headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let mut entry = RecordedRequest {
        method: parts.method.to_string(),
        path,
        query,
        content_type: parts
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        body: (!bytes.is_empty()).then(|| {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()))
        }),
        code: 0,
    };
    let path_and_query = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_default();
    let held = take_hold(&mut shared.holds(), parts.method.as_str(), &path_and_query);
    if let Some((arrived, mut released)) = held {
        arrived.send_modify(|waiting| *waiting += 1);
        let _ = released.wait_for(|go| *go).await;
        // Released after an outage began: it went down with the apiserver.
        if parts
            .extensions
            .get::<super::outage::ArrivedIn>()
            .is_some_and(super::outage::ArrivedIn::is_cut)
        {
            return ApiError::injected(503).into_response();
        }
    }
    let injected = take_fault(&mut shared.faults(), parts.method.as_str(), &path_and_query);
    let response = match injected {
        Some(code) => ApiError::injected(code).into_response(),
        None => {
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
    };
    entry.code = response.status().as_u16();
    shared.traffic.record(
        arrived_at,
        &entry.method,
        &entry.path,
        &entry.query,
        user_agent.as_deref(),
        entry.code,
    );
    shared.log().push(entry);
    response
}

/// Query parameters the fake server reads; others are accepted and ignored.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Params {
    watch: Option<String>,
    label_selector: Option<String>,
    field_selector: Option<String>,
    resource_version: Option<String>,
    allow_watch_bookmarks: Option<String>,
    send_initial_events: Option<String>,
    timeout_seconds: Option<String>,
    dry_run: Option<String>,
    propagation_policy: Option<String>,
    field_manager: Option<String>,
    field_validation: Option<String>,
    force: Option<String>,
    limit: Option<String>,
    #[serde(rename = "continue")]
    continue_token: Option<String>,
    resource_version_match: Option<String>,
}

/// The field manager of a write (`managerOrUserAgent`): `fieldManager`, else the product
/// token of the user agent (what precedes the first `/`, printable, at most 128 bytes),
/// else `unknown`.
fn manager_of(params: &Params, headers: &HeaderMap) -> String {
    if let Some(manager) = params.field_manager.as_deref().filter(|m| !m.is_empty()) {
        return manager.to_owned();
    }
    let agent = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let mut prefix = String::new();
    for c in agent.split('/').next().unwrap_or("").chars() {
        if c.is_control() {
            continue;
        }
        if prefix.len() + c.len_utf8() > 128 {
            break;
        }
        prefix.push(c);
    }
    if prefix.is_empty() {
        "unknown".to_owned()
    } else {
        prefix
    }
}

fn flag(value: Option<&String>) -> bool {
    matches!(value.map(String::as_str), Some("true" | "1"))
}

/// Where a request points, from the route's path parameters.
struct Address {
    resource: &'static ResourceType,
    namespace: Option<String>,
    name: Option<String>,
    target: Target,
}

impl Address {
    fn resolve(
        mut params: HashMap<String, String>,
        config: &super::FakeApiConfig,
    ) -> Result<Self, ApiError> {
        let group = params.remove("group").unwrap_or_default();
        let version = params.remove("version").unwrap_or_default();
        let plural = params.remove("plural").unwrap_or_default();
        let resource =
            ResourceType::find(&group, &version, &plural).ok_or_else(ApiError::unknown_path)?;
        // VolumeAttributesClasses are served at one version, or none, as the gate and the
        // enabled versions decide.
        if resource.plural == "volumeattributesclasses"
            && super::profile::volume_attributes_class_version(config) != Some(resource.version)
        {
            return Err(ApiError::unknown_path());
        }
        let namespace = params.remove("namespace");
        if namespace.is_some() && !resource.namespaced {
            return Err(ApiError::unknown_path());
        }
        let target = match params.remove("subresource").as_deref() {
            None => Target::Main,
            Some("status") if resource.status_subresource => Target::Status,
            Some("scale") if resource.plural == "statefulsets" => Target::Scale,
            Some(_) => return Err(ApiError::unknown_path()),
        };
        let name = params.remove("name");
        if name.is_some() && resource.namespaced && namespace.is_none() {
            return Err(ApiError::unknown_path());
        }
        Ok(Self {
            resource,
            namespace,
            name,
            target,
        })
    }
}

async fn serve_namespace(
    state: State<Arc<Shared>>,
    method: Method,
    Path(mut params): Path<HashMap<String, String>>,
    query: Result<Query<Params>, axum::extract::rejection::QueryRejection>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    params.insert("plural".into(), "namespaces".into());
    serve_resource(state, method, Path(params), query, headers, body).await
}

async fn serve_resource(
    State(shared): State<Arc<Shared>>,
    method: Method,
    Path(params): Path<HashMap<String, String>>,
    query: Result<Query<Params>, axum::extract::rejection::QueryRejection>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let result = match query {
        Ok(Query(params_q)) => match Address::resolve(params, &shared.config()) {
            Ok(address) => dispatch(&shared, &method, &address, &params_q, &headers, &body).await,
            Err(e) => Err(e),
        },
        Err(rejection) => Err(ApiError::bad_request(rejection.body_text())),
    };
    result.unwrap_or_else(IntoResponse::into_response)
}

async fn dispatch(
    shared: &Arc<Shared>,
    method: &Method,
    address: &Address,
    params: &Params,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, ApiError> {
    let resource = address.resource;
    let dry_run = params.dry_run.as_deref() == Some("All");
    let namespace = address.namespace.as_deref().unwrap_or("");
    if address.target == Target::Scale {
        return scale(shared, method, address, params, headers, dry_run, body).await;
    }
    match (method, address.name.as_deref()) {
        (&Method::GET, None) if flag(params.watch.as_ref()) => {
            let request = WatchRequest {
                resource,
                namespace: address.namespace.clone(),
                selection: Selection::parse(
                    params.label_selector.as_deref(),
                    params.field_selector.as_deref(),
                    resource,
                )?,
                resource_version: params.resource_version.clone(),
                send_initial_events: flag(params.send_initial_events.as_ref()),
                bookmarks: flag(params.allow_watch_bookmarks.as_ref()),
                timeout: params
                    .timeout_seconds
                    .as_deref()
                    .map(|t| t.parse::<u64>().map(Duration::from_secs))
                    .transpose()
                    .map_err(|_| {
                        ApiError::bad_request("timeoutSeconds must be a non-negative integer")
                    })?,
            };
            let body = watch::start(shared, request)?;
            Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
        }
        (&Method::GET, None) => {
            let selection = Selection::parse(
                params.label_selector.as_deref(),
                params.field_selector.as_deref(),
                resource,
            )?;
            let request = ListRequest {
                resource,
                namespace: address.namespace.as_deref(),
                selection: &selection,
                selective: [&params.label_selector, &params.field_selector]
                    .iter()
                    .any(|s| s.as_deref().is_some_and(|s| !s.is_empty())),
                limit: params.limit.as_deref(),
                continue_token: params.continue_token.as_deref(),
                resource_version: params.resource_version.as_deref(),
                resource_version_match: params.resource_version_match.as_deref(),
            };
            shared.traffic.listed(resource, request.is_continuation());
            pagination::list(&shared.store(), &request)
        }
        (&Method::GET, Some(name)) => {
            let store = shared.store();
            let object = store
                .get(resource, namespace, name)
                .ok_or_else(|| ApiError::not_found(resource, name))?;
            Ok(json_response(StatusCode::OK, object))
        }
        (&Method::POST, None) => {
            let object = registry::parse_object(body)?;
            write(
                shared,
                address,
                params,
                headers,
                dry_run,
                WriteBody::Create(object),
            )
            .await
        }
        (&Method::PUT, Some(_)) => {
            let object = registry::parse_object(body)?;
            write(
                shared,
                address,
                params,
                headers,
                dry_run,
                WriteBody::Replace(object),
            )
            .await
        }
        (&Method::PATCH, Some(_)) => {
            let content_type = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            let kind = PatchKind::from_content_type(content_type)?;
            let force = flag(params.force.as_ref());
            apply::check_options(
                kind == PatchKind::Apply,
                params.field_manager.as_deref(),
                force,
            )?;
            let write_body = match kind {
                PatchKind::Apply => WriteBody::Apply {
                    config: apply::parse(body)?,
                    force,
                },
                other => WriteBody::Patch(other, body.to_vec()),
            };
            write(shared, address, params, headers, dry_run, write_body).await
        }
        (&Method::DELETE, Some(name)) if address.target == Target::Main => {
            let options =
                DeleteOptions::parse(body, params.propagation_policy.as_deref(), dry_run)?;
            let config = shared.config();
            let outcome = registry::delete(
                &mut shared.store(),
                &config,
                resource,
                namespace,
                name,
                &options,
            )?;
            if let Some(lag) = outcome.deferred {
                let uid = meta_str(&outcome.object, "uid").unwrap_or("").to_owned();
                let (shared, namespace, name) =
                    (Arc::clone(shared), namespace.to_owned(), name.to_owned());
                tokio::spawn(async move {
                    tokio::time::sleep(lag).await;
                    // The garbage collector writes through the apiserver: not while it is down.
                    while shared.outage.is_down() {
                        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                    }
                    let at = shared.traffic.elapsed();
                    let written = registry::finish_orphan_delete(
                        &mut shared.store(),
                        resource,
                        &namespace,
                        &name,
                        &uid,
                    );
                    for write in written {
                        shared.traffic.record_collector(
                            at,
                            write.resource,
                            &write.namespace,
                            &write.name,
                        );
                    }
                });
            }
            let code = StatusCode::from_u16(outcome.code).unwrap_or(StatusCode::OK);
            Ok(json_response(code, &outcome.object))
        }
        (method, _) => Err(ApiError::method_not_allowed(method.as_str())),
    }
}

/// The autoscaling/v1 Scale of a StatefulSet (`GetScale` of its registry).
fn scale_of(set: &Value) -> Value {
    let selector: Vec<String> = set
        .pointer("/spec/selector/matchLabels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
        .collect();
    let meta = |k: &str| {
        set.pointer(&format!("/metadata/{k}"))
            .cloned()
            .unwrap_or(Value::Null)
    };
    serde_json::json!({
        "kind": "Scale", "apiVersion": "autoscaling/v1",
        "metadata": {"name": meta("name"), "namespace": meta("namespace"), "uid": meta("uid"),
                     "resourceVersion": meta("resourceVersion"),
                     "creationTimestamp": meta("creationTimestamp")},
        "spec": {"replicas": set.pointer("/spec/replicas").cloned().unwrap_or(serde_json::json!(0))},
        "status": {"replicas": set.pointer("/status/replicas").cloned().unwrap_or(serde_json::json!(0)),
                   "selector": selector.join(",")},
    })
}

/// `statefulsets/{name}/scale`: read, or change `spec.replicas` by a patch or replace of the
/// Scale (admission sees an UPDATE of the `scale` subresource).
async fn scale(
    shared: &Arc<Shared>,
    method: &Method,
    address: &Address,
    params: &Params,
    headers: &HeaderMap,
    dry_run: bool,
    body: &[u8],
) -> Result<Response, ApiError> {
    let resource = address.resource;
    let namespace = address.namespace.as_deref().unwrap_or("");
    let name = address.name.as_deref().unwrap_or("");
    let current = shared
        .store()
        .get(resource, namespace, name)
        .cloned()
        .ok_or_else(|| ApiError::not_found(resource, name))?;
    let current_scale = scale_of(&current);
    let wanted = match *method {
        Method::GET => return Ok(json_response(StatusCode::OK, &current_scale)),
        Method::PUT => registry::parse_object(body)?,
        Method::PATCH => {
            let content_type = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            let kind = PatchKind::from_content_type(content_type)?;
            if kind == PatchKind::Apply {
                return Err(ApiError::unsupported_media_type(content_type));
            }
            registry::patched(resource, &current_scale, kind, body)?
        }
        _ => return Err(ApiError::method_not_allowed(method.as_str())),
    };
    let replicas = wanted
        .pointer("/spec/replicas")
        .cloned()
        .unwrap_or(serde_json::json!(0));
    let patch = serde_json::json!({"spec": {"replicas": replicas}});
    let response = write(
        shared,
        address,
        params,
        headers,
        dry_run,
        WriteBody::Patch(PatchKind::Merge, patch.to_string().into_bytes()),
    )
    .await?;
    let (parts, body) = response.into_parts();
    let bytes = to_bytes(body, MAX_BODY_BYTES)
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let written: Value =
        serde_json::from_slice(&bytes).map_err(|e| ApiError::internal(e.to_string()))?;
    Ok((parts.status, axum::Json(scale_of(&written))).into_response())
}

/// A create, replace, patch or apply, through admission.
async fn write(
    shared: &Arc<Shared>,
    address: &Address,
    params: &Params,
    headers: &HeaderMap,
    dry_run: bool,
    body: WriteBody,
) -> Result<Response, ApiError> {
    let manager = manager_of(params, headers);
    let request = WriteRequest {
        resource: address.resource,
        namespace: address.namespace.as_deref(),
        name: address.name.as_deref(),
        target: address.target,
        writer: Writer {
            manager: &manager,
            dry_run,
        },
        field_manager: params.field_manager.as_deref(),
        field_validation: params.field_validation.as_deref(),
        user: UserInfo::from_headers(headers, &shared.config()),
        body,
    };
    let written = admission::write(shared, &request).await?;
    let code = if written.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let mut response = json_response(code, &written.object);
    for warning in &written.warnings {
        if let Ok(value) = header::HeaderValue::from_str(&admission::warning_header(warning)) {
            response.headers_mut().append(header::WARNING, value);
        }
    }
    Ok(response)
}

fn json_response(code: StatusCode, body: &Value) -> Response {
    (code, axum::Json(body)).into_response()
}
