//! Discovery (`/api`, `/api/v1`, `/apis`, `/apis/{group}`, `/apis/{group}/{version}`) and
//! OpenAPI (`/openapi/v2`, `/openapi/v3`, `/openapi/v3/{api/v1 | apis/{group}/{version}}`):
//! the documents of the configured profile ([`super::profile::Documents`]), answered the way
//! the apiserver shapes them (an unknown group or version is 404 like any unknown path).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::Shared;
use super::errors::ApiError;
use super::profile::Documents;

fn answer(document: Option<Value>) -> Response {
    match document {
        Some(document) => axum::Json(document).into_response(),
        None => ApiError::unknown_path().into_response(),
    }
}

fn documents(shared: &Shared) -> Documents {
    Documents::new(&shared.config())
}

pub(super) async fn core_versions(headers: HeaderMap) -> Response {
    let address = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("127.0.0.1");
    axum::Json(Documents::core_versions(address)).into_response()
}

pub(super) async fn core_resources(
    State(shared): State<Arc<Shared>>,
    Path(version): Path<String>,
) -> Response {
    answer(documents(&shared).resource_list("", &version))
}

pub(super) async fn groups(State(shared): State<Arc<Shared>>) -> Response {
    answer(Some(documents(&shared).group_list()))
}

pub(super) async fn group(
    State(shared): State<Arc<Shared>>,
    Path(group): Path<String>,
) -> Response {
    answer(documents(&shared).group(&group))
}

pub(super) async fn group_resources(
    State(shared): State<Arc<Shared>>,
    Path((group, version)): Path<(String, String)>,
) -> Response {
    answer(documents(&shared).resource_list(&group, &version))
}

pub(super) async fn openapi_v2(State(shared): State<Arc<Shared>>) -> Response {
    answer(Some(documents(&shared).openapi_v2()))
}

pub(super) async fn openapi_v3_index(State(shared): State<Arc<Shared>>) -> Response {
    answer(Some(documents(&shared).openapi_v3_index()))
}

pub(super) async fn openapi_v3_core(
    State(shared): State<Arc<Shared>>,
    Path(version): Path<String>,
) -> Response {
    answer(documents(&shared).openapi_v3(&format!("api/{version}")))
}

pub(super) async fn openapi_v3_group(
    State(shared): State<Arc<Shared>>,
    Path((group, version)): Path<(String, String)>,
) -> Response {
    answer(documents(&shared).openapi_v3(&format!("apis/{group}/{version}")))
}
