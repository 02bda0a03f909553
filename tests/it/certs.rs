//! `stateful-admission certs generate`: the files it writes, their names, and a real TLS
//! handshake against `serve` that trusts only the generated CA, for every Service name.

use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use stateful_admission::certs::x509;

use crate::common::{run_binary, temp_file};

const SERVICE: &str = "stateful-admission";
const NAMESPACE: &str = "sa-system";

fn service_names() -> Vec<String> {
    vec![
        SERVICE.to_owned(),
        format!("{SERVICE}.{NAMESPACE}"),
        format!("{SERVICE}.{NAMESPACE}.svc"),
        format!("{SERVICE}.{NAMESPACE}.svc.cluster.local"),
    ]
}

fn generate(dir: &std::path::Path, extra: &[&str]) -> crate::common::Run {
    let out = dir.to_str().expect("utf-8 path");
    let mut args = vec![
        "certs",
        "generate",
        "--service",
        SERVICE,
        "--namespace",
        NAMESPACE,
        "--out",
        out,
    ];
    args.extend_from_slice(extra);
    run_binary(&args, None)
}

#[test]
fn generate_writes_ca_and_serving_certificate_for_service_names() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = generate(dir.path(), &[]);
    assert_eq!(run.code, 0, "stderr: {}", run.stderr);
    assert!(run.stdout.contains("tls.crt"), "{}", run.stdout);
    let read = |name: &str| std::fs::read(dir.path().join(name)).expect(name);

    let leaf = x509::parse_pem(&read("tls.crt")).expect("leaf parses");
    let ca = x509::parse_pem(&read("ca.crt")).expect("ca parses");
    assert_eq!(leaf.dns_names, service_names());
    assert_eq!(leaf.issuer, ca.subject, "leaf is issued by the CA");
    assert_ne!(ca.subject, leaf.subject);
    // Defaults: CA one year, leaf 90 days (plus the 5 minutes of backdating).
    assert_eq!(
        ca.lifetime(),
        time::Duration::days(365) + time::Duration::minutes(5)
    );
    assert_eq!(
        leaf.lifetime(),
        time::Duration::days(90) + time::Duration::minutes(5)
    );
    assert!(
        !dir.path().join("ca.key").exists(),
        "CA key only on request"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join("tls.key"))
            .expect("key")
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "key readable by the owner only");
    }
}

#[test]
fn generate_honours_lifetimes_and_ca_key_flag() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = generate(
        dir.path(),
        &["--ca-days", "30", "--days", "7", "--with-ca-key"],
    );
    assert_eq!(run.code, 0, "stderr: {}", run.stderr);
    let leaf =
        x509::parse_pem(&std::fs::read(dir.path().join("tls.crt")).expect("leaf")).expect("parses");
    assert_eq!(
        leaf.lifetime(),
        time::Duration::days(7) + time::Duration::minutes(5)
    );
    assert!(dir.path().join("ca.key").exists());
}

#[test]
fn generate_rejects_bad_input() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cases: Vec<(&str, Vec<&str>)> = vec![
        (
            "leaf longer than CA",
            vec!["--ca-days", "10", "--days", "20"],
        ),
        ("zero days", vec!["--days", "0"]),
        ("not a number", vec!["--days", "soon"]),
    ];
    for (name, extra) in cases {
        let run = generate(dir.path(), &extra);
        assert_eq!(run.code, 2, "{name}: {}", run.stderr);
        assert!(
            !dir.path().join("tls.crt").exists(),
            "{name}: nothing written"
        );
    }
    let missing = run_binary(
        &["certs", "generate", "--namespace", "x", "--out", "/tmp/x"],
        None,
    );
    assert_eq!(missing.code, 2);
    assert!(missing.stderr.contains("--service"), "{}", missing.stderr);
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

struct Serving(Child);

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn serve_with_generated_files_is_trusted_under_every_service_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = generate(dir.path(), &[]);
    assert_eq!(run.code, 0, "stderr: {}", run.stderr);
    let state = temp_file(
        ".yaml",
        b"apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata:\n  name: standard\nprovisioner: x\n",
    );
    let (port, probe_port) = (free_port(), free_port());
    let child = Command::new(env!("CARGO_BIN_EXE_stateful-admission"))
        .args(["serve", "--addr", &format!("127.0.0.1:{port}")])
        .args(["--probe-addr", &format!("127.0.0.1:{probe_port}")])
        .arg("--tls-cert")
        .arg(dir.path().join("tls.crt"))
        .arg("--tls-key")
        .arg(dir.path().join("tls.key"))
        .arg("--state")
        .arg(state.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("serve starts");
    let _serving = Serving(child);

    let plain = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let ready = plain
            .get(format!("http://127.0.0.1:{probe_port}/readyz"))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success());
        if ready {
            break;
        }
        assert!(Instant::now() < deadline, "serve did not become ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let ca = reqwest::Certificate::from_pem(&std::fs::read(dir.path().join("ca.crt")).expect("ca"))
        .expect("ca pem");
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
    let call = |host: String| {
        let ca = ca.clone();
        async move {
            let client = reqwest::Client::builder()
                .tls_built_in_root_certs(false)
                .add_root_certificate(ca)
                .resolve(&host, addr)
                .build()
                .expect("client");
            client
                .post(format!("https://{host}:{port}/mutate"))
                .header("content-type", "application/json")
                .body("{}")
                .send()
                .await
        }
    };
    for host in service_names() {
        let response = call(host.clone()).await;
        // The handshake succeeded; the empty body is answered with 400.
        let status = response
            .map(|r| r.status())
            .unwrap_or_else(|e| panic!("{host}: {e:?}"));
        assert_eq!(status, reqwest::StatusCode::BAD_REQUEST, "{host}");
    }
    // A name the certificate does not carry is refused by the client's verification.
    assert!(call(format!("other.{NAMESPACE}.svc")).await.is_err());
}
