"""The lab the end-to-end tests write: the 8B target with its 1B draft model on the simulator.

One text for every directory's tests, so a change to a lab's required keys (a pinned revision, a
pairing field) is made once; each directory says only its server limits, variants and gateway.
"""

from __future__ import annotations

PAIR = """\
[target]
model = "meta-llama/Llama-3.1-8B-Instruct"
revision = "main"
sim_model = "{target_sim}"
[draft]
method = "draft_model"
model = "meta-llama/Llama-3.2-1B-Instruct"
revision = "main"
sim_model = "sim-1b"
[pair]
target_model = "meta-llama/Llama-3.1-8B-Instruct"
target_revision = "main"
draft_model = "meta-llama/Llama-3.2-1B-Instruct"
draft_revision = "main"
"""

BASELINE = '[[variants]]\nname = "baseline"\nspeculative = false\n'
K4 = '[[variants]]\nname = "k4"\nnum_speculative_tokens = 4\n'


def lab_toml(name: str, *, max_num_seqs: int = 16, max_model_len: int = 2048, server_extra: str = "",
             variants: str = BASELINE, rest: str = "", target_sim: str = "sim-8b") -> str:
    """A lab's TOML: the pair, ``[server]`` with its limits and ``server_extra`` lines, the
    ``variants`` tables, then ``rest`` (a ``[gateway]`` table, say)."""
    server = f"[server]\nmax_num_seqs = {max_num_seqs}\nmax_model_len = {max_model_len}\n"
    if server_extra:
        server += server_extra.rstrip("\n") + "\n"
    return f'name = "{name}"\n' + PAIR.format(target_sim=target_sim) + server + variants + rest
