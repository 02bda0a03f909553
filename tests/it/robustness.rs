//! CI-sized versions of the load and fault properties of scripts/load.sh: no numbers, only
//! behaviours (the numbers are in BENCHMARKS.md).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use prometheus_client::registry::Registry;
use serde_json::Value;
use stateful_admission::admission::Policy;
use stateful_admission::cluster::ClusterView;
use stateful_admission::server::metrics::Metrics;
use stateful_admission::server::routes::{self, AdmissionState, BodyBudget};
use tower::ServiceExt;

use crate::common::{fixture, post_raw};
use crate::serve_tls::Served;

fn state_with_budget(bytes: u32) -> Arc<AdmissionState> {
    let mut registry = Registry::default();
    let metrics = Arc::new(Metrics::register(&mut registry));
    let mut state = AdmissionState::new(ClusterView::empty(), Policy::default(), metrics);
    state.body_budget = Arc::new(BodyBudget::new(bytes));
    Arc::new(state)
}

fn review_request(body: &[u8]) -> Request<Body> {
    Request::post("/validate")
        .header("content-type", "application/json")
        .header("content-length", body.len().to_string())
        .body(Body::from(body.to_vec()))
        .expect("request")
}

#[tokio::test]
async fn a_review_waits_for_body_budget_and_is_answered_once_it_frees() {
    let body = serde_json::to_vec(&fixture("apiserver/pvc-create.validate.json")).expect("json");
    let state = state_with_budget(64 * 1024);
    let app = routes::router(state.clone());

    // Another request holds the whole budget: this one must not be read or answered yet.
    let held = state.body_budget.reserve(64 * 1024).await;
    let mut pending = tokio::spawn(app.clone().oneshot(review_request(&body)));
    let early = tokio::time::timeout(Duration::from_millis(200), &mut pending).await;
    assert!(early.is_err(), "answered while the budget was exhausted");

    drop(held);
    let response = pending.await.expect("task").expect("answer");
    assert_eq!(response.status(), StatusCode::OK);
    // Its share is returned after the answer.
    assert_eq!(state.body_budget.available(), 64 * 1024);
}

#[tokio::test]
async fn a_body_of_unknown_length_reserves_the_whole_cap_and_still_gets_413_past_it() {
    let state = state_with_budget(routes::MAX_BODY_BYTES as u32);
    let app = routes::router(state.clone());
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        (0..4).map(|_| Ok(vec![b' '; 1024 * 1024])).collect();
    let req = Request::post("/mutate")
        .header("content-type", "application/json")
        .body(Body::from_stream(futures::stream::iter(chunks)))
        .expect("request");
    let response = app.oneshot(req).await.expect("answer");
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(state.body_budget.available(), routes::MAX_BODY_BYTES);
}

#[tokio::test]
async fn an_object_without_metadata_is_400_naming_the_field() {
    let app = crate::common::app(ClusterView::empty(), Policy::default());
    let mut review = fixture("apiserver/pvc-create-by-statefulset-controller.mutate.json");
    review["request"]["object"] = serde_json::json!({"spec": {}});
    let body = serde_json::to_vec(&review).expect("json");
    let (status, bytes) = post_raw(&app, "/mutate", Some("application/json"), body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let err: Value = serde_json::from_slice(&bytes).expect("JSON error");
    assert_eq!(
        err["error"],
        "malformed AdmissionReview: request.object: metadata must be an object"
    );
}

/// Reads until the peer closes; true when it did (EOF or reset) within `limit`.
fn closed_by_peer(stream: &mut TcpStream, limit: Duration) -> bool {
    stream.set_read_timeout(Some(limit)).expect("timeout");
    let mut buf = [0u8; 512];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return false;
            }
            Err(_) => return true,
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn silent_and_half_finished_connections_are_dropped_and_slots_come_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dir_arg = dir.path().to_string_lossy().into_owned();
    let served = Served::start(&[
        "--self-signed",
        "--self-signed-dir",
        &dir_arg,
        "--state",
        &crate::common::fixture_path("state/empty.yaml").to_string_lossy(),
        "--handshake-timeout",
        "1s",
        "--max-connections",
        "4",
    ]);
    let url = served.url("/validate");
    let port = url
        .rsplit(':')
        .next()
        .and_then(|p| p.split('/').next())
        .expect("port");
    let addr = format!("127.0.0.1:{port}");
    // More silent peers than slots: each is dropped after the handshake timeout...
    let mut silent: Vec<TcpStream> = (0..6)
        .map(|_| TcpStream::connect(&addr).expect("connect"))
        .collect();
    // ...and so is one that starts a TLS hello and stops half-way.
    let mut partial = TcpStream::connect(&addr).expect("connect");
    partial
        .write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
        .expect("write");
    tokio::task::spawn_blocking(move || {
        for (i, s) in silent.iter_mut().enumerate() {
            assert!(
                closed_by_peer(s, Duration::from_secs(30)),
                "silent peer {i} still open"
            );
        }
        assert!(
            closed_by_peer(&mut partial, Duration::from_secs(30)),
            "partial hello still open"
        );
    })
    .await
    .expect("peers closed");
    // The slots are free again: a real client is served.
    let client = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .timeout(Duration::from_secs(20))
        .build()
        .expect("client");
    let body = serde_json::to_vec(&fixture("apiserver/pvc-create.validate.json")).expect("json");
    let response = client
        .post(&url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("served after the silent peers are gone");
    assert_eq!(response.status(), StatusCode::OK);
}

/// The binary's allocator returns freed memory (src/allocator.rs): jemalloc reports the
/// options it runs with when asked to print its statistics at exit.
#[test]
fn the_binary_runs_jemalloc_with_background_purging() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_stateful-admission"))
        .arg("--help")
        .env("_RJEM_MALLOC_CONF", "stats_print:true")
        .output()
        .expect("binary runs");
    assert!(out.status.success());
    let stats = String::from_utf8_lossy(&out.stderr);
    for option in [
        "opt.background_thread: true",
        "opt.dirty_decay_ms: 1000",
        "opt.muzzy_decay_ms: 0",
        "opt.narenas: 1",
    ] {
        assert!(
            stats.contains(option),
            "{option} missing from:\n{stats:.2000}"
        );
    }
}

/// A body of `chunks` chunks of 64 KiB (then, with `stall`, one that never comes), and how
/// many bytes of it the server has taken.
fn counted_body(chunks: usize, stall: bool) -> (Body, Arc<std::sync::atomic::AtomicUsize>) {
    use futures::StreamExt;
    let taken = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = taken.clone();
    let data = futures::stream::iter((0..chunks).map(|_| vec![b' '; 64 * 1024])).map(move |c| {
        counter.fetch_add(c.len(), std::sync::atomic::Ordering::SeqCst);
        Ok::<_, std::io::Error>(c)
    });
    let body = if stall {
        Body::from_stream(data.chain(futures::stream::pending()))
    } else {
        Body::from_stream(data)
    };
    (body, taken)
}

fn state_with_drain(bytes: usize, timeout: Duration) -> Arc<AdmissionState> {
    let mut registry = Registry::default();
    let metrics = Arc::new(Metrics::register(&mut registry));
    let mut state = AdmissionState::new(ClusterView::empty(), Policy::default(), metrics);
    state.early_reply_drain = routes::EarlyReplyDrain { bytes, timeout };
    Arc::new(state)
}

/// One request answered early: what it sends, and what the server must take of its body.
struct DrainCase {
    what: &'static str,
    content_type: &'static str,
    declared: Option<usize>,
    /// 64 KiB chunks the client has to send.
    chunks: usize,
    expect_continue: bool,
    status: StatusCode,
    taken: std::ops::RangeInclusive<usize>,
}

#[tokio::test]
async fn an_early_error_reply_reads_the_rest_of_the_body_within_its_bounds() {
    use std::sync::atomic::Ordering;
    const MIB: usize = 1024 * 1024;
    const CHUNK: usize = 64 * 1024;
    let app = routes::router(state_with_drain(8 * MIB, Duration::from_secs(5)));
    let case = |what, content_type, declared, chunks, status, taken| DrainCase {
        what,
        content_type,
        declared,
        chunks,
        expect_continue: false,
        status,
        taken,
    };
    let (json, text) = ("application/json", "text/plain");
    let (too_large, wrong_type) = (
        StatusCode::PAYLOAD_TOO_LARGE,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
    );
    let cases = [
        case(
            "wrong type, 4 MiB: read to the end",
            text,
            None,
            64,
            wrong_type,
            4 * MIB..=4 * MIB,
        ),
        case(
            "4 MiB declared: read to the end",
            json,
            Some(4 * MIB),
            64,
            too_large,
            4 * MIB..=4 * MIB,
        ),
        case(
            "4 MiB undeclared: the cap, then the rest",
            json,
            None,
            64,
            too_large,
            4 * MIB..=4 * MIB,
        ),
        case(
            "declared past the drain bound: nothing read",
            json,
            Some(64 * MIB),
            1024,
            too_large,
            0..=0,
        ),
        case(
            "wrong type declared past the bound: nothing read",
            text,
            Some(64 * MIB),
            1024,
            wrong_type,
            0..=0,
        ),
        // The chunk that crosses the cap and the one that crosses the bound are taken.
        case(
            "undeclared past the bound: stops at it",
            json,
            None,
            1024,
            too_large,
            8 * MIB..=8 * MIB + 2 * CHUNK,
        ),
        DrainCase {
            expect_continue: true,
            ..case(
                "Expect: 100-continue: the client waits, nothing read",
                text,
                Some(4 * MIB),
                64,
                wrong_type,
                0..=0,
            )
        },
    ];
    for c in cases {
        let (body, counter) = counted_body(c.chunks, false);
        let mut req = Request::post("/mutate").header("content-type", c.content_type);
        if let Some(len) = c.declared {
            req = req.header("content-length", len.to_string());
        }
        if c.expect_continue {
            req = req.header("expect", "100-continue");
        }
        let response = app
            .clone()
            .oneshot(req.body(body).expect("request"))
            .await
            .expect("answer");
        assert_eq!(response.status(), c.status, "{}", c.what);
        let got = counter.load(Ordering::SeqCst);
        assert!(
            c.taken.contains(&got),
            "{}: took {got} bytes, want {:?}",
            c.what,
            c.taken
        );
    }
}

#[tokio::test]
async fn an_early_error_reply_waits_for_a_stalled_body_no_longer_than_the_drain_timeout() {
    let app = routes::router(state_with_drain(
        8 * 1024 * 1024,
        Duration::from_millis(300),
    ));
    for content_type in ["text/plain", "application/json"] {
        // 4 MiB (past the cap when it is JSON), then nothing more.
        let (body, _) = counted_body(64, true);
        let req = Request::post("/mutate")
            .header("content-type", content_type)
            .body(body)
            .expect("request");
        let started = std::time::Instant::now();
        let response = tokio::time::timeout(Duration::from_secs(5), app.clone().oneshot(req))
            .await
            .expect("answered without the rest of the body")
            .expect("answer");
        assert!(
            response.status() == StatusCode::UNSUPPORTED_MEDIA_TYPE
                || response.status() == StatusCode::PAYLOAD_TOO_LARGE,
            "{content_type}: {}",
            response.status()
        );
        assert!(
            started.elapsed() >= Duration::from_millis(300),
            "{content_type}: answered before the drain timeout"
        );
    }
}
