"""Command line and process: parse flags, build the engine, serve with uvicorn on a pre-bound socket.

The socket is bound here (port 0 → a free port from the OS) and handed to uvicorn, so the port in
the READY line is exactly the one served. Exit codes: 0 after SIGTERM/SIGINT, 2 for bad flags or
faults or an address that cannot be bound, 70 when the crash-after fault fires.
"""

import argparse
import asyncio
import ctypes
import signal
import socket
import sys
import time
from dataclasses import dataclass

import torch
import uvicorn

from soak.refserver.api import RefServerApi, ServerInfo, build_app, publish_to_loop
from soak.refserver.clock import ModelClock
from soak.refserver.engine import Engine, EngineConfig
from soak.refserver.faults import FAULT_NAMES, FaultSet, FaultSpecError, parse_faults
from soak.refserver.injector import FaultInjector
from soak.refserver.kvcache import BlockPool, KVCacheManager
from soak.refserver.metrics import ServerMetrics
from soak.refserver.model import ModelConfig, PagedKVCache, build_model
from soak.refserver.sampling import DEFAULT_EOS_PROBABILITY
from soak.refserver.units import parse_duration

READY_PREFIX = "SOAK_REFSERVER_READY"
DEFAULT_MODEL_NAME = "soak-reference"
EXIT_OK, EXIT_USAGE = 0, 2
GRACEFUL_SHUTDOWN_S = 2


@dataclass(frozen=True)
class Settings:
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="soak refserver",
        description="CPU reference inference server (OpenAI-compatible, vLLM metric names) with fault injection.")
    add = parser.add_argument
    add("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    add("--port", type=int, default=0, help="port to bind; 0 = a free port chosen by the OS (default)")
    add("--served-model-name", default=DEFAULT_MODEL_NAME, help=f"model id to serve (default {DEFAULT_MODEL_NAME})")
    add("--seed", type=int, default=0, help="seed of the weights, of sampling without a request seed, of faults")
    add("--device", choices=["cpu", "cuda"], default="cpu", help="where the model and KV cache live")
    add("--max-num-seqs", type=int, default=32, help="most sequences in one batch (default 32)")
    add("--num-blocks", type=int, default=1024, help="KV-cache blocks in the pool (default 1024)")
    add("--block-size", type=int, default=16, help="tokens per KV-cache block (default 16)")
    add("--max-model-len", type=int, default=2048, help="longest prompt + completion in tokens (default 2048)")
    add("--enable-prefix-caching", action="store_true", help="reuse cached full blocks of shared prefixes")
    add("--eos-probability", type=float, default=DEFAULT_EOS_PROBABILITY,
        help=f"chance per generated token of EOS (default {DEFAULT_EOS_PROBABILITY:g})")
    add("--fault", action="append", default=[], metavar="NAME[=VALUE]",
        help=f"inject a fault (repeatable): {', '.join(FAULT_NAMES)}")
    add("--time-scale", type=float, default=1.0, help="model time = uptime x this (default 1)")
    add("--fault-horizon", default="1h", help="model time over which FROM:TO faults move (default 1h)")
    add("--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"],
        help="uvicorn log level (default warning); logs go to stderr")
    return parser


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Typed, checked settings; ValueError (or FaultSpecError) names what is wrong."""
    settings = Settings(
        host=args.host, port=args.port, model_name=args.served_model_name, seed=args.seed, device=args.device,
        max_num_seqs=args.max_num_seqs, num_blocks=args.num_blocks, block_size=args.block_size,
        max_model_len=args.max_model_len, enable_prefix_caching=args.enable_prefix_caching,
        eos_probability=args.eos_probability, faults=parse_faults(args.fault), time_scale=args.time_scale,
        fault_horizon_s=parse_duration(args.fault_horizon), log_level=args.log_level)
    check_settings(settings)
    return settings


def check_settings(s: Settings) -> None:
    positive = {"--max-num-seqs": s.max_num_seqs, "--num-blocks": s.num_blocks, "--block-size": s.block_size,
                "--max-model-len": s.max_model_len, "--time-scale": s.time_scale}
    for flag, value in positive.items():
        if value <= 0:
            raise ValueError(f"{flag} must be > 0, got {value}")
    if not 0 <= s.port <= 65535:
        raise ValueError(f"--port must be in 0..65535, got {s.port}")
    if not 0.0 <= s.eos_probability <= 1.0:
        raise ValueError(f"--eos-probability must be in [0, 1], got {s.eos_probability}")
    if s.num_blocks * s.block_size < s.max_model_len:
        raise ValueError(f"the KV cache ({s.num_blocks} blocks x {s.block_size} tokens) cannot hold one sequence "
                         f"of --max-model-len {s.max_model_len}: add blocks or lower --max-model-len")
    if s.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: torch sees no CUDA device")
    if s.faults.vram_leak_bytes and s.device != "cuda":
        raise ValueError("fault vram-leak needs --device cuda")


def main(argv: list[str] | None = None) -> int:
    """Run the server until SIGTERM/SIGINT; return the process exit code."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help, or argparse's own usage error (already printed)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    try:
        settings = settings_from_args(args)
    except (FaultSpecError, ValueError) as exc:
        print(f"soak refserver: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        sock = bind_socket(settings.host, settings.port)
    except OSError as exc:
        print(f"soak refserver: error: cannot bind {settings.host}:{settings.port}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    serve(settings, sock)
    return EXIT_OK


def bind_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def serve(settings: Settings, sock: socket.socket) -> None:
    """Build the server, announce READY once uvicorn listens, return after a clean shutdown."""
    _configure_process()
    clock = ModelClock(settings.time_scale)
    injector = FaultInjector(settings.faults, clock, settings.seed, settings.fault_horizon_s, settings.device)
    metrics = ServerMetrics(settings.model_name)
    engine = build_engine(settings, metrics, injector)
    info = ServerInfo(settings.model_name, settings.max_model_len, int(time.time()))
    config = uvicorn.Config(build_app(RefServerApi(engine, injector, metrics, info)), lifespan="off",
                            log_level=settings.log_level, access_log=False,
                            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S)
    server = uvicorn.Server(config)
    _stop_on_signals(server)

    def on_ready() -> None:
        clock.start()
        injector.start()
        engine.start()
        print(f"{READY_PREFIX} {_url(sock)}", flush=True)

    try:
        asyncio.run(_serve_and_announce(server, sock, engine, on_ready))
    finally:
        engine.stop()
        injector.stop()


def build_engine(settings: Settings, metrics: ServerMetrics, injector: FaultInjector) -> Engine:
    config = ModelConfig()
    model = build_model(config, settings.seed, settings.device)
    cache = PagedKVCache(config, settings.num_blocks, settings.block_size, settings.device)
    kv = KVCacheManager(BlockPool(settings.num_blocks, settings.enable_prefix_caching), settings.block_size)
    engine_config = EngineConfig(settings.max_num_seqs, settings.seed, settings.eos_probability)
    return Engine(model, cache, kv, engine_config, metrics, injector)


async def _serve_and_announce(server: uvicorn.Server, sock: socket.socket, engine: Engine, on_ready) -> None:
    engine.set_publisher(publish_to_loop(asyncio.get_running_loop()))
    announcer = asyncio.create_task(_announce_when_started(server, on_ready))
    try:
        await server.serve(sockets=[sock])
    finally:
        announcer.cancel()


async def _announce_when_started(server: uvicorn.Server, on_ready) -> None:
    while not server.started:
        await asyncio.sleep(0.01)
    on_ready()


def _url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _configure_process() -> None:
    torch.set_num_threads(1)  # leave the other cores to the load client
    _keep_freed_memory_in_heap()


def _stop_on_signals(server: uvicorn.Server) -> None:
    """SIGTERM/SIGINT ask uvicorn to stop, even before it installs its own handlers.

    uvicorn re-raises the signal after its shutdown; landing here again makes that a no-op, so a
    requested stop exits 0 instead of dying by the signal.
    """
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: setattr(server, "should_exit", True))


def _keep_freed_memory_in_heap() -> None:
    """Stop glibc from unmapping each freed multi-MiB tensor.

    Every decode step allocates fresh gather buffers of several MiB; with glibc's defaults each is
    a new mmap that is page-faulted in again, which made decode steps about 2-3x slower. Faults that
    must give memory back to the OS (gc-sawtooth) use mmap directly and are unaffected.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return  # not glibc: nothing to tune
    m_trim_threshold, m_mmap_threshold = -1, -3
    libc.mallopt(m_trim_threshold, 256 * 2**20)
    libc.mallopt(m_mmap_threshold, 512 * 2**20)
