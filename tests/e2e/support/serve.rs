//! `stateful-admission serve` as the chart runs it (the Deployment's arguments), as a child
//! process on loopback with the release ServiceAccount's token, behind the front.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;

use super::Install;
use super::front::Front;

/// What a scenario changes about `serve`.
#[derive(Debug, Clone, Default)]
pub struct ServeOptions {
    /// `--flag=value` arguments that replace the chart's of the same flag, or are added.
    pub args: Vec<String>,
    /// Do not wait for `/readyz` (for a replica that is expected not to become ready soon).
    pub no_wait: bool,
    /// Not behind the front: the apiserver cannot reach this replica's webhook.
    pub unreachable: bool,
    /// The Lease identity (the pod name); by default a new one. The same identity as a killed
    /// replica's is a container restarted in the same pod: it takes its Lease back at once.
    pub identity: Option<String>,
}

impl ServeOptions {
    pub fn args(args: &[&str]) -> Self {
        Self {
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            ..Self::default()
        }
    }
}

/// A running `serve`. Killed (SIGKILL) when dropped.
pub struct Serve {
    pub identity: String,
    pub addr: SocketAddr,
    pub probe: SocketAddr,
    pub log: PathBuf,
    /// Whether this replica runs the controller (not `--controller=false`).
    pub controller: bool,
    id: u64,
    child: Arc<Mutex<Option<Child>>>,
    front: Front,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The release binary: `cargo build --release` must have built it from this tree (the suite
/// runs `serve` as shipped). `E2E_SERVE_BIN` names another.
///
/// Fresh means newer than every source it is built from (`src/`, `Cargo.toml`, `Cargo.lock`);
/// the test executables are not a measure, since `cargo test` builds them after the release
/// build that `.ci/run` and README.md run first.
pub fn binary() -> anyhow::Result<PathBuf> {
    if let Some(path) = std::env::var_os("E2E_SERVE_BIN") {
        return Ok(PathBuf::from(path));
    }
    // The test executable's own build of the CLI tells which target directory is ours.
    let debug = Path::new(env!("CARGO_BIN_EXE_stateful-admission"));
    let release = debug
        .parent()
        .and_then(Path::parent)
        .map(|target| target.join("release/stateful-admission"))
        .context("no target directory")?;
    let Ok(built) = std::fs::metadata(&release).and_then(|m| m.modified()) else {
        anyhow::bail!(
            "{} is missing: run `cargo build --release --locked` first",
            release.display()
        );
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let sources = [
        root.join("src"),
        root.join("Cargo.toml"),
        root.join("Cargo.lock"),
    ];
    if let Some(newer) = sources.iter().find_map(|s| newer_than(s, built)) {
        anyhow::bail!(
            "{} is older than {}: run `cargo build --release --locked` first",
            release.display(),
            newer.display()
        );
    }
    Ok(release)
}

/// A file at or under `path` modified after `time`.
fn newer_than(path: &Path, time: std::time::SystemTime) -> Option<PathBuf> {
    let meta = std::fs::metadata(path).ok()?;
    if meta.is_dir() {
        std::fs::read_dir(path)
            .ok()?
            .flatten()
            .find_map(|entry| newer_than(&entry.path(), time))
    } else {
        meta.modified()
            .ok()
            .filter(|m| *m > time)
            .map(|_| path.to_owned())
    }
}

fn free_port() -> anyhow::Result<SocketAddr> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// The flag name of `--flag=value` or `--flag`.
fn flag(arg: &str) -> &str {
    arg.split('=').next().unwrap_or(arg)
}

/// The chart's certificate flags: the suite serves its own loopback certificate instead.
const CERT_FLAGS: [&str; 9] = [
    "--self-managed-certs",
    "--cert-namespace",
    "--cert-secret",
    "--service-name",
    "--cert-dir",
    "--cert-check-interval",
    "--mutating-webhook-configuration",
    "--validating-webhook-configuration",
    "--tls-cert",
];

impl Serve {
    pub async fn start(
        install: &Install,
        identity: &str,
        log: PathBuf,
        options: ServeOptions,
    ) -> anyhow::Result<Self> {
        let addr = free_port()?;
        let probe = free_port()?;
        let mut args: Vec<String> = install
            .chart_args
            .iter()
            .filter(|a| {
                let f = flag(a);
                !CERT_FLAGS.contains(&f) && f != "--tls-key" && f != "serve"
            })
            .cloned()
            .collect();
        let ours = [
            format!("--addr={addr}"),
            format!("--probe-addr={probe}"),
            format!("--tls-cert={}", install.tls_cert.display()),
            format!("--tls-key={}", install.tls_key.display()),
            format!("--controller-identity={identity}"),
            "--log-format=text".to_owned(),
        ];
        for arg in ours.iter().chain(options.args.iter()) {
            args.retain(|a| flag(a) != flag(arg));
            args.push(arg.clone());
        }
        let controller = !args.iter().any(|a| a == "--controller=false");
        let out = std::fs::File::create(&log)?;
        let child = Command::new(binary()?)
            .arg("serve")
            .args(&args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("KUBECONFIG", &install.token_kubeconfig)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .context("starting serve")?;
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let serve = Self {
            identity: identity.to_owned(),
            addr,
            probe,
            log,
            controller,
            id,
            child: Arc::new(Mutex::new(Some(child))),
            front: install.front.clone(),
        };
        if !options.unreachable {
            serve.front.add(id, addr, probe);
        }
        if !options.no_wait {
            serve.wait_ready(Duration::from_secs(60)).await?;
        }
        Ok(serve)
    }

    /// A handle on the same process, for the scenario's cleanup.
    pub fn handle(&self) -> Self {
        Self {
            identity: self.identity.clone(),
            addr: self.addr,
            probe: self.probe,
            log: self.log.clone(),
            controller: self.controller,
            id: self.id,
            child: self.child.clone(),
            front: self.front.clone(),
        }
    }

    /// Waits until `/readyz` answers 200.
    pub async fn wait_ready(&self, within: Duration) -> anyhow::Result<()> {
        let http = reqwest::Client::new();
        let url = format!("http://{}/readyz", self.probe);
        super::eventually(&format!("{} ready", self.identity), within, || async {
            if !self.running() {
                anyhow::bail!("serve exited; see {}", self.log.display());
            }
            let r = http.get(&url).send().await?;
            anyhow::ensure!(r.status().is_success(), "/readyz answers {}", r.status());
            Ok(())
        })
        .await
    }

    /// Waits until this replica leads (`stateful_admission_controller_leader` 1): it holds the
    /// Lease and its controller acts.
    pub async fn wait_leading(&self, within: Duration) -> anyhow::Result<()> {
        super::eventually(&format!("{} leading", self.identity), within, || async {
            if !self.running() {
                anyhow::bail!("serve exited; see {}", self.log.display());
            }
            let leading = self.metric("stateful_admission_controller_leader").await?;
            anyhow::ensure!(leading == 1.0, "not leading yet");
            Ok(())
        })
        .await
    }

    pub fn running(&self) -> bool {
        let mut child = self.child.lock().expect("child");
        match child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// `kill -9`: no shutdown, no Lease release, as a node or OOM kill.
    pub fn kill(&self) {
        if let Some(mut child) = self.child.lock().expect("child").take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.front.remove(self.id);
    }

    /// SIGTERM, then waits for the exit code.
    pub async fn terminate(&self, within: Duration) -> anyhow::Result<Option<i32>> {
        let pid = match self.child.lock().expect("child").as_ref() {
            Some(c) => c.id(),
            None => return Ok(None),
        };
        Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()?;
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(c) = self.child.lock().expect("child").as_mut()
                && let Some(status) = c.try_wait()?
            {
                self.front.remove(self.id);
                return Ok(status.code());
            }
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "serve did not exit within {within:?} of SIGTERM"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `/metrics` of this replica.
    pub async fn metrics(&self) -> anyhow::Result<String> {
        Ok(reqwest::get(format!("http://{}/metrics", self.probe))
            .await?
            .text()
            .await?)
    }

    /// The value of one sample (`name{labels}` as printed), or 0 when absent.
    pub async fn metric(&self, sample: &str) -> anyhow::Result<f64> {
        Ok(sample_value(&self.metrics().await?, sample))
    }

    /// The log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        // Only the last handle kills: the scope's cleanup holds one too.
        if Arc::strong_count(&self.child) == 1 {
            self.kill();
        }
    }
}

/// The sum of the samples that `sample` names: a bare metric name (any labels), a name with
/// complete labels (`name{a="1"}`), or a name with its first labels (`name{a="1",` or
/// `name{a="1"`, more may follow); 0 when none.
pub fn sample_value(text: &str, sample: &str) -> f64 {
    let matches = |line: &str| {
        let Some(rest) = line.strip_prefix(sample) else {
            return false;
        };
        if !sample.contains('{') {
            rest.starts_with(' ') || rest.starts_with('{')
        } else if sample.ends_with('}') {
            rest.starts_with(' ')
        } else {
            sample.ends_with(',') || rest.starts_with(',') || rest.starts_with('}')
        }
    };
    text.lines()
        .filter(|l| !l.starts_with('#') && matches(l))
        .filter_map(|l| l.rsplit(' ').next())
        .filter_map(|v| v.parse::<f64>().ok())
        .sum()
}
