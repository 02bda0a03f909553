//! The command line as a new user meets it, through the built binary: environment names
//! follow one rule, logs are coloured only on a terminal, `--self-signed` cleans up after
//! itself, and each startup error is one line naming the way out.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use clap::CommandFactory;
use stateful_admission::cli::{Cli, ENV_PREFIX};

use crate::common::{fixture_path, run_binary, run_binary_with_env};
use crate::serve_tls::Served;

const BIN: &str = env!("CARGO_BIN_EXE_stateful-admission");

/// `STATEFUL_ADMISSION_<FLAG>`: upper case, dashes to underscores.
fn env_name(flag: &str) -> String {
    format!("{ENV_PREFIX}{}", flag.to_uppercase().replace('-', "_"))
}

/// Every subcommand of the tree with its path, e.g. `certs generate`.
fn subcommands(command: &clap::Command, path: &str, out: &mut Vec<(String, clap::Command)>) {
    for sub in command.get_subcommands() {
        let name = format!("{path} {}", sub.get_name()).trim().to_owned();
        if sub.has_subcommands() {
            subcommands(sub, &name, out);
        } else {
            out.push((name, sub.clone()));
        }
    }
}

/// The flags (long options, `--help` aside) of a command, with their environment names.
fn flags(command: &clap::Command) -> Vec<(String, Option<String>)> {
    command
        .get_arguments()
        .filter_map(|arg| {
            let long = arg.get_long()?;
            (long != "help" && long != "version").then(|| {
                (
                    long.to_owned(),
                    arg.get_env().map(|e| e.to_string_lossy().into_owned()),
                )
            })
        })
        .collect()
}

/// The rule README.md states: every flag of `serve` has `STATEFUL_ADMISSION_<FLAG>`; `review`
/// reads the same name for each flag it shares with `serve` and none for its own; `check`,
/// `status` and `certs generate` read none.
#[test]
fn every_flag_s_environment_name_follows_the_rule() {
    let mut commands = Vec::new();
    subcommands(&Cli::command(), "", &mut commands);
    let names: Vec<&str> = commands.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "serve",
            "review",
            "certs generate",
            "check",
            "status",
            "gitops"
        ]
    );
    let serve_flags: Vec<String> = flags(&commands[0].1)
        .into_iter()
        .map(|(flag, _)| flag)
        .collect();
    assert!(serve_flags.len() > 40, "{serve_flags:?}");
    let mut with_env = 0;
    for (name, command) in &commands {
        for (flag, env) in flags(command) {
            let want = match name.as_str() {
                "serve" => Some(env_name(&flag)),
                "review" if serve_flags.contains(&flag) => Some(env_name(&flag)),
                _ => None,
            };
            assert_eq!(env, want, "{name} --{flag}");
            with_env += usize::from(env.is_some());
        }
    }
    // serve's flags, and review's --state and six policy flags.
    assert_eq!(with_env, serve_flags.len() + 7);
}

#[test]
fn help_shows_each_environment_name_and_the_patch_default() {
    let serve = run_binary(&["serve", "--help"], None);
    assert_eq!(serve.code, 0);
    assert!(
        serve
            .stdout
            .contains("[env: STATEFUL_ADMISSION_SELF_SIGNED_NAME=]"),
        "{}",
        serve.stdout
    );
    assert!(
        !serve.stdout.contains("SELF_SIGNED_NAMES"),
        "{}",
        serve.stdout
    );
    let review = run_binary(&["review", "--help"], None);
    assert_eq!(review.code, 0);
    let patch: String = review
        .stdout
        .split("--patch")
        .nth(1)
        .and_then(|rest| rest.split("\n      --").next())
        .expect("--patch in review --help")
        .to_owned();
    assert!(patch.contains("[default: base64]"), "{patch}");
}

/// The SAN DNS names of the certificate `--self-signed` wrote into `dir`.
fn self_signed_names(dir: &Path) -> Vec<String> {
    let pem = std::fs::read(dir.join("tls.crt")).expect("tls.crt");
    stateful_admission::certs::x509::parse_pem(&pem)
        .expect("certificate")
        .dns_names
}

fn state() -> String {
    fixture_path("../../examples/cluster.yaml")
        .to_str()
        .expect("utf-8")
        .to_owned()
}

#[test]
fn self_signed_names_come_from_the_new_variable_and_the_deprecated_one() {
    for (variable, deprecated) in [
        ("STATEFUL_ADMISSION_SELF_SIGNED_NAME", false),
        ("STATEFUL_ADMISSION_SELF_SIGNED_NAMES", true),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let served = Served::start_with_env(
            &[
                "--self-signed",
                "--self-signed-dir",
                dir.path().to_str().expect("utf-8"),
                "--state",
                &state(),
            ],
            &[(variable, "webhook.example,127.0.0.1")],
        );
        assert_eq!(
            self_signed_names(dir.path()),
            ["webhook.example"],
            "{variable}"
        );
        let warned = served
            .startup_logs()
            .iter()
            .any(|l| l.contains("STATEFUL_ADMISSION_SELF_SIGNED_NAMES is deprecated"));
        assert_eq!(
            warned,
            deprecated,
            "{variable}: {:?}",
            served.startup_logs()
        );
    }
    // The flag wins over the deprecated variable.
    let dir = tempfile::tempdir().expect("tempdir");
    let _served = Served::start_with_env(
        &[
            "--self-signed",
            "--self-signed-dir",
            dir.path().to_str().expect("utf-8"),
            "--self-signed-name",
            "flag.example",
            "--state",
            &state(),
        ],
        &[("STATEFUL_ADMISSION_SELF_SIGNED_NAMES", "old.example")],
    );
    assert_eq!(self_signed_names(dir.path()), ["flag.example"]);
}

/// A `serve` process, killed on drop (also when an assertion fails first).
struct Running {
    child: Child,
    _dir: tempfile::TempDir,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `serve` with text logs (`--state`, `--self-signed` into a directory of the test), its
/// stderr on `stderr`.
fn serve_text_logs(stderr: Stdio, env: &[(&str, &str)]) -> Running {
    let dir = tempfile::tempdir().expect("tempdir");
    let child = Command::new(BIN)
        .args([
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--probe-addr",
            "127.0.0.1:0",
            "--self-signed",
            "--self-signed-dir",
            dir.path().to_str().expect("utf-8"),
            "--state",
            &state(),
        ])
        .env_remove("NO_COLOR")
        .env_remove("RUST_LOG")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("binary starts");
    Running { child, _dir: dir }
}

/// Reads `from` on a thread until a chunk contains "webhook listening" or 20 s pass.
fn read_until_listening(from: impl Read + Send + 'static) -> String {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(from);
        let mut line = Vec::new();
        // A pty ends with EIO once the child is gone: any error ends the loop.
        while reader.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
            if tx
                .send(String::from_utf8_lossy(&line).into_owned())
                .is_err()
            {
                break;
            }
            line.clear();
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut text = String::new();
    while let Ok(chunk) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        text.push_str(&chunk);
        if chunk.contains("webhook listening") {
            return text;
        }
    }
    panic!("the server did not log that it listens:\n{text}")
}

#[test]
fn logs_to_a_pipe_carry_no_colour() {
    let mut running = serve_text_logs(Stdio::piped(), &[]);
    let text = read_until_listening(running.child.stderr.take().expect("piped"));
    drop(running);
    assert!(text.contains("INFO"), "{text}");
    assert!(!text.contains('\x1b'), "escape codes in a pipe:\n{text:?}");
}

/// A pseudo-terminal: (controller side to read, terminal side for the child's stderr).
fn pty() -> (std::fs::File, std::os::fd::OwnedFd) {
    use std::os::fd::FromRawFd;
    let (mut controller, mut terminal) = (-1, -1);
    // SAFETY: openpty writes two new descriptors into the integers it is given; null name,
    // termios and window size are allowed.
    let rc = unsafe {
        libc::openpty(
            &mut controller,
            &mut terminal,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just opened and are owned by nothing else.
    unsafe {
        (
            std::fs::File::from_raw_fd(controller),
            std::os::fd::OwnedFd::from_raw_fd(terminal),
        )
    }
}

#[test]
fn logs_on_a_terminal_are_coloured_unless_no_color_is_set() {
    for (no_color, coloured) in [(None, true), (Some(""), true), (Some("1"), false)] {
        let (controller, terminal) = pty();
        let env: Vec<(&str, &str)> = no_color.map(|v| ("NO_COLOR", v)).into_iter().collect();
        // The child holds the terminal side; ours closes when the Stdio drops after spawn.
        let running = serve_text_logs(Stdio::from(terminal), &env);
        let text = read_until_listening(controller);
        drop(running);
        assert_eq!(
            text.contains("\x1b["),
            coloured,
            "NO_COLOR={no_color:?}:\n{text:?}"
        );
    }
}

#[test]
fn the_self_signed_temporary_directory_is_removed_on_sigterm_ctrl_c_and_failure() {
    for signal in ["-TERM", "-INT"] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let tmp_path = tmp.path().to_str().expect("utf-8");
        let mut served = Served::start_with_env(
            &["--self-signed", "--state", &state()],
            &[("TMPDIR", tmp_path)],
        );
        let ca_line = served
            .startup_logs()
            .iter()
            .find_map(|l| l.strip_prefix("self-signed CA certificate: "))
            .expect("the CA's path is printed")
            .to_owned();
        let dir = Path::new(&ca_line)
            .parent()
            .expect("a directory")
            .to_owned();
        assert!(dir.starts_with(tmp.path()), "{ca_line}");
        assert!(dir.join("tls.key").exists(), "{ca_line}");
        let status = Command::new("kill")
            .args([signal, &served.pid().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success());
        assert_eq!(
            served.wait_exit(Duration::from_secs(15)),
            Some(0),
            "{signal}"
        );
        assert!(!dir.exists(), "{signal}: {} is left behind", dir.display());
        let left: Vec<_> = std::fs::read_dir(tmp.path()).expect("read").collect();
        assert!(left.is_empty(), "{signal}: left in TMPDIR: {left:?}");
    }

    // A failed start (the state file does not parse) removes it too.
    let tmp = tempfile::tempdir().expect("tempdir");
    let bad = crate::common::temp_file(".yaml", b"kind: StatefulSet\nspec: [\n");
    let run = run_binary_with_env(
        &[
            "serve",
            "--self-signed",
            "--addr",
            "127.0.0.1:0",
            "--probe-addr",
            "127.0.0.1:0",
            "--state",
            bad.path().to_str().expect("utf-8"),
        ],
        &[("TMPDIR", tmp.path().to_str().expect("utf-8"))],
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    let left: Vec<_> = std::fs::read_dir(tmp.path()).expect("read").collect();
    assert!(left.is_empty(), "left in TMPDIR after a failure: {left:?}");
}

#[test]
fn a_self_signed_directory_the_user_names_stays() {
    let dir = tempfile::tempdir().expect("tempdir");
    let certs = dir.path().join("certs");
    let mut served = Served::start(&[
        "--self-signed",
        "--self-signed-dir",
        certs.to_str().expect("utf-8"),
        "--state",
        &state(),
    ]);
    served.terminate();
    assert_eq!(served.wait_exit(Duration::from_secs(15)), Some(0));
    for file in ["ca.crt", "tls.crt", "tls.key"] {
        assert!(certs.join(file).exists(), "{file}");
    }
}

#[test]
fn serve_without_a_cluster_says_so_in_one_line_with_the_way_out() {
    let run = serve_without_a_cluster(&[]);
    assert_eq!(run.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&run.stderr);
    let stderr = stderr.trim_end();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("error: no cluster configuration: "),
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("/nonexistent/kubeconfig").count(),
        1,
        "{stderr}"
    );
    assert!(stderr.contains("\"/nonexistent/kubeconfig\""), "{stderr}");
    assert!(!stderr.contains("'\""), "quotes in quotes: {stderr}");
    assert_eq!(
        stderr.matches("No such file or directory").count(),
        1,
        "{stderr}"
    );
    assert!(stderr.contains("--state FILE"), "{stderr}");
    assert!(stderr.contains("KUBECONFIG"), "{stderr}");
}

#[test]
fn serve_without_a_cluster_logs_the_error_once_as_json_with_json_logs() {
    let run = serve_without_a_cluster(&["--log-format", "json"]);
    assert_eq!(run.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&run.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    let event: serde_json::Value = serde_json::from_str(lines[0]).expect("a JSON log line");
    assert_eq!(event["level"], "ERROR");
    let error = event["fields"]["error"].as_str().expect("error field");
    assert!(error.contains("--state FILE"), "{error}");
}

/// `serve --self-signed` with a kubeconfig that does not exist, outside any cluster.
fn serve_without_a_cluster(args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .args([
            "serve",
            "--self-signed",
            "--addr",
            "127.0.0.1:0",
            "--probe-addr",
            "127.0.0.1:0",
        ])
        .args(args)
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("binary runs")
}

/// The Lease timings are checked together, as client-go checks them: a leader must stop
/// writing before another may take the Lease. A bad combination is a usage error (exit 2),
/// before anything starts; the environment is read alike.
#[test]
fn inconsistent_lease_timings_are_a_usage_error() {
    for (args, env, says) in [
        (
            &["--lease-duration", "10s", "--renew-deadline", "10s"][..],
            &[][..],
            "--renew-deadline (10s) must be shorter than --lease-duration (10s)",
        ),
        (
            &["--retry-period", "10s"][..],
            &[][..],
            "--retry-period (10s) must be shorter than --renew-deadline (10s)",
        ),
        (
            &[][..],
            &[("STATEFUL_ADMISSION_RENEW_DEADLINE", "20s")][..],
            "--renew-deadline (20s) must be shorter than --lease-duration (15s)",
        ),
        (
            &[
                "--lease-duration",
                "1500ms",
                "--renew-deadline",
                "1s",
                "--retry-period",
                "200ms",
            ][..],
            &[][..],
            "--lease-duration must be a whole number of seconds",
        ),
        (
            &["--watch-reconnect-max-delay", "0s"][..],
            &[][..],
            "must be more than 0s",
        ),
    ] {
        let run = Command::new(BIN)
            .args(["serve", "--self-signed"])
            .args(args)
            .envs(env.iter().copied())
            .env("KUBECONFIG", "/nonexistent/kubeconfig")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdin(Stdio::null())
            .output()
            .expect("binary runs");
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(2), "{args:?} {env:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}
