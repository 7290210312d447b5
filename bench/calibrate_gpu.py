"""Measure a GPU's step-model constants and write a profile file the simulator loads.

Standalone on purpose (standard library and torch only): a GPU host may have neither speclab's
dependencies nor a network. It builds a Llama-shaped model with random weights, times forward
passes over a grid of batch x tokens per sequence x context, fits

    t = fixed + per batched token x tokens + per KV token x KV tokens read

at two depths (so the fixed part splits into weight streaming and a cost per layer), measures
copy bandwidth and GEMM throughput, and writes ``speclab.gpu_profile/1`` JSON for
``python -m speclab.sim MODEL --sim-gpu-profile FILE``. What eager PyTorch cannot see is kept
from the published vLLM H100 fit: the scheduler overhead per step and the per-pass overheads of
draft models, EAGLE heads and n-gram lookup. Eager launches also land in the per-layer cost,
where vLLM replays CUDA graphs, so a calibrated per-layer cost is an upper bound.

    python bench/calibrate_gpu.py --out h200.json               # on a GPU: the Llama-3.1-8B shape
    python bench/calibrate_gpu.py --device cpu --out cpu.json   # anywhere: a tiny shape, seconds
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F

SCHEMA = "speclab.gpu_profile/1"
# Kept from the published fit (speclab's H100 profile; a test checks they agree): host-side costs.
KEPT = {
    "step_overhead_s": 1.20683946e-03,
    "draft_pass_s": 9.616695762532329e-04,
    "eagle_pass_s": 4.171455774488337e-04,
    "ngram_fraction": 0.005875,
}
NOT_MEASURED = {"interconnect_bandwidth": 450e9, "allreduce_latency_s": 6e-6}  # one device: no all-reduce
EFFICIENCY_RANGE = (0.05, 4.0)


@dataclass(frozen=True)
class Shape:
    name: str
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int

    def layer_params(self) -> int:
        h, q, kv = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim
        return h * (q + 2 * kv) + q * h + 3 * h * self.intermediate + 2 * h

    def matmul_params(self, layers: int | None = None) -> int:
        return (self.layers if layers is None else layers) * self.layer_params() + self.vocab * self.hidden

    def kv_elems_per_token(self, layers: int | None = None) -> int:
        return 2 * (self.layers if layers is None else layers) * self.kv_heads * self.head_dim


SHAPES = {
    "llama-8b": Shape("Llama-3.1-8B", 32, 4096, 14336, 32, 8, 128, 128256),
    "llama-1b": Shape("Llama-3.2-1B", 16, 2048, 8192, 32, 8, 64, 128256),
    "tiny": Shape("tiny Llama", 4, 256, 704, 8, 2, 32, 2048),
}
GRIDS = {  # (batches, tokens per sequence, contexts)
    "gpu": ((1, 8, 16, 32, 64), (1, 3, 5), (256, 1024, 2048)),
    "cpu": ((1, 4, 8), (1, 5), (64, 256)),
}


class Model:
    """A Llama-shaped decoder with random weights and a preallocated KV cache."""

    def __init__(self, shape: Shape, layers: int, device: torch.device, dtype: torch.dtype, max_batch: int,
                 max_context: int, seed: int = 0) -> None:
        gen = torch.Generator(device="cpu").manual_seed(seed)
        s, self.shape, self.layers = shape, shape, layers

        def weight(*dims: int) -> torch.Tensor:
            return (torch.randn(*dims, generator=gen) * 0.02).to(device=device, dtype=dtype)

        q, kv = s.heads * s.head_dim, s.kv_heads * s.head_dim
        self.embed = weight(s.vocab, s.hidden)
        self.lm_head = weight(s.hidden, s.vocab)
        self.w = [(weight(s.hidden, q + 2 * kv), weight(q, s.hidden), weight(s.hidden, 2 * s.intermediate),
                   weight(s.intermediate, s.hidden)) for _ in range(layers)]
        self.norm = torch.ones(s.hidden, device=device, dtype=dtype)
        cache = (max_batch, s.kv_heads, max_context, s.head_dim)
        self.k = [torch.randn(*cache, generator=gen).to(device=device, dtype=dtype) for _ in range(layers)]
        self.v = [torch.randn(*cache, generator=gen).to(device=device, dtype=dtype) for _ in range(layers)]

    def forward(self, tokens: torch.Tensor, context: int) -> torch.Tensor:
        s = self.shape
        b, n = tokens.shape
        x = self.embed[tokens]
        mask = None
        if n > 1:
            rows = torch.arange(n, device=x.device).unsqueeze(1)
            mask = torch.arange(context + n, device=x.device).unsqueeze(0) <= rows + context
        for i, (wqkv, wo, wgu, wd) in enumerate(self.w):
            h = F.rms_norm(x, (s.hidden,), self.norm)
            qkv = h @ wqkv
            q, k, v = qkv.split([s.heads * s.head_dim, s.kv_heads * s.head_dim, s.kv_heads * s.head_dim], dim=-1)
            q = q.view(b, n, s.heads, s.head_dim).transpose(1, 2)
            self.k[i][:b, :, context:context + n] = k.view(b, n, s.kv_heads, s.head_dim).transpose(1, 2)
            self.v[i][:b, :, context:context + n] = v.view(b, n, s.kv_heads, s.head_dim).transpose(1, 2)
            keys, values = self.k[i][:b, :, :context + n], self.v[i][:b, :, :context + n]
            att = _attention(q, keys, values, mask, s.heads // s.kv_heads)
            x = x + att.transpose(1, 2).reshape(b, n, -1) @ wo
            gate, up = (F.rms_norm(x, (s.hidden,), self.norm) @ wgu).chunk(2, dim=-1)
            x = x + (F.silu(gate) * up) @ wd
        return (F.rms_norm(x, (s.hidden,), self.norm) @ self.lm_head).argmax(dim=-1)


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
               groups: int) -> torch.Tensor:
    try:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=groups > 1)
    except TypeError:  # torch < 2.5 has no enable_gqa
        return F.scaled_dot_product_attention(q, k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1),
                                              attn_mask=mask)


def timed(fn: Callable[[], object], device: torch.device, repeats: int, warmup: int = 2) -> float:
    """The fastest of ``repeats`` timed calls of ``fn`` (synchronised on CUDA): the least disturbed."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(warmup):
        fn()
    sync()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        samples.append(time.perf_counter() - start)
    return min(samples)


def copy_bandwidth(device: torch.device, nbytes: int, repeats: int) -> float:
    src = torch.empty(nbytes // 2, dtype=torch.float16, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    return 2 * nbytes / timed(lambda: dst.copy_(src), device, repeats)


def gemm_flops(device: torch.device, dtype: torch.dtype, size: int, repeats: int) -> float:
    a = torch.randn(size, size, device=device).to(dtype)
    b = torch.randn(size, size, device=device).to(dtype)
    return 2 * size**3 / timed(lambda: a @ b, device, repeats)


def lstsq(rows: list[tuple[float, float, float]], ys: list[float]) -> tuple[float, float, float]:
    a = torch.tensor(rows, dtype=torch.float64)
    y = torch.tensor(ys, dtype=torch.float64).unsqueeze(1)
    sol = torch.linalg.lstsq(a, y).solution.squeeze(1).tolist()
    return sol[0], sol[1], sol[2]


def measure_grid(model: Model, grid: tuple[tuple[int, ...], ...], device: torch.device,
                 repeats: int) -> list[dict[str, float]]:
    points = []
    with torch.inference_mode():
        for batch in grid[0]:
            for n in grid[1]:
                for context in grid[2]:
                    tokens = torch.randint(0, model.shape.vocab, (batch, n), device=device)
                    seconds = timed(lambda t=tokens, c=context: model.forward(t, c), device, repeats)
                    points.append({"batch": batch, "tokens": batch * n, "context": context,
                                   "kv_tokens": batch * (context + n), "seconds": seconds})
    return points


def fit(points: list[dict[str, float]]) -> tuple[float, float, float]:
    rows = [(1.0, p["tokens"], p["kv_tokens"]) for p in points]
    return lstsq(rows, [p["seconds"] for p in points])


def derive(shape: Shape, full: tuple[float, float, float], half: tuple[float, float, float], half_layers: int,
           bandwidth: float, flops: float, elem: int, notes: list[str]) -> dict[str, float]:
    """Efficiencies and fixed costs from the two fits (see the module docstring)."""
    a_full, token_s, kv_s = full
    w_full, w_half = shape.matmul_params() * elem, shape.matmul_params(half_layers) * elem
    # a = layers * layer_s + streamed bytes * x, at both depths; x = 1 / (bandwidth * weight efficiency)
    det = shape.layers * w_half - half_layers * w_full
    layer_s = (a_full * w_half - half[0] * w_full) / det if det else 0.0
    x = (a_full - shape.layers * layer_s) / w_full
    if layer_s < 0:
        notes.append(f"the two depths gave a negative cost per layer ({layer_s:.3g} s): all fixed cost on weights")
        layer_s, x = 0.0, a_full / w_full
    elif x <= 0:
        notes.append("the fixed cost is all per-layer (the weights stream in no measurable time): weight "
                     f"efficiency set to {EFFICIENCY_RANGE[1]}")
        x = 1.0 / (EFFICIENCY_RANGE[1] * bandwidth)
        layer_s = max(0.0, (a_full - w_full * x) / shape.layers)
    if token_s <= 0:
        notes.append("no cost per batched token resolved: compute bound at the measured GEMM rate")
        token_s = 2 * shape.matmul_params() / flops
    if kv_s <= 0:
        notes.append("no cost per KV token resolved: read at the measured copy bandwidth")
        kv_s = shape.kv_elems_per_token() * elem / bandwidth
    out = {
        "weight_efficiency": 1.0 / (x * bandwidth),
        "kv_efficiency": shape.kv_elems_per_token() * elem / (kv_s * bandwidth),
        "flops_efficiency": 2 * shape.matmul_params() / (token_s * flops),
    }
    lo, hi = EFFICIENCY_RANGE
    for key, value in out.items():
        if not lo <= value <= hi:
            notes.append(f"{key} {value:.3g} is outside [{lo}, {hi}] (cache effects or noise); clamped")
            out[key] = min(max(value, lo), hi)
    return {**out, "layer_s": layer_s, "draft_layer_s": layer_s}


def memory_bytes(device: torch.device) -> float:
    if device.type == "cuda":
        return float(torch.cuda.get_device_properties(device).total_memory)
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def modelled(p: dict[str, float], profile: dict[str, Any], shape: Shape, elem: int) -> float:
    """The step model's pass time for a grid point under ``profile`` (speclab.sim.timing's formula)."""
    bw, peak = profile["hbm_bandwidth"], profile["peak_flops"]
    fixed = shape.layers * profile["layer_s"] + shape.matmul_params() * elem / (bw * profile["weight_efficiency"])
    token = 2 * shape.matmul_params() / (peak * profile["flops_efficiency"])
    kv = shape.kv_elems_per_token() * elem / (bw * profile["kv_efficiency"])
    return float(fixed + p["tokens"] * token + p["kv_tokens"] * kv)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="profile file to write (JSON)")
    ap.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    ap.add_argument("--shape", choices=("auto", *SHAPES), default="auto")
    ap.add_argument("--name", help="profile name (default: the device's name)")
    ap.add_argument("--hbm-bandwidth", type=float, help="bytes/s to take as 100%% (default: measured copy)")
    ap.add_argument("--peak-flops", type=float, help="FLOP/s to take as 100%% (default: measured GEMM)")
    ap.add_argument("--repeats", type=int, default=0, help="timed repeats per point (default: 10 GPU, 3 CPU)")
    args = ap.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: no CUDA device visible to torch")
    device = torch.device("cuda" if args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
                          else "cpu")
    on_gpu = device.type == "cuda"
    dtype = torch.bfloat16 if on_gpu else torch.float32
    elem = torch.tensor([], dtype=dtype).element_size()
    shape = SHAPES[args.shape if args.shape != "auto" else ("llama-8b" if on_gpu else "tiny")]
    grid = GRIDS["gpu" if on_gpu else "cpu"]
    repeats = args.repeats or (10 if on_gpu else 3)
    if not on_gpu:
        torch.set_num_threads(1)  # one core's figures; a shared host's other cores add only noise
    device_name = torch.cuda.get_device_name(device) if on_gpu else f"cpu {platform.machine()} ({os.cpu_count()} cores)"
    print(f"calibrating on {device_name}: {shape.name} shape, {dtype}, grid {grid}, {repeats} repeats per point",
          flush=True)

    bandwidth = args.hbm_bandwidth or copy_bandwidth(device, (1 << 30) if on_gpu else (1 << 27), repeats)
    flops = args.peak_flops or gemm_flops(device, dtype, 8192 if on_gpu else 768, repeats)
    print(f"copy bandwidth {bandwidth / 1e9:.1f} GB/s, GEMM {flops / 1e12:.2f} TFLOP/s", flush=True)
    max_context = max(grid[2]) + max(grid[1])
    half_layers = max(1, shape.layers // 2)
    full_model = Model(shape, shape.layers, device, dtype, max(grid[0]), max_context)
    points = measure_grid(full_model, grid, device, repeats)
    del full_model
    half_grid = (grid[0][::2], grid[1], grid[2][:2])
    half_points = measure_grid(Model(shape, half_layers, device, dtype, max(half_grid[0]), max_context), half_grid,
                               device, repeats)
    full_fit, half_fit = fit(points), fit(half_points)
    notes: list[str] = []
    constants = derive(shape, full_fit, half_fit, half_layers, bandwidth, flops, elem, notes)
    stamp = time.strftime("%Y-%m-%d")
    profile: dict[str, Any] = {
        "schema": SCHEMA,
        "name": args.name or (f"{device_name} (measured)"),
        "hbm_bandwidth": bandwidth,
        "peak_flops": flops,
        "memory_bytes": memory_bytes(device),
        **NOT_MEASURED,
        **KEPT,
        **constants,
        "source": (f"measured by calibrate_gpu.py on {device_name}, {stamp}: {shape.name} shape in eager {dtype} "
                   f"over {len(points) + len(half_points)} passes; kept from the published vLLM H100 fit: "
                   f"{', '.join(KEPT)}; not measured: {', '.join(NOT_MEASURED)}"),
    }
    errors = []
    print(f"\n{'batch':>5} {'tokens':>6} {'context':>7} {'measured ms':>11} {'model ms':>9} {'ratio':>6}")
    for p in points:
        m = modelled(p, profile, shape, elem)
        errors.append(m / p["seconds"] - 1)
        print(f"{p['batch']:>5} {p['tokens']:>6} {p['context']:>7} {p['seconds'] * 1e3:11.3f} {m * 1e3:9.3f} "
              f"{m / p['seconds']:6.3f}")
    rms = math.sqrt(statistics.fmean(e * e for e in errors))
    print(f"rms relative error of the fitted model over the grid: {rms:.1%}")
    for note in notes:
        print(f"note: {note}")
    profile["measured"] = {
        "device": device_name, "dtype": str(dtype), "shape": asdict(shape), "half_layers": half_layers,
        "copy_bandwidth": bandwidth, "gemm_flops": flops, "torch": torch.__version__,
        "fit_full": dict(zip(("fixed_s", "token_s", "kv_token_s"), full_fit, strict=True)),
        "fit_half": dict(zip(("fixed_s", "token_s", "kv_token_s"), half_fit, strict=True)),
        "rms_relative_error": rms, "notes": notes, "points": points, "half_points": half_points,
    }
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(profile, fh, indent=2)
        fh.write("\n")
    print(f"wrote {args.out}: python -m speclab.sim MODEL --sim-gpu-profile {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
