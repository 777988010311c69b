"""The user entry points (make check/all/generate/judge): bad input stops before any work with one
message naming the file, key or row; good input writes the contract tables."""
import os
import subprocess
import sys

import pandas as pd
import pytest
import yaml

from refusal_audit.paths import ROOT


def cli(tmp_path, *args):
    env = {**os.environ, "REFUSAL_AUDIT_RESULTS": str(tmp_path / "results"), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "refusal_audit", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture
def here(tmp_path, monkeypatch, capsys):
    """The same entry point in this process, for the paths that stop before any work (a subprocess
    spends about 10 s importing torch and transformers before it gets there)."""
    from refusal_audit import __main__, paths

    monkeypatch.setattr(paths, "RESULTS_DIR", tmp_path / "results")
    monkeypatch.chdir(ROOT)

    def run(*args):
        code = __main__.main(list(args))
        out = capsys.readouterr()
        return subprocess.CompletedProcess(list(args), code, out.out, out.err)
    return run


def params(tmp_path, batch_rows=None, **kv):
    raw = yaml.safe_load((ROOT / "params" / "ci.yaml").read_text())
    raw["run_name"] = "t"
    raw["kv"].update(kv)
    if batch_rows:
        raw["generation"] = {"batch_rows": batch_rows}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path, raw


def assert_stopped(tmp_path, res, *fragments):
    assert res.returncode == 2, res.stderr
    message = res.stderr.strip().splitlines()[-1]
    assert message.startswith("error: ")
    for f in fragments:
        assert f in message
    assert not (tmp_path / "results").exists()  # nothing was written


def test_unknown_key(tmp_path, here):
    path, _ = params(tmp_path, keep_ratoi=0.3)
    assert_stopped(tmp_path, here("run", str(path)), "p.yaml: kv.keep_ratoi: unknown key")


def test_model_path_that_does_not_exist(tmp_path, here):
    path, raw = params(tmp_path)
    raw["models"]["smollm2-135m"]["source"] = "./models/nowhere.gguf"
    path.write_text(yaml.safe_dump(raw))
    assert_stopped(tmp_path, here("run", str(path)), "models.smollm2-135m.source",
                   "'./models/nowhere.gguf'", "GGUF file not found")


def test_filler_longer_than_the_context(tmp_path, here):
    path, _ = params(tmp_path, filler_tokens=9000)
    assert_stopped(tmp_path, here("check", str(path)), "p.yaml: kv.filler_tokens: 9000 filler tokens",
                   "context window of smollm2-135m-guarded (8192 positions)")


def test_generate_refuses_bad_prompt_files(tmp_path, here):
    bad = tmp_path / "prompts.csv"
    bad.write_text("id,prompt\n1,Tell me a joke\n2,\n")
    res = here("generate", "--prompts", str(bad), "--model", "smollm2-135m", "--run", "u",
               "--params", "params/ci.yaml")
    assert_stopped(tmp_path, res, "prompts.csv: row 1 (id '2'): empty prompt")


def test_judge_refuses_missing_columns(tmp_path, here):
    bad = tmp_path / "replies.csv"
    bad.write_text("prompt,answer\nhi,hello\n")
    res = here("judge", "--replies", str(bad), "--run", "u", "--params", "params/ci.yaml")
    assert_stopped(tmp_path, res, "replies.csv: missing column(s) ['reply']")


@pytest.mark.parametrize("content, message", [
    ("prompt,reply\nhi,caf\xe9\n".encode("latin-1"), "replies.csv: not UTF-8 text"),
    (b"id,prompt,reply\na,hi,no\na,hi,yes\n", "replies.csv: row 1: duplicate id 'a'"),
])
def test_judge_refuses_bad_replies_files(tmp_path, here, content, message):
    bad = tmp_path / "replies.csv"
    bad.write_bytes(content)
    res = here("judge", "--replies", str(bad), "--run", "u", "--params", "params/ci.yaml")
    assert_stopped(tmp_path, res, message)


def test_judge_writes_every_row_with_its_id(tmp_path):
    path, raw = params(tmp_path)
    raw["judges"] = {"llm": None}
    path.write_text(yaml.safe_dump(raw))
    replies = tmp_path / "replies.csv"
    pd.DataFrame({"id": ["x1", "x2", "x3"], "prompt": ["a", "b", "c"],
                  "reply": ["I'm sorry, I cannot help.", "Sure! Step one:", ""]}).to_csv(replies, index=False)
    res = cli(tmp_path, "judge", "--replies", str(replies), "--run", "u", "--params", str(path))
    assert res.returncode == 0, res.stderr
    out = pd.read_parquet(tmp_path / "results" / "u" / "user" / "judgments.parquet")
    assert out[out["judge"] == "keyword"][["generation_id", "label"]].values.tolist() == [
        ["x1", "refusal"], ["x2", "non_refusal"], ["x3", "unparseable"]]
    assert set(out["judge"]) == {"keyword", "learned_refusal", "learned_harmful"}
    assert (out[out["generation_id"] == "x3"]["label"] == "unparseable").all()
    assert (tmp_path / "results" / "u" / "user" / "judge_agreement.csv").is_file()


def test_generate_writes_the_contract_columns(tmp_path):
    path, _ = params(tmp_path, max_new_tokens=3)
    prompts = tmp_path / "prompts.csv"
    pd.DataFrame({"id": ["q1", "q2"], "prompt": ["Name a colour.", "Name a fruit."],
                  "system": ["Be brief.", ""]}).to_csv(prompts, index=False)
    res = cli(tmp_path, "generate", "--prompts", str(prompts), "--model", "smollm2-135m", "--run", "u",
              "--params", str(path), "--policies", "full,sink_tail", "--filler", "32")
    assert res.returncode == 0, res.stderr
    g = pd.read_parquet(tmp_path / "results" / "u" / "user" / "generations.parquet")
    assert sorted(zip(g["prompt_id"], g["policy"])) == [("q1", "full"), ("q1", "sink_tail"),
                                                         ("q2", "full"), ("q2", "sink_tail")]
    assert (g["new_tokens"] <= 3).all() and (g["filler_tokens"] == 32).all()
    assert g.groupby("prompt_id")["system_prompt"].first().to_dict() == {"q1": True, "q2": False}


def test_kill_9_then_rerun_equals_an_uninterrupted_run(tmp_path, here):
    """SIGKILL in the middle of `make generate` (a subprocess), rerun: the table equals an uninterrupted
    run's, row for row (the rerun and the uninterrupted run in this process)."""
    import signal
    import time

    path, _ = params(tmp_path, max_new_tokens=8, batch_rows=2)
    prompts = tmp_path / "prompts.csv"
    pd.DataFrame({"id": [f"q{i}" for i in range(6)],
                  "prompt": [f"Write a short poem about the number {i}." for i in range(6)]}).to_csv(prompts, index=False)
    args = ["generate", "--prompts", str(prompts), "--model", "smollm2-135m", "--params", str(path),
            "--policies", "full,sink_tail", "--filler", "64"]
    env = {**os.environ, "REFUSAL_AUDIT_RESULTS": str(tmp_path / "results"), "HF_HUB_OFFLINE": "1"}
    shards = tmp_path / "results" / "killed" / "user" / "shards" / "generations"
    proc = subprocess.Popen([sys.executable, "-m", "refusal_audit", *args, "--run", "killed"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline and len(list(shards.glob("*.parquet"))) < 2:
        assert proc.poll() is None, "make generate exited before the kill"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done_at_kill = len(list(shards.glob("*.parquet")))
    assert 2 <= done_at_kill < 12, "the kill must land mid-run"
    assert not (shards.parent.parent / "generations.parquet").exists()

    assert here(*args, "--run", "killed").returncode == 0
    assert here(*args, "--run", "clean").returncode == 0
    killed = pd.read_parquet(tmp_path / "results" / "killed" / "user" / "generations.parquet")
    clean = pd.read_parquet(tmp_path / "results" / "clean" / "user" / "generations.parquet")
    assert len(killed) == 12 and killed["generation_id"].is_unique
    pd.testing.assert_frame_equal(killed, clean)


def test_every_command_the_makefile_calls_exists(capsys):
    """Each ``-m refusal_audit <command>`` of the Makefile parses (seen failing when the contract's CLI lost
    ``figures`` and ``make figures`` stopped with "invalid choice")."""
    import re

    from refusal_audit.__main__ import main

    called = set(re.findall(r"-m refusal_audit ([a-z][a-z-]*)", (ROOT / "Makefile").read_text()))
    assert {"run", "check", "figures", "guard-verdict"} <= called
    for command in sorted(called):
        with pytest.raises(SystemExit) as stop:
            main([command, "--help"])
        assert stop.value.code == 0, command
    assert "invalid choice" not in capsys.readouterr().err
