"""The shipped Grafana dashboard and Prometheus alert rules (docs/deploy/), read as tests need them: every PromQL
expression with where it comes from, the series names an expression reads, and an expression with the dashboard's
template variables filled in."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from soak.metrics.catalog import CATALOG, Kind

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "docs" / "deploy" / "grafana" / "soak.json"
ALERTS = REPO / "docs" / "deploy" / "prometheus" / "soak-alerts.yml"

# Words of PromQL that are no series name where a name could stand.
KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left",
                      "group_right", "inf", "nan", "atan2"})
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_MODIFIER = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_WORD = re.compile(r"(?<![\w.:])[A-Za-z_:][A-Za-z0-9_:]*")
_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")


@dataclass(frozen=True)
class Expression:
    """One PromQL expression of a shipped file: `where` names it (a panel and its refId, or an alert)."""

    where: str
    expr: str


def dashboard() -> dict[str, Any]:
    """The dashboard's JSON model."""
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def panels(model: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel but the rows, those inside collapsed rows included."""
    found = []
    for panel in model["panels"]:
        if panel.get("type") == "row":
            found.extend(panel.get("panels", []))
        else:
            found.append(panel)
    return found


def dashboard_expressions(model: dict[str, Any] | None = None) -> list[Expression]:
    """Each target's expression, named `panel title / refId`."""
    model = model if model is not None else dashboard()
    return [Expression(f"{panel['title']} / {target['refId']}", target["expr"])
            for panel in panels(model) for target in panel.get("targets", [])]


def alert_rules() -> list[dict[str, Any]]:
    """Every rule of the alerts file, in order."""
    document = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))
    return [rule for group in document["groups"] for rule in group["rules"]]


def alert_expressions() -> list[Expression]:
    """Each rule's expression, named by its alert (or recorded series)."""
    return [Expression(rule.get("alert") or rule["record"], rule["expr"].strip()) for rule in alert_rules()]


def series_names(expr: str) -> set[str]:
    """The series names an expression selects: its matchers, ranges, strings, grouping and matching clauses left
    out, then every word that is neither a function (followed by a parenthesis) nor a PromQL keyword."""
    text = _STRING.sub('""', expr)
    text = _VARIABLE.sub("1", text)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = _MODIFIER.sub(" ", text)
    names = set()
    for match in _WORD.finditer(text):
        word = match.group(0)
        if word.lower() in KEYWORDS or text[match.end():].lstrip().startswith("("):
            continue
        names.add(word)
    return names


def catalog_sample_names() -> set[str]:
    """The names soak's page gives its samples: a counter's `_total`, a histogram's `_bucket`, `_sum`, `_count`."""
    names = set()
    for spec in CATALOG:
        if spec.kind == Kind.HISTOGRAM:
            names.update(f"{spec.prom}_{suffix}" for suffix in ("bucket", "sum", "count"))
        else:
            names.add(spec.sample_name)
    return names


def substitute(expr: str, values: dict[str, str]) -> str:
    """`$name` and `${name}` (also `${name:format}`) replaced from `values`; an unknown variable is an error."""
    def one(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in values:
            raise KeyError(f"no value for ${name} in {expr!r}")
        return values[name]

    return _VARIABLE.sub(one, expr)
