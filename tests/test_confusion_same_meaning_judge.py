"""The same-meaning judge (``studies/confusion/same_meaning_judge.py``) end to end on the embedded SmolLM2-135M: its
answers on a stratified 24 of the repository's 151 hand-labelled pairs (the whole set takes the model ~2.5 minutes on
two cores: ``benchmarks/confusion_same_meaning_judge.py`` measures it), precision and recall counted here by hand, and
the blind sheet of ``make confusion`` pre-labelled with the judge's measured error in the report. The route is proven
here, not the judge: on all 151 pairs the embedded model calls 62 the same, precision 0.44 [0.32, 0.56], recall 0.57
[0.43, 0.70] (the cosine at 0.70: 0.36 and 0.72), weakly above chance (Fisher's exact p 0.007), far from a label."""
import pandas as pd
import pytest
import torch
from scipy.stats import fisher_exact
from test_confusion_study import Pool, user_params
from test_confusion_user_verdict import DATA

from refusal_audit import paths
from refusal_audit.studies import confusion as C
from refusal_audit.studies.confusion import arm_verdict, meaning, user_run
from refusal_audit.studies.confusion import same_meaning_judge as J

SUBSET = 12  # labelled pairs of each label the tests judge


@pytest.fixture(scope="module", autouse=True)
def few_pairs(tmp_path_factory):
    """The first ``SUBSET`` same and ``SUBSET`` different pairs of the labelled file, in its place for this module
    (the judge's per-process answers are cleared before and after, so no other module sees the subset's)."""
    rows = pd.read_csv(meaning.PAIRS)
    path = tmp_path_factory.mktemp("pairs") / "same_meaning_pairs.csv"
    rows.groupby("label", sort=False).head(SUBSET).to_csv(path, index=False)
    mp = pytest.MonkeyPatch()
    mp.setattr(meaning, "PAIRS", path)
    J._ANSWERS.clear()
    yield path
    J._ANSWERS.clear()
    mp.undo()


@pytest.fixture(scope="module")
def judged(embedded):
    """The judge's answers on the labelled pairs (computed once; ``measured`` and ``make confusion`` reuse them)."""
    judge = J.build(*embedded)
    pairs, a, b, got = J.labelled_answers(judge)
    return pairs, a, b, got, judge


def test_the_judges_precision_and_recall_on_the_labelled_pairs(judged):
    """Precision and recall of the judge's calls, counted here (printed with the table of calls against labels and
    Fisher's exact p). Seen failing with ``measured`` reading every pair as called same."""
    pairs, _, _, got, judge = judged
    same, called = pairs["label"].eq("same"), got["judge_label"].eq("same")
    m = J.measured(judge)
    table = pd.crosstab(same, called).reindex(index=[False, True], columns=[False, True], fill_value=0)
    print(J.words(m, "smollm2-135m"), "crosstab (label same x called same):", table.to_numpy().tolist(),
          "Fisher p", fisher_exact(table.to_numpy())[1])
    assert m["n_pairs"] == len(pairs) == 2 * SUBSET and m["n_called"] == called.sum()
    assert m["precision"] == pytest.approx((same & called).sum() / called.sum())
    assert m["recall"] == pytest.approx((same & called).sum() / same.sum())


def test_one_answer_is_the_models_next_token_choice(judged, embedded):
    """The first pair's label from a forward pass written here: P(yes) against P(no) at the answer position, each
    summed over the single-token casings of the word with and without a leading space."""
    model, tok = embedded
    _, a, b, got, judge = judged
    ids = torch.tensor([judge.render(a[0], b[0])])
    with torch.no_grad():
        p = model(input_ids=ids).logits[0, -1].softmax(-1)

    def mass(word):
        variants = {v for w in (word, word.capitalize(), word.upper()) for v in (w, " " + w)}
        ids = {tok.encode(v, add_special_tokens=False)[0] for v in variants
               if len(tok.encode(v, add_special_tokens=False)) == 1}
        return sum(p[i].item() for i in ids)

    yes, no = mass("yes"), mass("no")
    assert got["judge_label"].iloc[0] == ("same" if yes > no else "different")
    assert got["judge_p_same"].iloc[0] == pytest.approx(yes / (yes + no), rel=1e-4)


def test_make_confusion_pre_labels_the_sheet_with_the_judge(tmp_path, monkeypatch, embedded):
    """With ``confusion.same_meaning_judge`` in params, the blind sheet gains the judge's labels beside the empty
    ``label`` (the person's), and the report states the judge's measured precision and recall."""
    import yaml

    monkeypatch.setattr(paths, "RESULTS_DIR", tmp_path / "results")
    pfile = user_params(tmp_path)
    raw = yaml.safe_load(pfile.read_text())
    raw["confusion"]["same_meaning_judge"] = "smollm2-135m"
    pfile.write_text(yaml.safe_dump(raw))
    folder = C.run_user_clusters(str(DATA / "clusters.csv"), [], "judged", str(pfile),
                                 str(DATA / "lookalike_guard.csv"), pool=Pool(*embedded))
    sheet = pd.read_csv(folder / arm_verdict.SHEET, keep_default_na=False)
    assert (sheet["label"] == "").all() and sheet["judge_label"].isin(["same", "different", "unparseable"]).all()
    assert "Same-meaning judge smollm2-135m" in (folder / "report.html").read_text()
    # the pre-labelled sheet is still one PAIRS= reads once a person fills its label column
    sheet["label"] = sheet["judge_label"].replace("unparseable", "different")
    sheet.to_csv(tmp_path / "filled.csv", index=False)
    assert user_run.check_inputs(str(DATA / "clusters.csv"), [], str(DATA / "lookalike_guard.csv"),
                                 str(tmp_path / "filled.csv"))[2]
