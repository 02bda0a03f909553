"""Chart checks: lint, schema validation of every rendered manifest, and the properties that
keep a webhook from blocking a cluster (scoping, timeouts, failure policy, least privilege)."""

from __future__ import annotations

import copy
import os
import re
import subprocess
from pathlib import Path

import celpy
import kubernetes_validate
import pytest
from helm_python import HelmError

from render import NAMESPACE, RELEASE, lint, notes, render

CERT_MANAGER = ("cert-manager.io/v1",)
KUBE_VERSIONS = ["v1.27.0", "v1.28.0", "v1.30.0", "v1.33.0"]
# (name, values, API versions the cluster serves, expected certificate mode)
MODES = [
    ("default", {}, (), "selfManaged"),
    ("auto-with-cert-manager", {}, CERT_MANAGER, "certManager"),
    ("certManager", {"certs": {"mode": "certManager"}}, CERT_MANAGER, "certManager"),
    ("selfManaged", {"certs": {"mode": "selfManaged"}}, CERT_MANAGER, "selfManaged"),
    ("monitoring", {"monitoring": {"serviceMonitor": {"enabled": True},
                                   "prometheusRule": {"enabled": True},
                                   "grafanaDashboard": {"enabled": True}}}, (), "selfManaged"),
]
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


def of_kind(docs, kind):
    return [d for d in docs if d["kind"] == kind]


def one(docs, kind):
    found = of_kind(docs, kind)
    assert len(found) == 1, f"{kind}: {len(found)}"
    return found[0]


def webhooks(docs):
    return [(d["kind"], w) for d in docs if d["kind"] in WEBHOOK_KINDS for w in d["webhooks"]]


def container(docs):
    return one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]


def rules(docs, kind):
    return [r for d in of_kind(docs, kind) for r in d["rules"]]


def grants(docs, kind, resource, verb):
    return any(
        resource in r["resources"] and verb in r["verbs"] for r in rules(docs, kind)
    )


@pytest.mark.parametrize("name,values,apis,mode", MODES, ids=[m[0] for m in MODES])
def test_lint_is_clean(name, values, apis, mode):
    report = lint(values)
    problems = [m for m in report["messages"] if m["severity"] >= 2] + report["errors"]
    assert not problems, problems


@pytest.mark.parametrize("kube", KUBE_VERSIONS)
@pytest.mark.parametrize("name,values,apis,mode", MODES, ids=[m[0] for m in MODES])
def test_every_manifest_matches_the_kubernetes_schema(name, values, apis, mode, kube):
    docs = render(values, kube_version=kube, api_versions=apis)
    schema_version = kube.lstrip("v")
    checked = 0
    for doc in docs:
        if doc["apiVersion"].startswith("cert-manager.io/"):
            continue  # no bundled schema; structure checked in test_cert_manager_chain
        if doc["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # validated against the pinned CRD schemas in test_monitoring.py
        # strict: unknown fields are errors, so a field the version lacks cannot slip in.
        kubernetes_validate.validate(doc, schema_version, strict=True)
        checked += 1
    assert checked >= 10


@pytest.mark.parametrize("name,values,apis,mode", MODES, ids=[m[0] for m in MODES])
def test_certificate_mode(name, values, apis, mode):
    docs = render(values, api_versions=apis)
    has_cert_manager = bool(of_kind(docs, "Certificate"))
    assert has_cert_manager == (mode == "certManager")
    args = container(docs)["args"]
    assert ("--self-managed-certs" in args) == (mode == "selfManaged")
    for kind, hook in webhooks(docs):
        assert "caBundle" not in hook["clientConfig"], f"{kind}: caBundle must not be rendered"
    for doc in docs:
        assert doc["kind"] != "Secret", "Helm must not generate certificates"
        annotations = doc["metadata"].get("annotations") or {}
        if doc["kind"] in WEBHOOK_KINDS:
            injected = annotations.get("cert-manager.io/inject-ca-from")
            if mode == "certManager":
                assert injected == f"{NAMESPACE}/{RELEASE}-tls"
            else:
                assert injected is None


def test_cert_manager_chain():
    docs = render({"certs": {"mode": "certManager"}}, api_versions=CERT_MANAGER)
    issuers = {d["metadata"]["name"]: d["spec"] for d in of_kind(docs, "Issuer")}
    certs = {d["metadata"]["name"]: d["spec"] for d in of_kind(docs, "Certificate")}
    ca = certs[f"{RELEASE}-ca"]
    assert ca["isCA"] is True
    assert issuers[ca["issuerRef"]["name"]] == {"selfSigned": {}}
    ca_issuer = issuers[f"{RELEASE}-ca"]
    assert ca_issuer == {"ca": {"secretName": ca["secretName"]}}
    serving = certs[f"{RELEASE}-tls"]
    assert serving["issuerRef"]["name"] == f"{RELEASE}-ca"
    assert serving["dnsNames"] == [
        RELEASE,
        f"{RELEASE}.{NAMESPACE}",
        f"{RELEASE}.{NAMESPACE}.svc",
        f"{RELEASE}.{NAMESPACE}.svc.cluster.local",
    ]
    volumes = one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert volumes[0]["secret"]["secretName"] == serving["secretName"]
    args = container(docs)["args"]
    assert "--tls-cert=/certs/tls.crt" in args and "--tls-key=/certs/tls.key" in args


@pytest.mark.parametrize("name,values,apis,mode", MODES, ids=[m[0] for m in MODES])
def test_webhook_scoping_and_safety(name, values, apis, mode):
    docs = render(values, api_versions=apis)
    found = webhooks(docs)
    assert [k for k, _ in found] == list(WEBHOOK_KINDS)
    for kind, hook in found:
        assert hook["admissionReviewVersions"] == ["v1"]
        assert hook["sideEffects"] == "None"
        assert 1 <= hook["timeoutSeconds"] <= 10
        assert hook["matchPolicy"] == "Equivalent"
        assert hook["failurePolicy"] == "Ignore"
        if kind == "MutatingWebhookConfiguration":
            assert hook["reinvocationPolicy"] == "IfNeeded"
        service = hook["clientConfig"]["service"]
        assert (service["name"], service["namespace"]) == (RELEASE, NAMESPACE)
        assert service["path"] == ("/mutate" if kind.startswith("Mutating") else "/validate")
        for rule in hook["rules"]:
            assert "*" not in str(rule)
            assert set(rule["operations"]) <= {"CREATE", "UPDATE"}
            assert (rule["apiGroups"], rule["resources"]) in [
                (["apps"], ["statefulsets"]),
                ([""], ["persistentvolumeclaims"]),
            ]
        expressions = hook["namespaceSelector"]["matchExpressions"]
        by_key = {e["key"]: e for e in expressions}
        names = by_key["kubernetes.io/metadata.name"]
        assert names["operator"] == "NotIn"
        assert {"kube-system", NAMESPACE} <= set(names["values"])
        ignore = by_key["stateful-admission.io/ignore"]
        assert (ignore["operator"], ignore["values"]) == ("NotIn", ["true"])


def test_release_namespace_is_excluded_whatever_it_is_called():
    docs = render(namespace="db-tools", release="sa")
    for _, hook in webhooks(docs):
        values = hook["namespaceSelector"]["matchExpressions"][0]["values"]
        assert values == ["kube-system", "db-tools"]


def test_extra_exclusions_and_selector_expressions_are_added():
    extra = {"key": "tier", "operator": "In", "values": ["data"]}
    docs = render(
        {"webhook": {"excludeNamespaces": ["monitoring", "kube-system"],
                     "namespaceSelectorExpressions": [extra]}}
    )
    for _, hook in webhooks(docs):
        expressions = hook["namespaceSelector"]["matchExpressions"]
        assert expressions[0]["values"] == ["kube-system", NAMESPACE, "monitoring"]
        assert expressions[-1] == extra


def test_failure_policy_and_timeout_come_from_values():
    docs = render(
        {"webhook": {"timeoutSeconds": 10, "mutating": {"failurePolicy": "Fail"}}}
    )
    by_kind = dict(webhooks(docs))
    assert by_kind["MutatingWebhookConfiguration"]["failurePolicy"] == "Fail"
    assert by_kind["ValidatingWebhookConfiguration"]["failurePolicy"] == "Ignore"
    assert {h["timeoutSeconds"] for _, h in webhooks(docs)} == {10}


@pytest.mark.parametrize(
    "values",
    [
        {"webhook": {"timeoutSeconds": 11}},
        {"webhook": {"timeoutSeconds": 0}},
        {"webhook": {"mutating": {"failurePolicy": "Sometimes"}}},
        {"certs": {"mode": "helm"}},
        {"webhook": {"matchConditions": "maybe"}},
        {"policy": {"admissionMode": "audit"}},
        {"controller": {"kubeApiQps": 0}},
        {"controller": {"kubeApiBurst": 0}},
        {"controller": {"mode": "audit"}},
    ],
    ids=["timeout-11", "timeout-0", "bad-failure-policy", "bad-cert-mode", "bad-match-mode",
         "bad-admission-mode", "qps-0", "burst-0", "bad-controller-mode"],
)
def test_bad_values_are_refused(values):
    with pytest.raises(HelmError):
        render(values)


def test_a_webhook_can_be_turned_off():
    docs = render({"webhook": {"validating": {"enabled": False}}})
    assert [d["kind"] for d in docs if d["kind"] in WEBHOOK_KINDS] == [
        "MutatingWebhookConfiguration"
    ]
    args = container(docs)["args"]
    assert not any(a.startswith("--validating-webhook-configuration") for a in args)
    assert not any(
        "validatingwebhookconfigurations" in r["resources"] for r in rules(docs, "ClusterRole")
    )


@pytest.mark.parametrize(
    "kube,mode,expected",
    [
        ("v1.27.9", "auto", False),
        ("v1.28.0", "auto", True),
        ("v1.30.2", "auto", True),
        ("v1.33.1-eks-1", "auto", True),
        ("v1.27.0", "always", True),
        ("v1.33.0", "never", False),
    ],
)
def test_match_conditions_only_where_supported(kube, mode, expected):
    docs = render({"webhook": {"matchConditions": mode}}, kube_version=kube)
    for kind, hook in webhooks(docs):
        assert ("matchConditions" in hook) == expected, kind


def _match_condition_program():
    docs = render(kube_version="v1.30.0")
    hook = dict(webhooks(docs))["MutatingWebhookConfiguration"]
    (condition,) = hook["matchConditions"]
    env = celpy.Environment()
    return env.program(env.compile(condition["expression"]))


def _statefulset(**changes):
    sts = {
        "metadata": {
            "name": "db",
            "annotations": {"deployment.kubernetes.io/revision": "1",
                            "stateful-admission.io/volume-claim-update-policy": "InPlace"},
        },
        "spec": {
            "replicas": 3,
            "updateStrategy": {"type": "RollingUpdate",
                               "rollingUpdate": {"partition": 0, "maxUnavailable": 1}},
            "template": {"spec": {"containers": [{"name": "db", "image": "db:1"}]}},
            "volumeClaimTemplates": [
                {"metadata": {"name": "data"},
                 "spec": {"resources": {"requests": {"storage": "1Gi"}}}}
            ],
        },
    }
    for path, value in changes.items():
        node = sts
        keys = path.split("__")
        for key in keys[:-1]:
            node = node[key]
        if value is None:
            node.pop(keys[-1], None)
        else:
            node[keys[-1]] = value
    return sts


MATCH_CASES = [
    # (name, resource, operation, old, new, expected: is the webhook called)
    ("pvc create", "persistentvolumeclaims", "CREATE", None, {"spec": {}}, True),
    ("pvc update", "persistentvolumeclaims", "UPDATE", {"spec": {}}, {"spec": {"x": 1}}, True),
    ("statefulset create", "statefulsets", "CREATE", None, _statefulset(), True),
    ("image bump only", "statefulsets", "UPDATE", _statefulset(),
     _statefulset(spec__template={"spec": {"containers": [{"name": "db", "image": "db:2"}]}}),
     False),
    ("nothing changed", "statefulsets", "UPDATE", _statefulset(), _statefulset(), False),
    ("foreign annotation", "statefulsets", "UPDATE", _statefulset(),
     _statefulset(metadata__annotations={
         "deployment.kubernetes.io/revision": "2",
         "stateful-admission.io/volume-claim-update-policy": "InPlace"}), False),
    ("template storage", "statefulsets", "UPDATE", _statefulset(),
     _statefulset(spec__volumeClaimTemplates=[
         {"metadata": {"name": "data"}, "spec": {"resources": {"requests": {"storage": "2Gi"}}}}]),
     True),
    ("templates removed", "statefulsets", "UPDATE", _statefulset(),
     _statefulset(spec__volumeClaimTemplates=None), True),
    ("maxUnavailable", "statefulsets", "UPDATE", _statefulset(),
     _statefulset(spec__updateStrategy={"type": "RollingUpdate",
                                        "rollingUpdate": {"partition": 0, "maxUnavailable": "50%"}}),
     True),
    ("maxUnavailable int to string", "statefulsets", "UPDATE", _statefulset(),
     _statefulset(spec__updateStrategy={"type": "RollingUpdate",
                                        "rollingUpdate": {"partition": 0, "maxUnavailable": "1"}}),
     True),
    ("maxUnavailable added", "statefulsets", "UPDATE",
     _statefulset(spec__updateStrategy={"type": "RollingUpdate"}), _statefulset(), True),
    ("partition", "statefulsets", "UPDATE", _statefulset(),
     _statefulset(spec__updateStrategy={"type": "RollingUpdate",
                                        "rollingUpdate": {"partition": 2, "maxUnavailable": 1}}),
     True),
    ("strategy to OnDelete", "statefulsets", "UPDATE", _statefulset(),
     _statefulset(spec__updateStrategy={"type": "OnDelete"}), True),
    ("replicas", "statefulsets", "UPDATE", _statefulset(), _statefulset(spec__replicas=5), True),
    ("our annotation changed", "statefulsets", "UPDATE", _statefulset(),
     _statefulset(metadata__annotations={
         "deployment.kubernetes.io/revision": "1",
         "stateful-admission.io/volume-claim-update-policy": "OnDelete"}), True),
    ("our annotation removed", "statefulsets", "UPDATE", _statefulset(),
     _statefulset(metadata__annotations={"deployment.kubernetes.io/revision": "1"}), True),
    ("annotations dropped entirely", "statefulsets", "UPDATE", _statefulset(),
     _statefulset(metadata__annotations=None), True),
    ("no annotations either side", "statefulsets", "UPDATE",
     _statefulset(metadata__annotations=None), _statefulset(metadata__annotations=None), False),
    # A set that asks for a budget with `{type: RollingUpdate}` and no `rollingUpdate` is sent
    # on every update, so that the webhook can add `rollingUpdate: {partition: 0}`.
    ("type-only strategy with a budget, image bump", "statefulsets", "UPDATE",
     _statefulset(spec__updateStrategy={"type": "RollingUpdate"},
                  metadata__annotations={"stateful-admission.io/max-unavailable": "2"}),
     _statefulset(spec__updateStrategy={"type": "RollingUpdate"},
                  metadata__annotations={"stateful-admission.io/max-unavailable": "2"},
                  spec__template={"spec": {"containers": [{"name": "db", "image": "db:2"}]}}),
     True),
    ("type-only strategy without a budget, image bump", "statefulsets", "UPDATE",
     _statefulset(spec__updateStrategy={"type": "RollingUpdate"}),
     _statefulset(spec__updateStrategy={"type": "RollingUpdate"},
                  spec__template={"spec": {"containers": [{"name": "db", "image": "db:2"}]}}),
     False),
    ("budget with a rollingUpdate block, image bump", "statefulsets", "UPDATE",
     _statefulset(metadata__annotations={"stateful-admission.io/max-unavailable": "2"}),
     _statefulset(metadata__annotations={"stateful-admission.io/max-unavailable": "2"},
                  spec__template={"spec": {"containers": [{"name": "db", "image": "db:2"}]}}),
     False),
]


@pytest.mark.parametrize(
    "name,resource,operation,old,new,expected", MATCH_CASES, ids=[c[0] for c in MATCH_CASES]
)
def test_match_condition_sends_only_relevant_statefulset_updates(
    name, resource, operation, old, new, expected
):
    program = _match_condition_program()
    activation = celpy.json_to_cel(
        {
            "request": {"resource": {"group": "", "version": "v1", "resource": resource},
                        "operation": operation},
            "object": copy.deepcopy(new),
            "oldObject": copy.deepcopy(old),
        }
    )
    assert bool(program.evaluate(dict(activation))) is expected


def _all_rbac(docs):
    return [r for d in docs if d["kind"] in ("ClusterRole", "Role") for r in d["rules"]]


@pytest.mark.parametrize("name,values,apis,mode", MODES, ids=[m[0] for m in MODES])
def test_rbac_has_no_wildcards_and_names_what_it_patches(name, values, apis, mode):
    docs = render(values, api_versions=apis)
    for rule in _all_rbac(docs):
        for field in ("apiGroups", "resources", "verbs", "resourceNames"):
            assert "*" not in rule.get(field, []), rule
        if any(r.endswith("webhookconfigurations") for r in rule["resources"]):
            assert rule["resourceNames"] == [RELEASE]
        if "secrets" in rule["resources"]:
            assert mode == "selfManaged"
            # Only create cannot be restricted by name.
            assert rule.get("resourceNames") == [f"{RELEASE}-certs"] or rule["verbs"] == ["create"]
    role = one(docs, "Role")
    assert role["metadata"]["namespace"] == NAMESPACE
    binding = one(docs, "RoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    cluster_binding = one(docs, "ClusterRoleBinding")
    subject = cluster_binding["subjects"][0]
    assert (subject["name"], subject["namespace"]) == (RELEASE, NAMESPACE)
    assert not any(
        r["resources"] == ["secrets"] for r in rules(docs, "ClusterRole")
    ), "no cluster-wide Secret access"


def _feature_off(feature):
    return {"controller": {feature: {"enabled": False}}}


# (feature switch, (kind, resource, verb) granted only while it is on)
FEATURE_GRANTS = [
    ("converge", ("Role", "configmaps", "create")),
    ("converge", ("ClusterRole", "statefulsets", "delete")),
    ("conditions", ("ClusterRole", "statefulsets/status", "patch")),
    ("maxUnavailable", ("ClusterRole", "pods", "delete")),
    ("claimRollout", ("ClusterRole", "pods/eviction", "create")),
]


def test_the_capability_probes_may_dry_run_create_where_the_controller_runs():
    for resource in ("statefulsets", "persistentvolumeclaims"):
        assert grants(render(), "Role", resource, "create")
        assert grants(render(_feature_off("maxUnavailable")), "Role", resource, "create")
    webhook_only = render({"controller": {"enabled": False}, "certs": {"mode": "certManager"}},
                          api_versions=CERT_MANAGER)
    args = container(webhook_only)["args"]
    assert "--capability-probe-interval=1h" in args
    stated = render({"capabilities": {"stated": ["claim-volume-attributes-class=dropped"]}})
    assert "--capability=claim-volume-attributes-class=dropped" in container(stated)["args"]


@pytest.mark.parametrize("feature,grant", FEATURE_GRANTS, ids=[f"{f}-{g[1]}-{g[2]}" for f, g in FEATURE_GRANTS])
def test_rbac_follows_each_feature_switch(feature, grant):
    kind, resource, verb = grant
    assert grants(render(), kind, resource, verb)
    assert not grants(render(_feature_off(feature)), kind, resource, verb)


def test_a_journaled_convergence_can_be_finished_after_converge_is_turned_off():
    converge_off = render(_feature_off("converge"))
    assert not grants(converge_off, "Role", "configmaps", "create"), "no new journals"
    assert not grants(converge_off, "ClusterRole", "statefulsets", "delete"), "no new deletes"
    assert grants(converge_off, "Role", "configmaps", "delete")
    assert grants(converge_off, "ClusterRole", "statefulsets", "create")
    both_off = render({"controller": {"claimRollout": {"enabled": False},
                                      "converge": {"enabled": False}}})
    assert not grants(both_off, "Role", "configmaps", "delete")
    assert not grants(both_off, "ClusterRole", "statefulsets", "create")


def test_a_recreated_statefulset_gets_its_field_ownership_back_without_rollout_or_conditions():
    converge_only = render({"controller": {"claimRollout": {"enabled": False},
                                           "conditions": {"enabled": False}}})
    assert grants(converge_only, "ClusterRole", "statefulsets", "patch")
    nothing = render({"controller": {"claimRollout": {"enabled": False},
                                     "conditions": {"enabled": False},
                                     "converge": {"enabled": False}}})
    assert not grants(nothing, "ClusterRole", "statefulsets", "patch")


def test_claim_patching_needs_rollout_or_retroactive_class():
    both_off = {"controller": {"claimRollout": {"enabled": False},
                               "retroactiveDefaultStorageClass": {"enabled": False}}}
    assert grants(render(_feature_off("claimRollout")), "ClusterRole", "persistentvolumeclaims", "patch")
    assert not grants(render(both_off), "ClusterRole", "persistentvolumeclaims", "patch")


def test_webhook_only_install_can_only_read():
    docs = render({"controller": {"enabled": False}, "certs": {"mode": "certManager"}},
                  api_versions=CERT_MANAGER)
    verbs = {v for r in _all_rbac(docs) for v in r["verbs"]}
    assert verbs == {"get", "list", "watch"}
    assert not of_kind(docs, "Role")
    args = container(docs)["args"]
    assert "--controller=false" in args
    assert not any(a.startswith("--converge") for a in args)


def test_deployment_is_highly_available_and_hardened():
    docs = render({"priorityClassName": "system-cluster-critical"})
    deployment = one(docs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    c = container(docs)
    assert deployment["spec"]["replicas"] == 2
    assert one(docs, "PodDisruptionBudget")["spec"]["minAvailable"] == 1
    assert pod["priorityClassName"] == "system-cluster-critical"
    anti = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"webhook": 8443, "probes": 8080}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "probes"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "probes"}
    assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]
    assert "--shutdown-delay=5s" in c["args"]
    assert pod["terminationGracePeriodSeconds"] > 5 + 25
    service = one(docs, "Service")
    assert service["spec"]["ports"][0]["targetPort"] == "webhook"
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert not any(d["kind"] == "Deployment" and "priorityClassName" in
                   d["spec"]["template"]["spec"] for d in render())


def test_anti_affinity_modes():
    hard = one(render({"podAntiAffinity": "hard"}), "Deployment")["spec"]["template"]["spec"]
    assert "requiredDuringSchedulingIgnoredDuringExecution" in hard["affinity"]["podAntiAffinity"]
    none = one(render({"podAntiAffinity": "none"}), "Deployment")["spec"]["template"]["spec"]
    assert "affinity" not in none


def test_self_managed_args_name_the_rendered_objects():
    docs = render()
    args = container(docs)["args"]
    names = {d["kind"]: d["metadata"]["name"] for d in docs if d["kind"] in WEBHOOK_KINDS}
    assert f"--mutating-webhook-configuration={names['MutatingWebhookConfiguration']}" in args
    assert f"--validating-webhook-configuration={names['ValidatingWebhookConfiguration']}" in args
    assert f"--service-name={one(docs, 'Service')['metadata']['name']}" in args
    assert f"--cert-namespace={NAMESPACE}" in args
    volumes = one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert "emptyDir" in volumes[0]


def test_controller_values_reach_the_flags():
    args = container(render({"controller": {"resync": "2m", "converge": {"enabled": False},
                                            "leaderElection": {"leaseName": "sa-lock"}}}))["args"]
    assert f"--controller-namespace={NAMESPACE}" in args
    assert "--lease-name=sa-lock" in args
    assert "--resync=2m" in args
    assert "--converge=false" in args
    assert "--claim-rollout=true" in args
    assert "--kube-api-qps=20" in args and "--kube-api-burst=30" in args
    assert "--controller-mode=enforce" in args
    observing = container(render({"controller": {"mode": "observe"}}))["args"]
    assert "--controller-mode=observe" in observing
    limited = container(render({"controller": {"kubeApiQps": 5.5, "kubeApiBurst": 8}}))["args"]
    assert "--kube-api-qps=5.5" in limited and "--kube-api-burst=8" in limited
    lease_rules = [r for r in rules(render({"controller": {"leaderElection": {"leaseName": "sa-lock"}}}), "Role")
                   if r["resources"] == ["leases"] and "resourceNames" in r]
    assert lease_rules[0]["resourceNames"] == ["sa-lock"]


def test_policy_values_reach_the_flags():
    args = container(render({"policy": {"strictMaxUnavailable": True,
                                        "maxUnavailableFallback": False,
                                        "expansionRecovery": False}}))["args"]
    assert "--strict-max-unavailable" in args
    assert "--admission-mode=enforce" in container(render())["args"]
    assert "--admission-mode=warn" in container(render({"policy": {"admissionMode": "warn"}}))["args"]
    assert "--max-unavailable-fallback=false" in args
    assert "--expansion-recovery=false" in args
    assert "--strict-max-unavailable" not in container(render())["args"]
    assert (
        "--statefulset-controller-users=system:serviceaccount:kube-system:statefulset-controller,"
        "system:kube-controller-manager"
    ) in container(render())["args"]
    users = {"policy": {"statefulsetControllerUsers": ["system:serviceaccount:kube-system:sts",
                                                       "k3s-controller"]}}
    assert ("--statefulset-controller-users=system:serviceaccount:kube-system:sts,k3s-controller"
            in container(render(users))["args"])


# Flags of `serve` the chart deliberately never sets.
NOT_FOR_THE_CHART = {
    "--help", "--state", "--self-signed", "--self-signed-dir", "--self-signed-name",
    "--tls-cert", "--tls-key",  # set in certManager mode only
    "--controller-identity",  # defaults to HOSTNAME, the pod name
}


def _binary() -> Path | None:
    path = os.environ.get("STATEFUL_ADMISSION_BIN")
    return Path(path) if path else None


@pytest.mark.skipif(_binary() is None, reason="STATEFUL_ADMISSION_BIN not set (check.sh sets it)")
def test_every_rendered_flag_exists_and_every_serve_flag_is_covered():
    help_text = subprocess.run(
        [str(_binary()), "serve", "--help"], check=True, capture_output=True, text=True
    ).stdout
    known = set(re.findall(r"(--[a-z0-9-]+)", help_text))
    rendered = set()
    for values, apis in [({}, ()), ({"certs": {"mode": "certManager"}}, CERT_MANAGER),
                         ({"policy": {"strictMaxUnavailable": True}}, ()),
                         ({"capabilities": {"stated": ["max-unavailable=dropped"]}}, ())]:
        for arg in container(render(values, api_versions=apis))["args"][1:]:
            rendered.add(arg.split("=", 1)[0])
    assert rendered <= known, f"flags the binary lacks: {rendered - known}"
    assert known - NOT_FOR_THE_CHART <= rendered, (
        f"serve flags without a chart value: {known - NOT_FOR_THE_CHART - rendered}"
    )


def test_notes_tell_how_to_verify_the_install():
    text = notes()
    assert (f"stateful-admission check --namespace {NAMESPACE} --release {RELEASE}\n"
            in text), text
    custom = notes({"controller": {"leaderElection": {"leaseName": "sa-lock"}},
                    "service": {"port": 8443}}, release="db", namespace="ops")
    assert ("stateful-admission check --namespace ops --release db --lease-name sa-lock "
            "--service-port 8443\n") in custom, custom
