"""Generation benchmark (a benchmark, not a test): naive per-row decoding vs the engine.

The same kv prompts (HarmBench standard behaviours, system safety text, N-token filler) x 3 policies
(full, sink_tail, snapkv at keep 0.3) x ``--new`` greedy tokens, run

  (a) naively: for every prompt and policy separately, ``model.generate`` for full retention, and
      prefill + evict + decode (batch 1) for the evicting policies, re-prefilling each time;
  (b) through the engine (``generation.run``: one prefill per prompt, reusing the prefix it shares
      with the previous prompt; rows of similar cache length decoded in batches).

It checks that both give identical tokens, and prints tokens/s, prefill vs decode time, and decode
throughput at several batch sizes (decoding the same evicted caches). The floor is the time of one
full prefill per prompt, as if nothing were shared; the engine's own prefill, which reuses shared
prefixes, is printed beside it. The last line reads
``speedup <engine/naive throughput> floor <engine time / prefill-only time> identical <true|false>``.

    .venv/bin/python benchmarks/generation.py                 # 32 prompts, filler 2048, 64 tokens
    .venv/bin/python benchmarks/generation.py --prompts 4 --filler 256 --new 16   # a quick look
    .venv/bin/python benchmarks/generation.py --dtype bfloat16   # both arms in bf16 (avx512_bf16 CPUs)
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pandas as pd  # noqa: E402
import torch  # noqa: E402
from kv_grid import kv_grid  # noqa: E402

from refusal_audit import generation, retention  # noqa: E402
from refusal_audit.store import ShardStore  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--filler", type=int, default=2048)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--batches", default="1,4,16,64")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                    help="the model's dtype (params: models.<name>.dtype), for the naive reference and the engine alike")
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]

    kv, model, tok, table = kv_grid(args.prompts, args.filler, args.dtype)  # freed memory kept, for every arm alike
    eos = generation.eos_token_ids(model, tok)
    pols = [retention.make("full"), retention.make("sink_tail", keep_ratio=0.3, sink=4),
            retention.make("snapkv", keep_ratio=0.3, window=kv.snapkv_window, kernel=kv.snapkv_kernel)]
    n_rows = len(table) * len(pols)
    print(f"{len(table)} prompts x {len(pols)} policies x {args.new} new tokens; "
          f"prompt length {table['prompt_tokens'].min()}-{table['prompt_tokens'].max()} tokens; "
          f"torch threads {torch.get_num_threads()}; {args.dtype}", flush=True)

    # (a) naive: one prefill per (prompt, policy)
    t0 = time.perf_counter()
    naive = []
    with torch.no_grad():
        for _, p in table.iterrows():
            ids = list(p["input_ids"])
            for pol in pols:
                if pol.name == "full":
                    out = model.generate(torch.tensor([ids]), max_new_tokens=args.new, do_sample=False)
                    naive.append(out[0, len(ids):].tolist())
                else:
                    pre = generation.prefill(model, ids, capture_window=pol.window if pol.needs_window_attention else 0)
                    naive.append(generation.decode_greedy(model, pre, pol.select(pre), args.new, eos)[0])
    t_naive = time.perf_counter() - t0
    tok_naive = sum(map(len, naive))
    print(f"naive   {t_naive:8.1f} s  {tok_naive / t_naive:7.2f} tok/s", flush=True)

    # prefill only (the floor), keeping the evicted caches for the batch-size sweep
    t0 = time.perf_counter()
    rows = []
    for _, p in table.iterrows():
        pre = generation.prefill(model, list(p["input_ids"]), capture_window=kv.snapkv_window)
        rows += [(pre, pol.select(pre)) for pol in pols]
    t_prefill = time.perf_counter() - t0
    print(f"prefill {t_prefill:8.1f} s  ({t_prefill / len(table):.2f} s a prompt, "
          f"{table['prompt_tokens'].sum() / t_prefill:.0f} prompt tok/s)", flush=True)

    # the engine's own prefill: in token order, each prompt reusing the prefix it shares with the last
    t0 = time.perf_counter()
    pre = None
    for ids in sorted(list(p["input_ids"]) for _, p in table.iterrows()):
        pre = generation.prefill(model, ids, capture_window=kv.snapkv_window, reuse=pre)
    t_shared = time.perf_counter() - t0
    del pre
    print(f"prefill with shared prefixes {t_shared:8.1f} s  ({t_shared / len(table):.2f} s a prompt)", flush=True)

    # decode throughput by batch size, rows batched by cache length as the engine does
    d = generation.Decoding(0.0, 0, args.new)
    order = sorted(range(len(rows)), key=lambda i: int(rows[i][1].shape[-1]) if rows[i][1] is not None else rows[i][0].length)
    for b in batches:
        t0 = time.perf_counter()
        sweep = [None] * len(rows)
        for i in range(0, len(order), b):
            chunk = order[i:i + b]
            out = generation.decode(model, [generation.Row(retention.evict(rows[j][0].cache, rows[j][1]), rows[j][0].length,
                                                           rows[j][0].last_logits, d) for j in chunk], eos)
            for j, (tokens, _) in zip(chunk, out):
                sweep[j] = tokens
        dt = time.perf_counter() - t0
        print(f"decode  batch {b:3d}: {dt:8.1f} s  {sum(map(len, sweep)) / dt:7.2f} tok/s  "
              f"identical to naive: {sweep == naive}", flush=True)
    rows.clear()  # free the caches before the engine run

    # (b) the engine, end to end
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        gens = generation.run(model, tok, "smollm2-135m", table, lambda row: pols, ShardStore(tmp), [d],
                              batch_rows=max(batches))
        t_engine = time.perf_counter() - t0
    tok_engine = int(gens["new_tokens"].sum())
    same = (gens["new_tokens"].tolist() == [len(t) for t in naive]
            and gens["reply"].tolist() == [tok.decode(t, skip_special_tokens=True) for t in naive])
    print(f"engine  {t_engine:8.1f} s  {tok_engine / t_engine:7.2f} tok/s  (prefill with shared prefixes {t_shared:.1f} s"
          f" + decode {t_engine - t_shared:.1f} s; {n_rows} rows, batch_rows {max(batches)})", flush=True)
    speedup = (tok_engine / t_engine) / (tok_naive / t_naive)
    print(f"speedup {speedup:.2f} floor {t_engine / t_prefill:.2f} identical {str(same).lower()}")


if __name__ == "__main__":
    pd.set_option("display.width", 200)
    main()
