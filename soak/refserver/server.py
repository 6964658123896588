"""The server process: build model, KV cache, engine and app; serve with uvicorn on a pre-bound socket."""

import asyncio
import ctypes
import signal
import socket
import time

import torch
import uvicorn

from soak.refserver.api import ModelCard, RefServerApi, build_app, publish_to_loop
from soak.refserver.clock import ModelClock
from soak.refserver.engine import Engine, EngineConfig
from soak.refserver.injector import FaultInjector
from soak.refserver.kvcache import BlockPool, KVCacheManager
from soak.refserver.metrics import ServerMetrics
from soak.refserver.model import ModelConfig, PagedKVCache, build_model
from soak.refserver.settings import Settings

READY_PREFIX = "SOAK_REFSERVER_READY"
GRACEFUL_SHUTDOWN_S = 2


def check_device(device: str) -> None:
    """ValueError unless torch can use `device`."""
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: torch sees no CUDA device")


def serve(settings: Settings, sock: socket.socket) -> None:
    """Build the server, announce READY once uvicorn listens, return after a clean shutdown."""
    _configure_process()
    clock = ModelClock(settings.time_scale)
    injector = FaultInjector(settings.faults, clock, settings.seed, settings.fault_horizon_s, settings.device)
    metrics = ServerMetrics(settings.model_name, settings.dialect, settings.num_blocks * settings.block_size)
    engine = build_engine(settings, metrics, injector)
    card = ModelCard(settings.model_name, settings.max_model_len, int(time.time()), settings.dialect)
    api = RefServerApi(engine, injector, metrics, card, settings.refused, settings.image_cost_s_per_mpix,
                       settings.log_refusals)
    config = uvicorn.Config(build_app(api), lifespan="off",
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
    engine_config = EngineConfig(settings.max_num_seqs, settings.seed, settings.eos_probability,
                                 settings.min_step_s)
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
