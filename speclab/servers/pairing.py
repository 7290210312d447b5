"""Version pairing: a draft ships only together with the target it was released for.

A lab binds its draft to its target in ``[pair]`` (both names and revisions, and tokenizer file
hashes when the tokenizers are local). A lab whose draft is not so bound is refused unless forced;
reports and recordings carry :func:`pair_info`. Drafters that are not a separate checkpoint
(ngram, suffix, mtp without a draft model) have nothing to bind and are paired by construction.
A draft_model whose real vocabulary size differs from the target's is refused outright, forced or
not, because vLLM 0.33 refuses it at start-up (unless ``draft.use_heterogeneous_vocab``); the sizes
are those of the real models the simulator stand-ins stand for, read from the stand-ins' files.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speclab.model.errors import InputError
from speclab.model.lab import Lab

SIM_MODELS_DIR = Path(__file__).resolve().parent.parent / "sim" / "data" / "models"


@dataclass(frozen=True, slots=True)
class PairStatus:
    paired: bool
    reason: str
    forced: bool = False


def tokenizer_file(path: str | Path) -> Path | None:
    """The tokenizer.json of a local tokenizer (a file or a model directory), if it exists."""
    p = Path(path).expanduser()
    if p.is_dir():
        p = p / "tokenizer.json"
    return p if p.is_file() else None


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def sim_tokenizer_sha256(sim_model: str | None) -> str | None:
    if not sim_model:
        return None
    f = tokenizer_file(SIM_MODELS_DIR / sim_model)
    return sha256_file(f) if f else None


def stand_in_vocab_size(sim_model: str | None) -> int | None:
    """The real vocab size of the model a simulator stand-in stands for (its config.json)."""
    if not sim_model:
        return None
    try:
        config = json.loads((SIM_MODELS_DIR / sim_model / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    size = config.get("stands_for_vocab_size") if isinstance(config, dict) else None
    return size if isinstance(size, int) else None


def vocab_problem(lab: Lab) -> str | None:
    """Why vLLM 0.33 would refuse this lab's draft_model pair for its vocab sizes, or None."""
    d = lab.draft
    if d is None or d.method != "draft_model" or d.use_heterogeneous_vocab:
        return None
    t_size, d_size = stand_in_vocab_size(lab.target.sim_model), stand_in_vocab_size(d.sim_model)
    if t_size is None or d_size is None or t_size == d_size:
        return None
    return (f"lab {lab.name!r}: draft.use_heterogeneous_vocab: the target {lab.target.model} has vocab_size "
            f"{t_size} and the draft {d.model} has {d_size}; vLLM 0.33 refuses such a draft_model pair "
            "(\"Target and draft model should have the same vocabulary size\"). Set "
            "draft.use_heterogeneous_vocab = true (greedy drafts over the tokens both share) or pick a draft "
            "with the target's vocabulary")


def check_pairing(lab: Lab) -> PairStatus:
    draft = lab.draft
    if draft is None or not draft.model:
        method = draft.method if draft else "none"
        return PairStatus(True, f"no separate draft checkpoint (method {method}); nothing to pair")
    pair = lab.pair
    t, d = lab.target, draft
    if pair is None:
        return PairStatus(False, f"lab {lab.name!r} has no [pair] binding draft {d.model} to target {t.model}")
    problems = []
    if pair.target_model != t.model:
        problems.append(f"pair.target_model {pair.target_model!r} is not the target {t.model!r}")
    if pair.draft_model != d.model:
        problems.append(f"pair.draft_model {pair.draft_model!r} is not the draft {d.model!r}")
    if not t.revision:
        problems.append("target.revision is not set")
    elif pair.target_revision != t.revision:
        problems.append(f"target revision {t.revision!r} differs from the paired {pair.target_revision!r}")
    if not d.revision:
        problems.append("draft.revision is not set")
    elif pair.draft_revision != d.revision:
        problems.append(f"draft revision {d.revision!r} differs from the paired {pair.draft_revision!r}")
    for role, local, expected in (
        ("target", t.tokenizer, pair.target_tokenizer_sha256),
        ("draft", d.tokenizer, pair.draft_tokenizer_sha256),
    ):
        if not local or not expected:
            continue
        f = tokenizer_file(local)
        if f is None:
            problems.append(f"{role}.tokenizer {local!r}: no tokenizer.json there to hash")
        elif (got := sha256_file(f)) != expected:
            problems.append(f"{role} tokenizer sha256 {got[:12]}… differs from the paired {expected[:12]}…")
    if problems:
        return PairStatus(False, f"lab {lab.name!r}: draft not paired with target: " + "; ".join(problems))
    return PairStatus(True, f"paired: {t.model}@{t.revision} with {d.model}@{d.revision}")


def require_pairing(lab: Lab, *, force: bool = False) -> PairStatus:
    """Refuse an unpaired lab with the reason (exit 2) unless ``force``; a forced status says so.

    A vocab mismatch vLLM would refuse is exit 2 even when forced: no server could start.
    """
    vocab = vocab_problem(lab)
    if vocab is not None:
        raise InputError(vocab)
    status = check_pairing(lab)
    if status.paired:
        return status
    if not force:
        raise InputError(f"{status.reason} (use --force to run it anyway)")
    return PairStatus(False, f"forced: {status.reason}", forced=True)


def pair_info(lab: Lab, status: PairStatus | None = None) -> dict[str, Any]:
    """Flat facts for reports, recordings and the session header (strings, bools)."""
    status = status or check_pairing(lab)
    t, d = lab.target, lab.draft
    info: dict[str, Any] = {
        "target_model": t.model,
        "target_revision": t.revision or "",
        "target_sim_model": t.sim_model,
        "draft_method": d.method if d else "",
        "draft_model": (d.model or "") if d else "",
        "draft_revision": (d.revision or "") if d else "",
        "draft_sim_model": (d.sim_model or "") if d else "",
        "paired": status.paired,
        "forced": status.forced,
        "reason": status.reason,
    }
    for role, local in (("target", t.tokenizer), ("draft", d.tokenizer if d else None)):
        f = tokenizer_file(local) if local else None
        if f is not None:
            info[f"{role}_tokenizer_sha256"] = sha256_file(f)
    for role, sim in (("target", t.sim_model), ("draft", d.sim_model if d else None)):
        digest = sim_tokenizer_sha256(sim)
        if digest:
            info[f"{role}_sim_tokenizer_sha256"] = digest
    return info
