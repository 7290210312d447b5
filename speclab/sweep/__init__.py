"""Sweep reductions: pure functions over run reports (no servers, sessions or screens here).

A driver walks ``Grid.cells()``, runs each ``CellPlan`` as a config epoch, turns the epoch's
report block into a ``CellResult`` with ``cell_from_epoch`` (or ``failed_cell``), and after
each cell calls ``reduce_sweep`` and ``write_sweep`` so the directory always holds the
reductions so far. ``confirmation_configs`` names the arms of the confirmation pass (run as
phase ``"confirm"``); ``load_sweep`` and ``remaining`` serve ``--resume``.
"""

from __future__ import annotations

from .cells import (
    MEASURES,
    CellResult,
    ServerSummary,
    cell_from_epoch,
    cell_from_report,
    epoch_block,
    failed_cell,
    summarize_samples,
)
from .confirm import best_fixed_k, confirmation, confirmation_configs
from .grid import (
    CellConfig,
    CellPlan,
    Grid,
    LoadLevel,
    make_grid,
    parse_list,
    parse_schedule,
    rules_for_lab,
    schedule_option,
)
from .result import SWEEP_SCHEMA, SweepResult, load_sweep, reduce_sweep, remaining, sweep_document
from .rules import DraftRules, check_k, check_schedule
from .slo import Slo, parse_slo

__all__ = [
    "MEASURES", "SWEEP_SCHEMA", "CellConfig", "CellPlan", "CellResult", "DraftRules", "Grid", "LoadLevel",
    "ServerSummary", "Slo", "SweepResult", "best_fixed_k", "cell_from_epoch", "cell_from_report", "check_k", "check_schedule",
    "confirmation", "confirmation_configs", "epoch_block", "failed_cell", "load_sweep", "make_grid",
    "parse_list", "parse_schedule", "parse_slo", "reduce_sweep", "remaining", "rules_for_lab", "schedule_option",
    "summarize_samples", "sweep_document",
]
