"""Monitoring parts of the chart (ServiceMonitor, PrometheusRule, Grafana dashboard): rendered,
validated offline against the Prometheus Operator's CRD schemas, every query parsed as PromQL
and checked against the metrics the binary exports. And the values documentation: the README's
Parameters tables are what the generator makes of values.yaml, and every value has a type."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path

import jsonschema
import kubernetes_validate
import promql_parser as promql
import pytest
import yaml

from render import CHART, NAMESPACE, RELEASE, render

HERE = Path(__file__).resolve().parent
DASHBOARD = CHART / "dashboards" / "stateful-admission.json"
ALL_ON = {
    "monitoring": {
        "serviceMonitor": {"enabled": True},
        "prometheusRule": {"enabled": True},
        "grafanaDashboard": {"enabled": True},
    }
}
SELECTOR = {"job": f"{RELEASE}-metrics", "namespace": NAMESPACE}
# Alert → section of docs/runbooks.md its runbook_url points at.
RUNBOOKS = {
    "StatefulAdmissionWebhookErrors": "webhook-errors",
    "StatefulAdmissionWebhookLatency": "webhook-latency",
    "StatefulAdmissionCertificateExpiry": "certificate-expiry",
    "StatefulAdmissionRolloutPastDeadline": "rollout-past-deadline",
    "StatefulAdmissionConvergenceJournalStuck": "convergence-journal-stuck",
    "StatefulAdmissionControllerWithoutLeader": "controller-without-leader",
}


def values(**monitoring):
    merged = copy.deepcopy(ALL_ON)
    for part, settings in monitoring.items():
        merged["monitoring"][part].update(settings)
    return merged


def of_kind(docs, kind):
    return [d for d in docs if d["kind"] == kind]


def one(docs, kind):
    (doc,) = of_kind(docs, kind)
    return doc


# --- CRD schemas -------------------------------------------------------------------------


def _strict(schema):
    """The CRD's structural schema, with unknown fields refused (the apiserver would prune
    them silently, so a misspelt field would be lost without a word)."""
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items()}
    if (
        out.get("type") == "object"
        and "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@cache
def crd_validator(kind):
    plural = {"ServiceMonitor": "servicemonitors", "PrometheusRule": "prometheusrules"}[kind]
    crd = yaml.safe_load((HERE / "crds" / f"monitoring.coreos.com_{plural}.yaml").read_text())
    assert crd["spec"]["names"]["kind"] == kind
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema = _strict(version["schema"]["openAPIV3Schema"])
    return jsonschema.Draft7Validator(schema)


def crd_errors(doc):
    assert doc["apiVersion"] == "monitoring.coreos.com/v1"
    return sorted(
        f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
        for e in crd_validator(doc["kind"]).iter_errors(doc)
    )


# --- PromQL and the metric catalogue ------------------------------------------------------


@cache
def catalogue():
    """Sample names the binary exports → (family, type), from tests/metrics.txt, which a Rust
    test keeps equal to the metrics the code registers."""
    names = {}
    for line in (HERE / "metrics.txt").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        family, kind = line.split()
        suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"]}.get(kind, [""])
        for suffix in suffixes:
            names[family + suffix] = (family, kind)
    assert len(names) > 25
    return names


def selectors(expr):
    """Every vector selector of a parsed expression, and the range-function calls."""
    found, ranged = [], []

    def visit(node):
        if isinstance(node, promql.VectorSelector):
            found.append(node)
        if isinstance(node, promql.Call) and node.func.name in ("rate", "irate", "increase"):
            ranged.extend(a.vector_selector.name for a in node.args if isinstance(a, promql.MatrixSelector))

    promql.walk(expr, visit)
    return found, ranged


def check_query(query):
    """Parses `query` (PromQL types included) and returns the metric names it reads; fails on
    a name the binary does not export, or rate/increase of something that is not a counter."""
    expr = promql.parse(query)
    found, ranged = selectors(expr)
    names = [s.name for s in found]
    assert names, f"no metric in {query}"
    unknown = [n for n in names if n not in catalogue()]
    assert not unknown, f"not exported by the binary: {unknown} in {query}"
    for name in ranged:
        kind = catalogue()[name][1]
        # A histogram's _bucket, _sum and _count are counters too.
        assert kind in ("counter", "histogram"), f"rate/increase of {name}, a {kind}"
    return found


def test_the_checks_themselves_refuse_what_they_should():
    with pytest.raises(ValueError):
        promql.parse("sum(rate(stateful_admission_admission_requests_total[5m])")
    with pytest.raises(ValueError):
        promql.parse("rate(stateful_admission_admission_requests_total)")
    with pytest.raises(AssertionError, match="not exported"):
        check_query("stateful_admission_admission_requests")  # a counter is read as _total
    with pytest.raises(AssertionError, match="not exported"):
        check_query("rate(stateful_admission_controller_leader_total[5m])")
    with pytest.raises(AssertionError, match="rate/increase"):
        check_query("rate(stateful_admission_controller_leader[5m])")
    monitor = one(render(ALL_ON), "ServiceMonitor")
    typo = copy.deepcopy(monitor)
    typo["spec"]["endpoints"][0]["scrapeInterval"] = "30s"
    assert any("scrapeInterval" in e for e in crd_errors(typo))
    bad_interval = copy.deepcopy(monitor)
    bad_interval["spec"]["endpoints"][0]["interval"] = "30 seconds"
    assert crd_errors(bad_interval)
    rule = one(render(ALL_ON), "PrometheusRule")
    no_expr = copy.deepcopy(rule)
    del no_expr["spec"]["groups"][0]["rules"][0]["expr"]
    assert any("expr" in e for e in crd_errors(no_expr))


# --- Rendering ------------------------------------------------------------------------------


def test_monitoring_is_off_by_default():
    docs = render()
    kinds = {d["kind"] for d in docs}
    assert not kinds & {"ServiceMonitor", "PrometheusRule"}
    assert not [d for d in of_kind(docs, "ConfigMap")]
    assert [d["metadata"]["name"] for d in of_kind(docs, "Service")] == [RELEASE]


@pytest.mark.parametrize("kube", ["v1.27.0", "v1.33.0"])
def test_monitoring_manifests_match_their_schemas(kube):
    docs = render(ALL_ON, kube_version=kube)
    checked = set()
    for doc in docs:
        if doc["apiVersion"] == "monitoring.coreos.com/v1":
            assert crd_errors(doc) == [], doc["kind"]
            checked.add(doc["kind"])
        elif doc["kind"] in ("Service", "ConfigMap"):
            kubernetes_validate.validate(doc, kube.lstrip("v"), strict=True)
    assert checked == {"ServiceMonitor", "PrometheusRule"}


def test_service_monitor_scrapes_the_probe_port_of_the_webhook_pods_only():
    docs = render(values(serviceMonitor={
        "labels": {"release": "kube-prometheus-stack"},
        "interval": "15s",
        "scrapeTimeout": "10s",
        "metricRelabelings": [{"action": "drop", "regex": "go_.*", "sourceLabels": ["__name__"]}],
    }))
    monitor = one(docs, "ServiceMonitor")
    assert monitor["metadata"]["namespace"] == NAMESPACE
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    (endpoint,) = monitor["spec"]["endpoints"]
    assert (endpoint["port"], endpoint["path"], endpoint["interval"], endpoint["scrapeTimeout"]) == (
        "metrics", "/metrics", "15s", "10s")
    assert endpoint["metricRelabelings"][0]["action"] == "drop"
    assert crd_errors(monitor) == []

    services = {s["metadata"]["name"]: s for s in of_kind(docs, "Service")}
    wanted = monitor["spec"]["selector"]["matchLabels"]
    selected = [n for n, s in services.items() if wanted.items() <= s["metadata"]["labels"].items()]
    assert selected == [SELECTOR["job"]], "the metrics Service alone, not the webhook's"
    (port,) = services[SELECTOR["job"]]["spec"]["ports"]
    assert (port["name"], port["targetPort"]) == ("metrics", "probes")
    deployment = one(docs, "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "probes", "containerPort": 8080, "protocol": "TCP"} in container["ports"]
    assert services[SELECTOR["job"]]["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]


def test_metrics_service_name_keeps_its_suffix_when_the_full_name_is_long():
    long_name = "x" * 63
    docs = render({**ALL_ON, "fullnameOverride": long_name})
    names = sorted(s["metadata"]["name"] for s in of_kind(docs, "Service"))
    assert names == ["x" * 55 + "-metrics", long_name]
    assert all(len(n) <= 63 for n in names)
    (dashboard,) = of_kind(docs, "ConfigMap")
    assert len(dashboard["metadata"]["name"]) <= 63


# --- Alerts ---------------------------------------------------------------------------------


def rules(docs):
    return {r["alert"]: r for r in one(docs, "PrometheusRule")["spec"]["groups"][0]["rules"]}


def test_alerts_are_valid_promql_on_exported_metrics_with_runbooks():
    rule = one(render(ALL_ON), "PrometheusRule")
    assert crd_errors(rule) == []
    alerts = rules(render(ALL_ON))
    assert set(alerts) == set(RUNBOOKS)
    for name, alert in alerts.items():
        found = check_query(alert["expr"])
        for selector in found:
            matchers = {(m.name, m.value) for m in selector.matchers.matchers
                        if m.op == promql.MatchOp.Equal}
            assert set(SELECTOR.items()) <= matchers, f"{name}: {selector} misses the release's selector"
        annotations = alert["annotations"]
        assert annotations["runbook_url"] == f"docs/runbooks.md#{RUNBOOKS[name]}"
        assert annotations["summary"] and annotations["description"]
        for text in annotations.values():
            assert text.count("{{") == text.count("}}"), text
        assert alert["labels"]["severity"] in ("warning", "critical")
        assert re.fullmatch(r"\d+m", alert["for"])


def metric_names(query):
    return {s.name for s in check_query(query)}


def test_each_alert_reads_what_it_is_about():
    alerts = rules(render(ALL_ON))
    assert metric_names(alerts["StatefulAdmissionWebhookErrors"]["expr"]) == {
        "stateful_admission_admission_requests_rejected_total",
        "stateful_admission_admission_requests_total"}
    assert metric_names(alerts["StatefulAdmissionWebhookLatency"]["expr"]) == {
        "stateful_admission_admission_request_duration_seconds_bucket"}
    assert metric_names(alerts["StatefulAdmissionCertificateExpiry"]["expr"]) == {
        "stateful_admission_serving_certificate_expiry_timestamp_seconds",
        "stateful_admission_certificate_expiry_timestamp_seconds"}
    assert metric_names(alerts["StatefulAdmissionRolloutPastDeadline"]["expr"]) == {
        "stateful_admission_statefulsets_past_progress_deadline"}
    assert metric_names(alerts["StatefulAdmissionConvergenceJournalStuck"]["expr"]) == {
        "stateful_admission_convergence_journal_oldest_timestamp_seconds"}
    leader = alerts["StatefulAdmissionControllerWithoutLeader"]["expr"]
    assert metric_names(leader) == {"stateful_admission_controller_leader"}
    absent = [c for c in _calls(promql.parse(leader)) if c.func.name == "absent"]
    assert len(absent) == 1, "a controller that is not scraped at all has no leader either"


def _calls(expr):
    calls = []
    promql.walk(expr, lambda n: calls.append(n) if isinstance(n, promql.Call) else None)
    return calls


def test_alert_thresholds_severity_selector_and_labels_come_from_values():
    docs = render({
        **values(prometheusRule={
            "webhookErrorRatio": 0.2, "webhookLatencySeconds": 1, "certificateExpiryDays": 7,
            "journalAgeMinutes": 30, "selector": 'job="sa",cluster="eu-1"',
            "runbookBaseURL": "https://docs.example/runbooks", "alertLabels": {"team": "storage"},
            "labels": {"release": "kube-prometheus-stack"}}),
        "webhook": {"validating": {"failurePolicy": "Fail"}},
    })
    rule = one(docs, "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    alerts = rules(docs)
    assert alerts["StatefulAdmissionWebhookErrors"]["expr"].rstrip().endswith("> 0.2")
    assert alerts["StatefulAdmissionWebhookErrors"]["labels"]["severity"] == "critical"
    assert alerts["StatefulAdmissionWebhookLatency"]["expr"].rstrip().endswith("> 1")
    assert alerts["StatefulAdmissionCertificateExpiry"]["expr"].count("< 7 * 86400") == 2
    assert alerts["StatefulAdmissionConvergenceJournalStuck"]["expr"].rstrip().endswith("> 30 * 60")
    for name, alert in alerts.items():
        assert alert["labels"]["team"] == "storage"
        assert alert["annotations"]["runbook_url"] == f"https://docs.example/runbooks#{RUNBOOKS[name]}"
        for selector in check_query(alert["expr"]):
            matchers = {(m.name, m.value) for m in selector.matchers.matchers}
            assert {("job", "sa"), ("cluster", "eu-1")} <= matchers
    assert rules(render(ALL_ON))["StatefulAdmissionWebhookErrors"]["labels"]["severity"] == "warning"


@pytest.mark.parametrize(
    "controller,absent",
    [
        ({"enabled": False}, {"StatefulAdmissionRolloutPastDeadline",
                              "StatefulAdmissionConvergenceJournalStuck",
                              "StatefulAdmissionControllerWithoutLeader"}),
        ({"conditions": {"enabled": False}}, {"StatefulAdmissionRolloutPastDeadline"}),
        ({"claimRollout": {"enabled": False}, "converge": {"enabled": False}},
         {"StatefulAdmissionConvergenceJournalStuck"}),
        ({"converge": {"enabled": False}}, set()),
    ],
    ids=["controller-off", "conditions-off", "rollout-and-converge-off", "converge-off"],
)
def test_controller_alerts_follow_the_features_that_export_their_metrics(controller, absent):
    alerts = set(rules(render({**ALL_ON, "controller": controller})))
    assert alerts == set(RUNBOOKS) - absent


# --- Dashboard ------------------------------------------------------------------------------


def dashboard():
    return json.loads(DASHBOARD.read_text())


def panels(board):
    for panel in board["panels"]:
        yield panel
        yield from panel.get("panels", [])


def grafana_query(expr):
    """A Grafana query as Prometheus receives it: variables replaced by sample values."""
    for variable, value in [("$__rate_interval", "5m"), ("$namespace", NAMESPACE), ("$job", "job")]:
        expr = expr.replace(variable, value)
    assert "$" not in expr, expr
    return expr


def test_dashboard_queries_are_valid_promql_on_exported_metrics():
    board = dashboard()
    used = set()
    targets = [(p, t) for p in panels(board) for t in p.get("targets", [])]
    assert len(targets) >= 30
    for panel, target in targets:
        found = check_query(grafana_query(target["expr"]))
        used |= {s.name for s in found}
        for selector in found:
            matchers = {(m.name, m.value) for m in selector.matchers.matchers}
            assert {("namespace", NAMESPACE), ("job", "job")} <= matchers, (
                f"{panel['title']}: {target['expr']} is not filtered by the variables")
        assert target["datasource"]["uid"] == "${datasource}"
    families = {catalogue()[n][0] for n in used}
    every = {family for family, _ in catalogue().values()}
    assert families == every, f"families on no panel: {sorted(every - families)}"
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            (metric,) = re.findall(r"label_values\((\w+)", variable["query"]["query"])
            assert metric in catalogue()


def test_dashboard_layout_is_sound():
    board = dashboard()
    assert board["uid"] == "stateful-admission"
    ids = [p["id"] for p in panels(board)]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    cells = set()
    for panel in panels(board):
        g = panel["gridPos"]
        assert g["x"] + g["w"] <= 24, panel["title"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & mine, f"{panel['title']} overlaps another panel"
        cells |= mine
        assert panel["title"]


def test_dashboard_config_map_is_labelled_for_the_sidecar():
    docs = render(ALL_ON)
    (config_map,) = of_kind(docs, "ConfigMap")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["namespace"] == NAMESPACE
    (text,) = config_map["data"].values()
    assert json.loads(text) == dashboard()

    docs = render(values(grafanaDashboard={"label": "dashboards.example/grafana", "labelValue": "yes",
                                           "namespace": "monitoring",
                                           "annotations": {"grafana_folder": "Storage"}}))
    (config_map,) = of_kind(docs, "ConfigMap")
    meta = config_map["metadata"]
    assert meta["labels"]["dashboards.example/grafana"] == "yes"
    assert "grafana_dashboard" not in meta["labels"]
    assert meta["namespace"] == "monitoring"
    assert meta["annotations"] == {"grafana_folder": "Storage"}
    kubernetes_validate.validate(config_map, "1.33.0", strict=True)


# --- Values documentation ----------------------------------------------------------------


PARAM = re.compile(r"^\s*## @param (\S+)")


def documented_params():
    return [m.group(1) for line in (CHART / "values.yaml").read_text().splitlines()
            if (m := PARAM.match(line))]


def _generator():
    path = os.environ.get("README_GENERATOR")
    return Path(path) if path else None


@pytest.mark.skipif(_generator() is None, reason="README_GENERATOR not set (check.sh sets it)")
def test_readme_parameters_are_generated_from_values_yaml(tmp_path):
    readme = tmp_path / "README.md"
    shutil.copy(CHART / "README.md", readme)
    result = subprocess.run(
        ["node", str(_generator()), "--values", str(CHART / "values.yaml"), "--readme", str(readme)],
        capture_output=True, text=True)
    # The generator refuses a value without a description, or a description of no value.
    assert result.returncode == 0, result.stdout + result.stderr
    assert readme.read_text() == (CHART / "README.md").read_text(), (
        "charts/stateful-admission/README.md does not match values.yaml; regenerate it with "
        "`bash charts/stateful-admission/tests/readme.sh`")


def test_every_value_is_documented_and_typed():
    schema = json.loads((CHART / "values.schema.json").read_text())
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    params = documented_params()
    assert len(params) == len(set(params)) >= 90

    def leaves(node, prefix=""):
        for key, value in node.items():
            path = f"{prefix}{key}"
            if isinstance(value, dict) and value:
                yield from leaves(value, f"{path}.")
            else:
                yield path

    assert sorted(leaves(defaults)) == sorted(params), "every value has one @param line"
    for param in params:
        node = schema
        for key in param.split("."):
            node = node.get("properties", {}).get(key)
            if node is None:
                break
            node = schema["definitions"][node["$ref"].split("/")[-1]] if "$ref" in node else node
        assert node is not None and ("type" in node or "enum" in node), f"{param} has no type"


@pytest.mark.parametrize(
    "bad",
    [
        {"monitoring": {"prometheusRule": {"certificateExpiryDays": "14"}}},
        {"monitoring": {"prometheusRule": {"webhookErrorRatio": 2}}},
        {"monitoring": {"grafanaDashboard": {"labelValue": 1}}},
        {"monitoring": {"serviceMonitor": {"enabled": "yes"}}},
        {"replicaCount": "2"},
        {"server": {"logFormat": "xml"}},
        {"podSecurityContext": {"runAsUser": "root"}},
    ],
    ids=["days-string", "ratio-2", "label-value-int", "enabled-string", "replicas-string",
         "log-format", "run-as-user-string"],
)
def test_values_of_the_wrong_type_are_refused(bad):
    from helm_python import HelmError

    with pytest.raises(HelmError):
        render(bad)
