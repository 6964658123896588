"""The server's process tree as the sampler sees it, with real processes: roots, new children, exits."""

import subprocess
import sys
import time

import pytest

from soak.telemetry.process import ProcessTreeSampler

pytestmark = pytest.mark.timeout(60)

# A parent that starts one sleeping child at once and a second one when its stdin gets a line.
PARENT = """
import subprocess, sys
sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
children = [subprocess.Popen(sleep)]
print(children[0].pid, flush=True)
sys.stdin.readline()
children.append(subprocess.Popen(sleep))
print(children[1].pid, flush=True)
sys.stdin.readline()
for child in children:
    child.kill()
"""


@pytest.fixture()
def parent():
    process = subprocess.Popen([sys.executable, "-c", PARENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               text=True)
    try:
        yield process
    finally:
        process.kill()
        process.wait(10)


def sampled_pids(sampler):
    return {row.pid for row in sampler.sample()}


def wait_for(condition, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_children_are_found_new_ones_within_the_refresh_and_exits_at_once(parent):
    first_child = int(parent.stdout.readline())
    sampler = ProcessTreeSampler([parent.pid], tree_every_s=0.5)
    assert sampled_pids(sampler) == {parent.pid, first_child}

    parent.stdin.write("go\n")
    parent.stdin.flush()
    second_child = int(parent.stdout.readline())
    wait_for(lambda: second_child in sampled_pids(sampler))
    assert sampled_pids(sampler) == {parent.pid, first_child, second_child}

    parent.stdin.write("stop\n")
    parent.stdin.flush()
    parent.wait(10)
    wait_for(lambda: not sampled_pids(sampler))  # gone processes are dropped, not reported stale
    assert sampler.tree_pids() == []


def test_new_roots_are_read_at_once(parent):
    first_child = int(parent.stdout.readline())
    sampler = ProcessTreeSampler([first_child], tree_every_s=3600)
    assert sampled_pids(sampler) == {first_child}
    sampler.set_roots([parent.pid])
    assert sampled_pids(sampler) == {parent.pid, first_child}
