"""Renders the chart with the real Helm v4 engine (helm-python-sdk binds Helm's Go SDK) and
runs Helm's lint. No cluster is contacted: installs are client-side dry runs whose
.Capabilities come from the kube version and API versions given here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import helm_python as helm
import yaml
from helm_python import _native

CHART = Path(__file__).resolve().parent.parent
RELEASE = "stateful-admission"
NAMESPACE = "stateful-admission"

_config: helm.Config | None = None


def _helm() -> helm.Config:
    global _config
    if _config is None:
        # In-memory release storage: nothing is read from or written to a cluster.
        _config = helm.Config(namespace=NAMESPACE, storage_driver="memory")
    return _config


def render(
    values: dict[str, Any] | None = None,
    *,
    kube_version: str = "v1.31.0",
    api_versions: tuple[str, ...] = (),
    release: str = RELEASE,
    namespace: str = NAMESPACE,
) -> list[dict[str, Any]]:
    """`helm install --dry-run=client --kube-version ... --api-versions ...`: every rendered
    document, parsed. The public Config.install does not expose kube_version/api_versions,
    so the same native entry point is called with them (pinned helm-python-sdk version)."""
    config = _helm()
    handle, ref = config._chart_args(str(CHART))
    options = {
        "dry_run": "client",
        "namespace": namespace,
        "kube_version": kube_version,
        "api_versions": list(api_versions),
    }
    payload = _native.call_string(
        "helm_install",
        config._raw(),
        config._context_arg(None),
        handle,
        ref,
        release,
        json.dumps(values) if values else None,
        json.dumps(options),
    )
    release_info = json.loads(payload)
    _last_notes[0] = release_info.get("notes", "")
    manifest = release_info["manifest"]
    return [doc for doc in yaml.safe_load_all(manifest) if doc]


# NOTES.txt as the last render made it.
_last_notes: list[str] = [""]


def notes(values: dict[str, Any] | None = None, **kwargs: Any) -> str:
    """The rendered NOTES.txt, as `helm install` prints it."""
    render(values, **kwargs)
    return _last_notes[0]


def lint(values: dict[str, Any] | None = None, *, kube_version: str = "v1.31.0") -> dict[str, Any]:
    """`helm lint --strict`: warnings count as errors."""
    return helm.lint(
        str(CHART), values, strict=True, namespace=NAMESPACE, kube_version=kube_version
    )
