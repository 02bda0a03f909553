//! `stateful-admission status` through the built binary against the fake API server, pointed
//! at it by a kubeconfig: the views, `--wait` following a rollout the test advances as the
//! controller and a volume resizer would, its failure and timeout exits, and that nothing but
//! reads is ever sent.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use stateful_admission::admission::statefulset::templates::desired_annotation;
use stateful_admission::names;
use stateful_admission::rollout::journal as converge;
use tokio::sync::mpsc;

use crate::common::run_binary_with_env;
use crate::support::fake_apiserver::{FakeApiServer, resources};

const NS: &str = "db";
const CONTROLLER_NS: &str = "stateful-admission";
const JOURNAL: &str = "sa-journal.db.web";
/// Longest wait for the binary to show a state; never reached when it works.
const PATIENCE: Duration = Duration::from_secs(60);

fn template(storage: &str) -> Value {
    json!({"metadata": {"name": "data"},
           "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast",
                    "resources": {"requests": {"storage": storage}}}})
}

/// Set `web` (policy InPlace, 3 replicas) with live templates of `live`, and `desired`
/// recorded as the webhook records it.
fn set(live: &str, desired: Option<&str>) -> Value {
    let mut annotations = json!({names::VOLUME_CLAIM_UPDATE_POLICY: "InPlace"});
    if let Some(size) = desired {
        annotations[names::DESIRED_VOLUME_CLAIM_TEMPLATES] =
            json!(desired_annotation(&[template(size)]).expect("annotation"));
    }
    json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
           "metadata": {"name": "web", "namespace": NS, "annotations": annotations},
           "spec": {"replicas": 3, "serviceName": "web",
                    "selector": {"matchLabels": {"app": "web"}},
                    "template": {"metadata": {"labels": {"app": "web"}},
                                 "spec": {"containers": [{"name": "c", "image": "db:1"}]}},
                    "volumeClaimTemplates": [template(live)]}})
}

fn claim(ordinal: u32, request: &str, capacity: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": format!("data-web-{ordinal}"), "namespace": NS},
           "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast",
                    "volumeName": format!("pv-{ordinal}"),
                    "resources": {"requests": {"storage": request}}},
           "status": {"phase": "Bound", "capacity": {"storage": capacity}}})
}

/// A cluster with class `fast` (expandable), set `web` as `set` and its three claims.
async fn cluster(set: Value, request: &str, capacity: &str) -> FakeApiServer {
    let api = FakeApiServer::start().await;
    api.put_object(json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "fast"}, "provisioner": "disk.example.com", "allowVolumeExpansion": true}));
    api.put_object(set);
    for n in 0..3 {
        api.put_object(claim(n, request, capacity));
    }
    api
}

/// A kubeconfig for `api` whose context's namespace is `db`.
fn kubeconfig(api: &FakeApiServer) -> tempfile::NamedTempFile {
    let file = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(
        file.path(),
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\n\
             contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: dev\n    namespace: {NS}\n\
             current-context: fake\nusers:\n- name: dev\n  user: {{}}\n",
            api.url()
        ),
    )
    .expect("kubeconfig");
    file
}

/// Runs `status ARGS` to its end, off the runtime the fake serves from.
async fn status(config: &tempfile::NamedTempFile, args: &[&str]) -> crate::common::Run {
    let path = config.path().to_str().expect("utf-8").to_owned();
    let mut all = vec!["status".to_owned()];
    all.extend(args.iter().map(|a| (*a).to_owned()));
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = all.iter().map(String::as_str).collect();
        run_binary_with_env(&args, &[("KUBECONFIG", path.as_str())])
    })
    .await
    .expect("run")
}

/// The binary running in the background, its stdout and stderr read line by line.
struct Running {
    child: Child,
    lines: mpsc::UnboundedReceiver<String>,
    seen: Vec<String>,
    errors: mpsc::UnboundedReceiver<String>,
    seen_errors: Vec<String>,
}

/// Sends each line `pipe` gives, until it closes.
fn read_lines(pipe: impl std::io::Read + Send + 'static) -> mpsc::UnboundedReceiver<String> {
    let (send, lines) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { break };
            if send.send(line).is_err() {
                break;
            }
        }
    });
    lines
}

/// Waits for a line of `lines` that contains every one of `parts`, keeping each in `seen`.
async fn next_with(
    lines: &mut mpsc::UnboundedReceiver<String>,
    seen: &mut Vec<String>,
    parts: &[&str],
    what: &str,
) -> String {
    let found = tokio::time::timeout(PATIENCE, async {
        while let Some(line) = lines.recv().await {
            seen.push(line.clone());
            if parts.iter().all(|p| line.contains(p)) {
                return Some(line);
            }
        }
        None
    })
    .await;
    match found {
        Ok(Some(line)) => line,
        _ => panic!(
            "no line with {parts:?}; {what} so far:\n{}",
            seen.join("\n")
        ),
    }
}

impl Running {
    fn start(binary: &str, config: &tempfile::NamedTempFile, args: &[&str]) -> Self {
        let mut child = Command::new(binary)
            .arg("status")
            .args(args)
            .env("KUBECONFIG", config.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("binary starts");
        let lines = read_lines(child.stdout.take().expect("stdout"));
        let errors = read_lines(child.stderr.take().expect("stderr"));
        Self {
            child,
            lines,
            seen: Vec::new(),
            errors,
            seen_errors: Vec::new(),
        }
    }

    /// Waits for a line of stdout that contains every one of `parts`; returns it.
    async fn line_with(&mut self, parts: &[&str]) -> String {
        next_with(&mut self.lines, &mut self.seen, parts, "stdout").await
    }

    /// Waits for a line of stderr that contains every one of `parts`; returns it.
    async fn error_with(&mut self, parts: &[&str]) -> String {
        next_with(&mut self.errors, &mut self.seen_errors, parts, "stderr").await
    }

    /// Waits for the exit; returns the code, the rest of stdout and all of stderr.
    async fn exit(mut self) -> (i32, String, String) {
        let mut child = self.child;
        let code =
            tokio::task::spawn_blocking(move || child.wait().expect("wait").code().unwrap_or(-1))
                .await
                .expect("exit");
        while let Some(line) = self.lines.recv().await {
            self.seen.push(line);
        }
        while let Some(line) = self.errors.recv().await {
            self.seen_errors.push(line);
        }
        let mut stderr = self.seen_errors.join("\n");
        if !stderr.is_empty() {
            stderr.push('\n');
        }
        (code, self.seen.join("\n"), stderr)
    }
}

const BINARY: &str = env!("CARGO_BIN_EXE_stateful-admission");

/// Everything the binary sent was a read (list or watch: GET).
fn only_reads(api: &FakeApiServer) {
    let writes = api.writes();
    assert!(writes.is_empty(), "status wrote: {writes:?}");
    assert!(!api.requests().is_empty());
}

fn journal(set: &Value, step: &str) -> Value {
    let object = converge::desired_object(set).expect("desired object");
    let mut cm = serde_json::to_value(
        converge::journal_configmap(CONTROLLER_NS, set, &object).expect("journal"),
    )
    .expect("json");
    cm["apiVersion"] = json!("v1");
    cm["kind"] = json!("ConfigMap");
    cm["metadata"]["annotations"][names::JOURNAL_STEP] = json!(step);
    cm
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_views_read_the_cluster_and_write_nothing() {
    let api = cluster(set("1Gi", Some("2Gi")), "1Gi", "1Gi").await;
    api.put_object(json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "web.1", "namespace": NS},
        "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "stateful-admission",
        "reportingInstance": "sa-0", "action": "PatchClaim", "reason": "VolumeClaimPatched",
        "type": "Normal", "note": "patched claim data-web-0",
        "regarding": {"apiVersion": "apps/v1", "kind": "StatefulSet", "namespace": NS, "name": "web"}}));
    let config = kubeconfig(&api);

    // The context's namespace, as kubectl takes it.
    let table = status(&config, &[]).await;
    assert_eq!(table.code, 0, "{}{}", table.stdout, table.stderr);
    let mut lines = table.stdout.lines();
    assert!(
        lines.next().is_some_and(|h| h.starts_with("NAME   STATE")),
        "{}",
        table.stdout
    );
    let row = lines.next().unwrap_or_default();
    for cell in [
        "web",
        "Progressing",
        "InPlace",
        "data: 1Gi -> 2Gi",
        "0/3 (3 pending)",
        "pending",
    ] {
        assert!(row.contains(cell), "{cell:?} in {row}");
    }

    let detail = status(&config, &["web"]).await;
    assert_eq!(detail.code, 0, "{}", detail.stderr);
    for part in [
        "StatefulSet:    db/web",
        "State:          Progressing (ChangeRecorded): change recorded (data: 1Gi -> 2Gi)",
        "data-web-2   Pending   1Gi       1Gi        2Gi",
        "Normal   VolumeClaimPatched",
    ] {
        assert!(
            detail.stdout.contains(part),
            "{part:?} in\n{}",
            detail.stdout
        );
    }

    let json = status(&config, &["-o", "json", "-A"]).await;
    assert_eq!(json.code, 0, "{}", json.stderr);
    let report = json.json();
    assert_eq!(report["apiVersion"], "stateful-admission.io/v1alpha1");
    assert_eq!(report["kind"], "StatusReport");
    assert_eq!(report["items"][0]["namespace"], NS);
    assert_eq!(report["items"][0]["convergence"]["phase"], "Pending");
    assert_eq!(
        report["items"][0]["events"][0]["reason"],
        "VolumeClaimPatched"
    );

    let wide = status(&config, &["-o", "wide", "-n", NS]).await;
    assert!(
        wide.stdout
            .lines()
            .next()
            .is_some_and(|h| h.contains("JOURNAL   LAST-BATCH   MESSAGE")),
        "{}",
        wide.stdout
    );

    // --watch alone ends after --timeout, having printed the view once (nothing changed).
    let watched = status(&config, &["--watch", "--timeout", "3s"]).await;
    assert_eq!(watched.code, 0, "{}", watched.stderr);
    assert_eq!(watched.stdout, table.stdout);

    let other = status(&config, &["-n", "empty"]).await;
    assert_eq!(other.code, 0);
    assert_eq!(other.stdout, "");
    assert_eq!(
        other.stderr,
        "No StatefulSets with a storage rollout found in empty namespace.\n"
    );
    // Following, it says so on stderr too, once: stdout is the view.
    let watched_empty = status(&config, &["-n", "empty", "--watch", "--timeout", "3s"]).await;
    assert_eq!((watched_empty.code, watched_empty.stdout.as_str()), (0, ""));
    assert_eq!(watched_empty.stderr, other.stderr);

    let missing = status(&config, &["nope"]).await;
    assert_eq!(missing.code, 2, "{}", missing.stdout);
    assert!(
        missing
            .stderr
            .starts_with("error: statefulset db/nope not found"),
        "{}",
        missing.stderr
    );

    only_reads(&api);
    // Events of ours only, asked of the apiserver.
    assert!(api.requests().iter().any(|r| {
        r.path
            .contains("/apis/events.k8s.io/v1/namespaces/db/events")
            && r.query
                .contains("fieldSelector=reportingController%3Dstateful-admission")
    }));
}

/// A convergence whose orphan delete has waited 40 s for the garbage collector: the table,
/// the detail view and the report say so (the set terminating with the `orphan` finalizer,
/// its journal at step `deleting`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_convergence_waiting_on_the_garbage_collector_is_said_in_every_view() {
    let recorded = set("1Gi", Some("2Gi"));
    let deleted = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(40);
    let mut terminating = recorded.clone();
    terminating["metadata"]["uid"] = json!("uid-web");
    terminating["metadata"]["deletionTimestamp"] =
        json!(deleted.strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
    terminating["metadata"]["finalizers"] = json!(["orphan"]);
    // As the journal recorded it (the store gives the set its own).
    terminating["metadata"]["resourceVersion"] = json!("10");
    let api = cluster(terminating.clone(), "1Gi", "1Gi").await;
    api.put_object(journal(&terminating, "deleting"));
    let config = kubeconfig(&api);
    let says =
        "waiting for the garbage collector to orphan the dependents of db/web (uid-web) for ";

    let table = status(&config, &[]).await;
    assert_eq!(table.code, 0, "{}", table.stderr);
    let row = table.stdout.lines().nth(1).unwrap_or_default();
    assert!(row.contains("deleting (gc 4"), "{}", table.stdout);

    let detail = status(&config, &["web"]).await;
    assert_eq!(detail.code, 0, "{}", detail.stderr);
    assert!(
        detail.stdout.contains(&format!(
            "Convergence:    deleting, journal {CONTROLLER_NS}/{JOURNAL} (step deleting): {says}"
        )),
        "{}",
        detail.stdout
    );

    let json = status(&config, &["-o", "json"]).await;
    let convergence = &json.json()["items"][0]["convergence"];
    assert!(
        convergence["garbageCollectorWaitSeconds"]
            .as_u64()
            .is_some_and(|s| (40..60).contains(&s)),
        "{convergence:#}"
    );
    assert!(
        convergence["message"]
            .as_str()
            .is_some_and(|m| m.starts_with(says)),
        "{convergence:#}"
    );
    only_reads(&api);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_follows_a_rollout_to_its_end() {
    let recorded = set("1Gi", Some("2Gi"));
    let api = cluster(recorded.clone(), "1Gi", "1Gi").await;
    let config = kubeconfig(&api);
    let mut run = Running::start(BINARY, &config, &["web", "--wait", "--timeout", "2m"]);
    // The change is recorded, nothing has acted yet: not done.
    run.line_with(&["Convergence:", "pending"]).await;

    // The controller journals the set, deletes it (orphan), creates it from the journal.
    let live = api
        .get_object(&resources::STATEFULSETS, NS, "web")
        .expect("set");
    api.put_object(journal(&live, "journaled"));
    run.line_with(&["web", "journaled"]).await;
    api.put_object(journal(&live, "deleting"));
    api.remove_object(&resources::STATEFULSETS, NS, "web");
    run.line_with(&["web", "re-creating"]).await;
    let converged = set("2Gi", None);
    api.put_object(converged);
    api.remove_object(&resources::CONFIG_MAPS, CONTROLLER_NS, JOURNAL);
    run.line_with(&["web", "done", "0/3 (3 pending)"]).await;

    // The controller patches the claims; the resizer finishes them one by one.
    for n in 0..3 {
        api.put_object(claim(n, "2Gi", "1Gi"));
    }
    run.line_with(&["web", "0/3 (3 updating)"]).await;
    api.put_object(claim(0, "2Gi", "2Gi"));
    api.put_object(claim(1, "2Gi", "2Gi"));
    run.line_with(&["web", "2/3 (1 updating)"]).await;
    api.put_object(claim(2, "2Gi", "2Gi"));

    let (code, stdout, stderr) = run.exit().await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(
        stdout.ends_with("statefulset db/web: storage rollout complete: the live object and 3 of 3 claims carry the recorded templates"),
        "{stdout}"
    );
    only_reads(&api);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_on_policy_on_delete_waits_for_the_live_object_only() {
    // Policy OnDelete (the default): claims are not patched, so they are already "as good as
    // they get"; a recorded change is still not done until the set is re-created with it.
    let mut recorded = set("1Gi", Some("2Gi"));
    recorded["metadata"]["annotations"]
        .as_object_mut()
        .expect("annotations")
        .remove(names::VOLUME_CLAIM_UPDATE_POLICY);
    let api = cluster(recorded, "1Gi", "1Gi").await;
    let config = kubeconfig(&api);
    let mut run = Running::start(BINARY, &config, &["--wait", "--timeout", "60s"]);
    run.line_with(&["web", "OnDelete", "pending"]).await;
    let live = api
        .get_object(&resources::STATEFULSETS, NS, "web")
        .expect("set");
    api.put_object(journal(&live, "deleting"));
    api.remove_object(&resources::STATEFULSETS, NS, "web");
    // Still waiting while the set is away.
    run.line_with(&["web", "re-creating"]).await;
    let mut converged = set("2Gi", None);
    converged["metadata"]["annotations"] = json!({});
    api.put_object(converged);
    api.remove_object(&resources::CONFIG_MAPS, CONTROLLER_NS, JOURNAL);
    let (code, stdout, stderr) = run.exit().await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(
        stdout.ends_with("statefulset db/web: storage rollout complete: the live object carries the recorded templates; policy OnDelete patches no existing claim (0 of 3 compatible), new and re-created claims get the templates"),
        "{stdout}"
    );
    only_reads(&api);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_fails_on_a_resize_error_and_says_which_claim() {
    let api = cluster(set("2Gi", None), "2Gi", "1Gi").await;
    let config = kubeconfig(&api);
    let mut run = Running::start(
        BINARY,
        &config,
        &["--wait", "-o", "wide", "--timeout", "60s"],
    );
    run.line_with(&["web", "0/3 (3 updating)"]).await;
    let mut failing = claim(1, "2Gi", "1Gi");
    failing["status"]["conditions"] = json!([{"type": "ControllerResizeError", "status": "True",
        "message": "resize volume \"pv-1\" by resizer \"disk.example.com\" failed: quota exceeded"}]);
    api.put_object(failing);
    let (code, stdout, stderr) = run.exit().await;
    assert_eq!(code, 1, "{stdout}\n{stderr}");
    assert_eq!(
        stderr,
        "error: statefulset db/web: claim data-web-1: ControllerResizeError: resize volume \"pv-1\" by resizer \"disk.example.com\" failed: quota exceeded\n"
    );
    only_reads(&api);
}

/// Where the controller found the cluster dropping claims' classes: once everything else is
/// done, a recorded class change ends `--wait` with exit 1 naming it (not a timeout); a class
/// the template had all along is said, and the wait succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_fails_on_a_class_change_the_cluster_cannot_apply_once_the_rest_is_done() {
    for changed in [true, false] {
        let mut live = set("2Gi", None);
        live["spec"]["volumeClaimTemplates"][0]["spec"]["volumeAttributesClassName"] =
            json!("gold");
        live["metadata"]["annotations"][names::VOLUME_CLAIM_STATUS] = json!(
            json!([{"name": "data", "compatible": 3, "updating": 0, "overSized": 0,
                    "totalCapacity": "6Gi", "volumeAttributesClass": {"name": "gold",
                    "applied": false, "changed": changed,
                    "reason": "the cluster drops a claim's volumeAttributesClassName (its VolumeAttributesClass feature gate is off)"}}])
            .to_string()
        );
        // Still growing: not failed yet.
        let api = cluster(live, "2Gi", "1Gi").await;
        let config = kubeconfig(&api);
        let mut run = Running::start(BINARY, &config, &["--wait", "--timeout", "60s"]);
        run.line_with(&["web", "data: class gold not applied"])
            .await;
        for n in 0..3 {
            api.put_object(claim(n, "2Gi", "2Gi"));
        }
        let (code, stdout, stderr) = run.exit().await;
        if changed {
            assert_eq!(code, 1, "{stdout}\n{stderr}");
            assert_eq!(
                stderr,
                "error: statefulset db/web: template data: volumeAttributesClassName \"gold\" cannot be applied: the cluster drops a claim's volumeAttributesClassName (its VolumeAttributesClass feature gate is off); everything else of the rollout is done\n"
            );
        } else {
            assert_eq!(code, 0, "{stdout}\n{stderr}");
        }
        only_reads(&api);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_times_out_with_what_it_waited_for() {
    let api = cluster(set("1Gi", Some("2Gi")), "1Gi", "1Gi").await;
    let config = kubeconfig(&api);
    let run = status(&config, &["--wait", "--timeout", "3s"]).await;
    assert_eq!(run.code, 2, "{}{}", run.stdout, run.stderr);
    assert_eq!(
        run.stderr,
        "error: timed out after 3s waiting for statefulset db/web: change recorded (data: 1Gi -> 2Gi); waiting for the controller to journal it and re-create the StatefulSet with it\n"
    );
    only_reads(&api);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_with_nothing_selected_waits_for_a_set_and_times_out_naming_the_namespace() {
    // A mistyped namespace: not done, a timeout (2) saying where nothing was found.
    let api = cluster(set("2Gi", None), "2Gi", "2Gi").await;
    let config = kubeconfig(&api);
    let wrong = status(&config, &["-n", "dbs", "--wait", "--timeout", "3s"]).await;
    assert_eq!(wrong.code, 2, "{}{}", wrong.stdout, wrong.stderr);
    assert_eq!(wrong.stdout, "");
    assert_eq!(
        wrong.stderr,
        "No StatefulSets with a storage rollout found in dbs namespace.\n\
         error: timed out after 3s waiting for a StatefulSet with a storage rollout: none found in namespace dbs\n"
    );
    let everywhere = FakeApiServer::start().await;
    let empty = kubeconfig(&everywhere);
    let none = status(&empty, &["-A", "--wait", "--timeout", "3s"]).await;
    assert_eq!(none.code, 2, "{}{}", none.stdout, none.stderr);
    assert!(
        none.stderr.ends_with(
            "error: timed out after 3s waiting for a StatefulSet with a storage rollout: none found in any namespace (-A)\n"
        ),
        "{}",
        none.stderr
    );

    // Right after `helm upgrade` the set may be away, deleted to be created again: waited
    // for, then followed to done.
    let api = cluster(set("2Gi", None), "2Gi", "2Gi").await;
    api.remove_object(&resources::STATEFULSETS, NS, "web");
    let config = kubeconfig(&api);
    let mut run = Running::start(BINARY, &config, &["--wait", "--timeout", "60s"]);
    run.error_with(&["No StatefulSets with a storage rollout found in db namespace."])
        .await;
    api.put_object(set("2Gi", None));
    let (code, stdout, stderr) = run.exit().await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(
        stdout.ends_with("statefulset db/web: storage rollout complete: the live object and 3 of 3 claims carry the recorded templates"),
        "{stdout}"
    );
    only_reads(&api);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_retries_a_first_list_the_apiserver_failed_and_not_one_it_refused() {
    let api = cluster(set("2Gi", None), "2Gi", "2Gi").await;
    let config = kubeconfig(&api);
    // An apiserver failing for a moment (during a control-plane upgrade, say): waited out.
    api.fail_next("GET", "/namespaces/db/statefulsets", 500, 2);
    let run = status(&config, &["--wait", "--timeout", "60s"]).await;
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stdout
            .contains("statefulset db/web: storage rollout complete"),
        "{}",
        run.stdout
    );
    // Failing throughout: the timeout says what failed, in one line.
    api.fail_next("GET", "/namespaces/db/persistentvolumeclaims", 500, 1000);
    let run = status(&config, &["--wait", "--timeout", "2s"]).await;
    assert_eq!(run.code, 2, "{}{}", run.stdout, run.stderr);
    assert_eq!(
        run.stderr,
        "error: timed out after 2s before the cluster answered (cannot list persistentvolumeclaims: injected failure (500 InternalError) (500))\n"
    );
    api.clear_faults();
    // A refusal stays one: exit 2 at once, in one line.
    api.fail_next("GET", "/namespaces/db/persistentvolumeclaims", 403, 1);
    let run = status(&config, &["--wait", "--timeout", "60s"]).await;
    assert_eq!(run.code, 2, "{}{}", run.stdout, run.stderr);
    assert_eq!(
        run.stderr,
        "error: cannot list persistentvolumeclaims: injected failure (403 Forbidden) (403)\n"
    );
    // Without --wait a failure ends the run at once, as kubectl's does.
    api.fail_next("GET", "/namespaces/db/statefulsets", 500, 1);
    let run = status(&config, &[]).await;
    assert_eq!(run.code, 2, "{}{}", run.stdout, run.stderr);
    assert_eq!(
        run.stderr,
        "error: cannot list statefulsets: injected failure (500 InternalError) (500)\n"
    );
    only_reads(&api);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_journals_are_said_and_judged_without() {
    let api = cluster(set("1Gi", Some("2Gi")), "1Gi", "1Gi").await;
    // A developer who may not read the controller's namespace.
    api.fail_next("GET", "/namespaces/stateful-admission/configmaps", 403, 1);
    let config = kubeconfig(&api);
    let run = status(&config, &["-o", "json"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let report = run.json();
    assert_eq!(report["unreadable"][0]["resource"], "configmaps");
    let verdict = &report["items"][0]["verdict"];
    assert_eq!(verdict["reason"], "ChangeRecorded");
    assert!(
        verdict["message"]
            .as_str()
            .unwrap_or("")
            .contains("journals cannot be read"),
        "{verdict}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_wait_prints_a_report_per_change() {
    let api = cluster(set("2Gi", None), "2Gi", "1Gi").await;
    let config = kubeconfig(&api);
    let mut run = Running::start(
        BINARY,
        &config,
        &["-o", "json", "--wait", "--timeout", "60s"],
    );
    let first: Value =
        serde_json::from_str(&run.line_with(&["StatusReport"]).await).expect("json line");
    assert_eq!(first["items"][0]["claims"]["updating"], 3);
    for n in 0..3 {
        api.put_object(claim(n, "2Gi", "2Gi"));
    }
    let (code, stdout, stderr) = run.exit().await;
    assert_eq!(code, 0, "{stderr}");
    let reports: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("a report per line"))
        .collect();
    assert_eq!(
        reports
            .last()
            .map(|r| r["items"][0]["verdict"]["result"].clone()),
        Some(json!("Done"))
    );
    assert!(
        stderr.starts_with("statefulset db/web: storage rollout complete"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubectl_plugin_name_works_and_usage_errors_exit_2() {
    let api = cluster(set("2Gi", None), "2Gi", "2Gi").await;
    let config = kubeconfig(&api);
    let dir = tempfile::tempdir().expect("dir");
    let plugin = dir.path().join("kubectl-stateful_admission");
    std::os::unix::fs::symlink(BINARY, &plugin).expect("link");
    let path = config.path().to_owned();
    let plugin_run = |args: Vec<&'static str>| {
        let (plugin, path) = (plugin.clone(), path.clone());
        tokio::task::spawn_blocking(move || {
            Command::new(plugin)
                .args(args)
                .env("KUBECONFIG", path)
                .output()
                .expect("plugin runs")
        })
    };
    // kubectl runs the plugin with the words after `kubectl stateful-admission`.
    let out = plugin_run(vec!["status", "web"]).await.expect("run");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains("State:          Done (RolloutComplete): storage rollout complete")
    );
    let help = plugin_run(vec!["status", "--help"]).await.expect("run");
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    assert!(
        help.contains("Usage: kubectl stateful-admission status [OPTIONS] [NAME]"),
        "{help}"
    );
    for flag in [
        "-n, --namespace",
        "-A, --all-namespaces",
        "-o, --output",
        "-w, --watch",
        "--context",
        "--timeout",
        "--wait",
    ] {
        assert!(help.contains(flag), "{flag} in {help}");
    }

    let bad = plugin_run(vec!["status", "-A", "web"]).await.expect("run");
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("kubectl stateful-admission status"));
    let bad = status(&config, &["--wait", "--timeout", "soon"]).await;
    assert_eq!(bad.code, 2);
    assert!(
        bad.stderr.contains("not a duration like 90s, 10m or 1h30m"),
        "{}",
        bad.stderr
    );
    let none = run_binary_with_env(&["status"], &[("KUBECONFIG", "/nonexistent/kubeconfig")]);
    assert_eq!(none.code, 2);
    assert!(
        none.stderr.starts_with("error: no cluster configuration"),
        "{}",
        none.stderr
    );
    only_reads(&api);
}

/// A coordinated rollout held at partition 2 of 3 (the user's partition 0): the detail view
/// says so on its `Coordinated` line, the report carries the hold, and the partition shown is
/// the set's own; a hold that does not parse is named as such.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinated_rollouts_hold_is_said() {
    let mut held = set("1Gi", Some("2Gi"));
    held["metadata"]["annotations"][names::ROLLOUT_HOLD] =
        json!(r#"{"partition":2,"userPartition":0}"#);
    held["spec"]["updateStrategy"] =
        json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 2}});
    let api = cluster(held, "1Gi", "1Gi").await;
    let config = kubeconfig(&api);
    let detail = status(&config, &["web"]).await;
    assert_eq!(detail.code, 0, "{}", detail.stderr);
    for part in [
        "updateStrategy RollingUpdate, partition 2, replicas 3",
        "Coordinated:    rolling update held at partition 2 (yours: 0): the claims of replica 1 are patched, then its pod is re-created",
    ] {
        assert!(
            detail.stdout.contains(part),
            "{part:?} in\n{}",
            detail.stdout
        );
    }
    let json = status(&config, &["-o", "json"]).await;
    assert_eq!(json.code, 0, "{}", json.stderr);
    let report = json.json();
    assert_eq!(
        report["items"][0]["hold"],
        json!({"partition": 2, "userPartition": 0})
    );
    assert_eq!(report["items"][0]["partition"], 2);

    let mut hostile = set("1Gi", Some("2Gi"));
    hostile["metadata"]["annotations"][names::ROLLOUT_HOLD] = json!("{\"partition\":\"\\u0000\"}");
    let api = cluster(hostile, "1Gi", "1Gi").await;
    let config = kubeconfig(&api);
    let detail = status(&config, &["web"]).await;
    assert_eq!(detail.code, 0, "{}", detail.stderr);
    assert!(
        detail
            .stdout
            .contains("Coordinated:    stateful-admission.io/rollout-hold does not parse"),
        "{}",
        detail.stdout
    );
    only_reads(&api);
}
