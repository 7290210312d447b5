"""The sweep's heat map: speed-up over k = 0 per arm (rows) and load level (columns), one class.

It reads ``SweepResult.speedup[class][arm][measure]`` (the numbers behind ``sweep.json``'s
``speedup`` and the speed-up plot), so the screen and the files never disagree. A cell not yet
run is ``·``, the one under way ``…``, a failed one ``fail``; a speed-up within the tie tolerance
is shown plain, a win green and a loss red, brighter the further from 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import RenderResult
from textual.widget import Widget

from speclab.sweep import CellPlan, Grid, SweepResult
from speclab.sweep.grid import order_configs

MEASURES = ("throughput", "tpot")
MEASURE_LABEL = {"throughput": "output tokens/s", "tpot": "TPOT p50"}


@dataclass
class HeatModel:
    """What the heat map shows: the grid, the latest reductions, the cell under way."""

    grid: Grid
    result: SweepResult | None = None
    running: CellPlan | None = None
    prompt_class: str = "all"
    measure: str = "throughput"
    classes: list[str] = field(default_factory=lambda: ["all"])

    def arms(self) -> list[tuple[str, object]]:
        varying = self.grid.varying()
        return [(c.arm(varying), c) for c in order_configs(self.grid.configs) if c.speculative]

    def next_class(self) -> None:
        names = self.classes or ["all"]
        index = names.index(self.prompt_class) if self.prompt_class in names else -1
        self.prompt_class = names[(index + 1) % len(names)]

    def next_measure(self) -> None:
        self.measure = MEASURES[(MEASURES.index(self.measure) + 1) % len(MEASURES)]

    def take(self, result: SweepResult) -> None:
        self.result = result
        found = list(result.speedup)
        self.classes = found or ["all"]
        if self.prompt_class not in self.classes:
            self.prompt_class = self.classes[0]


def _style(speedup: float, tolerance: float) -> str:
    if abs(speedup - 1.0) <= tolerance:
        return ""
    strength = min(1.0, abs(speedup - 1.0) / 0.5)
    shade = 90 + round(140 * strength)
    return f"bold rgb(0,{shade},0)" if speedup > 1.0 else f"bold rgb({shade},0,0)"


def cell_text(model: HeatModel, arm: str, config: object, load: float) -> Text:
    result = model.result
    if model.running is not None and model.running.phase == "grid" and model.running.config == config \
            and model.running.load.value == load:
        return Text("…", style="bold cyan")
    if result is not None:
        failed = [c for c in result.cells if c.plan.phase == "grid" and not c.ok and c.config == config
                  and c.load.value == load]
        rows = ((result.speedup.get(model.prompt_class) or {}).get(arm) or {}).get(model.measure) or []
        row = next((r for r in rows if r["load"] == load), None)
        if row is not None:
            text = f"×{row['speedup']:.2f}"
            if row["high"] != row["low"]:
                text += f" ({row['low']:.2f}–{row['high']:.2f})"
            return Text(text, style=_style(float(row["speedup"]), model.grid.tie_tolerance))
        if failed:
            return Text("fail", style="bold red reverse")
        done = [c for c in result.cells if c.plan.phase == "grid" and c.config == config and c.load.value == load]
        if done:
            return Text("–", style="dim")  # measured, but no speed-up (k = 0 missing or too few requests)
    return Text("·", style="dim")


def render_heat(model: HeatModel) -> Group:
    grid = model.grid
    title = Text.assemble(("speed-up over k=0", "bold"), f" · {MEASURE_LABEL[model.measure]} · class ",
                          (model.prompt_class, "bold"), no_wrap=True, overflow="ellipsis")
    table = Table(expand=False, box=None, padding=(0, 1))
    head = "arm \\ concurrency" if grid.mode == "concurrency" else "arm \\ req/s"
    table.add_column(head, style="bold", no_wrap=True)
    for level in grid.load:
        table.add_column(level.label, justify="right", no_wrap=True)
    for arm, config in model.arms():
        table.add_row(arm, *(cell_text(model, arm, config, level.value) for level in grid.load))
    return Group(title, table)


class SweepHeat(Widget):
    DEFAULT_CSS = """
    SweepHeat { height: auto; padding: 0 1; }
    """

    def __init__(self, model: HeatModel, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.model = model

    def render(self) -> RenderResult:
        return render_heat(self.model)
