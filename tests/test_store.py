"""Atomic writes, shard keys and the run manifest."""
import json

import pandas as pd
import pytest

from refusal_audit import store


def test_write_atomic_leaves_nothing_half_written(tmp_path):
    path = tmp_path / "t.parquet"
    store.write_atomic(pd.DataFrame({"a": [1, 2]}), path)

    class Boom:  # a frame whose serialisation fails midway
        def to_parquet(self, tmp, index):
            open(tmp, "wb").write(b"partial")
            raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        store.write_atomic(Boom(), path)
    assert pd.read_parquet(path)["a"].tolist() == [1, 2]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.parquet"]


def test_shard_key_is_stable_and_sensitive():
    k = store.shard_key(model="m", input_ids=[1, 2], policy="full", decoding={"t": 0})
    assert k == store.shard_key(decoding={"t": 0}, policy="full", input_ids=[1, 2], model="m")
    assert k != store.shard_key(model="m", input_ids=[1, 3], policy="full", decoding={"t": 0})


def test_shard_store_collect(tmp_path):
    s = store.ShardStore(tmp_path / "shards")
    s.put("b", pd.DataFrame({"x": [2]}))
    s.put("a", pd.DataFrame({"x": [1]}))
    assert s.has("a") and not s.has("c")
    assert s.collect(["a", "b"])["x"].tolist() == [1, 2]
    with pytest.raises(FileNotFoundError, match="1 shards missing"):
        s.collect(["a", "c"])


def test_manifest_hashes_inputs_and_outputs(tmp_path):
    run = tmp_path / "run"
    (run / "stats").mkdir(parents=True)
    (run / "stats" / "r.csv").write_text("a\n1\n")
    (run / "shards").mkdir()
    (run / "shards" / "x.parquet").write_text("ignored")
    src = tmp_path / "input.csv"
    src.write_text("hello")
    path = store.write_manifest(run, {"run_name": "t"}, [src])
    m = json.loads(path.read_text())
    assert m["params"] == {"run_name": "t"}
    assert m["outputs"] == {"stats/r.csv": store.sha256_file(run / "stats" / "r.csv")}
    assert list(m["inputs"].values()) == ["2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"]
    assert m["packages"]["torch"].startswith("2.13.0") and m["git_commit"]
