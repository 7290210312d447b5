"""The run report: ``report.json`` (``build``) and ``report.md`` (``markdown``), below every command that writes one."""

from .build import REPORT_SCHEMA, build_report, class_dict
from .markdown import render_markdown, write_report

__all__ = ["REPORT_SCHEMA", "build_report", "class_dict", "render_markdown", "write_report"]
