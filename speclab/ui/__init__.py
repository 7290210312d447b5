"""The Textual front end. Only this package and ``speclab.cli`` import Textual or Rich."""

from __future__ import annotations

from speclab.ui.app import SpeclabApp, create_app
from speclab.ui.replay import ReplayControls

__all__ = ["ReplayControls", "SpeclabApp", "create_app"]
