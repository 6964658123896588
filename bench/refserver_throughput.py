"""Output tokens/s of the CPU reference server at concurrency 1, 8 and 32 (streaming, fixed max_tokens).

    python bench/refserver_throughput.py [--max-tokens 128] [--rounds 3] [-- extra refserver flags]

Starts `python -m soak.refserver --port 0`, keeps N streams in flight (each stream ends at exactly
max_tokens: ignore_eos), counts completion tokens from the usage chunks, and prints tokens/s with the
batch-1 figure as the baseline ratio. Figures, not assertions: see docs/refserver.md.
"""

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time

import httpx

LEVELS = (1, 8, 32)


async def one_stream(client: httpx.AsyncClient, max_tokens: int, index: int) -> tuple[int, float]:
    """Stream one chat completion; return (completion tokens, time to first content chunk)."""
    body = {"messages": [{"role": "user", "content": f"benchmark request {index}"}], "max_tokens": max_tokens,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    started, first_s, tokens = time.perf_counter(), None, 0
    async with client.stream("POST", "/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            elif first_s is None and chunk["choices"][0]["delta"].get("content"):
                first_s = time.perf_counter() - started
    return tokens, first_s or 0.0


async def run_level(url: str, concurrency: int, max_tokens: int, rounds: int) -> dict:
    """`rounds` × `concurrency` requests, `concurrency` in flight at all times."""
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:
        queue = list(range(rounds * concurrency))
        results: list[tuple[int, float]] = []

        async def worker() -> None:
            while queue:
                results.append(await one_stream(client, max_tokens, queue.pop()))

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    tokens = sum(t for t, _ in results)
    return {"concurrency": concurrency, "tokens": tokens, "seconds": elapsed, "tokens_per_s": tokens / elapsed,
            "ttft_median_ms": statistics.median(f for _, f in results) * 1000}


def start_server(extra: list[str]) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen([sys.executable, "-m", "soak.refserver", "--port", "0", *extra],
                               stdout=subprocess.PIPE, text=True)
    line = process.stdout.readline().strip()
    if not line.startswith("SOAK_REFSERVER_READY "):
        process.kill()
        raise SystemExit(f"the reference server did not start: {line!r}")
    return process, line.split()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3, help="requests per stream slot at each level")
    parser.add_argument("server_args", nargs="*", help="extra refserver flags (after --)")
    args = parser.parse_args()
    process, url = start_server(args.server_args)
    try:
        asyncio.run(run_level(url, 2, 8, 1))  # warm-up
        rows = [asyncio.run(run_level(url, level, args.max_tokens, args.rounds)) for level in LEVELS]
    finally:
        process.terminate()
        process.wait(30)
    baseline = rows[0]["tokens_per_s"]
    print(f"refserver throughput, streaming, max_tokens={args.max_tokens}, {args.rounds} rounds per slot")
    print(f"{'concurrency':>11} {'tokens':>7} {'seconds':>8} {'tokens/s':>9} {'x batch-1':>9} {'TTFT p50 ms':>11}")
    for row in rows:
        print(f"{row['concurrency']:>11} {row['tokens']:>7} {row['seconds']:>8.2f} {row['tokens_per_s']:>9.0f} "
              f"{row['tokens_per_s'] / baseline:>9.2f} {row['ttft_median_ms']:>11.1f}")


if __name__ == "__main__":
    main()
