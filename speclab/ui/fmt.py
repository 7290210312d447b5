"""Number formatting shared by every widget, so units and "no data" read the same everywhere."""

from __future__ import annotations

NO_DATA = "—"


def us(value: float | None, sep: str = " ") -> str:
    """A latency in microseconds with a unit a person reads at a glance."""
    if value is None:
        return NO_DATA
    if value < 1_000:
        return f"{value:.0f}{sep}µs"
    if value < 1_000_000:
        ms = value / 1_000
        return f"{ms:.1f}{sep}ms" if ms < 100 else f"{ms:.0f}{sep}ms"
    return f"{value / 1_000_000:.2f}{sep}s"


def us_short(value: float | None) -> str:
    """A latency in at most five characters, unit included and no space (``850µs``, ``4.2ms``,
    ``42ms``, ``1.2s``, ``12s``): for a line too narrow for ``us``; a number is rounded, never cut."""
    if value is None:
        return NO_DATA
    if value < 999.5:
        return f"{value:.0f}µs"
    ms = value / 1_000
    if ms < 9.95:
        return f"{ms:.1f}ms"
    if ms < 999.5:
        return f"{ms:.0f}ms"
    s = value / 1_000_000
    return f"{s:.1f}s" if s < 9.95 else f"{s:.0f}s"


def pct(value: float | None, digits: int = 1) -> str:
    return NO_DATA if value is None else f"{value * 100:.{digits}f}%"


def num(value: float | None, digits: int = 2) -> str:
    return NO_DATA if value is None else f"{value:.{digits}f}"


def signed_pct_change(new: float | None, old: float | None) -> str:
    """Relative change, new against old; blank when either side is missing or old is zero."""
    if new is None or old is None or old == 0:
        return NO_DATA
    return f"{(new - old) / old * 100:+.1f}%"


def percentile_label(p: float) -> str:
    if p >= 100.0:
        return "max"
    return f"p{p:g}"


BLOCKS = " ▁▂▃▄▅▆▇█"


def spark(values: list[float | None], top: float | None = None) -> str:
    """One character per value, scaled to ``top`` (or the largest value); gaps for missing values."""
    present = [v for v in values if v is not None]
    peak = top if top is not None else (max(present) if present else 0.0)
    out = []
    for v in values:
        if v is None:
            out.append(" ")
        elif peak <= 0:
            out.append(BLOCKS[1])
        else:
            level = round(min(v / peak, 1.0) * (len(BLOCKS) - 2)) + 1
            out.append(BLOCKS[level])
    return "".join(out)
