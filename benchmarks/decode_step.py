"""Where a decode step's time goes (a benchmark, not a test): matmul, attention, sampling, cache
bookkeeping and the rest (Python, small ops), for one decode batch of kv prompts.

Prefills ``--prompts`` kv prompts (filler ``--filler``), evicts each under ``--policy``, stacks
``--rows`` rows (prompts repeated) into one decode batch as the engine does, then decodes ``--steps``
greedy tokens: timed (the faster of two), then under torch's profiler. Prints the stacking time, the step
time and tokens/s, and a table of the profiled step time by kind of operation; "other" is the
profiled wall time that no operator accounts for (Python, the model's module calls, mask building).

    .venv/bin/python benchmarks/decode_step.py                          # 32 rows, full retention, 2k filler
    .venv/bin/python benchmarks/decode_step.py --policy sink_tail --rows 64
"""
from __future__ import annotations

import argparse
import os
import time
from collections import Counter

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from kv_grid import kv_grid  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from refusal_audit import generation, retention  # noqa: E402

KINDS = {  # operator name -> kind; anything else is "elementwise and small ops"
    "aten::mm": "matmul", "aten::addmm": "matmul", "aten::bmm": "matmul",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "attention",
    "aten::equal": "finding the shared prefix", "aten::eq": "finding the shared prefix",
    "aten::argmax": "sampling", "aten::softmax": "sampling", "aten::cumsum": "sampling",
    "aten::searchsorted": "sampling", "aten::copy_": "copies", "aten::cat": "copies", "aten::fill_": "copies",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--filler", type=int, default=2048)
    ap.add_argument("--policy", default="full", choices=["full", "sink_tail", "snapkv"])
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--steps", type=int, default=8)
    args = ap.parse_args()

    kv, model, tok, table = kv_grid(args.prompts, args.filler)
    policy = retention.make(args.policy, **({} if args.policy == "full" else {"keep_ratio": 0.3}))
    window = kv.snapkv_window if policy.needs_window_attention else 0
    pres = [generation.prefill(model, list(p["input_ids"]), capture_window=window) for _, p in table.iterrows()]
    decoding = generation.Decoding(0.0, 0, args.steps + 1)

    def batch():
        return [generation.Row(retention.evict(pre.cache, policy.select(pre)), pre.length, pre.last_logits, decoding)
                for pre in (pres[i % len(pres)] for i in range(args.rows))]

    generation.decode(model, batch(), set())  # warm-up: the allocator's blocks, the kernels' first calls
    rows = batch()
    positions = max(r.cache.layers[0].keys.shape[2] for r in rows)
    t0 = time.perf_counter()
    shared = generation.shared_positions([r.cache for r in rows])  # as decode does
    stacked = generation._stack([r.cache for r in rows], "cpu", args.steps + 1, shared)
    t_stack = time.perf_counter() - t0
    del stacked
    t_all = float("inf")
    for _ in range(2):  # the faster of two: a first decode may still fault in fresh pages
        rows = batch()
        t0 = time.perf_counter()
        generation.decode(model, rows, set())
        t_all = min(t_all, time.perf_counter() - t0)
    step = (t_all - t_stack) / args.steps
    print(f"{args.rows} rows, {args.policy}, cache {positions} positions ({shared} shared by every row): stacking "
          f"{t_stack:.2f} s, a step {1000 * step:.0f} ms, {args.rows / step:.1f} tok/s")

    rows = batch()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        generation.decode(model, rows, set())
        wall = time.perf_counter() - t0
    by_kind: Counter = Counter()
    for e in prof.key_averages():
        by_kind[KINDS.get(e.key, "elementwise and small ops")] += e.self_cpu_time_total / 1e6
    by_kind["other (Python, module calls)"] = max(wall - sum(by_kind.values()), 0.0)
    print(f"{'kind':32s} {'s':>7s} {'share':>6s}   (a profiled decode, stacking included: {wall:.2f} s)")
    for kind, s in by_kind.most_common():
        print(f"{kind:32s} {s:7.2f} {s / wall:6.1%}")


if __name__ == "__main__":
    main()
