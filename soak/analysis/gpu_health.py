"""GPU health: `gpu.xid` (a GPU raised an XID) and `gpu.ecc` (uncorrectable memory errors rose during the run).

Both read what the driver reports — NVML on this host, or dcgm-exporter pages given with `--metrics-url` — not
what the client saw, so a late client cannot void them. Neither has a threshold: one XID, one double-bit ECC
error or one uncorrectable remapped row during a release soak is a fault to explain before signing it off.
"""

from __future__ import annotations

import numpy as np

from soak.analysis.findings import FAIL, PASS, Finding, skipped
from soak.analysis.fmt import duration_text
from soak.analysis.gates import Gates
from soak.analysis.inputs import Event, GpuSeries, RunData
from soak.contracts import EventKind

# What the common XIDs mean, in short (NVIDIA's XID catalog says more, and what to do).
XID_MEANINGS = {
    13: "graphics engine exception", 31: "GPU memory page fault", 43: "GPU stopped processing",
    48: "double-bit ECC error", 63: "ECC page retirement or row remap recorded",
    64: "ECC page retirement or row remap failed", 74: "NVLink error", 79: "fallen off the bus",
    92: "high single-bit ECC error rate", 94: "contained ECC error", 95: "uncontained ECC error",
}
# The counters gpu.ecc watches: a rise in any is memory the GPU could not correct.
ECC_COUNTERS = {"ecc_dbe": "double-bit ECC errors", "remapped_rows_uncorrectable": "uncorrectable remapped rows",
                "row_remap_failure": "row-remap failures"}


def xid_text(code: int) -> str:
    """`79 (fallen off the bus)`, or the bare code when it is not in the table."""
    meaning = XID_MEANINGS.get(code)
    return f"{code} ({meaning})" if meaning else str(code)


def _gpu_name(event: Event) -> str:
    uuid = event.data.get("uuid")
    return f"GPU {uuid}" if uuid else f"GPU {event.data.get('gpu_index')}"


def _sources(run: RunData) -> str:
    """Where the GPU readings came from, in a few words."""
    names = ["NVML" if g.source is None else "dcgm-exporter" for g in run.gpus]
    return " and ".join(dict.fromkeys(names)) or "no source"


def xids_before_run(run: RunData) -> str:
    """`; GPU … showed XID 13 before the run (not judged)` for each XID a dcgm-exporter page showed when first read."""
    before = {uuid: code for e in run.events if e.kind == EventKind.GPU_DCGM
              for uuid, code in (e.data.get("xid_before_run") or {}).items()}
    return "".join(f"; GPU {uuid} showed XID {xid_text(int(code))} before the run (not judged)"
                   for uuid, code in before.items())


def check_xid(run: RunData, gates: Gates) -> Finding:
    """FAIL on any XID a GPU raised during the run; PASS when XIDs could be read and none came."""
    xids = [e for e in run.events if e.kind == EventKind.GPU_XID]
    readable = [g for g in run.gpus if g.xid_errors is not None]
    details = {"xids": [{"t_s": e.t_s, "gpu": _gpu_name(e), "xid": e.data.get("xid")} for e in xids],
               "gpus_read": len(readable), "source": _sources(run), "before_run": xids_before_run(run).lstrip("; ")}
    if xids:
        first = xids[0]
        more = f"; {len(xids) - 1} more XID(s): " + ", ".join(
            f"{xid_text(int(e.data.get('xid') or 0))} on {_gpu_name(e)}" for e in xids[1:4]) if len(xids) > 1 else ""
        return Finding(check="gpu.xid", verdict=FAIL, value=len(xids), unit="XIDs", threshold=0, details=details,
                       evidence=(f"{_gpu_name(first)} raised XID {xid_text(int(first.data.get('xid') or 0))} at "
                                 f"{duration_text(first.t_s)}{more}{xids_before_run(run)}."))
    if not readable:
        return skipped("gpu.xid", "No XIDs could be read: no dcgm-exporter page among the --metrics-url pages "
                       "and NVML could not report them on this host.", **details)
    return Finding(check="gpu.xid", verdict=PASS, value=0, unit="XIDs", threshold=0, details=details,
                   evidence=f"No XID on {len(readable)} GPU(s) in {duration_text(run.actual_duration_s)} "
                            f"(read from {_sources(run)}){xids_before_run(run)}.")


def rise(values: np.ndarray) -> float:
    """How much a counter rose over the run: the sum of its increases (a reset to 0 on a driver reload is no
    rise, and what it counted after the reset still is)."""
    finite = values[np.isfinite(values)]
    return float(np.clip(np.diff(finite), 0, None).sum()) if finite.size > 1 else 0.0


def _rises(gpu: GpuSeries) -> dict[str, float]:
    counters = {name: getattr(gpu, name) for name in ECC_COUNTERS}
    return {name: rise(values) for name, values in counters.items() if values is not None}


def check_ecc(run: RunData, gates: Gates) -> Finding:
    """FAIL when uncorrectable ECC errors, uncorrectable remapped rows or row-remap failures rose on a GPU."""
    read = {g.label: _rises(g) for g in run.gpus}
    read = {label: rises for label, rises in read.items() if rises}
    if not read:
        return skipped("gpu.ecc", "No ECC or row-remap counters were read (NVML did not give them and no "
                       "dcgm-exporter page among the --metrics-url pages did).")
    risen = [(label, name, amount) for label, rises in read.items() for name, amount in rises.items() if amount > 0]
    details = {"rises": {label: rises for label, rises in read.items()}, "source": _sources(run)}
    if risen:
        text = "; ".join(f"{label}: +{amount:.0f} {ECC_COUNTERS[name]}" for label, name, amount in risen[:3])
        return Finding(check="gpu.ecc", verdict=FAIL, value=sum(a for _, _, a in risen), unit="errors",
                       threshold=0, details=details,
                       evidence=f"GPU memory the GPU could not correct, during the run — {text}.")
    return Finding(check="gpu.ecc", verdict=PASS, value=0, unit="errors", threshold=0, details=details,
                   evidence=f"No uncorrectable ECC error or remapped row on {len(read)} GPU(s) "
                            f"(read from {_sources(run)}).")
