"""Which simulator drafter stands in for each vLLM speculative method.

A lab names vLLM's method and a simulator stand-in model, so one lab file serves both engines.
The simulator has two drafters: a draft model (its stand-in's weights set the drafting cost) and
prompt lookup. EAGLE heads are drafted by their stand-in model and priced as the head itself
(``shapes.eagle_head``); suffix decoding and the GPU n-gram drafter by prompt lookup over the
request's own tokens. MTP (heads inside the target) and the other methods have no stand-in and
are refused at start-up.
"""

from __future__ import annotations

from typing import Final, Literal

Drafter = Literal["draft_model", "ngram"]

DRAFTER_FOR_METHOD: Final[dict[str, Drafter]] = {
    "draft_model": "draft_model",
    "eagle": "draft_model",
    "eagle3": "draft_model",
    "ngram": "ngram",
    "ngram_gpu": "ngram",
    "suffix": "ngram",
}

# Methods whose drafter is a head on the target's hidden states, not a separate model's passes.
EAGLE_HEADS: Final = frozenset({"eagle", "eagle3"})

# Suffix decoding continues the longest matching suffix of any length, so its stand-in looks up
# matches from 1 token up; the upper bound keeps the per-step lookup cheap.
SUFFIX_LOOKUP: Final = (1, 8)


def modelled_as_note(method: str) -> str | None:
    """A warning line when ``method`` runs on a stand-in drafter of another kind; None when exact."""
    drafter = DRAFTER_FOR_METHOD.get(method)
    if drafter is None or drafter == method:
        return None
    what = "a draft model (the lab's sim_model)" if drafter == "draft_model" else "n-gram prompt lookup"
    return f"speculative method {method!r} is modelled by the simulator as {what}"
