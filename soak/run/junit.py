"""JUnit XML of a run's findings: one testcase per check, so CI systems show soak's verdicts natively."""

from __future__ import annotations

from pathlib import Path
from xml.etree import ElementTree

from soak.contracts import Summary, Verdict

FAILED = (Verdict.FAIL, Verdict.INVALID)
SKIPPED = (Verdict.SKIPPED, Verdict.INCONCLUSIVE)


def junit_tree(summary: Summary) -> ElementTree.ElementTree:
    """A <testsuite> with a <testcase> per finding: FAIL/INVALID fail, SKIPPED/INCONCLUSIVE skip."""
    findings = summary.findings
    failed = sum(finding.verdict in FAILED for finding in findings)
    skipped = sum(finding.verdict in SKIPPED for finding in findings)
    suite = ElementTree.Element("testsuite", name=f"soak {summary.run_id}", tests=str(len(findings)),
                                failures=str(failed), skipped=str(skipped))
    for finding in findings:
        case = ElementTree.SubElement(suite, "testcase", classname="soak", name=finding.check)
        text = f"{finding.verdict}: {finding.evidence}"
        if finding.verdict in FAILED:
            ElementTree.SubElement(case, "failure", message=text)
        elif finding.verdict in SKIPPED:
            ElementTree.SubElement(case, "skipped", message=text)
        else:
            ElementTree.SubElement(case, "system-out").text = text
    return ElementTree.ElementTree(suite)


def write_junit(summary: Summary, path: Path) -> None:
    """Write the JUnit XML file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    junit_tree(summary).write(path, encoding="utf-8", xml_declaration=True)
