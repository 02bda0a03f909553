#!/usr/bin/env python3
"""Builds benches/fixtures/statefulset-update-3-templates.mutate.json from the captured
single-template review in tests/fixtures/apiserver: three volumeClaimTemplates whose storage
and labels change, a realistic pod template (two containers with env, probes, mounts) and
managedFields covering all of it, so the review is about 10 KB like a Helm-managed database.
Deterministic: re-running it rewrites the same bytes."""
import copy
import json
import pathlib

root = pathlib.Path(__file__).resolve().parent.parent
src = root / "tests/fixtures/apiserver/statefulset-update-vct-change.mutate.json"
dst = root / "benches/fixtures/statefulset-update-3-templates.mutate.json"
review = json.loads(src.read_text())
req = review["request"]
req["uid"] = "0b9e5b0e-6c1f-4a57-9a55-3d3b1f0c0a01"


def templates(sizes, chart):
    out = []
    for name, size in zip(["data", "wal", "backup"], sizes):
        out.append({
            "kind": "PersistentVolumeClaim",
            "apiVersion": "v1",
            "metadata": {"name": name, "creationTimestamp": None,
                         "labels": {"app": "web", "helm.sh/chart": chart, "volume": name}},
            "spec": {"accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": size}},
                     "volumeMode": "Filesystem"},
            "status": {"phase": "Pending"},
        })
    return out


def container(name, image, port):
    return {
        "name": name, "image": image,
        "ports": [{"name": "p-" + name, "containerPort": port, "protocol": "TCP"}],
        "env": [{"name": f"ENV_{i}", "value": f"value-{i}-{name}"} for i in range(1)],
        "resources": {"limits": {"cpu": "2", "memory": "4Gi"},
                      "requests": {"cpu": "500m", "memory": "1Gi"}},
        "volumeMounts": [{"name": v, "mountPath": "/var/lib/" + v} for v in ["data", "wal", "backup"]],
        "readinessProbe": {"tcpSocket": {"port": port}, "timeoutSeconds": 1, "periodSeconds": 10,
                           "successThreshold": 1, "failureThreshold": 3},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent",
    }


def fields_for_container(c):
    return {
        ".": {}, "f:env": {f'k:{{"name":"{e["name"]}"}}': {".": {}, "f:name": {}, "f:value": {}} for e in c["env"]},
        "f:image": {}, "f:imagePullPolicy": {}, "f:name": {},
        "f:ports": {f'k:{{"containerPort":{c["ports"][0]["containerPort"]},"protocol":"TCP"}}':
                    {".": {}, "f:containerPort": {}, "f:name": {}, "f:protocol": {}}},
        "f:readinessProbe": {".": {}, "f:tcpSocket": {".": {}, "f:port": {}}},
        "f:resources": {".": {}, "f:limits": {".": {}, "f:cpu": {}, "f:memory": {}},
                        "f:requests": {".": {}, "f:cpu": {}, "f:memory": {}}},
        "f:volumeMounts": {f'k:{{"mountPath":"{m["mountPath"]}"}}': {".": {}, "f:mountPath": {}, "f:name": {}}
                           for m in c["volumeMounts"]},
    }


containers = [container("db", "postgres:16.4", 5432),
              container("exporter", "exporter:0.15", 9187)]
for key, sizes, chart in [("oldObject", ["10Gi", "2Gi", "20Gi"], "web-1.0.0"),
                          ("object", ["20Gi", "4Gi", "20Gi"], "web-1.1.0")]:
    obj = req[key]
    obj["metadata"]["labels"] = {"helm.sh/chart": chart, "app.kubernetes.io/name": "web",
                                 "app.kubernetes.io/instance": "web", "app.kubernetes.io/managed-by": "Helm"}
    obj["spec"]["replicas"] = 3
    obj["spec"]["template"]["spec"]["containers"] = copy.deepcopy(containers)
    obj["spec"]["volumeClaimTemplates"] = templates(sizes, chart)
    mf = obj["metadata"]["managedFields"][0]["fieldsV1"]
    mf["f:metadata"]["f:labels"] = {".": {}, **{"f:" + k: {} for k in obj["metadata"]["labels"]}}
    mf["f:spec"]["f:template"]["f:spec"]["f:containers"] = {
        f'k:{{"name":"{c["name"]}"}}': fields_for_container(c) for c in containers}
    obj["metadata"]["managedFields"].append({
        "manager": "kube-controller-manager", "operation": "Update", "apiVersion": "apps/v1",
        "time": "2026-11-22T05:06:40Z", "fieldsType": "FieldsV1", "subresource": "status",
        "fieldsV1": {"f:status": {"f:availableReplicas": {}, "f:collisionCount": {},
                                  "f:currentReplicas": {}, "f:currentRevision": {},
                                  "f:observedGeneration": {}, "f:readyReplicas": {},
                                  "f:replicas": {}, "f:updateRevision": {}, "f:updatedReplicas": {}}}})
# The client-side-apply annotation carries the desired object again, as kubectl writes it.
last = {"apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"labels": req["object"]["metadata"]["labels"], "name": "web", "namespace": "default"},
        "spec": {"replicas": 3, "serviceName": "web", "selector": {"matchLabels": {"app": "web"}},
                 "volumeClaimTemplates": [{"metadata": t["metadata"] | {"creationTimestamp": None},
                                           "spec": t["spec"]} for t in req["object"]["spec"]["volumeClaimTemplates"]]}}
req["object"]["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] = json.dumps(last, separators=(",", ":")) + "\n"
dst.parent.mkdir(parents=True, exist_ok=True)
dst.write_text(json.dumps(review, separators=(",", ":")) + "\n")
print(dst.relative_to(root), dst.stat().st_size, "bytes")
