"""The simulator's training corpus and tokenizers, generated deterministically.

``python -m speclab.sim.corpus --write`` regenerates every committed data file: the corpus
(``data/corpus.jsonl.gz``, one chat per line), the per-model directories under ``data/models/``
(``tokenizer.json``, ``tokenizer_config.json``, ``config.json``) and the bundled prompt and golden
files (see ``golden_sets.py``). Four classes are generated: factual QA over real facts, tool-call
JSON, long prose continuation and refusals. The target family shares one byte-level BPE; the
``sim-1b-misaligned`` draft gets a genuinely different tokenizer (sentencepiece-style Metaspace
BPE, another vocabulary size and other special tokens) so an alignment check has something to find.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from .corpus_facts import (
    AIRPORTS,
    AMOUNTS,
    CURRENCIES,
    FACTS,
    HARMFUL_PHRASINGS,
    HARMFUL_REQUESTS,
    REFUSAL_REASONS,
    TICKERS,
    TOOL_PHRASINGS,
    UNITS,
    WEATHER_CITIES,
)
from .corpus_prose import essay, story
from .shapes import MODEL_SHAPES

DATA_DIR: Final = Path(__file__).resolve().parent / "data"
CORPUS_PATH: Final = DATA_DIR / "corpus.jsonl.gz"
CORPUS_SEED: Final = 20240917

Chat = dict[str, Any]


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def tool_call(name: str, arguments: dict[str, Any]) -> str:
    """The exact JSON text of a call, as the corpus (and so the target) writes it."""
    return json.dumps({"name": name, "arguments": arguments})


def random_tool_args(tool: str, rng: random.Random) -> dict[str, Any]:
    if tool == "get_weather":
        return {"city": rng.choice(WEATHER_CITIES), "unit": rng.choice(UNITS)}
    if tool == "search_flights":
        origin, destination = rng.sample(AIRPORTS, 2)
        date = f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        return {"origin": origin, "destination": destination, "date": date}
    if tool == "convert_currency":
        src, dst = rng.sample(CURRENCIES, 2)
        return {"amount": rng.choice(AMOUNTS), "from_currency": src, "to_currency": dst}
    return {"ticker": rng.choice(TICKERS)}


def fact_chats() -> Iterator[Chat]:
    for kind, (questions, answer, pairs) in FACTS.items():
        for subject, value in pairs:
            for question in questions:
                reply = answer.format(s=subject, S=_cap(subject), a=value)
                yield {"class": "factual_qa", "kind": kind, "messages": [
                    {"role": "user", "content": question.format(s=subject)},
                    {"role": "assistant", "content": reply}]}


def tool_chats(rng: random.Random, per_tool: int) -> Iterator[Chat]:
    from .golden_sets import tool_messages

    for tool in TOOL_PHRASINGS:
        for i in range(per_tool):
            args = random_tool_args(tool, rng)
            messages = tool_messages(tool, i, args)
            yield {"class": "tool_call", "tool": tool, "messages": [
                *messages, {"role": "assistant", "content": tool_call(tool, args)}]}


def refusal_chats(rng: random.Random) -> Iterator[Chat]:
    for request in HARMFUL_REQUESTS:
        for phrasing in HARMFUL_PHRASINGS:
            reply = f"I can't help with that. {rng.choice(REFUSAL_REASONS)} If you are in danger, please contact local emergency services."
            yield {"class": "refusal", "messages": [
                {"role": "user", "content": phrasing.format(r=request)},
                {"role": "assistant", "content": reply}]}


def prose_chats(rng: random.Random, stories: int, essays: int) -> Iterator[Chat]:
    for _ in range(stories):
        opening, rest = story(rng)
        yield {"class": "long_continuation", "messages": [
            {"role": "user", "content": f"Continue the story: {opening}"},
            {"role": "assistant", "content": rest}]}
    for _ in range(essays):
        topic, text = essay(rng)
        yield {"class": "long_continuation", "messages": [
            {"role": "user", "content": f"Write a short essay about {topic}."},
            {"role": "assistant", "content": text}]}


def generate_corpus() -> list[Chat]:
    rng = random.Random(CORPUS_SEED)
    chats = [*fact_chats(), *fact_chats(), *tool_chats(rng, 600), *refusal_chats(rng),
             *prose_chats(rng, 900, 250)]
    random.Random(CORPUS_SEED + 1).shuffle(chats)
    return chats


def load_corpus(path: Path = CORPUS_PATH) -> list[Chat]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _texts(chats: list[Chat]) -> Iterator[str]:
    for chat in chats:
        for message in chat["messages"]:
            yield message["content"]


def write_all() -> list[Path]:
    """Regenerate corpus, tokenizers, model configs, bundled prompts and golden sets."""
    from . import golden_sets, tokenizer_build

    chats = generate_corpus()
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    with gzip.GzipFile(CORPUS_PATH, "wb", mtime=0) as raw, io.TextIOWrapper(raw, encoding="utf-8") as fh:
        for chat in chats:
            fh.write(json.dumps(chat, ensure_ascii=False) + "\n")
    written = [CORPUS_PATH]
    texts = list(_texts(chats))
    for name in MODEL_SHAPES:
        written += tokenizer_build.write_model_dir(name, texts)
    written += golden_sets.write_sets()
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m speclab.sim.corpus", description=__doc__)
    parser.add_argument("--write", action="store_true", help="regenerate the committed data files")
    args = parser.parse_args(argv)
    if not args.write:
        chats = generate_corpus()
        by_class: dict[str, int] = {}
        for chat in chats:
            by_class[chat["class"]] = by_class.get(chat["class"], 0) + 1
        print(json.dumps(by_class))
        return 0
    for path in write_all():
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
