"""Gates: defaults, TOML loading and one-line errors."""

from pathlib import Path

import pydantic
import pytest

from soak.analysis.gates import DEFAULT_REQUIRED, Gates, gates_from_dict, load_gates
from soak.errors import ConfigError

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "gates.example.toml"


def test_defaults():
    gates = Gates()
    assert gates.min_windows == 20 and gates.p_value == 0.01 and gates.confidence == 0.95
    assert gates.errors.budget == 0.01
    assert gates.leak.rss.slope_bytes_per_h is None and gates.leak.rss.max_default_bytes_per_h == 16 * 2**20
    assert gates.required == DEFAULT_REQUIRED
    assert gates.hang.after_s == 60.0


def test_none_path_gives_defaults():
    assert load_gates(None) == Gates()


def test_example_file_documents_the_defaults():
    assert load_gates(EXAMPLE) == Gates()


def test_partial_table_keeps_other_defaults(tmp_path):
    path = tmp_path / "gates.toml"
    path.write_text('p_value = 0.005\n[leak.rss]\nslope_bytes_per_h = "8MiB"\n')
    gates = load_gates(path)
    assert gates.p_value == 0.005
    assert gates.leak.rss.slope_bytes_per_h == 8 * 2**20
    assert gates.leak.rss.max_default_bytes_per_h == Gates().leak.rss.max_default_bytes_per_h
    assert gates.leak.vram == Gates().leak.vram


def test_leak_threshold_is_the_users_figure_or_headroom_over_horizon():
    week_s, gib = 7 * 86400.0, 2**30
    default = Gates().leak.rss
    assert default.threshold_bytes_per_h(None, week_s) == 16 * 2**20  # headroom unknown: the cap
    assert default.threshold_bytes_per_h(64 * gib, week_s) == 16 * 2**20  # plenty of room: the cap
    assert default.threshold_bytes_per_h(1 * gib, week_s) == pytest.approx(gib / 168)  # lasts the week
    fixed = gates_from_dict({"leak": {"rss": {"slope_bytes_per_h": "8MiB"}}}).leak.rss
    assert fixed.threshold_bytes_per_h(1 * gib, week_s) == 8 * 2**20


def test_retired_keys_load_with_a_warning(caplog):
    gates = gates_from_dict({"suspect_min_fraction": 0.3, "leak": {"rss": {"growth_frac": 0.1}}}, source="old.toml")
    assert gates == Gates()
    assert "leak.rss.growth_frac is no longer used" in caplog.text and "suspect_min_fraction" in caplog.text


@pytest.mark.parametrize("text, needle", [
    ("[leak.rss]\nslop = 1\n", "unknown key 'leak.rss.slop'"),
    ("bogus = 1\n", "unknown key 'bogus'"),
    ("p_value = 2\n", "p_value = 2"),
    ('[leak.rss]\nslope_bytes_per_h = "12Mo"\n', "leak.rss.slope_bytes_per_h = '12Mo'"),
    ('required = ["leak.foo"]\n', "unknown check 'leak.foo'"),
    ("[client]\nlag_p99_suspect_ms = 500\n", "lag_p99_suspect_ms (500) must not exceed"),
    ("[errors]\nbudget = -0.1\n", "errors.budget = -0.1"),
    ("min_windows = 2\n", "min_windows = 2"),
    ("leak = 3\n", "leak = 3"),
])
def test_bad_values_name_the_key(tmp_path, text, needle):
    path = tmp_path / "gates.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_gates(path)
    message = str(info.value)
    assert needle in message and "\n" not in message and str(path) in message
    assert info.value.exit_code == 2


def test_invalid_toml(tmp_path):
    path = tmp_path / "gates.toml"
    path.write_text("p_value = = 1\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_gates(path)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_gates(tmp_path / "nope.toml")


def test_hang_limit_scales_for_short_runs():
    hang = Gates().hang
    assert hang.effective_after_s(86400) == 60.0
    assert hang.effective_after_s(300) == 15.0
    assert hang.effective_after_s(60) == 10.0


def test_dict_loading_and_frozen():
    gates = gates_from_dict({"errors": {"fail_on_bursts": True}})
    assert gates.errors.fail_on_bursts is True
    with pytest.raises(pydantic.ValidationError):
        gates.p_value = 0.5
