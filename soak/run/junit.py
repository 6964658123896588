"""JUnit XML of a run's findings: one testcase per check, so CI systems show soak's verdicts natively."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from xml.etree import ElementTree


def junit_tree(summary: dict[str, Any]) -> ElementTree.ElementTree:
    """A <testsuite> with a <testcase> per finding: FAIL/INVALID fail, SKIPPED/INCONCLUSIVE skip."""
    findings = summary.get("findings", [])
    failed = [f for f in findings if f["verdict"] in ("FAIL", "INVALID")]
    skipped = [f for f in findings if f["verdict"] in ("SKIPPED", "INCONCLUSIVE")]
    suite = ElementTree.Element("testsuite", name=f"soak {summary['run_id']}", tests=str(len(findings)),
                                failures=str(len(failed)), skipped=str(len(skipped)))
    for finding in findings:
        case = ElementTree.SubElement(suite, "testcase", classname="soak", name=finding["check"])
        if finding in failed:
            ElementTree.SubElement(case, "failure", message=f"{finding['verdict']}: {finding['evidence']}")
        elif finding in skipped:
            ElementTree.SubElement(case, "skipped", message=f"{finding['verdict']}: {finding['evidence']}")
        else:
            ElementTree.SubElement(case, "system-out").text = f"{finding['verdict']}: {finding['evidence']}"
    return ElementTree.ElementTree(suite)


def write_junit(summary: dict[str, Any], path: Path) -> None:
    """Write the JUnit XML file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    junit_tree(summary).write(path, encoding="utf-8", xml_declaration=True)
