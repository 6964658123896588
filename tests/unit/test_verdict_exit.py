"""Exit codes of a run's verdict (docs/summary.md, "Exit codes"): 0 only for PASS, 1 for FAIL, 3 not signed off."""

from soak.cli.common import VERDICT_EXIT
from soak.contracts import Verdict


def test_only_a_pass_exits_0_and_every_run_verdict_has_its_code():
    run_verdicts = set(Verdict) - {Verdict.SKIPPED}  # a run is never SKIPPED
    assert set(VERDICT_EXIT) == {str(v) for v in run_verdicts}
    assert [v for v, code in VERDICT_EXIT.items() if code == 0] == ["PASS"]
    assert VERDICT_EXIT["FAIL"] == 1
    assert {VERDICT_EXIT[v] for v in ("SUSPECT", "INVALID", "INCONCLUSIVE")} == {3}
