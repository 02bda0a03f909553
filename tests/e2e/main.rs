//! The real-cluster suite: the release binary's `serve` (webhook and controller) against a real
//! kube-apiserver and kube-controller-manager, as a user meets them.
//!
//! Reads `KUBECONFIG` (a cluster-admin context) and asks the cluster what it does (discovery,
//! OpenAPI, dry runs: `support/caps.rs`), assuming no version. Each scenario runs on the first
//! cluster that has what it needs: `KUBECONFIG`, else `E2E_GATES_KUBECONFIG` when set (a second
//! cluster, e.g. with the `MaxUnavailableStatefulSet` and `VolumeAttributesClass` gates the
//! other way); where neither has it, the scenario is reported `ignored` with the reason (what
//! the cluster lacks). Without `KUBECONFIG` every scenario is reported `ignored` with the
//! reason, never passed. The `versions_*` trials need no cluster: they hold the table of which
//! scenario runs where on each captured apiserver (`versions.rs`). README.md ("Tests against a
//! real cluster") says how to run it and what it creates.
//!
//! The `agreement_*` trials run the bodies of tests/agreement (which tests/it runs against the
//! fake API server) on the `KUBECONFIG` cluster with nothing but a client and a namespace:
//! no install, no release binary.
//!
//! Scenarios run one at a time (they share cluster-wide objects: the webhook configurations,
//! StorageClasses), each in namespaces of its own that are removed afterwards. `serve` runs as
//! a child process on loopback with the chart's ServiceAccount token and RBAC, behind a local
//! TCP front that plays the Service (it forwards to the ready replicas); the webhook
//! configurations are the chart's, in URL mode. The test plays the kubelet, the external
//! provisioner and the external resizer.

#[path = "../agreement/mod.rs"]
mod agreement;
#[path = "../gitops/mod.rs"]
mod gitops;
mod scenarios;
mod support;
mod versions;

use std::process::ExitCode;

use libtest_mimic::{Arguments, Completion, Trial};

fn main() -> ExitCode {
    let mut args = Arguments::from_args();
    // One scenario at a time: they share the webhook configurations and cluster-wide classes.
    args.test_threads = Some(1);
    let skip = support::Env::skip_reason();
    if let Some(why) = &skip {
        eprintln!("e2e: every scenario is skipped: {why}");
    }
    // Every name the suite gives its objects, checked against the apiserver's limits.
    let mut names: Vec<String> = scenarios::all().iter().map(|s| s.name.to_owned()).collect();
    names.extend(
        agreement::all()
            .iter()
            .map(|(n, _)| format!("agreement_{n}")),
    );
    names.push("agreement-expect".to_owned());
    let mut trials: Vec<Trial> = scenarios::all()
        .into_iter()
        .map(|scenario| {
            let skip = skip.clone();
            Trial::ignorable_test(scenario.name, move || match skip {
                Some(why) => Ok(Completion::ignored_with(why)),
                None => support::run_scenario(&scenario),
            })
        })
        .collect();
    // The agreement bodies (tests/agreement), also run against the fake in tests/it: a client
    // and a namespace each, no install and no `serve`.
    trials.extend(agreement::all().into_iter().map(|(name, body)| {
        let skip = skip.clone();
        let trial = format!("agreement_{name}");
        Trial::ignorable_test(trial.clone(), move || match skip {
            Some(why) => Ok(Completion::ignored_with(why)),
            None => support::run_agreement(&trial, body).map(|()| Completion::Completed),
        })
    }));
    // What the cluster was found to do is what one captured version does: the fake's profile of
    // that version is the one that speaks for this cluster.
    let skip_expect = skip.clone();
    trials.push(Trial::ignorable_test(
        "agreement_expectations_match_a_profile",
        move || match skip_expect {
            Some(why) => Ok(Completion::ignored_with(why)),
            None => support::expectations_match_a_profile().map(|()| Completion::Completed),
        },
    ));
    trials.push(Trial::test(
        "names_within_the_apiservers_limits",
        move || {
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            support::names_within_limits(&names)
        },
    ));
    // Which scenario runs where on each captured apiserver: no cluster needed.
    trials.extend(versions::trials());
    libtest_mimic::run(&args, trials).exit_code()
}
