//! Shared helpers of the integration tests: fixtures, the admission router in-process, and
//! the real binary.

#![allow(dead_code)]

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use prometheus_client::registry::Registry;
use serde_json::Value;
use stateful_admission::admission::Policy;
use stateful_admission::cluster::ClusterView;
use stateful_admission::server::metrics::Metrics;
use stateful_admission::server::routes::{self, AdmissionState};
use tower::ServiceExt;

/// Path of a file under `tests/fixtures/`.
pub fn fixture_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// A JSON fixture under `tests/fixtures/`.
pub fn fixture(name: &str) -> Value {
    let path = fixture_path(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The admission router as `serve` builds it, on the given view and policy.
pub fn app(view: ClusterView, policy: Policy) -> Router {
    let mut registry = Registry::default();
    let metrics = Arc::new(Metrics::register(&mut registry));
    routes::router(Arc::new(AdmissionState::new(view, policy, metrics)))
}

/// The router with a stand-in evaluator, and its metrics registry.
pub fn app_with(evaluator: routes::Evaluator) -> (Router, Arc<Registry>) {
    let mut registry = Registry::default();
    let metrics = Arc::new(Metrics::register(&mut registry));
    let mut state = AdmissionState::new(ClusterView::empty(), Policy::default(), metrics);
    state.evaluator = evaluator;
    (routes::router(Arc::new(state)), Arc::new(registry))
}

/// Sends raw bytes with a content type; returns the status and the body bytes.
pub async fn post_raw(
    app: &Router,
    path: &str,
    content_type: Option<&str>,
    body: Vec<u8>,
) -> (StatusCode, Vec<u8>) {
    let mut req = Request::post(path);
    if let Some(ct) = content_type {
        req = req.header("content-type", ct);
    }
    let req = req.body(Body::from(body)).expect("request");
    let resp = app.clone().oneshot(req).await.expect("router answers");
    let status = resp.status();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes()
        .to_vec();
    (status, bytes)
}

/// POSTs an AdmissionReview as the apiserver does (with `?timeout=5s`); returns the status
/// and the JSON body.
pub async fn post_review(app: &Router, endpoint: &str, review: &Value) -> (StatusCode, Value) {
    let path = format!("{endpoint}?timeout=5s");
    let (status, bytes) = post_raw(
        app,
        &path,
        Some("application/json"),
        serde_json::to_vec(review).expect("serialise"),
    )
    .await;
    let body = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
        panic!(
            "response is not JSON ({e}): {}",
            String::from_utf8_lossy(&bytes)
        )
    });
    (status, body)
}

/// The `response` of a review answered with HTTP 200.
pub async fn review_response(app: &Router, endpoint: &str, review: &Value) -> Value {
    let (status, body) = post_review(app, endpoint, review).await;
    assert_eq!(status, StatusCode::OK, "body: {body}");
    body["response"].clone()
}

/// Output of one run of the real binary.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", self.stdout))
    }
}

/// Runs the binary with `args` and extra environment variables.
pub fn run_binary_with_env(args: &[&str], env: &[(&str, &str)]) -> Run {
    run(args, None, env)
}

/// Runs the binary with `args`, feeding `stdin` when given.
pub fn run_binary(args: &[&str], stdin: Option<&[u8]>) -> Run {
    run(args, stdin, &[])
}

fn run(args: &[&str], stdin: Option<&[u8]>, env: &[(&str, &str)]) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_stateful-admission"))
        .args(args)
        .envs(env.iter().copied())
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("binary starts");
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().expect("stdin");
        pipe.write_all(input).expect("write stdin");
    }
    let out = child.wait_with_output().expect("binary ends");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A temporary file with `content`, kept until the handle drops.
pub fn temp_file(suffix: &str, content: &[u8]) -> tempfile::NamedTempFile {
    let mut file = tempfile::Builder::new()
        .suffix(suffix)
        .tempfile()
        .expect("temp file");
    file.write_all(content).expect("write temp file");
    file
}

/// The JSON patch of an admission response: a base64 string on the wire, with
/// `patchType: JSONPatch`. No patch field means an empty patch.
pub fn patch_of(response: &Value) -> Value {
    use base64::Engine as _;
    match response.get("patch") {
        None | Some(Value::Null) => serde_json::json!([]),
        Some(Value::String(text)) => {
            assert_eq!(response["patchType"], "JSONPatch", "{response}");
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(text)
                .unwrap_or_else(|e| panic!("patch is not base64 ({e}): {text}"));
            serde_json::from_slice(&bytes).expect("patch is JSON")
        }
        Some(other) => panic!("patch must be a base64 string, got {other}"),
    }
}

/// What the capabilities say when the apiserver's `MaxUnavailableStatefulSet` gate is `gate`
/// (learned by a probe; unknown for `Unknown`).
pub fn capabilities_with_gate(
    gate: stateful_admission::admission::GateStatus,
) -> stateful_admission::capabilities::Capabilities {
    use stateful_admission::admission::GateStatus;
    use stateful_admission::capabilities::{Capabilities, Learned, Name, Value};
    let mut capabilities = Capabilities::default();
    let value = match gate {
        GateStatus::Enabled => Value::Kept,
        GateStatus::Disabled => Value::Dropped,
        GateStatus::Unknown => return capabilities,
    };
    capabilities.set(Name::MaxUnavailable, Learned::probed(value, "a test"));
    capabilities
}
