"""The typed summary.json: it reads back a real summary unchanged, and docs/summary.md describes its schema."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from soak.analysis.findings import Exhaustion, Finding, PerRequest, ProcessGrowth, Trend
from soak.analysis.warmup import WarmupCut
from soak.contracts import ErrorsByClass, Summary, SummaryFinding, Verdict
from soak.store.models import ERROR_CLASSES

REPO = Path(__file__).resolve().parents[2]
# summary.json of a 45 s reference run (tests/e2e/test_start_reference.py's flags), written before the model.
REFERENCE = Path(__file__).parent / "data" / "reference_run_summary.json"
HEADING = re.compile(r"^### `(\w+)`")
ROW = re.compile(r"^\| `(\w+)` \| ([^|]+) \|")


def test_a_real_summary_reads_back_byte_for_byte():
    text = REFERENCE.read_text(encoding="utf-8")
    summary = Summary.model_validate(json.loads(text))
    assert summary.verdict is Verdict.INCONCLUSIVE and summary.finding("hang").verdict is Verdict.PASS
    assert json.dumps(summary.to_json_dict(), indent=2, default=str) + "\n" == text


def test_a_finding_keeps_its_shape_and_number_types():
    trend = Trend(slope_per_s=0.1, intercept=5, t0_s=0)
    process = ProcessGrowth(verdict=Verdict.FAIL, value=2, ci=(1, 4.0), detection_limit=4.0, mk_p=0.001, points=20,
                            step=None, net_growth=None, warmup=WarmupCut(t_s=30, index=3, floor_s=30), pid=1,
                            name="server", unit="bytes/h", floor=100, trend=trend)
    finding = Finding(check="leak.rss", verdict="FAIL", value=np.float64(2.5), unit="bytes/h", ci=(1, 4.0),
                      threshold=3, evidence="grows", per_process=[process],
                      per_request=PerRequest(value=1, ci=(0, 2.0), unit="bytes/request"),
                      percentile_used="p99", trend=trend, exhaustion=Exhaustion("host memory", 1024, None),
                      details={"n": 3})
    bare = Finding(check="hang", verdict="PASS", value=0, unit="s")
    for original in (finding.to_dict(), bare.to_dict()):
        dumped = SummaryFinding.model_validate(original).model_dump(mode="json")
        assert json.dumps(dumped) == json.dumps(original)  # same keys, order and int/float spelling


def test_error_classes_match_the_store():
    assert tuple(ErrorsByClass.model_fields) == ERROR_CLASSES


def _type_text(schema: dict[str, Any], required: bool = True) -> str:
    """A property's type as docs/summary.md writes it; an optional key is absent rather than null."""
    if "$ref" in schema:
        return f"`{schema['$ref'].rsplit('/', 1)[-1]}`"
    if "anyOf" in schema:
        parts = [_type_text(part) for part in schema["anyOf"]]
        parts = [p for p in parts if not (p == "integer" and "number" in parts) and (required or p != "null")]
        return " or ".join(parts)
    if schema.get("type") == "array":
        items = _type_text(schema["items"])
        return f"array of ({items})" if " or " in items else f"array of {items}"
    return schema["type"]


def schema_tables() -> dict[str, dict[str, str]]:
    """Each object of Summary's JSON schema: field → type text."""
    schema = Summary.model_json_schema()
    objects = {"Summary": schema} | {name: d for name, d in schema["$defs"].items() if "properties" in d}
    return {name: {field: _type_text(prop, field in d.get("required", ())) for field, prop in d["properties"].items()}
            for name, d in objects.items()}


def docs_tables() -> dict[str, dict[str, str]]:
    """The field tables of docs/summary.md: heading `Name` → field → type text."""
    tables: dict[str, dict[str, str]] = {}
    current = None
    for line in (REPO / "docs" / "summary.md").read_text(encoding="utf-8").splitlines():
        if heading := HEADING.match(line):
            current = tables.setdefault(heading.group(1), {})
        elif (row := ROW.match(line)) and current is not None:
            current[row.group(1)] = row.group(2).strip()
    return tables


def test_docs_describe_every_field_of_the_schema_and_no_other():
    documented, schema = docs_tables(), schema_tables()
    assert set(documented) == set(schema)
    for name, fields in schema.items():
        assert documented[name] == fields, name
