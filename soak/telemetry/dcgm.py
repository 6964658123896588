"""GPU health read from a dcgm-exporter page among the scraped `--metrics-url` pages.

NVIDIA's dcgm-exporter serves one series per DCGM field (`DCGM_FI_*`) per GPU, labelled `gpu` (index), `UUID`,
`modelName`, `Hostname` and, in Kubernetes, `pod`/`container`/`namespace`. `read_gpus` turns one page into one
`gpu_samples` row per GPU (keyed by UUID, else by index; a MIG instance by its `GPU_I_ID` too), with framebuffer
in bytes. `XidChanges` turns the XID gauge into events: `DCGM_FI_DEV_XID_ERRORS` holds the last XID code the GPU
raised, so a change to a non-zero value is a new XID (the same code raised twice in a row cannot be told apart).
Nothing here does I/O: `prometheus.scrape` hands over the page's text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from soak.samples import GpuReading

DCGM_PREFIX = "DCGM_FI_"
MIB = 1 << 20

# DCGM field → (gpu_samples column, factor to the column's unit). Names from dcgm-exporter's default counters.
FIELDS: dict[str, tuple[str, float]] = {
    "DCGM_FI_DEV_FB_USED": ("mem_used_bytes", MIB),
    "DCGM_FI_DEV_GPU_TEMP": ("temp_c", 1.0),
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", 1.0),
    "DCGM_FI_DEV_GPU_UTIL": ("util_pct", 1.0),
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_mhz", 1.0),
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": ("throttle_reasons", 1.0),
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": ("throttle_reasons", 1.0),  # the newer name of the same bitmask
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": ("ecc_errors", 1.0),
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": ("ecc_sbe_errors", 1.0),
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": ("remapped_rows_uncorrectable", 1.0),
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": ("remapped_rows_correctable", 1.0),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": ("row_remap_failure", 1.0),
    "DCGM_FI_DEV_XID_ERRORS": ("last_xid", 1.0),
}
# Framebuffer not used: free and reserved, added to used for the GPU's total (its headroom for leak.vram).
FB_REST = ("DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED")
WHOLE_NUMBERS = {"throttle_reasons", "ecc_errors", "ecc_sbe_errors", "remapped_rows_uncorrectable",
                 "remapped_rows_correctable", "row_remap_failure", "last_xid"}


def dcgm_lines(text: str) -> str:
    """The page's DCGM series (and their HELP/TYPE lines); empty when the page has none."""
    if DCGM_PREFIX not in text:
        return ""
    wanted = [line for line in text.splitlines()
              if line.startswith(DCGM_PREFIX) or (line.startswith("# ") and f" {DCGM_PREFIX}" in line)]
    return "\n".join(wanted) + "\n" if wanted else ""


def gpu_key(labels: dict[str, str]) -> str:
    """Which GPU a series is of: its UUID (with the MIG instance, when there is one), else its index."""
    name = labels.get("UUID") or labels.get("uuid") or f"gpu{labels.get('gpu', '?')}"
    instance = labels.get("GPU_I_ID")
    return f"{name}/{instance}" if instance else name


def gpu_reading(row: dict[str, Any], source: str) -> GpuReading:
    """The sample of one GPU row of a page (its XIDs since the run started set by `XidChanges.observe`), read from
    `source`; the pod it was claimed by is no column."""
    return GpuReading(**{key: value for key, value in row.items() if key != "_pod"}, source=source)


def _new_row(labels: dict[str, str]) -> dict[str, Any]:
    index = labels.get("gpu", "")
    return {"gpu_index": int(index) if index.isdigit() else -1, "uuid": gpu_key(labels)[:96],
            "name": labels.get("modelName", "")[:128] or None, "_fb_rest": 0.0, "_pod": labels.get("pod") or None}


@dataclass(frozen=True)
class GpuClaim:
    """Which GPUs of a dcgm-exporter page are this run's. A plain run claims every one. A fleet replica's run
    claims the GPUs `--replica NAME=URL,GPU_UUID…` named (a MIG instance by its GPU's UUID), else those whose
    `pod` label (dcgm-exporter's Kubernetes mapping) is the replica's name — so one GPU's XID is one replica's."""

    every: bool = True
    uuids: tuple[str, ...] = ()
    pod: str | None = None

    @classmethod
    def of_replica(cls, name: str, uuids: tuple[str, ...]) -> GpuClaim:
        return cls(every=False, uuids=uuids, pod=None if uuids else name)

    def keeps(self, row: dict[str, Any]) -> bool:
        if self.every:
            return True
        if self.uuids:
            return row["uuid"] in self.uuids or row["uuid"].split("/")[0] in self.uuids
        return row.get("_pod") is not None and row.get("_pod") == self.pod

    def describe_none(self, url: str, count: int) -> str:
        """Why a page's GPUs are none of this replica's, and how to name them."""
        how = (f"none has UUID {', '.join(self.uuids)}" if self.uuids else
               f"none is labelled pod={self.pod!r}; name its GPUs with --replica {self.pod}=URL,GPU_UUID")
        return f"dcgm-exporter {url}: {count} GPU(s), none of them this replica's ({how})"


def read_gpus(text: str) -> list[dict[str, Any]]:
    """One row per GPU a dcgm-exporter page shows (gpu_samples columns); [] for a page that is not one."""
    page = dcgm_lines(text)
    if not page:
        return []
    rows: dict[str, dict[str, Any]] = {}
    for family in text_string_to_metric_families(page):
        for sample in family.samples:
            if math.isnan(sample.value):
                continue
            row = rows.setdefault(gpu_key(sample.labels), _new_row(sample.labels))
            _take(row, sample.name, sample.value)
    return [_finish(row) for row in rows.values()]


def _take(row: dict[str, Any], name: str, value: float) -> None:
    name = name.removesuffix("_total")  # prometheus_client names a counter's sample `<family>_total`
    if name in FB_REST:
        row["_fb_rest"] += value * MIB
    elif name in FIELDS:
        column, factor = FIELDS[name]
        row[column] = int(value) if column in WHOLE_NUMBERS else value * factor


def _finish(row: dict[str, Any]) -> dict[str, Any]:
    """Whole bytes, and the total framebuffer where free (or reserved) memory was on the page."""
    rest = row.pop("_fb_rest")
    used = row.get("mem_used_bytes")
    if used is not None:
        row["mem_used_bytes"] = int(used)
        row["mem_total_bytes"] = int(used + rest) if rest else None
    return row


@dataclass
class XidChanges:
    """New XIDs, from the last-XID gauge of each GPU of each page, and the count of them since the run started.

    The first reading of a GPU is where it stood before the run: an XID already showing then is not new (the
    page's `first_seen` names it, for the record), only a later change to a non-zero code is.
    """

    last: dict[tuple[str, str], int] = field(default_factory=dict)
    counts: dict[tuple[str, str], int] = field(default_factory=dict)

    def first_seen(self, source: str, rows: list[dict[str, Any]]) -> dict[str, Any] | None:
        """What a page shows the first time it is read (None after): its GPUs, and XIDs already showing then."""
        if any((source, row["uuid"]) in self.last for row in rows):
            return None
        before = {row["uuid"]: row["last_xid"] for row in rows if row.get("last_xid")}
        return {"source": source, "gpus": [{"uuid": row["uuid"], "gpu_index": row["gpu_index"], "name": row.get("name")}
                                           for row in rows], "xid_before_run": before}

    def observe(self, source: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Set each row's `xid_errors` (new XIDs so far) and return one event's data per new XID."""
        found = []
        for row in rows:
            key, code = (source, row["uuid"]), row.get("last_xid")
            if code is None:
                continue
            previous = self.last.get(key)
            if previous is not None and code and code != previous:
                self.counts[key] = self.counts.get(key, 0) + 1
                found.append({"gpu_index": row["gpu_index"], "uuid": row["uuid"], "xid": code,
                              "previous_xid": previous, "source": source})
            self.last[key] = code
            row["xid_errors"] = self.counts.get(key, 0)
        return found
