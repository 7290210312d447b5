"""vLLM's speculative methods as the simulator's drafters, each with what its drafting costs.

``draft_model`` drafts with the named stand-in model (its own tokenizer if it has one); ``eagle``,
``eagle3`` and ``mtp`` with a head on the target's own state (``heads``), priced as the head
(``shapes.eagle_head``); ``ngram`` / ``ngram_gpu`` with prompt lookup and ``suffix`` with suffix
trees, both priced as a lookup. The other methods vLLM 0.33 knows (dflash, dspark, custom_class,
extract_hidden_states) have no counterpart here and are refused at start-up.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from .api import SpecConfig
from .errors import SimStartupError, UnknownModelError
from .heads import HEAD_SPECS, load_head
from .lm import SimLM, load_lm
from .proposers import DraftModelProposer, HeadProposer, MisalignedDraftProposer, NgramProposer, Proposer
from .shapes import MODEL_SHAPES, ModelShape, eagle_head
from .suffix import SuffixProposer
from .tokenizer import SIM_MODELS

MODELLED_METHODS: Final = ("draft_model", "eagle", "eagle3", "mtp", "ngram", "ngram_gpu", "suffix")
HEAD_METHODS: Final = frozenset(HEAD_SPECS)


@dataclass(slots=True)
class Drafting:
    proposer: Proposer
    draft_shape: ModelShape | None = None  # what the draft passes cost (None: a lookup)
    head: bool = False
    notes: list[str] = field(default_factory=list)


def build_drafting(spec: SpecConfig, target_name: str, target: SimLM, max_model_len: int) -> Drafting:
    """The drafter for ``spec`` on ``target``; SimStartupError for a method the simulator does not model."""
    probabilistic = spec.draft_sample_method == "probabilistic"
    method = spec.method
    one_hot = ([f"draft_sample_method 'probabilistic' has no draft distribution to sample with method "
                f"{method!r}: its drafts are deterministic, verified as one-hot"] if probabilistic else [])
    if method in ("ngram", "ngram_gpu"):
        lo = spec.prompt_lookup_min or 5
        hi = spec.prompt_lookup_max or lo
        return Drafting(NgramProposer(lo, hi), notes=one_hot)
    if method == "suffix":
        return Drafting(SuffixProposer(spec.suffix, target.vocab_size, max_model_len), notes=one_hot)
    if method in HEAD_METHODS:
        head = load_head(method, target_name)
        shape = eagle_head(MODEL_SHAPES[target_name], method)
        named = f" (checkpoint {spec.model!r})" if spec.model else ""
        note = (f"speculative method {method!r}{named} is modelled as {head.spec.description}, on "
                f"{target_name}'s own state, priced as the head ({shape.num_parameters / 1e6:.0f}M parameters)")
        return Drafting(HeadProposer(head, probabilistic=probabilistic), shape, True, [note])
    if method == "draft_model":
        if spec.model not in SIM_MODELS:
            raise UnknownModelError(
                f"Unknown model {spec.model!r} for the speculative draft; the simulator's models are: "
                f"{', '.join(SIM_MODELS)}")
        draft = load_lm(spec.model)
        shape = MODEL_SHAPES[spec.model]
        if draft.tokenizer.backend.get_vocab() == target.tokenizer.backend.get_vocab():
            return Drafting(DraftModelProposer(draft, probabilistic=probabilistic), shape)
        notes = [f"draft_sample_method 'probabilistic' is not modelled for {spec.model!r}, whose tokenizer is not "
                 f"{target_name}'s: its drafts are greedy, re-tokenized text"] if probabilistic else []
        return Drafting(MisalignedDraftProposer(draft, target.tokenizer), shape, notes=notes)
    raise SimStartupError(f"speculative method {method!r} is not modelled by the simulator "
                          f"(modelled: {', '.join(MODELLED_METHODS)})")
