//! The real binary over real TLS on loopback: HTTP/1.1 and HTTP/2 by ALPN, certificate
//! rotation by a Secret-volume symlink swap under load, SIGTERM drain, startup errors.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use serde_json::Value;
use stateful_admission::certs;

use crate::common::{fixture, fixture_path, temp_file};

/// A running `serve` process, killed on drop.
pub(crate) struct Served {
    child: Child,
    addr: String,
    probe_addr: String,
    stderr: mpsc::Receiver<String>,
    /// What the process wrote before it listened.
    startup: Vec<String>,
}

impl Served {
    pub(crate) fn start(args: &[&str]) -> Served {
        Self::start_with_env(args, &[])
    }

    pub(crate) fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Served {
        Self::start_binary(env!("CARGO_BIN_EXE_stateful-admission"), args, env)
    }

    /// [`Self::start_with_env`] with another build of the binary (a benchmark's baseline).
    pub(crate) fn start_binary(binary: &str, args: &[&str], env: &[(&str, &str)]) -> Served {
        let mut child = Command::new(binary)
            .envs(env.iter().copied())
            .args([
                "serve",
                "--addr",
                "127.0.0.1:0",
                "--probe-addr",
                "127.0.0.1:0",
                "--log-format",
                "json",
            ])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("binary starts");
        let stderr = child.stderr.take();
        let (tx, rx) = mpsc::channel();
        // Owned from here on, so that a failed start still kills and reaps the process.
        let mut served = Served {
            child,
            addr: String::new(),
            probe_addr: String::new(),
            stderr: rx,
            startup: Vec::new(),
        };
        let stderr = stderr.expect("stderr is piped");
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let line = served
                .stderr
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .expect("the server logs that it listens");
            served.startup.push(line.clone());
            let Ok(event) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if event["fields"]["message"] == "webhook listening" {
                let field = |k: &str| {
                    event["fields"][k]
                        .as_str()
                        .expect("address field")
                        .to_owned()
                };
                served.addr = field("addr");
                served.probe_addr = field("probe_addr");
                return served;
            }
        }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("https://localhost:{}{path}", port(&self.addr))
    }

    pub(crate) fn probe_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.probe_addr)
    }

    pub(crate) fn probe(&self, path: &str) -> u16 {
        let url = format!("http://{}{path}", self.probe_addr);
        reqwest::blocking_get_status(&url)
    }

    pub(crate) fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success());
    }

    pub(crate) fn wait_exit(&mut self, within: Duration) -> Option<i32> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The lines written before the listener was bound, that one included.
    pub(crate) fn startup_logs(&self) -> &[String] {
        &self.startup
    }

    pub(crate) fn logs(&self) -> Vec<String> {
        self.stderr.try_iter().collect()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn port(addr: &str) -> &str {
    addr.rsplit(':').next().expect("port")
}

mod reqwest {
    pub use ::reqwest::*;

    /// A plain GET on the probe port from a blocking context.
    pub fn blocking_get_status(url: &str) -> u16 {
        let url = url.to_owned();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                ::reqwest::get(&url)
                    .await
                    .map(|r| r.status().as_u16())
                    .unwrap_or(0)
            })
        })
        .join()
        .expect("probe thread")
    }
}

/// A client that trusts only the given CAs; `fresh` disables connection reuse so that every
/// request makes a new TLS handshake.
fn client(cas: &[&Path], http1_only: bool, fresh: bool) -> reqwest::Client {
    let mut builder = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .timeout(Duration::from_secs(10));
    for ca in cas {
        let pem = std::fs::read(ca).expect("read CA");
        builder =
            builder.add_root_certificate(reqwest::Certificate::from_pem(&pem).expect("CA PEM"));
    }
    if http1_only {
        builder = builder.http1_only();
    }
    if fresh {
        builder = builder.pool_max_idle_per_host(0);
    }
    builder.build().expect("client")
}

fn review_body() -> Vec<u8> {
    serde_json::to_vec(&fixture("apiserver/pvc-create.validate.json")).expect("json")
}

async fn post(
    client: &reqwest::Client,
    url: &str,
    body: Vec<u8>,
) -> Result<(reqwest::Version, Value), reqwest::Error> {
    let resp = client
        .post(url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await?
        .error_for_status()?;
    let version = resp.version();
    Ok((version, resp.json().await?))
}

fn state_file() -> PathBuf {
    fixture_path("state/empty.yaml")
}

#[tokio::test(flavor = "multi_thread")]
async fn serves_http1_and_http2_over_tls() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dir_arg = dir.path().to_str().expect("utf-8 path");
    let served = Served::start(&[
        "--self-signed",
        "--self-signed-dir",
        dir_arg,
        "--state",
        state_file().to_str().expect("path"),
    ]);
    let ca = dir.path().join("ca.crt");
    assert_eq!(served.probe("/healthz"), 200);
    assert_eq!(served.probe("/readyz"), 200);

    for (http1_only, want) in [
        (true, reqwest::Version::HTTP_11),
        (false, reqwest::Version::HTTP_2),
    ] {
        let c = client(&[&ca], http1_only, false);
        let (version, body) = post(&c, &served.url("/validate?timeout=5s"), review_body())
            .await
            .expect("request succeeds");
        assert_eq!(version, want);
        assert_eq!(
            body["response"]["uid"],
            "4c114ae9-dfc0-44f7-91c9-cc0ae1fcaf46"
        );
        assert_eq!(body["response"]["allowed"], true);
    }

    let metrics = reqwest::get(format!("http://{}/metrics", served.probe_addr))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(
        metrics.contains("stateful_admission_admission_requests_total{endpoint=\"validate\""),
        "{metrics}"
    );
}

/// Lays out certificates like a mounted Secret: `tls.crt -> ..data/tls.crt`,
/// `..data -> ..<version>`, and swaps versions with an atomic rename of `..data`.
struct SecretVolume {
    dir: PathBuf,
}

impl SecretVolume {
    fn new(dir: &Path, first: &certs::GeneratedCerts) -> SecretVolume {
        let vol = SecretVolume {
            dir: dir.to_owned(),
        };
        vol.write_version("..v1", &first.cert_pem, &first.key_pem);
        std::os::unix::fs::symlink("..v1", dir.join("..data")).expect("link ..data");
        for f in ["tls.crt", "tls.key"] {
            std::os::unix::fs::symlink(format!("..data/{f}"), dir.join(f)).expect("link file");
        }
        vol
    }

    fn write_version(&self, version: &str, cert: &str, key: &str) {
        let v = self.dir.join(version);
        std::fs::create_dir(&v).expect("version dir");
        std::fs::write(v.join("tls.crt"), cert).expect("cert");
        std::fs::write(v.join("tls.key"), key).expect("key");
    }

    fn swap_to(&self, version: &str, cert: &str, key: &str) {
        self.write_version(version, cert, key);
        let tmp = self.dir.join("..data_tmp");
        std::os::unix::fs::symlink(version, &tmp).expect("link tmp");
        std::fs::rename(&tmp, self.dir.join("..data")).expect("atomic swap");
    }

    fn cert(&self) -> PathBuf {
        self.dir.join("tls.crt")
    }

    fn key(&self) -> PathBuf {
        self.dir.join("tls.key")
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_symlink_swapped_certificate_is_served_with_no_failed_request() {
    let names = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
    let first = certs::generate("first", &names, 1, 1).expect("certs");
    let second = certs::generate("second", &names, 1, 1).expect("certs");
    let cas = tempfile::tempdir().expect("tempdir");
    let (ca1, ca2) = (cas.path().join("ca1.crt"), cas.path().join("ca2.crt"));
    std::fs::write(&ca1, &first.ca_cert_pem).expect("ca1");
    std::fs::write(&ca2, &second.ca_cert_pem).expect("ca2");

    let volume_dir = tempfile::tempdir().expect("tempdir");
    let volume = SecretVolume::new(volume_dir.path(), &first);
    let served = Served::start(&[
        "--tls-cert",
        volume.cert().to_str().expect("path"),
        "--tls-key",
        volume.key().to_str().expect("path"),
        "--cert-poll-interval",
        "1s",
        "--state",
        state_file().to_str().expect("path"),
    ]);
    let url = served.url("/validate");

    // Only the second CA: fails until the new certificate is served.
    let second_only = client(&[&ca2], false, true);
    assert!(post(&second_only, &url, review_body()).await.is_err());

    // A client trusting both keeps sending, on reused and on new connections, throughout.
    let failures = Arc::new(AtomicUsize::new(0));
    let sent = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut senders = Vec::new();
    for fresh in [false, true] {
        let (failures, sent, stop, url) =
            (failures.clone(), sent.clone(), stop.clone(), url.clone());
        let c = client(&[&ca1, &ca2], false, fresh);
        senders.push(tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                if post(&c, &url, review_body()).await.is_err() {
                    failures.fetch_add(1, Ordering::SeqCst);
                }
                sent.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    volume.swap_to("..v2", &second.cert_pem, &second.key_pem);

    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if post(&second_only, &url, review_body()).await.is_ok() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "new certificate not served within 10s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A broken pair (certificate of one, key of another) is refused; the last good one stays.
    volume.swap_to("..v3", &first.cert_pem, &second.key_pem);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    post(&second_only, &url, review_body())
        .await
        .expect("the last good certificate is still served");

    stop.store(true, Ordering::SeqCst);
    for s in senders {
        s.await.expect("sender");
    }
    assert!(sent.load(Ordering::SeqCst) > 20, "the load loop ran");
    assert_eq!(
        failures.load(Ordering::SeqCst),
        0,
        "requests failed during rotation"
    );
    let logs = served.logs().join("\n");
    assert!(logs.contains("serving certificate reloaded"), "{logs}");
    assert!(logs.contains("new serving certificate rejected"), "{logs}");
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_turns_readiness_off_finishes_in_flight_requests_and_exits_zero() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut served = Served::start(&[
        "--self-signed",
        "--self-signed-dir",
        dir.path().to_str().expect("path"),
        "--state",
        state_file().to_str().expect("path"),
        "--shutdown-delay",
        "1s",
    ]);
    let ca = dir.path().join("ca.crt");
    let c = client(&[&ca], true, false);
    let url = served.url("/validate");

    // A request whose body is still arriving when the signal comes.
    let body = review_body();
    let (first, rest) = body.split_at(body.len() / 2);
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(2);
    tx.send(Ok(first.to_vec())).await.expect("first half");
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    let in_flight = tokio::spawn({
        let c = c.clone();
        let url = url.clone();
        async move {
            c.post(&url)
                .header("content-type", "application/json")
                .body(reqwest::Body::wrap_stream(stream))
                .send()
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    served.terminate();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        served.probe("/readyz"),
        503,
        "readiness must turn off on SIGTERM"
    );
    assert_eq!(served.probe("/healthz"), 200);

    // Past the delay the listener closes; the accepted request still completes.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    tx.send(Ok(rest.to_vec())).await.expect("rest");
    drop(tx);
    let resp = in_flight
        .await
        .expect("task")
        .expect("in-flight request answered");
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.expect("json");
    assert_eq!(
        body["response"]["uid"],
        "4c114ae9-dfc0-44f7-91c9-cc0ae1fcaf46"
    );

    assert_eq!(served.wait_exit(Duration::from_secs(10)), Some(0));
}

#[test]
fn a_state_file_that_does_not_parse_stops_serve_naming_file_and_document() {
    let bad = temp_file(".yaml", b"kind: Namespace\nmetadata: {name: a}\n---\nkind: StatefulSet\nmetadata: {name: web}\nspec: {replicas: many}\n");
    let path = bad.path().to_str().expect("path").to_owned();
    let run = crate::common::run_binary(
        &[
            "serve",
            "--self-signed",
            "--addr",
            "127.0.0.1:0",
            "--probe-addr",
            "127.0.0.1:0",
            "--state",
            &path,
        ],
        None,
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!(
            "state file {path}: document 2: StatefulSet \"web\""
        )),
        "{}",
        run.stderr
    );
}

#[test]
fn serve_without_a_certificate_source_is_a_usage_error_naming_all_three() {
    let run = crate::common::run_binary(&["serve", "--state", "x"], None);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    for way_out in [
        "--tls-cert",
        "--tls-key",
        "--self-signed",
        "--self-managed-certs",
    ] {
        assert!(run.stderr.contains(way_out), "{way_out}: {}", run.stderr);
    }
}

#[test]
fn help_shows_the_defaults() {
    let run = crate::common::run_binary(&["serve", "--help"], None);
    assert_eq!(run.code, 0);
    for want in [
        "0.0.0.0:8443",
        "0.0.0.0:8080",
        "STATEFUL_ADMISSION_ADDR",
        "--self-signed",
        "--state",
    ] {
        assert!(
            run.stdout.contains(want),
            "missing {want} in:\n{}",
            run.stdout
        );
    }
}

/// An HTTP/2-only (prior knowledge over TLS) or HTTP/1.1-only client.
fn client_for(ca: &Path, version: reqwest::Version) -> reqwest::Client {
    let pem = std::fs::read(ca).expect("read CA");
    let builder = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(&pem).expect("CA PEM"))
        .timeout(Duration::from_secs(20));
    let builder = if version == reqwest::Version::HTTP_2 {
        builder.http2_prior_knowledge()
    } else {
        builder.http1_only()
    };
    builder.build().expect("client")
}

/// A body the server answers before reading it: too large (declared or not), or sent with
/// the wrong content type.
#[derive(Debug, Clone, Copy)]
enum EarlyError {
    TooLargeDeclared,
    TooLargeStreamed,
    WrongContentType,
}

impl EarlyError {
    const ALL: [EarlyError; 3] = [
        EarlyError::TooLargeDeclared,
        EarlyError::TooLargeStreamed,
        EarlyError::WrongContentType,
    ];

    fn want(self) -> (u16, &'static str) {
        match self {
            EarlyError::TooLargeDeclared | EarlyError::TooLargeStreamed => {
                (413, "request body too large")
            }
            EarlyError::WrongContentType => (415, "content type must be application/json"),
        }
    }

    fn content_type(self) -> &'static str {
        match self {
            EarlyError::WrongContentType => "text/plain",
            _ => "application/json",
        }
    }
}

const FOUR_MIB: usize = 4 * 1024 * 1024;

async fn send_early_error(
    c: &reqwest::Client,
    url: &str,
    case: EarlyError,
) -> Result<(reqwest::Version, u16, Value), reqwest::Error> {
    let request = c.post(url).header("content-type", case.content_type());
    let request = match case {
        EarlyError::TooLargeStreamed => {
            // No content-length: the server finds out only while reading.
            let chunks =
                (0..FOUR_MIB / (64 * 1024)).map(|_| Ok::<_, std::io::Error>(vec![b' '; 64 * 1024]));
            request.body(reqwest::Body::wrap_stream(futures::stream::iter(chunks)))
        }
        _ => request.body(vec![b' '; FOUR_MIB]),
    };
    let resp = request.send().await?;
    let (version, status) = (resp.version(), resp.status().as_u16());
    Ok((version, status, resp.json().await?))
}

#[tokio::test(flavor = "multi_thread")]
async fn early_error_replies_are_readable_over_http2_and_http1() {
    let dir = tempfile::tempdir().expect("tempdir");
    let served = Served::start(&[
        "--self-signed",
        "--self-signed-dir",
        dir.path().to_str().expect("path"),
        "--state",
        state_file().to_str().expect("path"),
    ]);
    let ca = dir.path().join("ca.crt");
    let url = served.url("/mutate");
    for version in [reqwest::Version::HTTP_2, reqwest::Version::HTTP_11] {
        let c = client_for(&ca, version);
        for case in EarlyError::ALL {
            let (want_status, want_error) = case.want();
            let (got_version, status, body) = send_early_error(&c, &url, case)
                .await
                .unwrap_or_else(|e| panic!("{version:?} {case:?}: {e:?}"));
            assert_eq!(got_version, version, "{case:?}");
            assert_eq!(status, want_status, "{version:?} {case:?}: {body}");
            assert_eq!(body["error"], want_error, "{version:?} {case:?}");
        }
        // The connection (or, over HTTP/2, the same connection) still serves a review.
        let resp = c
            .post(&url)
            .header("content-type", "application/json")
            .body(review_body())
            .send()
            .await
            .expect("a review after the early errors");
        assert_eq!(resp.status(), 200, "{version:?}");
    }
}

/// The exact command line that used to print `Stream error in the HTTP/2 framing layer`:
/// curl's default HTTP/2 with a body it is still sending when the answer comes. Skipped
/// (passes with a note) where curl is not installed.
#[test]
fn curl_gets_early_error_replies_over_http2() {
    if Command::new("curl").arg("--version").output().is_err() {
        eprintln!("curl not found; skipping the curl HTTP/2 early-reply check");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let served = Served::start(&[
        "--self-signed",
        "--self-signed-dir",
        dir.path().to_str().expect("path"),
        "--state",
        state_file().to_str().expect("path"),
    ]);
    let ca = dir.path().join("ca.crt");
    let big = temp_file(".json", &vec![b' '; FOUR_MIB]);
    let url = served.url("/mutate");
    for (http, want_version) in [("--http2", "2"), ("--http1.1", "1.1")] {
        for (content_type, want) in [
            ("application/json", "413 request body too large"),
            ("text/plain", "415 content type must be application/json"),
        ] {
            let out = Command::new("curl")
                .args([
                    "--silent",
                    "--show-error",
                    http,
                    "--cacert",
                    ca.to_str().expect("path"),
                    "--header",
                    &format!("content-type: {content_type}"),
                    "--data-binary",
                    &format!("@{}", big.path().to_str().expect("path")),
                    "--write-out",
                    "\n%{http_version} %{http_code}",
                    &url,
                ])
                .output()
                .expect("curl runs");
            let stdout = String::from_utf8_lossy(&out.stdout);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                out.status.success(),
                "{http} {content_type}: curl failed ({:?}): {stderr}",
                out.status.code()
            );
            let (body, status_line) = stdout.rsplit_once('\n').expect("write-out line");
            let (version, code) = status_line.split_once(' ').expect("version and code");
            let error: Value = serde_json::from_str(body).expect("JSON error body");
            assert_eq!(version, want_version, "{http} {content_type}");
            assert_eq!(
                format!("{code} {}", error["error"].as_str().unwrap_or("")),
                want,
                "{http} {content_type}"
            );
        }
    }
}

/// An UPDATE of an `InPlace` set of three replicas that changes its image and grows its claims.
fn coordinated_review() -> Value {
    let set = |image: &str, size: &str| {
        serde_json::json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "web", "namespace": "db", "uid": "5b1f0e4c-0000-4c57-9d0e-1d2b3c4d5e6f",
                         "annotations": {"stateful-admission.io/volume-claim-update-policy": "InPlace"}},
            "spec": {"replicas": 3, "serviceName": "web",
                     "selector": {"matchLabels": {"app": "web"}},
                     "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "db", "image": image}]}},
                     "volumeClaimTemplates": [{"metadata": {"name": "data"},
                         "spec": {"accessModes": ["ReadWriteOnce"],
                                  "resources": {"requests": {"storage": size}}}}]}})
    };
    serde_json::json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "0c6f1c1e-7d0a-4a8e-9c55-3f7b1d1f0a11",
            "kind": {"group": "apps", "version": "v1", "kind": "StatefulSet"},
            "resource": {"group": "apps", "version": "v1", "resource": "statefulsets"},
            "requestKind": {"group": "apps", "version": "v1", "kind": "StatefulSet"},
            "requestResource": {"group": "apps", "version": "v1", "resource": "statefulsets"},
            "name": "web", "namespace": "db", "operation": "UPDATE",
            "userInfo": {"username": "alice"},
            "object": set("db:2", "2Gi"), "oldObject": set("db:1", "1Gi"),
            "dryRun": false, "options": {"apiVersion": "meta.k8s.io/v1", "kind": "UpdateOptions"}}})
}

/// The coordinated rollout's hold is started only where this process's controller lowers it:
/// `serve --state` (no controller) records the claim change and holds nothing; the offline
/// `review` shows what an install does, the hold included.
#[tokio::test(flavor = "multi_thread")]
async fn a_hold_is_started_only_where_a_controller_lowers_it() {
    let review = coordinated_review();
    let dir = tempfile::tempdir().expect("tempdir");
    let served = Served::start(&[
        "--self-signed",
        "--self-signed-dir",
        dir.path().to_str().expect("utf-8 path"),
        "--state",
        state_file().to_str().expect("path"),
    ]);
    let c = client(&[&dir.path().join("ca.crt")], false, false);
    let (_, body) = post(
        &c,
        &served.url("/mutate?timeout=5s"),
        serde_json::to_vec(&review).expect("json"),
    )
    .await
    .expect("request succeeds");
    assert_eq!(body["response"]["allowed"], true, "{body}");
    let patch = body["response"]["patch"].as_str().expect("a patch");
    let patch = String::from_utf8(
        base64::Engine::decode(&base64::engine::general_purpose::STANDARD, patch).expect("base64"),
    )
    .expect("utf-8");
    assert!(
        patch.contains("desired-volume-claim-templates"),
        "the change is recorded: {patch}"
    );
    assert!(
        !patch.contains("rollout-hold") && !patch.contains("partition"),
        "no hold without a controller: {patch}"
    );

    let file = temp_file(".json", &serde_json::to_vec(&review).expect("json"));
    let out = crate::common::run_binary(
        &[
            "review",
            "--state",
            state_file().to_str().expect("path"),
            "--patch",
            "json",
            file.path().to_str().expect("path"),
        ],
        None,
    );
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("stateful-admission.io~1rollout-hold"),
        "{}",
        out.stdout
    );
}
