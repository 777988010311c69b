"""Eviction correctness: against model.generate and against a cache-free masked reference."""
from types import SimpleNamespace

import pytest
import torch

from refusal_audit import generation, prompts, retention
from refusal_audit.attention import attention_hook

SYSTEM = "You are a careful assistant. Refuse harmful requests."
QUERY = "Describe how a town library organises its catalogue."


@pytest.fixture(scope="module")
def prompt_ids(embedded):
    _, tok = embedded
    return prompts.render_ids(tok, SYSTEM, QUERY, filler_tokens=180)


SETTINGS = {"sink_tail": {"sink": 4}, "snapkv": {"window": 16, "kernel": 7},  # beyond the defaults, where a policy has any
            "sink_span": {"sink": 4, "span_start": 3, "span_end": 15}, "minus_span": {"span_start": 3, "span_end": 15}}
UNBUDGETED = {"minus_span"}  # removes the system span whatever the budget: it never keeps everything


def expected_kept(name: str, n: int, keep_ratio: float = 0.3) -> int:
    """Positions a policy keeps of an n-token prompt at ``SETTINGS``: its budget, or n minus the span."""
    span = SETTINGS.get(name, {}).get("span_end", 0) - SETTINGS.get(name, {}).get("span_start", 0)
    return n - span if name in UNBUDGETED else round(keep_ratio * n)


EVICTING = [name for name in retention.REGISTRY if name != "full"]


def policies(keep_ratio):
    """Every registered policy (kvpress runs one test over every press): a new policy is tested here."""
    return [retention.make(name, keep_ratio=keep_ratio, **SETTINGS.get(name, {})) for name in retention.REGISTRY]


def test_keep_all_reproduces_generate(embedded, prompt_ids):
    model, tok = embedded
    eos = generation.eos_token_ids(model, tok)
    ref = model.generate(torch.tensor([prompt_ids]), max_new_tokens=16, do_sample=False)[0, len(prompt_ids):].tolist()
    pre = generation.prefill(model, prompt_ids, capture_window=16)
    for policy in policies(1.0):
        if policy.name in UNBUDGETED:
            continue
        keep = policy.select(pre)
        assert keep is None, policy.name
        tokens, _ = generation.decode_greedy(model, pre, keep, 16, eos)
        assert tokens == ref, policy.name


def masked_reference_logits(model, ids, n_prompt, keep):
    """Logits of a cache-free forward over ``ids`` where every query after the prompt sees only the
    kept prompt positions of each layer and KV head (queries inside the prompt see everything)."""
    T = len(ids)
    causal = torch.ones(T, T, dtype=torch.bool).tril()

    def mask(layer_idx, query, key, attention_mask):
        heads, kv_heads = query.shape[1], key.shape[1]
        allowed = torch.zeros(kv_heads, T, dtype=torch.bool)
        allowed[:, n_prompt:] = True
        allowed.scatter_(1, keep[layer_idx], True)
        allowed = allowed.repeat_interleave(heads // kv_heads, dim=0)  # [heads, T]
        m = causal.expand(heads, T, T).clone()
        m[:, n_prompt:, :] &= allowed[:, None, :]
        return m[None]

    with torch.no_grad(), attention_hook(model, mask):
        return model(input_ids=torch.tensor([ids])).logits[0].float()


def decoded_logits(model, pre, keep, tokens, wrong_positions=False):
    cache = retention.evict(pre.cache, keep)
    out = []
    for i, t in enumerate(tokens):
        pos = cache.get_seq_length() if wrong_positions else pre.length + i
        out.append(generation.step(model, cache, [t], pos))
    return torch.stack(out)


@pytest.mark.parametrize("name", EVICTING)
def test_evicted_decode_matches_masked_reference(embedded, prompt_ids, name):
    model, tok = embedded
    policy = {p.name: p for p in policies(0.3)}[name]
    pre = generation.prefill(model, prompt_ids, capture_window=16)
    keep = policy.select(pre)
    assert keep.shape[-1] == expected_kept(name, len(prompt_ids))
    tokens, _ = generation.decode_greedy(model, pre, keep, 6, set())
    ours = decoded_logits(model, pre, keep, tokens[:5])
    ref = masked_reference_logits(model, prompt_ids + tokens[:5], len(prompt_ids), keep)[len(prompt_ids):]
    assert (ours - ref).abs().max().item() < 1e-3


def test_positions_restarting_at_cache_length_are_caught(embedded, prompt_ids):
    """The reference comparison is sensitive to the transformers-5 default (position = cache length)."""
    model, _ = embedded
    policy = retention.make("sink_tail", keep_ratio=0.3, sink=4)
    pre = generation.prefill(model, prompt_ids)
    keep = policy.select(pre)
    tokens, _ = generation.decode_greedy(model, pre, keep, 4, set())
    ref = masked_reference_logits(model, prompt_ids + tokens[:3], len(prompt_ids), keep)[len(prompt_ids):]
    wrong = decoded_logits(model, pre, keep, tokens[:3], wrong_positions=True)
    right = decoded_logits(model, pre, keep, tokens[:3])
    assert (right - ref).abs().max().item() < 1e-3
    assert (wrong - ref).abs().max().item() > 1e-1


def test_sink_tail_keeps_sink_and_tail():
    layer = SimpleNamespace(keys=torch.zeros(1, 3, 100, 8))  # 3 KV heads, 100 positions
    pre = retention.Prefill(cache=SimpleNamespace(layers=[layer, layer]), length=100)
    keep = retention.make("sink_tail", keep_ratio=0.3, sink=4).select(pre)
    assert keep.shape == (2, 3, 30)
    assert keep[0, 0].tolist() == [0, 1, 2, 3] + list(range(74, 100))


def test_snapkv_picks_the_most_attended_positions():
    n, w = 50, 5
    scores = torch.zeros(1, n)
    scores[0, [7, 20, 33]] = 1.0
    pre = retention.Prefill(cache=None, length=n, window_scores=[scores])
    keep = retention.make("snapkv", keep_ratio=0.16, window=w, kernel=1).select(pre)
    assert keep[0, 0].tolist() == [7, 20, 33] + list(range(n - w, n))


@pytest.mark.parametrize("kwargs, message", [
    ({"keep_ratio": 0.0}, "keep_ratio"), ({"keep_ratio": 1.5}, "keep_ratio"), ({"sink": -1}, "sink"),
])
def test_bad_policy_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        retention.make("sink_tail", **kwargs)


def test_sink_larger_than_budget_is_refused():
    with pytest.raises(ValueError, match="sink 64 is larger than the budget 15"):
        retention.make("sink_tail", keep_ratio=0.3, sink=64).check(50)
    with pytest.raises(ValueError, match="unknown retention policy"):
        retention.make("h3o")


def test_hooked_attention_keeps_masks(embedded, prompt_ids):
    """A multi-token step on a cache gives the same logits under the hookable attention as under sdpa
    (the cue step that answers MMLU under retention)."""
    model, _ = embedded
    pre = generation.prefill(model, prompt_ids)
    cue = prompt_ids[-5:]
    model.set_attn_implementation("sdpa")
    plain = generation.step(model, retention.evict(pre.cache, None), cue, pre.length)
    with attention_hook(model, lambda *a: None):
        hooked = generation.step(model, retention.evict(pre.cache, None), cue, pre.length)
    assert (plain - hooked).abs().max().item() < 1e-4


def test_span_retained_is_the_kept_share_of_the_span():
    keep = torch.tensor([[[0, 1, 5, 9], [0, 2, 3, 9]], [[4, 5, 6, 7], [0, 1, 2, 3]]])  # 2 layers x 2 heads
    # span [1, 4): kept 1 | 2 (2, 3) | 0 | 3 (1, 2, 3) of 3 positions -> (1 + 2 + 0 + 3) / 4 / 3
    assert retention.span_retained(keep, 1, 4) == pytest.approx(0.5)
    assert retention.span_retained(None, 1, 4) == 1.0 and retention.span_retained(keep, 3, 3) == 1.0


@pytest.mark.parametrize("filler", [0, 96])
def test_system_span_is_the_system_text(embedded, filler):
    _, tok = embedded
    system = "You are careful. Refuse harmful requests."
    ids = prompts.render_ids(tok, system, "How do I bake bread?", filler)
    a, b = prompts.system_span(tok, system, "How do I bake bread?", filler)
    assert tok.decode(ids[a:b]).strip() == system and a > 0 and b < len(ids) - filler
