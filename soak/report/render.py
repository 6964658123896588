"""Rendering the report context into one self-contained HTML file with Jinja2.

The page carries plotly's JavaScript inline and its chart data as JSON in a `<script type="application/json">`
block, so it opens offline, years later, with nothing fetched.
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

import soak
from soak.errors import StorageError
from soak.report import formatting

TEMPLATE = "report.html.j2"
# JSON inside a <script> element: "<", ">" and "&" as \u escapes, so no "</script>" or "<!--" can end or bend it.
_SCRIPT_SAFE = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028",
                              "\u2029": "\\u2029"})


@functools.lru_cache(maxsize=1)
def plotly_js() -> Markup:
    """plotly.js, to be inlined once; a literal "</script" inside it would close the element early."""
    from plotly.offline import get_plotlyjs

    return Markup(get_plotlyjs().replace("</script", "<\\/script"))


def script_json(value: Any) -> Markup:
    """`value` as JSON that is safe inside a <script type="application/json"> element."""
    text = json.dumps(value, allow_nan=False, separators=(",", ":"), ensure_ascii=False)
    return Markup(text.translate(_SCRIPT_SAFE))


@functools.lru_cache(maxsize=1)
def environment() -> Environment:
    """The Jinja2 environment: templates from the `soak._templates` package, autoescape on."""
    env = Environment(loader=PackageLoader("soak._templates", "."), autoescape=True,
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update({
        "number": formatting.format_number, "count": formatting.format_count,
        "percent": formatting.format_percent, "span": formatting.format_span,
        "elapsed": formatting.format_elapsed, "utc": formatting.format_utc,
    })
    return env


def render_html(context: dict[str, Any], live: dict[str, Any] | None = None) -> str:
    """The report page as text; `live` (the live view: `refresh_s`, `plotly_url`) makes the page reload itself
    and load plotly.js by URL instead of inline."""
    chart_data = {chart["id"]: chart["figure"] for chart in context["charts"] if chart["figure"]}
    return environment().get_template(TEMPLATE).render(
        **context, chart_json=script_json(chart_data), plotly_js=plotly_js(), soak_version=soak.__version__,
        live=live)


def write_atomically(text: str, out_path: Path) -> Path:
    """Write `text` to `out_path` through a temporary file, so a reader never sees half a report."""
    out_path = Path(out_path)
    temp_name = None
    try:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        handle, temp_name = tempfile.mkstemp(prefix=".report-", suffix=".tmp", dir=out_path.parent)
        with os.fdopen(handle, "w", encoding="utf-8") as temp:
            temp.write(text)
        os.chmod(temp_name, 0o644)  # mkstemp makes it private; a report is meant to be shared
        os.replace(temp_name, out_path)
    except OSError as exc:
        if temp_name and os.path.exists(temp_name):
            os.unlink(temp_name)
        raise StorageError(f"cannot write the report {out_path}: {exc.strerror or exc}") from None
    return out_path
