"""A blocking reading (PSS of a large process) runs off the gevent loop, so the arrival clock keeps ticking."""

import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(120)

# In a gevent-patched process, as `soak start` is: how many 10 ms ticks another greenlet gets while a call that
# blocks its OS thread for 0.5 s runs inline, and while it runs through off_loop.
PROBE = """
from gevent import monkey; monkey.patch_all()
import gevent
from soak.telemetry.process import off_loop
blocking_sleep = monkey.get_original("time", "sleep")
ticks = []
def ticker():
    while True:
        gevent.sleep(0.01)
        ticks.append(1)
gevent.spawn(ticker)
gevent.sleep(0.05)
before = len(ticks); blocking_sleep(0.5); inline = len(ticks) - before
before = len(ticks); answer = off_loop(lambda: blocking_sleep(0.5) or 42); threaded = len(ticks) - before
print(inline, threaded, answer)
"""


def test_a_blocking_call_holds_the_loop_inline_but_not_through_off_loop():
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=100)
    assert done.returncode == 0, done.stderr
    inline, threaded, answer = (int(x) for x in done.stdout.split())
    assert answer == 42
    assert inline <= 1, "inline, nothing else runs while the call blocks"
    assert threaded >= 10, f"off the loop the ticker kept going ({threaded} ticks of 10 ms in 0.5 s)"


def test_without_gevent_off_loop_is_a_plain_call():
    from soak.telemetry.process import off_loop

    assert off_loop(lambda: "same thread") == "same thread"
