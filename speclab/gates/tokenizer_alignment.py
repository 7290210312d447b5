"""Does the draft speak the target's tokens? Compare two model directories before measuring speed.

A draft whose vocabulary, special tokens or stop policy differ from the target's silently lowers
acceptance (or, in vLLM, is refused outright for a different ``vocab_size``). This reads the
Hugging Face files both the simulator and real checkpoints ship — ``tokenizer.json`` (via the
``tokenizers`` library), ``tokenizer_config.json``, ``config.json`` and, when present,
``generation_config.json`` — and reports every difference as one readable line.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from tokenizers import Tokenizer

from speclab.model.errors import InputError

from .result import StageResult
from .stages import TOKENIZER_ALIGNMENT

SAMPLE_TEXTS: Final[tuple[str, ...]] = (
    "What is the capital of France? The capital of France is Paris.",
    '{"name": "get_weather", "arguments": {"city": "Berlin", "unit": "celsius"}}',
    "Once upon a time, in a village by the sea, there lived an old clockmaker who",
    "I can't help with that request, but I can point you to safety resources.",
    "Numbers 1234567890, symbols <>[]{}()!?;:'\" and mixed CaSe words.",
    "  leading spaces, tabs\tand\nnew lines\n\n",
    "Émigré café naïve — façade, Zürich, São Paulo, 東京.",
)

_SPECIAL_KEYS: Final = ("bos_token", "eos_token", "pad_token", "unk_token")


@dataclass(frozen=True, slots=True)
class AlignmentReport:
    target: str
    draft: str
    mismatches: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def aligned(self) -> bool:
        return not self.mismatches


@dataclass(slots=True)
class _ModelFiles:
    path: Path
    tokenizer: Tokenizer
    tokenizer_config: dict[str, Any]
    config: dict[str, Any]
    generation_config: dict[str, Any]

    def vocab(self) -> dict[str, int]:
        return self.tokenizer.get_vocab(with_added_tokens=True)

    def special_token(self, key: str) -> str | None:
        value = self.tokenizer_config.get(key)
        if isinstance(value, dict):
            value = value.get("content")
        return value if isinstance(value, str) else None

    def stop_token_ids(self) -> set[int]:
        """EOS ids from config.json and generation_config.json, else the tokenizer's EOS token."""
        ids: set[int] = set()
        for source in (self.config, self.generation_config):
            value = source.get("eos_token_id")
            if isinstance(value, int):
                ids.add(value)
            elif isinstance(value, list):
                ids.update(v for v in value if isinstance(v, int))
        eos = self.special_token("eos_token")
        if not ids and eos is not None and (eos_id := self.tokenizer.token_to_id(eos)) is not None:
            ids.add(eos_id)
        return ids

    def chat_template(self) -> str | None:
        template = self.tokenizer_config.get("chat_template")
        if isinstance(template, list):
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            template = named.get("default", next(iter(named.values()), None))
        if template is None and (self.path / "chat_template.jinja").is_file():
            template = (self.path / "chat_template.jinja").read_text(encoding="utf-8")
        return template if isinstance(template, str) else None

    def added_tokens(self) -> dict[int, tuple[str, bool]]:
        return {i: (t.content, bool(t.special)) for i, t in self.tokenizer.get_added_tokens_decoder().items()}


def _read_json(path: Path, required: bool) -> dict[str, Any]:
    if not path.is_file():
        if required:
            raise InputError(f"{path}: no such file (a model directory needs tokenizer.json)")
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InputError(f"{path}: not readable JSON ({error})") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a JSON object at the top level")
    return data


def _load(model_dir: str | Path) -> _ModelFiles:
    path = Path(model_dir)
    if not path.is_dir():
        raise InputError(f"{path}: not a model directory")
    tokenizer_file = path / "tokenizer.json"
    _read_json(tokenizer_file, required=True)
    try:
        tokenizer = Tokenizer.from_file(str(tokenizer_file))
    except Exception as error:  # the Rust side raises a bare Exception
        raise InputError(f"{tokenizer_file}: the tokenizers library cannot load it ({error})") from None
    return _ModelFiles(
        path=path,
        tokenizer=tokenizer,
        tokenizer_config=_read_json(path / "tokenizer_config.json", required=False),
        config=_read_json(path / "config.json", required=False),
        generation_config=_read_json(path / "generation_config.json", required=False),
    )


def first_difference(a: Sequence[Any], b: Sequence[Any]) -> int:
    """Index of the first differing element; the shorter length when one is a prefix of the other."""
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def _sample(items: Sequence[str], limit: int) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f", … ({len(items) - limit} more)" if len(items) > limit else "")


def _compare_vocab(t: _ModelFiles, d: _ModelFiles, limit: int) -> tuple[list[str], list[str]]:
    out: list[str] = []
    tv, dv = t.vocab(), d.vocab()
    notes = [f"vocabulary: target {len(tv)} tokens, draft {len(dv)} tokens"]
    if len(tv) != len(dv):
        out.append(f"vocabulary size differs: target {len(tv)}, draft {len(dv)}")
    only_t = sorted(set(tv) - set(dv), key=tv.__getitem__)
    only_d = sorted(set(dv) - set(tv), key=dv.__getitem__)
    moved = sorted((tok for tok in set(tv) & set(dv) if tv[tok] != dv[tok]), key=tv.__getitem__)
    if only_t:
        out.append(f"{len(only_t)} tokens only in the target: {_sample([repr(x) for x in only_t], limit)}")
    if only_d:
        out.append(f"{len(only_d)} tokens only in the draft: {_sample([repr(x) for x in only_d], limit)}")
    if moved:
        pairs = [f"{tok!r} target {tv[tok]} / draft {dv[tok]}" for tok in moved]
        out.append(f"{len(moved)} tokens have different ids: {_sample(pairs, limit)}")
    t_size, d_size = t.config.get("vocab_size"), d.config.get("vocab_size")
    if t_size is not None and d_size is not None and t_size != d_size:
        out.append(f"config.json vocab_size differs: target {t_size}, draft {d_size} (vLLM refuses this pair)")
    return out, notes


def _compare_special(t: _ModelFiles, d: _ModelFiles) -> list[str]:
    out: list[str] = []
    for key in _SPECIAL_KEYS:
        ts, ds = t.special_token(key), d.special_token(key)
        if ts != ds:
            out.append(f"{key} differs: target {ts!r}, draft {ds!r}")
        elif ts is not None:
            ti, di = t.tokenizer.token_to_id(ts), d.tokenizer.token_to_id(ds or "")
            if ti != di:
                out.append(f"{key} {ts!r} has different ids: target {ti}, draft {di}")
    for key in ("bos_token_id", "pad_token_id"):
        tv, dv = t.config.get(key), d.config.get(key)
        if tv != dv and tv is not None and dv is not None:
            out.append(f"config.json {key} differs: target {tv}, draft {dv}")
    t_extra = t.tokenizer_config.get("additional_special_tokens") or []
    d_extra = d.tokenizer_config.get("additional_special_tokens") or []
    t_names = [x.get("content") if isinstance(x, dict) else x for x in t_extra]
    d_names = [x.get("content") if isinstance(x, dict) else x for x in d_extra]
    if t_names != d_names:
        out.append(f"additional_special_tokens differ: target {t_names}, draft {d_names}")
    t_stop, d_stop = t.stop_token_ids(), d.stop_token_ids()
    if t_stop != d_stop:
        out.append(f"stop token ids differ: target {sorted(t_stop)}, draft {sorted(d_stop)}")
    else:
        t_text = sorted(str(t.tokenizer.id_to_token(i)) for i in t_stop)
        d_text = sorted(str(d.tokenizer.id_to_token(i)) for i in d_stop)
        if t_text != d_text:
            out.append(f"stop tokens differ: target {t_text}, draft {d_text}")
    return out


def _compare_added(t: _ModelFiles, d: _ModelFiles, limit: int) -> list[str]:
    ta, da = t.added_tokens(), d.added_tokens()
    if ta == da:
        return []
    lines = []
    for token_id in sorted(set(ta) | set(da)):
        if ta.get(token_id) != da.get(token_id):
            lines.append(f"id {token_id}: target {ta.get(token_id)}, draft {da.get(token_id)}")
    return [f"added tokens differ at {len(lines)} ids: {_sample(lines, limit)}"]


def _compare_chat_template(t: _ModelFiles, d: _ModelFiles) -> list[str]:
    tt, dt = t.chat_template(), d.chat_template()
    if tt == dt:
        return []
    if tt is None or dt is None:
        return [f"chat template present only in the {'target' if dt is None else 'draft'}"]
    index = first_difference(tt, dt)
    return [
        f"chat template differs from character {index}: target {tt[index:index + 40]!r}, "
        f"draft {dt[index:index + 40]!r}"
    ]


def _compare_round_trip(t: _ModelFiles, d: _ModelFiles, texts: Sequence[str], limit: int) -> list[str]:
    differing: list[str] = []
    for text in texts:
        ti = t.tokenizer.encode(text, add_special_tokens=False).ids
        di = d.tokenizer.encode(text, add_special_tokens=False).ids
        if ti != di:
            pos = first_difference(ti, di)
            differing.append(
                f"{text[:40]!r}: target {len(ti)} ids, draft {len(di)} ids, first difference at token {pos} "
                f"(target {ti[pos:pos + 3]}, draft {di[pos:pos + 3]})"
            )
    if not differing:
        return []
    return [f"round trip: {len(differing)}/{len(texts)} sample texts tokenize differently; {_sample(differing, min(limit, 2))}"]


def compare_tokenizers(
    target_dir: str | Path,
    draft_dir: str | Path,
    *,
    sample_texts: Sequence[str] = SAMPLE_TEXTS,
    max_examples: int = 5,
) -> AlignmentReport:
    """Every difference between two model directories that matters to speculative decoding."""
    target, draft = _load(target_dir), _load(draft_dir)
    vocab_lines, notes = _compare_vocab(target, draft, max_examples)
    mismatches = [
        *vocab_lines,
        *_compare_special(target, draft),
        *_compare_added(target, draft, max_examples),
        *_compare_chat_template(target, draft),
        *_compare_round_trip(target, draft, sample_texts, max_examples),
    ]
    t_model = json.loads(target.tokenizer.to_str()).get("model", {}).get("type")
    d_model = json.loads(draft.tokenizer.to_str()).get("model", {}).get("type")
    if t_model != d_model:
        mismatches.append(f"tokenizer model type differs: target {t_model}, draft {d_model}")
    return AlignmentReport(target=str(target_dir), draft=str(draft_dir), mismatches=mismatches, notes=notes)


def alignment_result(report: AlignmentReport, *, forced: bool = False) -> StageResult:
    """The tokenizer-alignment stage (exit 10); ``forced`` records the mismatches but passes."""
    pair = f"target {report.target} / draft {report.draft}"
    if report.aligned:
        return StageResult.of(TOKENIZER_ALIGNMENT, [], f"tokenizers aligned ({pair})", report.notes,
                              {"aligned": True, "mismatches": 0})
    summary = f"{len(report.mismatches)} tokenizer mismatches ({pair})"
    metrics = {"aligned": False, "mismatches": len(report.mismatches), "forced": forced}
    if forced:
        details = [f"forced past: {line}" for line in report.mismatches] + report.notes
        return StageResult.of(TOKENIZER_ALIGNMENT, [], summary + "; forced", details, metrics)
    return StageResult.of(TOKENIZER_ALIGNMENT, report.mismatches, summary, report.notes, metrics)
