use super::super::Status;
use super::*;
use serde_json::json;

fn at(text: &str) -> jiff::Timestamp {
    text.parse().expect("timestamp")
}

#[test]
fn a_lease_is_ok_only_when_held_and_fresh() {
    let lease = |holder: &str, renewed: &str| json!({"spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, "renewTime": renewed}});
    let now = at("2026-01-01T00:00:20Z");
    let fresh = lease("pod-a", "2026-01-01T00:00:10.000000Z");
    assert_eq!(lease_status(Some(&fresh), now), "ok");
    let stale = lease("pod-a", "2026-01-01T00:00:01Z");
    assert_eq!(lease_status(Some(&stale), now), "failed");
    assert_eq!(
        lease_status(Some(&lease("", "2026-01-01T00:00:10Z")), now),
        "failed"
    );
    assert_eq!(lease_status(None, now), "failed");
}

fn lease_status(lease_json: Option<&Value>, now: jiff::Timestamp) -> &'static str {
    lease(lease_json, "l", now).status.as_str()
}

#[test]
fn each_replica_says_which_part_waits_for_what() {
    let leading = "[+]tls ok\n[+]webhook ok: storageclasses, namespaces, statefulsets listed\n[+]controller leading (Lease l), mode enforce\n[+]max-unavailable-gate disabled: x\nreadyz check passed\n";
    let waiting = "[+]tls ok\n[-]webhook-claims listing persistentvolumeclaims: x\n[-]controller waiting for persistentvolumeclaims to list before campaigning for the Lease\nreadyz check passed\n";
    assert_eq!(replicas(&[]), None, "no replica runs: nothing to ask");
    let ok = replicas(&[("sa-1".into(), Ok(leading.into()))]).expect("a line");
    assert_eq!(
        (ok.status, ok.message.as_str()),
        (Status::Ok, "ready: sa-1 leading")
    );
    let slow = replicas(&[
        ("sa-1".into(), Ok(leading.into())),
        ("sa-2".into(), Ok(waiting.into())),
    ])
    .expect("a line");
    assert_eq!(slow.status, Status::Warning);
    assert!(
        slow.message
            .starts_with("sa-2: [-]webhook-claims listing persistentvolumeclaims")
            && slow
                .message
                .contains("[-]controller waiting for persistentvolumeclaims"),
        "{}",
        slow.message
    );
    // A replica cut off from the apiserver: ready (its webhook answers from its view),
    // with the staleness as a warning of its own.
    let cut_off = "[+]tls ok\n[+]webhook ok: storageclasses, namespaces, statefulsets listed\n[!]view stale: statefulsets, pods not refreshed for 27s, the apiserver unreachable or refusing the watch (failed to start watching object: connection refused); answering from what was last seen\n[+]controller standby: campaigning for Lease l\nreadyz check passed\n";
    let stale = replicas(&[
        ("sa-1".into(), Ok(leading.into())),
        ("sa-2".into(), Ok(cut_off.into())),
    ])
    .expect("a line");
    assert_eq!(stale.status, Status::Warning);
    assert_eq!(
        stale.message,
        "sa-2: [!]view stale: statefulsets, pods not refreshed for 27s, the apiserver unreachable or refusing the watch (failed to start watching object: connection refused); answering from what was last seen"
    );
    assert!(
        stale.hint.contains("cannot refresh its view")
            && stale.hint.contains("#a-replicas-view-is-stale"),
        "{}",
        stale.hint
    );
    let refused =
        replicas(&[("sa-1".into(), Err("pods \"sa-1\" is forbidden".into()))]).expect("a line");
    assert_eq!(refused.status, Status::Warning);
    assert!(refused.hint.contains("pods/proxy"), "{}", refused.hint);
}

#[test]
fn a_probe_namespace_the_webhooks_skip_is_named() {
    let mut release = Release::of("stateful-admission", "ops");
    assert!(probe_namespace_excluded(&release, None).is_none());
    let ignored = [(names::IGNORE_LABEL.to_owned(), "true".to_owned())].into();
    let check = probe_namespace_excluded(&release, Some(&ignored)).expect("ignored");
    assert!(check.message.contains("labelled"), "{}", check.message);
    for namespace in ["ops", "kube-system"] {
        release.probe_namespace = namespace.to_owned();
        assert!(
            probe_namespace_excluded(&release, None).is_some(),
            "{namespace}"
        );
    }
}

#[test]
fn features_follow_the_deployment_arguments() {
    let all = Features::from_args(&[]);
    assert_eq!(all, Features::default());
    let off = Features::from_args(&["--controller=false".to_owned()]);
    assert!(!off.converge && !off.max_unavailable);
    let release = super::super::Release::of("stateful-admission", "ops");
    assert!(off.needs(&release).iter().all(|a| a.feature == "webhook"));
    let needs = all.needs(&release);
    assert!(
        needs
            .iter()
            .any(|a| a.verb == "delete" && a.resource == "pods")
    );
    // The chart grants the Lease by name only; a review without the name would be denied.
    let lease = needs
        .iter()
        .find(|a| a.resource == "leases")
        .expect("lease");
    assert_eq!(lease.name.as_deref(), Some("stateful-admission-leader"));
    let chart = Features::from_args(&[
        "--lease-name=sa-lock".to_owned(),
        "--self-managed-certs".to_owned(),
        "--cert-secret=sa-certs".to_owned(),
        "--mutating-webhook-configuration=sa".to_owned(),
    ]);
    let needs = chart.needs(&release);
    let names: Vec<_> = needs.iter().filter_map(|a| a.name.as_deref()).collect();
    assert_eq!(names, ["sa-lock", "sa-certs", "sa"]);
}

/// `check` on every captured apiserver (its own probes' answers as captured): the version
/// line never advises turning off a part the cluster's answers show is needed, calls ours
/// redundant only where the cluster does it, and says where the cluster differs from
/// upstream's default for its version.
#[test]
fn check_never_contradicts_what_each_captured_apiserver_does() {
    use crate::capabilities::judge::captured;
    for label in captured::LABELS {
        let cluster = captured::capabilities(label);
        let git = cluster.git_version.clone().expect("a version");
        let check = version(&Ok(git.clone()), &Features::default(), &cluster);
        let keeps = cluster.keeps_max_unavailable().expect("known");
        let driver_off = "--max-unavailable-driver=false";
        assert_eq!(
            check.message.contains(driver_off),
            keeps,
            "{label}: {}",
            check.message
        );
        let retro = cluster
            .value(Name::RetroactiveDefaultClass)
            .expect("known")
            .is_yes();
        assert_eq!(
            check.message.contains("--retroactive-default-class=false"),
            retro,
            "{label}: {}",
            check.message
        );
        // A warning exactly where something of ours runs that the cluster does itself.
        assert_eq!(
            check.status == Status::Warning,
            keeps || retro,
            "{label}: {}",
            check.message
        );
        assert!(
            check.message.starts_with(&format!("{git}: natively ")),
            "{}",
            check.message
        );
        // Each capability line says what the captured answers said, learned by check itself.
        let round = crate::capabilities::probe::Round {
            git_version: Ok(git.clone()),
            outcomes: cluster
                .iter()
                .map(|(n, l)| (n, crate::capabilities::probe::Outcome::Learned(l.clone())))
                .collect(),
        };
        let (lines, merged) = capabilities(&round, &[]);
        assert_eq!(merged.keeps_max_unavailable(), Some(keeps));
        assert!(
            lines.iter().all(|l| l.status == Status::Ok),
            "{label}: {lines:?}"
        );
        let mu = lines
            .iter()
            .find(|l| l.name == "capability max-unavailable")
            .expect("a line");
        assert!(
            mu.message.starts_with(if keeps {
                "kept"
            } else if label == "v1.24" {
                "absent"
            } else {
                "dropped"
            }),
            "{label}: {}",
            mu.message
        );
    }
    // v1.35.3 as captured (a build whose gate is off, unlike upstream 1.35.0's default):
    // the line says so, and keeps our driver.
    let cluster = captured::capabilities("v1.35");
    let check = version(
        &Ok(cluster.git_version.clone().expect("v")),
        &Features {
            retroactive_default_class: false,
            ..Features::default()
        },
        &cluster,
    );
    assert_eq!(check.status, Status::Ok, "{}", check.message);
    assert!(
        check.message.contains("KEP-961: upstream 1.35.3's default is on (gate MaxUnavailableStatefulSet), this cluster does not (max-unavailable dropped (probe))"),
        "{}",
        check.message
    );
    assert!(
        check
            .message
            .contains("ours apply: KEP-4650, KEP-961, KEP-2804"),
        "{}",
        check.message
    );
}

#[test]
fn without_an_answer_the_version_line_gives_no_advice() {
    let unknown = Capabilities::default();
    let check = version(&Ok("v1.35.2".to_owned()), &Features::default(), &unknown);
    assert_eq!(check.status, Status::Ok, "{}", check.message);
    assert!(!check.message.contains("redundant"), "{}", check.message);
    assert!(
        check
            .message
            .contains("not known yet whether it does KEP-4650, KEP-961, KEP-3333"),
        "{}",
        check.message
    );
    let broken = version(
        &Err("connection refused".into()),
        &Features::default(),
        &unknown,
    );
    assert_eq!(broken.status, Status::Warning);
}

#[test]
fn capability_lines_come_from_check_and_else_from_the_replicas() {
    use crate::capabilities::probe::{Outcome, Round};
    use crate::capabilities::{Learned, Value};
    let round = Round {
        git_version: Ok("v1.36.2".into()),
        outcomes: vec![
            (
                Name::MaxUnavailable,
                Outcome::Learned(Learned::probed(Value::Dropped, "dry run")),
            ),
            (
                Name::RetroactiveDefaultClass,
                Outcome::NotTried("no class-less claim".into()),
            ),
            (
                Name::ExpansionRecovery,
                Outcome::NotTried("no expanding claim".into()),
            ),
            (
                Name::ClaimVolumeAttributesClass,
                Outcome::Failed("500".into()),
            ),
        ],
    };
    let leader = "[+]tls ok\n[+]capability max-unavailable kept (probe: dry-run create)\n[+]capability retroactive-default-class accepted (evidence: claim db/data was given class \"fast\")\n[!]capability expansion-recovery unknown (no bound claim with an expansion in flight)\nreadyz check passed\n";
    let (lines, merged) = capabilities(&round, &[("sa-1".into(), Ok(leader.into()))]);
    let line = |name: &str| {
        lines
            .iter()
            .find(|l| l.name == format!("capability {name}"))
            .expect(name)
    };
    let mu = line("max-unavailable");
    assert_eq!(mu.status, Status::Warning, "{}", mu.message);
    assert!(mu.message.contains("sa-1 says kept"), "{}", mu.message);
    assert_eq!(
        merged.value(Name::MaxUnavailable),
        Some(Value::Dropped),
        "check's own answer wins"
    );
    let retro = line("retroactive-default-class");
    assert_eq!(retro.status, Status::Ok);
    assert!(
        retro
            .message
            .starts_with("accepted (evidence: replica sa-1: evidence: claim db/data"),
        "{}",
        retro.message
    );
    assert!(
        retro.message.ends_with("as replica sa-1 learned it"),
        "{}",
        retro.message
    );
    assert_eq!(
        line("expansion-recovery").status,
        Status::Ok,
        "not tried: nothing needs it yet"
    );
    assert_eq!(
        line("claim-volume-attributes-class").status,
        Status::Warning,
        "a failure is said"
    );
    // The replicas line leaves capability lines to these.
    let replicas_line = replicas(&[("sa-1".into(), Ok(leader.into()))]).expect("a line");
    assert_eq!(
        replicas_line.status,
        Status::Ok,
        "{}",
        replicas_line.message
    );
    // Hostile readyz text: unknown names and values are skipped, nothing panics.
    assert!(replica_capabilities("[+]capability\n[+]capability x y\n[+]capability max-unavailable\n[+]capability max-unavailable 😀 (").iter().all(|c| c.value.is_none()));
}
