"""JUnit XML of a run: a testcase for the run's verdict, then one per check, so CI systems show soak's verdicts
natively (docs/summary.md, "JUnit XML")."""

from __future__ import annotations

from pathlib import Path
from xml.etree import ElementTree

from soak.contracts import Summary, Verdict

FAILED = (Verdict.FAIL, Verdict.INVALID)
SKIPPED = (Verdict.SKIPPED, Verdict.INCONCLUSIVE)
# The run's verdicts that fail its own testcase: a SUSPECT run is not signed, though its SUSPECT checks pass.
RUN_FAILED = (*FAILED, Verdict.SUSPECT)
RUN_CASE = "verdict"


def _case(suite: ElementTree.Element, name: str, text: str, failed: bool, skipped: bool) -> None:
    case = ElementTree.SubElement(suite, "testcase", classname="soak", name=name)
    if failed:
        ElementTree.SubElement(case, "failure", message=text)
    elif skipped:
        ElementTree.SubElement(case, "skipped", message=text)
    else:
        ElementTree.SubElement(case, "system-out").text = text


def junit_tree(summary: Summary) -> ElementTree.ElementTree:
    """A <testsuite>: the run's verdict (FAIL/INVALID/SUSPECT fail, INCONCLUSIVE skips), then a <testcase> per
    finding (FAIL/INVALID fail, SKIPPED/INCONCLUSIVE skip)."""
    findings = summary.findings
    failed = (summary.verdict in RUN_FAILED) + sum(finding.verdict in FAILED for finding in findings)
    skipped = (summary.verdict in SKIPPED) + sum(finding.verdict in SKIPPED for finding in findings)
    suite = ElementTree.Element("testsuite", name=f"soak {summary.run_id}", tests=str(len(findings) + 1),
                                failures=str(failed), skipped=str(skipped))
    _case(suite, RUN_CASE, f"{summary.verdict}: {summary.verdict_reason}", summary.verdict in RUN_FAILED,
          summary.verdict in SKIPPED)
    for finding in findings:
        _case(suite, finding.check, f"{finding.verdict}: {finding.evidence}", finding.verdict in FAILED,
              finding.verdict in SKIPPED)
    return ElementTree.ElementTree(suite)


def write_junit(summary: Summary, path: Path) -> None:
    """Write the JUnit XML file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    junit_tree(summary).write(path, encoding="utf-8", xml_declaration=True)
