"""Rendering pieces: JSON safe inside <script>, plotly inlined safely, templates autoescaped and packaged."""

from __future__ import annotations

import json

import pytest

from soak.report.render import environment, plotly_js, script_json

pytestmark = pytest.mark.timeout(60)


def test_script_json_cannot_close_its_element_and_round_trips():
    value = {"name": "</script><script>alert(1)</script><!-- & \u2028", "n": [1, None, 2.5]}
    text = str(script_json(value))
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text) == value


def test_script_json_refuses_nan():
    with pytest.raises(ValueError):
        script_json({"y": [float("nan")]})


def test_plotly_is_inlined_without_a_closing_script_tag():
    js = str(plotly_js())
    assert len(js) > 1_000_000 and "</script" not in js.lower()


def test_templates_load_from_the_package_with_autoescape():
    env = environment()
    assert env.autoescape is True
    for name in ("report.html.j2", "_gates.j2", "_events.j2", "_environment.j2", "report.css", "report.js"):
        assert env.get_template(name) is not None
    assert "&lt;b&gt;" in env.from_string("{{ x }}").render(x="<b>")
