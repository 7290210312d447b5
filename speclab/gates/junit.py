"""JUnit XML for CI: one testcase per stage, so a CI page shows which gate failed and why."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

from speclab.model.errors import writing

from .result import StageResult


def junit_tree(results: Sequence[StageResult], *, suite: str = "speclab accept") -> ET.ElementTree:
    """A ``<testsuites>`` with one ``<testsuite>``; failure message = summary, system-out = details."""
    failures = sum(1 for r in results if not r.passed and not r.skipped)
    skipped = sum(1 for r in results if r.skipped)
    root = ET.Element("testsuites", name=suite, tests=str(len(results)), failures=str(failures))
    suite_el = ET.SubElement(
        root, "testsuite", name=suite, tests=str(len(results)), failures=str(failures),
        errors="0", skipped=str(skipped),
    )
    for result in results:
        case = ET.SubElement(suite_el, "testcase", classname=suite.replace(" ", "."), name=result.stage)
        if result.skipped:
            ET.SubElement(case, "skipped", message=result.summary)
        elif not result.passed:
            failure = ET.SubElement(case, "failure", message=result.summary, type=f"exit {result.exit_code}")
            failure.text = "\n".join(line for line in result.details if line.startswith("FAIL "))
        out = ET.SubElement(case, "system-out")
        out.text = "\n".join([result.summary, *result.details])
    ET.indent(root)
    return ET.ElementTree(root)


def write_junit(results: Sequence[StageResult], path: str | Path, *, suite: str = "speclab accept") -> Path:
    """Write the JUnit XML to ``path`` (its directory created if needed); a failed write is an InputError."""
    target = Path(path)
    tree = junit_tree(results, suite=suite)
    with writing(target, "the JUnit XML"):
        target.parent.mkdir(parents=True, exist_ok=True)
        tree.write(target, encoding="utf-8", xml_declaration=True)
    return target
