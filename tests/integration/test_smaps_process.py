"""A real process's growth read from its /proc/PID/smaps and classified by kind (soak/telemetry/smaps.py).

A tiny C program, compiled here, grows one kind of mapping for each line it reads, and its growth, as the
classification sees it, is held against the kind it grew and against the change of its VmRSS + VmSwap.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from soak.telemetry.smaps import SmapsGrowth, classify_growth, read_mappings

MIB = 2**20
# The kernel's RSS counters are per-CPU sums read without a lock: a few pages apart from the page walk of smaps.
AGREEMENT_BYTES = 2 * MIB

PROGRAM = r"""
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MIB (1024 * 1024)

static void grow_heap(void) {  /* 4096 blocks of 4 KiB: below malloc's mmap threshold, so from brk */
    for (int i = 0; i < 4096; i++) memset(malloc(4096), i, 4096);
}

static void grow_anon(void) {  /* 32 MiB between two PROT_NONE pages, so it merges with no neighbour */
    long page = sysconf(_SC_PAGESIZE);
    char *at = mmap(NULL, 32 * MIB + 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (at == MAP_FAILED) exit(2);
    mprotect(at, page, PROT_NONE);
    mprotect(at + page + 32 * MIB, page, PROT_NONE);
    memset(at + page, 1, 32 * MIB);
}

static void grow_memfd(void) {  /* 16 MiB of shared memory behind a memfd */
    int fd = memfd_create("soak-test", 0);
    if (fd < 0 || ftruncate(fd, 16 * MIB) != 0) exit(3);
    char *at = mmap(NULL, 16 * MIB, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (at == MAP_FAILED) exit(4);
    memset(at, 1, 16 * MIB);
}

int main(void) {
    char line[64];
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("ready\n");
    while (fgets(line, sizeof line, stdin)) {
        if (!strncmp(line, "heap", 4)) grow_heap();
        else if (!strncmp(line, "anon", 4)) grow_anon();
        else if (!strncmp(line, "memfd", 5)) grow_memfd();
        else return 1;
        printf("ok\n");
    }
    return 0;
}
"""


@pytest.fixture(scope="module")
def grower(tmp_path_factory) -> Path:
    """The program, compiled with the system's gcc."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("no gcc on PATH: the test compiles a small C program to grow each kind of mapping")
    folder = tmp_path_factory.mktemp("grower")
    (folder / "grower.c").write_text(PROGRAM)
    subprocess.run([gcc, "-O1", "-o", str(folder / "grower"), str(folder / "grower.c")], check=True, timeout=60)
    return folder / "grower"


@pytest.fixture
def child(grower) -> Iterator[subprocess.Popen]:
    """The program running, past its first line; ended by its PID afterwards."""
    process = subprocess.Popen([str(grower)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline() == "ready\n"
        yield process
    finally:
        process.terminate()
        process.wait(timeout=10)


def held_bytes(pid: int) -> int:
    """VmRSS + VmSwap of /proc/PID/status, in bytes."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return sum(int(fields[key].split()[0]) * 1024 for key in ("VmRSS", "VmSwap"))


def grow(process: subprocess.Popen, kind: str) -> tuple[SmapsGrowth, int]:
    """The classified growth of one command, and the change of VmRSS + VmSwap over it."""
    before, held_before = read_mappings(process.pid), held_bytes(process.pid)
    process.stdin.write(kind + "\n")
    process.stdin.flush()
    assert process.stdout.readline() == "ok\n"
    after, held_after = read_mappings(process.pid), held_bytes(process.pid)
    return classify_growth(before, after, pid=process.pid), held_after - held_before


@pytest.mark.parametrize("command, kind, size", [("heap", "heap", 16 * MIB), ("anon", "anon-medium", 32 * MIB),
                                                 ("memfd", "memfd", 16 * MIB)])
def test_the_growth_is_classified_under_the_kind_that_grew(child, command, kind, size):
    growth, status_growth = grow(child, command)
    top = growth.by_kind[0]
    assert top.kind == kind, growth.sentence()
    assert size <= top.growth_bytes < size + MIB
    assert top.growth_bytes >= 0.95 * growth.growth_bytes
    assert sum(row.growth_bytes for row in growth.by_kind) == growth.growth_bytes
    assert abs(growth.growth_bytes - status_growth) < AGREEMENT_BYTES, (growth.growth_bytes, status_growth)


def test_a_named_row_shows_what_grew(child):
    growth, _ = grow(child, "memfd")
    assert growth.by_name[0].name == "memfd:soak-test"
    assert growth.by_name[0].regions_after - growth.by_name[0].regions_before == 1
    assert growth.sentence().startswith("100 % of the 16.0 MiB growth is in memfd mappings (1 new)")
