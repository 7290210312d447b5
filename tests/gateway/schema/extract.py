"""Regenerate the vendored Gateway API v1 schemas from the project's CRD files.

    python tests/gateway/schema/extract.py gateway.networking.k8s.io_httproutes.yaml \
        gateway.networking.k8s.io_gateways.yaml

Takes each CRD's ``v1`` version's ``openAPIV3Schema`` and drops the ``description`` texts (they
are documentation, three quarters of the size); every validating keyword is kept as published.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
OUT = {"HTTPRoute": "httproute-v1.schema.json", "Gateway": "gateway-v1.schema.json"}


def strip(node: Any, in_properties: bool = False) -> Any:
    if isinstance(node, dict):
        return {k: strip(v, k == "properties") for k, v in node.items() if in_properties or k != "description"}
    if isinstance(node, list):
        return [strip(v) for v in node]
    return node


def main(paths: list[str]) -> None:
    for path in paths:
        crd = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        kind = crd["spec"]["names"]["kind"]
        version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
        schema = strip(version["schema"]["openAPIV3Schema"])
        (HERE / OUT[kind]).write_text(json.dumps(schema, indent=1, sort_keys=True) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1:])
