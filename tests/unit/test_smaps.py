"""/proc/PID/smaps parsed and a process's growth classified by kind of mapping (soak/telemetry/smaps.py).

The canned files under data/smaps/ are a llama-server-like process in the kernel's layout; between them the
heap grows by 3336 kB, three 8 MiB anonymous buffers appear fully resident, the 64 MiB arena gains 500 kB
resident and 1 MiB swapped, a named arena grows by 260 kB, the stack by 4 kB, and a small anonymous mapping
of 132 kB is unmapped.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from soak.telemetry.smaps import (
    KINDS,
    MappingGrowth,
    MappingRegion,
    SmapsGrowth,
    classify_growth,
    parse_smaps,
    read_mappings,
)

DATA = Path(__file__).parent / "data" / "smaps"
KIB = 1024


@pytest.fixture(scope="module")
def before() -> tuple[MappingRegion, ...]:
    return parse_smaps((DATA / "before.smaps").read_text())


@pytest.fixture(scope="module")
def after() -> tuple[MappingRegion, ...]:
    return parse_smaps((DATA / "after.smaps").read_text())


@pytest.fixture(scope="module")
def growth(before, after) -> SmapsGrowth:
    return classify_growth(before, after, pid=4242)


def test_every_mapping_is_parsed_with_its_fields(before):
    assert len(before) == 19
    heap = next(region for region in before if region.path == "[heap]")
    assert (heap.start, heap.end, heap.perms) == (0x5581A3E1E000, 0x5581A3E1E000 + 12548 * KIB, "rw-p")
    assert (heap.rss_bytes, heap.swap_bytes) == (11000 * KIB, 0)
    assert [region.path for region in before if region.start == 0x7F3A10000000] == [""]


def test_each_mapping_has_its_kind_and_name(before):
    found = {region.path or f"anon {region.end - region.start}": (region.kind, region.name) for region in before}
    assert found == {
        "/opt/llama/bin/llama-server": ("file", "/opt/llama/bin/llama-server"),
        "[heap]": ("heap", "[heap]"),
        f"anon {8 * 2**20}": ("anon-medium", "anonymous 1–64 MiB"),
        f"anon {64 * 2**20}": ("anon-large", "anonymous ≥ 64 MiB"),
        f"anon {132 * KIB}": ("anon-small", "anonymous < 1 MiB"),
        f"anon {256 * KIB}": ("anon-small", "anonymous < 1 MiB"),
        "[anon:glibc: malloc arena]": ("anon-named", "[anon:glibc: malloc arena]"),
        "/memfd:ggml-buffer (deleted)": ("memfd", "memfd:ggml-buffer"),
        "/dev/shm/soak-kv": ("shm", "/dev/shm/soak-kv"),
        "/SYSV0000162e (deleted)": ("shm", "/SYSV0000162e"),
        "/dev/zero (deleted)": ("shm", "shared anonymous"),
        "/opt/llama/lib/libggml-cpu.so": ("file", "/opt/llama/lib/libggml-cpu.so"),
        "/models/tiny.gguf": ("file", "/models/tiny.gguf"),  # shared but a real file: the model's weights
        "[stack]": ("stack", "[stack]"),
        "[vvar]": ("other", "[vvar]"),
        "[vdso]": ("other", "[vdso]"),
        "[vsyscall]": ("other", "[vsyscall]"),
    }
    assert {kind for kind, _ in found.values()} == set(KINDS)


def test_a_thread_stack_of_an_old_kernel_is_a_stack():
    region = MappingRegion(0x1000, 0x2000, "rw-p", "[stack:1234]", 4096, 0)
    assert (region.kind, region.name) == ("stack", "[stack]")


def test_the_size_classes_split_at_1_and_64_mib():
    def kind(size: int) -> str:
        return MappingRegion(0, size, "rw-p", "", 0, 0).kind

    assert [kind(2**20 - 4096), kind(2**20), kind(64 * 2**20 - 4096), kind(64 * 2**20)] == [
        "anon-small", "anon-medium", "anon-medium", "anon-large"]


def test_the_growth_is_classified_by_kind(growth):
    rows = {row.kind: (row.growth_bytes // KIB, row.regions_before, row.regions_after) for row in growth.by_kind}
    assert rows == {"anon-medium": (24576, 1, 4), "heap": (3336, 1, 1), "anon-large": (1524, 1, 1),
                    "anon-named": (260, 1, 1), "stack": (4, 1, 1), "file": (0, 5, 5), "shm": (0, 3, 3),
                    "memfd": (0, 1, 1), "other": (0, 3, 3), "anon-small": (-132, 2, 1)}
    assert [row.kind for row in growth.by_kind][:3] == ["anon-medium", "heap", "anon-large"]
    assert growth.by_kind[0].name == "anonymous mappings of 1–64 MiB"


def test_the_kinds_add_up_to_the_whole(growth, before, after):
    assert growth.growth_bytes == 29568 * KIB
    assert sum(row.growth_bytes for row in growth.by_kind) == growth.growth_bytes
    assert growth.before_bytes == sum(region.rss_bytes + region.swap_bytes for region in before)
    assert growth.after_bytes == sum(region.rss_bytes + region.swap_bytes for region in after)


def test_the_named_rows_are_those_that_changed_most(growth):
    assert [(row.name, row.growth_bytes // KIB) for row in growth.by_name] == [
        ("anonymous 1–64 MiB", 24576), ("[heap]", 3336), ("anonymous ≥ 64 MiB", 1524),
        ("[anon:glibc: malloc arena]", 260), ("[stack]", 4), ("anonymous < 1 MiB", -132)]
    assert len(classify_growth(growth_regions("before"), growth_regions("after"), pid=1, top=2).by_name) == 2


def growth_regions(name: str) -> tuple[MappingRegion, ...]:
    return parse_smaps((DATA / f"{name}.smaps").read_text())


def test_the_growth_survives_a_json_round_trip(growth):
    stored = json.loads(json.dumps(growth.as_dict()))
    assert stored["by_kind"][0]["growth_bytes"] == 24576 * KIB and stored["growth_bytes"] == 29568 * KIB
    again = SmapsGrowth.from_dict(stored)
    assert again == growth
    assert again.sentence() == growth.sentence()


def test_the_sentence_names_the_dominant_kinds(growth):
    assert growth.sentence() == ("83 % of the 29.0 MiB growth is in anonymous mappings of 1–64 MiB (3 new), "
                                 "11 % in [heap], 5 % in anonymous mappings of 64 MiB or more")


def test_a_spread_growth_is_called_spread():
    rows = tuple(MappingGrowth(kind, kind, 0, mib * 2**20, 1, 1)
                 for kind, mib in (("heap", 8), ("anon-small", 8), ("anon-medium", 7), ("anon-large", 7),
                                   ("anon-named", 5), ("file", 5)))
    spread = SmapsGrowth(pid=1, before_bytes=0, after_bytes=40 * 2**20, by_kind=rows, by_name=())
    assert spread.sentence() == "the 40.0 MiB growth is spread over 6 kinds of mapping, none above 20 %"


def test_a_release_elsewhere_is_said():
    rows = (MappingGrowth("heap", "[heap]", 0, 10 * 2**20, 1, 1),
            MappingGrowth("file", "file-backed mappings", 4 * 2**20, 0, 2, 0))
    assert SmapsGrowth(1, 4 * 2**20, 10 * 2**20, rows, ()).sentence() == (
        "100 % of the 10.0 MiB growth is in [heap]; 4.0 MiB was released elsewhere")
    assert SmapsGrowth(1, 4 * 2**20, 0, rows[1:], ()).sentence() == "no kind of mapping grew (4.0 MiB released)"


def test_a_garbage_line_is_named():
    text = (DATA / "before.smaps").read_text().splitlines()
    text.insert(30, "this is not smaps")
    with pytest.raises(ValueError, match=r"smaps line 31 .*'this is not smaps'"):
        parse_smaps("\n".join(text))


def test_a_field_before_any_header_is_refused():
    with pytest.raises(ValueError, match="line 1 is before any mapping's header: 'Rss:"):
        parse_smaps("Rss:                   8 kB\n")


def test_a_size_that_is_not_a_number_is_refused():
    with pytest.raises(ValueError, match="field Rss of mapping '7f3a10000000-7f3a10800000"):
        parse_smaps("7f3a10000000-7f3a10800000 rw-p 00000000 00:00 0 \nRss: lots kB\n")


def test_this_process_can_be_read():
    regions = read_mappings(os.getpid())
    assert any(region.kind == "heap" for region in regions) and any(region.kind == "file" for region in regions)


def test_a_gone_process_is_a_process_lookup_error():
    with pytest.raises(ProcessLookupError, match="process 4194305 is gone"):
        read_mappings(4194305)  # above the kernel's largest PID (pid_max ≤ 2**22)
