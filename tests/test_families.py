"""Every model family the paper params name, on tiny random-weight stand-ins loaded offline by their
real hub ids from a temporary Hugging Face cache (tests/standins.py): loading, the engine's retention
against ``generate`` and the masked-attention reference, seeded sampling, every study's rendering,
and ``make check`` on every paper params file."""

from types import SimpleNamespace

import pytest
import standins
import torch
from test_generation import sharing_a_filler, step_logits
from test_retention import SETTINGS, UNBUDGETED, expected_kept, masked_reference_logits

from refusal_audit import chat, families, generation, models, prompts, retention
from refusal_audit.attention import attention_hook
from refusal_audit.config import ModelSpec
from refusal_audit.paths import ROOT
from refusal_audit.studies import confusion, kv
from refusal_audit.studies.confusion import user_span
from refusal_audit.studies.contract import Rendering
from refusal_audit.studies.frames import wrapper as W
from refusal_audit.studies.policy.conventions import guard_template_check

SYSTEM = "You are a careful assistant. Refuse harmful requests."
QUERY = "Describe how a town library organises its catalogue."
EVERY_STUDY = SimpleNamespace(studies=dict.fromkeys(["kv", "frames", "confusion", "policy"]))  # a run of all four
ENGINE = sorted(standins.ENGINE_IDS)  # one hub id per family


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """A Hugging Face cache holding a stand-in under every hub id the paper params name (read offline), for this
    module only: session-wide, its cache and offline switch outlived the module and sized the paper's hub ids
    for every later test of the same worker as the stand-ins."""
    root = tmp_path_factory.mktemp("hf")
    cache = root / "hub"
    corpus = prompts.FILLER_FILE.read_text()
    for i, hub_id in enumerate(standins.HUB_IDS):
        standins.write_cache(cache, hub_id, corpus, seed=i)
    with standins.offline_hub(cache, home=root):
        yield cache


_loaded: dict = {}


def load(hub, family):
    """(model, tokenizer) of the family's stand-in, through the same ``models.load`` as a paper run."""
    if family not in _loaded:
        _loaded[family] = models.load(ModelSpec(standins.ENGINE_IDS[family]), device="cpu")
    return _loaded[family]


@pytest.mark.parametrize("family", ENGINE)
def test_loads_offline_by_hub_id(hub, family):
    hub_id = standins.ENGINE_IDS[family]
    model, tok = load(hub, family)
    assert (hub / ("models--" + hub_id.replace("/", "--")) / "refs" / "main").is_file()
    text_type = model.config.get_text_config().model_type
    assert text_type == ("mistral" if family == "mistral3" else standins.FAMILIES[family].model_type)
    assert chat.has_template(tok) == (standins.FAMILIES[family].template is not None)
    assert next(model.parameters()).dtype == torch.float32 and not model.training


def test_bfloat16_on_cpu_runs_the_engine(hub):
    model, tok = models.load(ModelSpec(standins.ENGINE_IDS["qwen2"], dtype="bfloat16"), device="cpu")
    assert next(model.parameters()).dtype == torch.bfloat16
    ids = prompt(tok)
    ref = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                         max_new_tokens=6, do_sample=False, eos_token_id=None, pad_token_id=tok.pad_token_id)
    tokens, _ = generation.decode_greedy(model, generation.prefill(model, ids), None, 6, set())
    assert tokens == ref[0, len(ids):].tolist()


def prompt(tok, filler=60):
    return prompts.render_ids(tok, SYSTEM, QUERY, filler_tokens=filler)


@pytest.mark.parametrize("family", ENGINE)
def test_full_retention_equals_generate(hub, family):
    model, tok = load(hub, family)
    ids = prompt(tok)
    ref = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                         max_new_tokens=8, do_sample=False, eos_token_id=None, pad_token_id=tok.pad_token_id)
    ref = ref[0, len(ids):].tolist()
    pre = generation.prefill(model, ids, capture_window=8)
    for name in [n for n in retention.REGISTRY if n not in UNBUDGETED]:  # minus_span never keeps everything
        keep = retention.make(name, keep_ratio=1.0, **SETTINGS.get(name, {})).select(pre)
        assert keep is None
        tokens, _ = generation.decode_greedy(model, pre, keep, 8, set())
        assert tokens == ref, name


@pytest.mark.parametrize("family", ENGINE)
@pytest.mark.parametrize("name", [n for n in retention.REGISTRY if n != "full"])
def test_every_policy_equals_its_masked_reference(hub, family, name):
    model, tok = load(hub, family)
    ids = prompt(tok)
    policy = retention.make(name, keep_ratio=0.3, **SETTINGS.get(name, {}))
    pre = generation.prefill(model, ids, capture_window=16)
    keep = policy.select(pre)
    assert keep.shape[-1] == expected_kept(name, len(ids))
    tokens, _ = generation.decode_greedy(model, pre, keep, 5, set())
    cache, ours = retention.evict(pre.cache, keep), []
    for i, t in enumerate(tokens[:4]):
        ours.append(generation.step(model, cache, [t], pre.length + i))
    ref = masked_reference_logits(model, ids + tokens[:4], len(ids), keep)[len(ids):]
    assert (torch.stack(ours) - ref).abs().max().item() < 1e-3


@pytest.mark.parametrize("family", ENGINE)
def test_a_prefix_every_row_shares_is_attended_once_with_the_same_logits(hub, family):
    """Two prompts sharing their template, system text and filler: one decode step with that prefix
    kept once for the batch (``attention.attend_after_prefix``) gives the logits of the batch holding
    it in every row; Gemma 2 with attention peaked enough for its soft-cap to bite."""
    model, tok = load(hub, family)
    model = peaked(model) if family == "gemma2" else model
    pres = sharing_a_filler(model, tok, SYSTEM, [QUERY, "Name three rivers in Europe."], 100)
    shared = generation.shared_positions([retention.evict(p.cache, None) for p in pres])
    assert shared >= 100
    assert (step_logits(model, pres, shared, [5, 7]) - step_logits(model, pres, 0, [5, 7])).abs().max().item() < 1e-4


def peaked(model):
    """A copy of ``model`` whose query and key weights are scaled up, so that attention is far from
    uniform (random weights give near-uniform attention, where scale and soft-cap barely show)."""
    import copy

    model = copy.deepcopy(model)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if any(k in name for k in ("q_proj", "k_proj", "qkv_proj")):
                param.mul_(40)
    return model


@pytest.mark.parametrize("family", ENGINE)
def test_snapkv_scores_are_the_models_own_attention(hub, family):
    """SnapKV's window scores equal the family's own eager attention weights (its scale: Granite's
    attention multiplier, Gemma 2's query_pre_attn_scalar and soft-cap), summed over the window and
    averaged over each KV head's query heads."""
    import copy

    model, tok = load(hub, family)
    model = peaked(model)
    ids, w = prompt(tok, filler=20), 8
    pre = generation.prefill(model, ids, capture_window=w)
    eager = copy.deepcopy(model)
    eager.set_attn_implementation("eager")
    with torch.no_grad():
        attentions = eager(input_ids=torch.tensor([ids]), output_attentions=True).attentions
    assert len(attentions) == len(pre.window_scores)
    standard = []  # the scores at the textbook scale 1/sqrt(head_dim), without a soft-cap
    with attention_hook(model, lambda i, q, k, m: standard.append(retention.window_scores(q.float(), k.float(), w)[0])):
        with torch.no_grad():
            model(input_ids=torch.tensor([ids]))
    for ours, attn, plain in zip(pre.window_scores, attentions, standard):
        heads, kv = attn.shape[1], ours.shape[0]
        ref = attn[0, :, -w:].float().sum(1).view(kv, heads // kv, -1).mean(1)
        assert (ours - ref).abs().max().item() < 1e-4
        if family in ("granite_guardian", "gemma2"):  # a family-specific scale: the textbook one would be wrong
            assert (plain - ref).abs().max().item() > 1e-2


@pytest.mark.parametrize("family", ENGINE)
def test_sampled_grid_is_reproducible_under_its_seed(hub, family):
    model, tok = load(hub, family)
    ids = prompt(tok, filler=20)
    pre = generation.prefill(model, ids)
    grid = generation.decoding_grid([0.0, 0.8], [0, 1], 6)

    def draw(order):
        rows = [generation.Row(retention.evict(pre.cache, None), pre.length, pre.last_logits, d, sample_key="k")
                for d in order]
        out = generation.decode(model, rows, set())
        return {d: toks for d, (toks, _) in zip(order, out)}

    first, again = draw(grid), draw(grid[::-1])
    assert first == again  # same seed, same tokens, whatever the batch order
    assert first[grid[1]] != first[grid[2]]  # two seeds at T = 0.8 draw differently


@pytest.mark.parametrize("family", ["gemma2", "olmo3"])
def test_sliding_window_families_refuse_what_exceeds_the_window(hub, family):
    model, tok = load(hub, family)
    window = models.sliding_window(model.config)
    assert window and models.attention_span(model.config) == window
    assert models.context_window(ModelSpec(standins.ENGINE_IDS[family])) == window
    long = pd_prompts(tok, window)
    with pytest.raises(ValueError, match="context window"):
        generation.check_plan(long, lambda r: [retention.make("full")], window, 8)


def pd_prompts(tok, n_tokens):
    import pandas as pd

    ids = prompt(tok, filler=n_tokens)
    return pd.DataFrame([{"prompt_id": "p", "item_id": "i", "prompt_tokens": len(ids)}])


def test_soft_capping_is_applied(hub):
    """Gemma 2's attention soft-cap, with attention logits large enough for it to bite (query and key
    weights scaled up): the engine's hooked attention equals the family's own eager attention, and
    differs from the uncapped attention."""
    import copy

    model, tok = load(hub, "gemma2")
    model = peaked(model)
    ids = prompt(tok, filler=10)
    eager = copy.deepcopy(model)
    eager.set_attn_implementation("eager")
    with torch.no_grad():
        reference = eager(input_ids=torch.tensor([ids])).logits[0, -1]
    ours = generation.prefill(model, ids, capture_window=4).last_logits
    assert (ours - reference).abs().max() < 1e-4
    for layer in model.model.layers:
        layer.self_attn.attn_logit_softcapping = None
    uncapped = generation.prefill(model, ids, capture_window=4).last_logits
    assert (uncapped - reference).abs().max() > 1e-2


# --- rendering ------------------------------------------------------------------------------------
RENDER = sorted(standins.FAMILIES)


@pytest.fixture(scope="module")
def tokenizers(hub):
    out = {}
    for family in RENDER:
        hub_id = next(h for h, f in standins.HUB_IDS.items() if f == family)
        out[family] = models.load_tokenizer(ModelSpec(hub_id))
    return out


@pytest.mark.parametrize("family", RENDER)
def test_every_study_renders(tokenizers, family):
    tok = tokenizers[family]
    base = not chat.has_template(tok)
    # kv: the exact filler, with and without the system text (folded where the template has no system role)
    for system in (SYSTEM, None):
        kv.filler_check(tok, system) if not base else None
        text = chat.render(tok, chat.turn(system, QUERY))
        assert QUERY in text and (system is None or SYSTEM in text)
    # frames: frame locality under the default wrapper, for every body shape
    for body in (QUERY, "Answer with one word.\nWhat is 2 + 2?"):
        ids = W.check_locality(tok, W.DEFAULT_WRAPPER, W.DEFAULT_FRAMES, body, family)
        assert len(set(map(tuple, ids.values()))) == len(W.DEFAULT_FRAMES)
    if base:
        for study in ("kv", "confusion", "policy"):
            with pytest.raises(RuntimeError, match="base model.* only by frames"):
                families.check_rendering(EVERY_STUDY, study, tok, Rendering("m", lambda tok: None))
        families.check_rendering(EVERY_STUDY, "frames", tok, Rendering("m", lambda tok: None))
        return
    # confusion: the user's span is found in the prompt
    built = prompts.render_ids(tok, SYSTEM, QUERY)
    assert user_span(tok, SYSTEM, built)[1] <= len(built)
    # policy: the guard's template (Granite Guardian with its guardian_config)
    guard_template_check(tok, None, "harm" if family == "granite_guardian" else None)


def test_a_template_that_cannot_render_a_study_is_refused(tokenizers):
    import copy

    tok = copy.deepcopy(tokenizers["qwen2"])
    tok.chat_template = standins.CHATML.replace("message['content']", "message['content'] + message['content']")
    with pytest.raises(chat.RenderError, match="exactly once"):  # the kv filler could not be exact
        kv.filler_check(tok, None)
    tok.chat_template = "{{ raise_exception('Only one role') if messages|length > 0 }}"
    with pytest.raises(chat.RenderError, match="cannot render"):
        confusion.user_turn_check(tok, SYSTEM)


def test_system_role_rules(tokenizers):
    gemma, base = tokenizers["gemma2"], tokenizers["olmo3_base"]
    with pytest.raises(Exception, match="System role not supported"):
        gemma.apply_chat_template(chat.turn(SYSTEM, QUERY), tokenize=False)
    assert chat.render(gemma, chat.turn(SYSTEM, QUERY)) == chat.render(gemma, chat.turn(None, SYSTEM + "\n\n" + QUERY))
    assert chat.render(base, chat.turn(SYSTEM, QUERY)) == f"{SYSTEM}\n\nUser: {QUERY}\n\nAssistant:"
    # a template that drops the system text (Qwen3Guard renders only the user's query) gets it folded in
    assert SYSTEM in chat.render(tokenizers["qwen3guard"], chat.turn(SYSTEM, QUERY))


# --- make check ---------------------------------------------------------------------------------
PAPER = sorted((ROOT / "params" / "paper").glob("*.yaml"))


@pytest.mark.parametrize("params", PAPER, ids=[p.stem for p in PAPER])
def test_make_check_knows_the_models(hub, params, capsys):
    from refusal_audit.__main__ import main

    assert main(["check", str(params)]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "config and tokenizer not on this machine" not in out  # every model was found and checked
    assert out.strip().endswith(("ok", "notes name)"))


KV_PAPER = [p for p in PAPER if p.stem.startswith("kv_") and not p.stem.endswith("_llama-judge")]


@pytest.mark.parametrize("params", KV_PAPER, ids=[p.stem for p in KV_PAPER])
def test_paper_kv_runs_test_the_papers_pair(hub, params, tmp_path, capsys):
    """Every paper kv generation file (the auxiliary judge's file re-judges the primary's replies) declares the
    paper's confirmatory pair, the keyword monitor against the HarmBench classifier, over every evicting arm it
    decodes, and make check passes on it with the stand-ins; naming a judge the file does not run stops it."""
    from refusal_audit import config
    from refusal_audit.__main__ import main
    from refusal_audit.studies.kv import design

    kv = config.load(params).studies["kv"]
    assert (kv.confirmatory.monitor, kv.confirmatory.reference) == ("keyword", "llm_harmbench")
    assert kv.confirmatory.family == design.main_arms(kv) and "sink_tail@2048" in kv.confirmatory.family
    assert main(["check", str(params)]) == 0, capsys.readouterr().err
    capsys.readouterr()
    broken = write_params(tmp_path, params.read_text().replace("questions: [harmbench]", "questions: [refusal]"))
    assert main(["check", str(broken)]) == 2
    err = capsys.readouterr().err
    assert f"{broken}: kv.confirmatory.reference: expected a judge the run emits" in err and "llm_harmbench" in err


def test_make_check_notes_absent_models(tmp_path, monkeypatch, capsys):
    import huggingface_hub.constants as hf

    from refusal_audit.__main__ import main

    monkeypatch.setattr(hf, "HF_HUB_CACHE", str(tmp_path))
    models._config.cache_clear()  # configs are read once per source: forget the stand-ins'
    assert main(["check", str(ROOT / "params" / "paper" / "frames_roster.yaml")]) == 0
    out = capsys.readouterr().out
    assert "models.olmo-3-7b-base: config and tokenizer not on this machine" in out
    models._config.cache_clear()


def write_params(tmp_path, text):
    f = tmp_path / "p.yaml"
    f.write_text(text)
    return f


def test_make_check_refuses_a_base_model_in_kv(hub, tmp_path, capsys):
    from refusal_audit.__main__ import main

    src = (ROOT / "params" / "paper" / "kv_qwen2.5-3b-instruct.yaml").read_text()
    f = write_params(tmp_path, src.replace("source: Qwen/Qwen2.5-3B-Instruct", "source: allenai/Olmo-3-1025-7B"))
    assert main(["check", str(f)]) == 2
    err = capsys.readouterr().err
    assert "models.qwen2.5-3b-instruct (allenai/Olmo-3-1025-7B)" in err and "base model" in err and str(f) in err


def test_make_check_refuses_an_unproven_architecture(hub, tmp_path, capsys):
    from refusal_audit.__main__ import main

    cfg = hub / "models--google--gemma-2-9b-it" / "snapshots" / ("0" * 40) / "config.json"
    import json

    saved = cfg.read_text()
    data = json.loads(saved)
    try:
        cfg.write_text(json.dumps(dict(data, model_type="gpt2", architectures=["GPT2LMHeadModel"])))
        models._config.cache_clear()
        assert main(["check", str(ROOT / "params" / "paper" / "confusion_paraguard.yaml")]) == 2
        err = capsys.readouterr().err
        assert "models.gemma-2-9b-it" in err and "'gpt2'" in err and "not one the engine's eviction is proven on" in err
    finally:
        cfg.write_text(saved)
        models._config.cache_clear()
