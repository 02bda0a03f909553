//! A kube client over a closure, for tests that need the API's answers without a server:
//! each request is answered by the closure at once, or never (a hung request), so that tests
//! run in paused time.

use std::sync::Arc;

use axum::http::{Method, Request, Response};
use http_body_util::BodyExt;
use kube::client::Body;
use serde_json::Value;
use tower::BoxError;

/// An answer: status code and JSON body, or `None` for a request that never returns.
pub(crate) type Answer = Option<(u16, Value)>;

/// A client whose every request `answer` answers from its method, path and body.
pub(crate) fn client(
    answer: impl Fn(&Method, &str, &[u8]) -> Answer + Send + Sync + 'static,
) -> kube::Client {
    let answer = Arc::new(answer);
    let service = tower::service_fn(move |request: Request<Body>| {
        let answer = answer.clone();
        async move {
            let (parts, body) = request.into_parts();
            let bytes = body.collect().await?.to_bytes();
            match answer(&parts.method, parts.uri.path(), &bytes) {
                Some((code, json)) => Response::builder()
                    .status(code)
                    .header("content-type", "application/json")
                    .body(Body::from(serde_json::to_vec(&json)?))
                    .map_err(BoxError::from),
                None => std::future::pending().await,
            }
        }
    });
    kube::Client::new(service, "default")
}
