"""The server-log scan on real files: following like tail -F, the pattern table, context, deduplication, the cap."""

from __future__ import annotations

import os
import time

import pytest

from soak.contracts import ProvokedExchange, ServerLogClass
from soak.telemetry import server_log
from soak.telemetry.server_log import LogFollower, ServerLogScanner, classify, exception_line, scanner_for_run


class Events:
    """Collects events as the run's Recorder would record them."""

    def __init__(self) -> None:
        self.recorded: list[tuple[str, str, dict]] = []

    def event(self, kind, message="", data=None):
        self.recorded.append((str(kind), message, data or {}))

    def of(self, kind: str) -> list[dict]:
        return [data for k, _, data in self.recorded if k == kind]


def append(path, text: str) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(text)


@pytest.mark.parametrize("line, log_class, dialect", [
    ("Killed", ServerLogClass.OOM, "any"),
    ("[12345.6] Out of memory: Killed process 4242 (python)", ServerLogClass.OOM, "any"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", ServerLogClass.OOM, "any"),
    ("alloc_buffer: allocating 4096.00 MiB on device 0: cudaMalloc failed: out of memory", ServerLogClass.OOM, "any"),
    ("vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.", ServerLogClass.ENGINE_DEAD, "any"),
    ("RuntimeError: CUDA error: an illegal memory access was encountered", ServerLogClass.CUDA_ERROR, "any"),
    ("(EngineCore_0 pid=2651) ERROR 06-11 11:46:39 [core.py:517] EngineCore encountered a fatal error.",
     ServerLogClass.FATAL, "vllm"),
    ("[2025-03-29 18:56:25 TP0] Scheduler hit an exception: Traceback", ServerLogClass.FATAL, "sglang"),
    ("[2026-02-27 15:27:13] Received sigquit from a child process. It usually means the child failed.",
     ServerLogClass.FATAL, "sglang"),
    ("2024-06-17T13:18:29Z ERROR shard-manager: text_generation_launcher: Shard complete standard error output:",
     ServerLogClass.FATAL, "tgi"),
    ("/src/ggml/ggml.c:1234: GGML_ASSERT(ctx->mem_buffer != NULL) failed", ServerLogClass.FATAL, "llamacpp"),
    ("[TensorRT-LLM][ERROR] Encountered an error in forwardAsync function", ServerLogClass.FATAL, "trtllm"),
    ("Fatal Python error: Segmentation fault", ServerLogClass.FATAL, "any"),
    ("Traceback (most recent call last):", ServerLogClass.TRACEBACK, "any"),
    ("WARNING: NaN detected in logits of request 7", ServerLogClass.NAN, "any"),
    ("RuntimeWarning: invalid value encountered in divide", ServerLogClass.NAN, "any"),
])
def test_the_table_classifies_each_kind_of_line(line, log_class, dialect):
    pattern = classify(line)
    assert pattern is not None and (pattern.log_class, pattern.dialect) == (log_class, dialect)


@pytest.mark.parametrize("line", [
    "INFO:     127.0.0.1:5555 - \"POST /v1/chat/completions HTTP/1.1\" 200 OK",
    "INFO 06-11 11:46:39 [loggers.py:116] Avg prompt throughput: 0.0 tokens/s, GPU KV cache usage: 0.0%",
    "SOAK_REFSERVER_READY http://127.0.0.1:4242",
    "soak refserver: fault hang-after=60s (model time): engine loop stopped",
    "the model infers information from inference requests",
    "WARNING lower --gpu-memory-utilization if you run out of memory",
])
def test_ordinary_lines_match_nothing(line):
    assert classify(line) is None


def test_a_traceback_ends_at_its_exception_line_under_a_log_prefix():
    header = "(EngineCore_0 pid=1) ERROR 06-11 11:46:39 [core.py:517] Traceback (most recent call last):"
    prefix = "(EngineCore_0 pid=1) ERROR 06-11 11:46:39 [core.py:517] "
    assert exception_line(header, prefix + '  File "x.py", line 3, in f') is None
    assert exception_line(header, prefix + "ValueError: bad") == "ValueError: bad"
    assert exception_line("Traceback (most recent call last):", "KeyError: 'x'") == "KeyError: 'x'"
    assert exception_line("Traceback (most recent call last):", "During handling of the above exception") is None


def test_follows_from_the_end_across_truncation_and_rotation(tmp_path):
    path = tmp_path / "server.log"
    path.write_text("before the run\n")
    follower = LogFollower(path, from_end=True)
    append(path, "one\ntw")
    assert follower.read_lines() == ["one"]
    append(path, "o\n")
    assert follower.read_lines() == ["two"]
    path.write_text("new\n")  # truncated: read again from the start
    assert follower.read_lines() == ["new"]
    os.rename(path, tmp_path / "server.log.1")
    path.write_text("rotated\n")  # a new file under the same name
    assert follower.read_lines() == ["rotated"]


def test_a_file_that_appears_later_is_read_from_its_start(tmp_path):
    path = tmp_path / "later.log"
    follower = LogFollower(path, from_end=True)
    assert follower.read_lines() == []
    path.write_text("first\n")
    assert follower.read_lines() == ["first"]


def test_scan_records_lines_with_context_and_totals(tmp_path):
    path, events = tmp_path / "server.log", Events()
    path.write_text("")
    scanner = scanner_for_run(path, None, events)
    append(path, "a\nb\nc\nd\nTraceback (most recent call last):\n  File \"e.py\", line 1, in <module>\n"
                 "RuntimeError: CUDA error: device-side assert triggered\ne\n")
    scanner.poll()
    scanner.close()
    found = events.of("server_log_error")
    assert [f["class"] for f in found] == ["traceback", "cuda_error"]
    assert found[0]["before"] == ["b", "c", "d"]
    assert found[0]["exception"] == "RuntimeError: CUDA error: device-side assert triggered"
    start, end = events.of("server_log_scanned")
    assert start["phase"] == "start" and end["phase"] == "end"
    assert end["lines"] == 8 and end["matched"] == {"traceback": 1, "cuda_error": 1}


def test_a_flood_is_deduplicated_and_capped(tmp_path, monkeypatch):
    path, events = tmp_path / "server.log", Events()
    path.write_text("")
    scanner = ServerLogScanner(LogFollower(path, from_end=False), events)
    append(path, "".join(f"WARNING nan detected in logits at step {i}\n" for i in range(5000)))
    monkeypatch.setattr(server_log, "MAX_EVENTS", 3)
    append(path, "".join(f"Killed process {i} on node {i % 7}x\n" for i in range(10)))
    append(path, "".join(f"distinct failure {chr(97 + i)}: CUDA error\n" for i in range(10)))
    scanner.close()
    found = events.of("server_log_error")
    assert len(found) == 3  # one nan line (its 4999 repeats held back), then the cap
    totals = events.of("server_log_scanned")[-1]
    assert totals["matched"] == {"nan": 5000, "oom": 10, "cuda_error": 10}
    assert totals["recorded"] == 3 and totals["suppressed"] == 5017


def test_no_log_no_scanner(tmp_path):
    assert scanner_for_run(None, None, Events()) is None
    events = Events()
    managed = tmp_path / "server.log"
    managed.write_text("Traceback (most recent call last):\nValueError: at startup\n")
    scanner = scanner_for_run(None, managed, events)  # a managed server's log is read from its start
    scanner.close()
    assert [f["exception"] for f in events.of("server_log_error")] == ["ValueError: at startup"]


def test_an_unreadable_log_is_no_error(tmp_path):
    events = Events()
    scanner = scanner_for_run(tmp_path, None, events)  # a folder: it stats, but cannot be read
    scanner.poll()
    scanner.close()
    assert events.of("server_log_error") == [] and events.of("server_log_scanned")[-1]["lines"] == 0


def test_a_line_written_answering_a_provoked_request_is_its_answer_and_the_rest_still_count(tmp_path):
    path, events = tmp_path / "server.log", Events()
    probe = "Traceback (most recent call last):\n  File \"serving.py\", line 9, in chat\nValueError: not multimodal\n"
    path.write_text("INFO started\n" + probe)
    span = ProvokedExchange("soak-probe-images-1", "capability probe images", os.stat(path).st_ino,
                            len("INFO started\n"), path.stat().st_size)
    named = ProvokedExchange("soak-probe-tools-2", "capability probe tools")  # no span: found by its id alone
    scanner = scanner_for_run(None, path, events, (span, named))
    append(path, "Traceback (most recent call last):\nValueError: request soak-probe-tools-2 has no tools\n")
    append(path, "ERROR Error in preprocessing request soak-probe-tools-2\n"  # the id only before: not its answer
                 "Traceback (most recent call last):\nKeyError: 'k'\n")
    scanner.close()
    answers = events.of("server_log_provoked")
    assert [(a["answer_to"], a["exception"]) for a in answers] == [
        ("capability probe images", "ValueError: not multimodal"),
        ("capability probe tools", "ValueError: request soak-probe-tools-2 has no tools")]
    assert [e["exception"] for e in events.of("server_log_error")] == ["KeyError: 'k'"]
    assert events.of("server_log_scanned")[-1]["provoked"] == 2


def test_offsets_follow_the_bytes_of_each_line(tmp_path):
    path = tmp_path / "server.log"
    path.write_text("ab\n")
    follower = LogFollower(path, from_end=False)
    append(path, "cdé\nf")
    assert follower.read_entries() == [(0, "ab"), (3, "cdé")]
    assert follower.rest() == [(len("ab\ncdé\n".encode()), "f")]


class Clock:
    """The scan's monotonic clock, moved by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


REFUSAL = "The model `tiny` is not a multimodal model"


def test_a_refusal_of_the_load_learnt_after_its_line_was_read_still_claims_it(tmp_path):
    path, events, clock = tmp_path / "server.log", Events(), Clock()
    path.write_text("")
    scanner = ServerLogScanner(LogFollower(path, from_end=False), events, clock=clock, provoked_wait_s=6.0)
    append(path, f"ERROR Error in preprocessing prompt inputs\nTraceback (most recent call last):\n"
                 f"  File \"serving.py\", line 9, in chat\nValueError: {REFUSAL}\nINFO 400 Bad Request\n")
    scanner.poll()
    clock.now = 1.0
    scanner.poll()
    assert events.of("server_log_provoked") == events.of("server_log_error") == []  # waiting for the refusal
    scanner.provoke(ProvokedExchange("soak-provoke-bad_input-1", "bad_input request expecting a refusal",
                                     message=REFUSAL, noticed_t=time.time()))
    clock.now = 6.0
    scanner.poll()
    (answer,) = events.of("server_log_provoked")
    assert answer["answer_to"] == "bad_input request expecting a refusal" and answer["exception"].endswith(REFUSAL)
    assert events.of("server_log_error") == []


def test_a_traceback_no_refusal_explains_is_a_fault_once_the_wait_is_over(tmp_path):
    path, events, clock = tmp_path / "server.log", Events(), Clock()
    path.write_text("")
    scanner = ServerLogScanner(LogFollower(path, from_end=False), events, clock=clock, provoked_wait_s=6.0)
    scanner.provoke(ProvokedExchange("soak-provoke-bad_input-1", "bad_input request expecting a refusal",
                                     message=REFUSAL, noticed_t=time.time()))
    scanner.provoke(ProvokedExchange("soak-provoke-bad_input-2", "bad_input request expecting a refusal",
                                     message=REFUSAL, noticed_t=time.time() - 60))  # long before the line below
    append(path, "Traceback (most recent call last):\nKeyError: 'block_table'\nINFO next\n")
    scanner.poll()
    assert events.of("server_log_error") == []
    clock.now = 6.0
    scanner.poll()
    assert [e["exception"] for e in events.of("server_log_error")] == ["KeyError: 'block_table'"]
    scanner.provoke(ProvokedExchange("", "a canary the server refused", message="KeyError: 'block_table'",
                                     noticed_t=time.time() - 60))
    append(path, "Traceback (most recent call last):\nValueError: KeyError: 'block_table'\nINFO next\n")
    clock.now = 100.0
    scanner.close()  # the same message, but a minute away from the refusal that said it: still a fault
    assert len(events.of("server_log_error")) == 2 and events.of("server_log_provoked") == []


@pytest.mark.parametrize("exception, said", [
    (f"ValueError: {REFUSAL}", True),
    (f"vllm.entrypoints.openai.protocol.ErrorResponse: {REFUSAL}. Please check the model card", True),
    (REFUSAL[:30], True),  # the server's line was cut shorter than the body's message
    ("ValueError: Bad Request", False),  # too short to say which refusal
    ("ValueError: The model `tiny` is a multimodal model", False),
    (None, False),
])
def test_a_refusal_is_said_by_an_exception_that_states_its_message(exception, said):
    refusal = ProvokedExchange("", "bad_input request expecting a refusal", message=REFUSAL, noticed_t=100.0)
    assert refusal.says(exception, 105.0) is said
    assert not refusal.says(exception, 100.0 + 2 * ProvokedExchange.MESSAGE_WINDOW_S)
