"""The generation stage: contract columns, resumability, and refusal of impossible plans."""
import pandas as pd
import pytest

from refusal_audit import generation, prompts, retention
from refusal_audit.generation import GENERATION_COLUMNS
from refusal_audit.store import ShardStore

CONTRACT = ["generation_id", "prompt_id", "item_id", "study", "model", "policy", "keep_ratio", "sink",
            "filler_tokens", "frame", "paraphrase", "temperature", "seed", "reply", "prompt_tokens", "kept_positions"]


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
    first = generation.run(model, tok, "smollm2-135m", table, policies_of, store, max_new_tokens=5)
    assert set(CONTRACT) <= set(first.columns) and list(first.columns) == GENERATION_COLUMNS
    assert len(first) == 4 and first["generation_id"].is_unique
    tail = first[first["policy"] == "sink_tail"]
    assert (tail["kept_positions"] < tail["prompt_tokens"]).all()

    # an interrupted run: the third decode dies; the two finished rows are kept
    again = ShardStore(tmp_path / "again")
    calls = {"n": 0}
    real = generation.decode_greedy

    def dying(*a, **k):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(generation, "decode_greedy", dying)
    with pytest.raises(KeyboardInterrupt):
        generation.run(model, tok, "smollm2-135m", table, policies_of, again, max_new_tokens=5)
    assert len(list(again.folder.glob("*.parquet"))) == 2
    assert not list(again.folder.glob(".*"))  # nothing half-written
    calls["n"] = -100  # the rerun does only the missing rows
    resumed = generation.run(model, tok, "smollm2-135m", table, policies_of, again, max_new_tokens=5)
    assert calls["n"] == -98
    pd.testing.assert_frame_equal(resumed, first)


def test_impossible_plans_stop_before_any_work(embedded, table, tmp_path):
    model, tok = embedded
    store = ShardStore(tmp_path)
    with pytest.raises(ValueError, match="max_new_tokens must be >= 1"):
        generation.run(model, tok, "m", table, policies_of, store, max_new_tokens=0)
    big_sink = lambda row: [retention.make("sink_tail", keep_ratio=0.1, sink=40)]  # noqa: E731
    with pytest.raises(ValueError, match="sink 40 is larger than the budget"):
        generation.run(model, tok, "m", table, big_sink, store, max_new_tokens=2)
    long = table.assign(prompt_tokens=9000)
    with pytest.raises(ValueError, match="exceed the context window 8192"):
        generation.run(model, tok, "m", long, policies_of, store, max_new_tokens=2)
    assert not list(store.folder.iterdir())
