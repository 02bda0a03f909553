//! The GitOps health checks as users install them: Argo CD's `health_test.yaml` cases run
//! through the check as Argo CD's own test harness runs a `resource_customizations` check, and
//! `stateful-admission gitops` printing each check from the binary. (The table the test data
//! comes from, with `status`'s judge and the Flux expressions beside it, is in
//! src/gitops/tests.rs.)

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

use crate::gitops;

/// Where the check and its test data live.
const DIR: &str = "gitops/argocd/resource_customizations/apps/StatefulSet";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn argocd_health_test_cases_pass() {
    let dir = repo().join(DIR);
    let text = std::fs::read_to_string(dir.join("health_test.yaml")).expect("health_test.yaml");
    let tests: Value = serde_saphyr::from_str(&text).expect("YAML");
    let tests = tests["tests"].as_array().expect("tests");
    assert!(tests.len() > 25, "{} cases", tests.len());
    let mut statuses = std::collections::BTreeSet::new();
    for test in tests {
        let input = test["inputPath"].as_str().expect("inputPath");
        let object: Value =
            serde_saphyr::from_str(&std::fs::read_to_string(dir.join(input)).expect("test data"))
                .expect("test data is YAML");
        let (status, message) = gitops::argocd_health(&object).expect("the check runs");
        assert_eq!(
            (status.as_str(), message.as_str()),
            (
                test["healthStatus"]["status"].as_str().unwrap_or(""),
                test["healthStatus"]["message"].as_str().unwrap_or("")
            ),
            "{input}"
        );
        statuses.insert(status);
    }
    assert_eq!(
        statuses.into_iter().collect::<Vec<_>>(),
        ["Degraded", "Healthy", "Progressing"]
    );
}

fn gitops_command(what: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_stateful-admission"))
        .args(["gitops", what])
        .output()
        .expect("run");
    assert!(out.status.success(), "{what}: {out:?}");
    String::from_utf8(out.stdout).expect("UTF-8")
}

#[test]
fn the_gitops_command_prints_each_check() {
    assert_eq!(gitops_command("argocd-lua"), gitops::HEALTH_LUA);
    let cm: Value = serde_saphyr::from_str(&gitops_command("argocd-cm")).expect("YAML");
    let data = &cm["data"];
    assert_eq!(
        data["resource.customizations.health.apps_StatefulSet"]
            .as_str()
            .map(str::trim_end),
        Some(gitops::HEALTH_LUA.trim_end())
    );
    assert_eq!(
        data["resource.customizations.useOpenLibs.apps_StatefulSet"], "true",
        "the check reads JSON with the string library"
    );
    let values: Value = serde_saphyr::from_str(&gitops_command("argocd-values")).expect("YAML");
    assert_eq!(&values["configs"]["cm"], data);
    let flux: Value = serde_saphyr::from_str(&gitops_command("flux")).expect("YAML");
    let shipped: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(repo().join("gitops/flux/statefulset-health.yaml"))
            .expect("the Flux file"),
    )
    .expect("YAML");
    assert_eq!(flux["spec"]["healthCheckExprs"], shipped);
    for key in ["current", "inProgress", "failed"] {
        assert!(
            shipped[0][key].as_str().is_some_and(|e| e.len() > 100),
            "{key}"
        );
    }
    // A wrong word is a usage error.
    let out = Command::new(env!("CARGO_BIN_EXE_stateful-admission"))
        .args(["gitops", "spinnaker"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}
