"""The reference server's settings: what `soak.refserver.cli` parses and `soak.refserver.server` runs with."""

from dataclasses import dataclass

from soak.refserver.faults import FaultSet


@dataclass(frozen=True)
class Settings:
    """The server's checked configuration, built from the command line by `soak.refserver.cli`."""

    host: str
    port: int
    model_name: str
    seed: int
    device: str
    max_num_seqs: int
    num_blocks: int
    block_size: int
    max_model_len: int
    enable_prefix_caching: bool
    eos_probability: float
    faults: FaultSet
    time_scale: float
    fault_horizon_s: float
    log_level: str
    dialect: str = "vllm"  # whose /metrics names and /v1/models fields to serve
    refused: frozenset[str] = frozenset()  # features answered with a 400: images, tools, json_schema
    image_cost_s_per_mpix: float = 0.05  # preprocessing time charged per megapixel of an image part
    min_step_s: float = 0.0  # the least one engine step takes (--step-time)
    log_refusals: bool = False  # a traceback in the log for each request refused with a 4xx (--log-refusals)


def check_settings(s: Settings) -> None:
    """ValueError naming the first flag whose value cannot work."""
    positive = {"--max-num-seqs": s.max_num_seqs, "--num-blocks": s.num_blocks, "--block-size": s.block_size,
                "--max-model-len": s.max_model_len, "--time-scale": s.time_scale}
    for flag, value in positive.items():
        if value <= 0:
            raise ValueError(f"{flag} must be > 0, got {value}")
    if not 0 <= s.port <= 65535:
        raise ValueError(f"--port must be in 0..65535, got {s.port}")
    if s.image_cost_s_per_mpix < 0:
        raise ValueError(f"--image-cost must be >= 0, got {s.image_cost_s_per_mpix}")
    if not 0 <= s.min_step_s <= 1:
        raise ValueError(f"--step-time must be between 0 and 1s, got {s.min_step_s:g}s")
    if not 0.0 <= s.eos_probability <= 1.0:
        raise ValueError(f"--eos-probability must be in [0, 1], got {s.eos_probability}")
    if s.num_blocks * s.block_size < s.max_model_len:
        raise ValueError(f"the KV cache ({s.num_blocks} blocks x {s.block_size} tokens) cannot hold one sequence "
                         f"of --max-model-len {s.max_model_len}: add blocks or lower --max-model-len")
    if s.faults.vram_leak_bytes and s.device != "cuda":
        raise ValueError("fault vram-leak needs --device cuda")
