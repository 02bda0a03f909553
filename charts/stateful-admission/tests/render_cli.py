"""Command-line front of render.py: the chart rendered as one JSON array on stdout."""

from __future__ import annotations

import argparse
import json
import sys

import render


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--release", default=render.RELEASE)
    parser.add_argument("--namespace", default=render.NAMESPACE)
    parser.add_argument("--kube-version", default="v1.31.0")
    parser.add_argument("--values", default="{}", help="chart values as a JSON object")
    args = parser.parse_args()
    docs = render.render(
        json.loads(args.values),
        kube_version=args.kube_version,
        release=args.release,
        namespace=args.namespace,
    )
    json.dump(docs, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
