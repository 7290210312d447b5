"""The Prometheus text format of the simulator's registry, as ``generate_latest`` writes it, faster.

A scraper reads ``/metrics`` every interval (a drift sampler at 20 Hz), and ``generate_latest``
formats and escapes every sample's name and labels on each call: a few hundred samples took
several milliseconds of the one thread that also runs the engine's clock. This writer keeps each
sample's ``name{labels} `` prefix and each family's HELP/TYPE lines once they are formatted and
formats only the values, so the bytes are ``generate_latest``'s (a test compares them).
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics import exposition as openmetrics
from prometheus_client.utils import floatToGoString
from prometheus_client.validation import _is_valid_legacy_metric_name

_go_float: Any = floatToGoString  # untyped in prometheus_client
_OM_SUFFIXES = ("_created", "_gsum", "_gcount")
_TYPES = {"info": "gauge", "stateset": "gauge", "gaugehistogram": "histogram", "unknown": "untyped"}


def _help(name: str, doc: str, mtype: str) -> str:
    return f"# HELP {name} {doc.replace(chr(92), chr(92) * 2).replace(chr(10), chr(92) + 'n')}\n# TYPE {name} {mtype}\n"


def _escape_value(v: str) -> str:
    """A label value as the text format writes it (label values are UTF-8: only \\, newline and " escaped)."""
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _prefix(name: str, labels: dict[str, str]) -> str:
    if not labels:
        return f"{name} "
    body = ",".join(f'{openmetrics.escape_label_name(k, openmetrics.UNDERSCORES)}="{_escape_value(v)}"'
                    for k, v in sorted(labels.items()))
    return f"{name}{{{body}}} "


class TextExposition:
    """``render()`` == ``generate_latest(registry)`` for legacy-valid names (the simulator's all are)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self._heads: dict[tuple[str, str], tuple[str, str, str]] = {}
        self._prefixes: dict[tuple[str, tuple[tuple[str, str], ...]], str] = {}
        self._values: dict[float, str] = {}

    def _value(self, v: float) -> str:
        text = self._values.get(v)
        if text is None:
            if len(self._values) > 50_000:
                self._values.clear()
            text = self._values[v] = str(_go_float(v))
        return text

    def _line(self, name: str, labels: dict[str, str], value: float, timestamp: object) -> str:
        key = (name, tuple(labels.items()))
        prefix = self._prefixes.get(key)
        if prefix is None:
            if not _is_valid_legacy_metric_name(name):
                raise ValueError(f"metric name {name!r} needs UTF-8 escaping; use generate_latest")
            prefix = self._prefixes[key] = _prefix(name, labels)
        line = prefix + self._value(value)
        if timestamp is not None:
            line += f" {int(float(timestamp) * 1000):d}"  # type: ignore[arg-type]
        return line + "\n"

    def render(self) -> bytes:
        out: list[str] = []
        for metric in self.registry.collect():
            head = self._heads.get((metric.name, metric.type))
            if head is None:
                mname = metric.name + ("_total" if metric.type == "counter" else "_info" if metric.type == "info" else "")
                head = self._heads[(metric.name, metric.type)] = (
                    _help(mname, metric.documentation, _TYPES.get(metric.type, metric.type)), metric.name,
                    metric.documentation)
            out.append(head[0])
            extra: dict[str, list[str]] = {}
            for s in metric.samples:
                line = self._line(s.name, s.labels, s.value, s.timestamp)
                for suffix in _OM_SUFFIXES:
                    if s.name == metric.name + suffix:
                        extra.setdefault(suffix, []).append(line)
                        break
                else:
                    out.append(line)
            for suffix, lines in sorted(extra.items()):
                out.append(_help(metric.name + suffix, metric.documentation, "gauge"))
                out.extend(lines)
        return "".join(out).encode("utf-8")
