"""Command line: flags → checked `Settings`, the bound socket, then the server.

The socket is bound here (port 0 → a free port from the OS) and handed to uvicorn, so the port in
the READY line is exactly the one served. Exit codes: 0 after SIGTERM/SIGINT; 2 for bad flags or
faults, a missing CUDA device, or an address that cannot be bound (one `soak refserver: error:`
line on stderr); 70 when the crash-after fault fires.
"""

import argparse
import socket
import sys

from soak.refserver.faults import FAULT_NAMES, FaultSpecError, parse_faults
from soak.refserver.metrics import DIALECTS
from soak.refserver.sampling import DEFAULT_EOS_PROBABILITY
from soak.refserver.settings import Settings, check_settings
from soak.refserver.units import parse_duration

DEFAULT_MODEL_NAME = "soak-reference"
EXIT_OK, EXIT_USAGE = 0, 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="soak refserver",
        description="CPU reference inference server (OpenAI-compatible; vLLM metric names, or another "
                    "server's with --dialect) with fault injection.")
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
    add("--dialect", choices=list(DIALECTS), default="vllm",
        help="serve /metrics names and /v1/models fields as this server does (default vllm)")
    add("--image-cost", default="50ms", metavar="D",
        help="preprocessing time charged per megapixel of an image part (default 50ms)")
    add("--step-time", default="0s", metavar="D",
        help="the least one engine step (one token of every running sequence) takes, as a GPU's decode step "
             "does; timings then stand above a busy CPU's jitter (default 0s: as fast as the CPU computes)")
    add("--no-images", action="store_true", help="answer image_url parts with a 400, as a text-only model does")
    add("--no-tools", action="store_true", help="answer requests with 'tools' with a 400")
    add("--no-json-schema", action="store_true", help="answer response_format json_schema with a 400")
    add("--log-refusals", action="store_true",
        help="log a traceback for each request refused with a 4xx, as vLLM 0.21 does for an image sent to a "
             "text-only model")
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
        fault_horizon_s=parse_duration(args.fault_horizon), log_level=args.log_level,
        dialect=args.dialect, refused=refused_features(args),
        image_cost_s_per_mpix=parse_duration(args.image_cost), min_step_s=parse_duration(args.step_time),
        log_refusals=args.log_refusals)
    check_settings(settings)
    return settings


def refused_features(args: argparse.Namespace) -> frozenset[str]:
    """The features the --no-… switches turn off."""
    switches = {"images": args.no_images, "tools": args.no_tools, "json_schema": args.no_json_schema}
    return frozenset(feature for feature, off in switches.items() if off)


def main(argv: list[str] | None = None) -> int:
    """Run the server until SIGTERM/SIGINT; return the process exit code."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help, or argparse's own usage error (already printed)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    try:
        settings = settings_from_args(args)
    except (FaultSpecError, ValueError) as exc:
        return _usage_error(str(exc))
    from soak.refserver import server  # torch loads only once the flags are known to be good

    try:
        server.check_device(settings.device)
        sock = bind_socket(settings.host, settings.port)
    except ValueError as exc:
        return _usage_error(str(exc))
    except OSError as exc:
        return _usage_error(f"cannot bind {settings.host}:{settings.port}: {exc}")
    server.serve(settings, sock)
    return EXIT_OK


def bind_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP matters: asyncio only sets TCP_NODELAY on sockets that say they are TCP, and with
    # Nagle left on, each small SSE chunk waits for a delayed ACK (~40 ms).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _usage_error(message: str) -> int:
    print(f"soak refserver: error: {message}", file=sys.stderr)
    return EXIT_USAGE
