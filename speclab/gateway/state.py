"""``gateway.json``: what a running gateway is, so a later command can find and drive it.

Written beside ``haproxy.cfg`` when the gateway starts. A switch command given ``--report DIR``
reads it; given ``--socket PATH`` it asks HAProxy where its map files are (``show map``) and
reads the ``gateway.json`` beside them, so either handle leads to the same gateway.
"""

from __future__ import annotations

import json
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, get_origin, get_type_hints

from speclab.model.errors import InputError

from .routing import RoutingTable

SCHEMA = "speclab.gateway/1"


@dataclass
class GatewayState:
    lab: str
    url: str  # the frontend clients send to
    socket: str
    config: str
    tenants_map: str
    routes_map: str
    servers: dict[str, str]  # variant -> base URL
    routing: dict[str, Any]  # RoutingTable.to_dict() as started
    haproxy: str = ""  # executable
    haproxy_version: str = ""
    haproxy_pid: int | None = None
    started_wall: float = 0.0  # Unix time of the gateway's clock zero
    started_monotonic: float = 0.0  # time.monotonic() at that moment (one clock for every process on the host)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def directory(self) -> Path:
        return Path(self.config).parent

    @property
    def events_path(self) -> Path:
        return self.directory / "events.jsonl"

    def table(self) -> RoutingTable:
        return RoutingTable.from_dict(self.routing)

    def write(self, path: Path) -> None:
        path.write_text(json.dumps({"schema": SCHEMA, **asdict(self)}, indent=2) + "\n", encoding="utf-8")

    @classmethod
    def read(cls, path: Path) -> GatewayState:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise InputError(f"gateway: {path}: no such file (not a gateway's report directory)") from None
        except (OSError, ValueError) as error:
            raise InputError(f"gateway: {path}: cannot read: {error}") from None
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise InputError(f"gateway: {path}: not a speclab gateway state file (expected schema {SCHEMA})")
        kept = {f.name: data[f.name] for f in fields(cls) if f.name in data}
        missing = [f.name for f in fields(cls)
                   if f.name not in kept and f.default is MISSING and f.default_factory is MISSING]
        if missing:
            raise InputError(f"gateway: {path}: no {', '.join(missing)} (a gateway state file names each)")
        for name, value in kept.items():  # a hand-edited or damaged file, checked against the fields' types
            kinds = _FIELD_KINDS.get(name)
            if kinds is not None and not (isinstance(value, kinds) and not isinstance(value, bool)):
                raise InputError(f"gateway: {path}: {name} is {value!r}, not a {' or '.join(k.__name__ for k in kinds)}")
        return cls(**kept)


def _kinds(hint: Any) -> tuple[type, ...] | None:
    """What a JSON value for a field of type ``hint`` may be (a float takes an int); None: unchecked."""
    base = get_origin(hint) or hint
    if base is float:
        return (int, float)
    return (base,) if base in (str, dict) else None


_FIELD_KINDS = {name: kinds for name, hint in get_type_hints(GatewayState).items()
                if (kinds := _kinds(hint)) is not None}


def state_path(report_dir: Path) -> Path:
    return report_dir / "gateway.json"
