"""The frames study's LLM roles on its items (stage 01): the paraphraser and the 1-5 equivalence score.

* **Paraphraser** (``frames.paraphraser``): the shared paraphraser (``refusal_audit.paraphraser``: its
  instruction, decoding and cleaning) rewrites each drawn item's public source request twice, under seeds
  ``seed`` and ``seed + 1`` at the params' temperature: sample 1 is request A, sample 2 request B. A jailbreak
  item keeps its template: its body is the file's body with the file's request replaced by the new one (the
  file's request appears verbatim in its body; an item where it does not is an error). An item whose two
  paraphrases cannot be used (a reply with no text, a repeat of the source, A equal to B, a wrapper marker) is
  dropped from the draw with its reason; every drawn item and its outcome is in the study folder's
  ``paraphrases.parquet``.
* **Equivalence score** (``frames.equivalence_scorer``): the LLM question ``equivalence`` (``judges/llm.py``: the
  codebook of DEFINITIONS.md, "Equivalence codebook") put to a params-named model about each item's two
  requests, the frame wrapper and any jailbreak template masked (only the requests are shown): the most probable
  score 1-5 (``equivalence_llm``, NaN when the model puts less than ``min_answer_mass`` on the five answers) and
  its share of the five answers' probability (``equivalence_llm_share``).

Both are cached in the study folder (``paraphrases.parquet``, ``equivalence_llm.parquet``), keyed by the texts
and the settings, so that later stages reading the items again do not load the model again; the paraphraser's
replies are also resumable shards (``shards/paraphrases``).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ... import models as model_lib
from ... import store
from ...judges.llm import LlmJudge
from ...paraphraser import rewrite
from ...paths import study_dir
from . import wrapper as W
from .params import NAME

PARAPHRASE_COLUMNS = ["item_id", "source_text", "model", "temperature", "max_new_tokens", "seed", "request_a",
                      "request_b", "note"]
SCORE_COLUMNS = ["item_id", "request_a", "request_b", "model", "equivalence_llm", "equivalence_llm_share"]


def _norm(text: str) -> str:
    return " ".join(str(text).lower().split())


def usable(source: str, a: str, b: str, notes: tuple[str, str]) -> str:
    """Why the pair (a, b) cannot be an item's two paraphrases of ``source`` ("" when it can)."""
    for x, text, note in (("A", a, notes[0]), ("B", b, notes[1])):
        if note:
            return f"paraphrase {x}: {note}"
        if _norm(text) == _norm(source):
            return f"paraphrase {x}: identical to the source text"
        for marker in (W.SLOT, W.BODY):
            if marker in text:
                return f"paraphrase {x}: contains the wrapper marker {marker!r}"
    if _norm(a) == _norm(b):
        return "paraphrases A and B are identical"
    return ""


def _cached(path: Path, key: pd.DataFrame, on: list[str]) -> pd.DataFrame | None:
    """The rows of a cache file matching every row of ``key`` on the columns ``on``, or None when one is missing."""
    if not path.is_file():
        return None
    old = pd.read_parquet(path)
    if not set(on) <= set(old):
        return None
    hit = key[on].merge(old.drop_duplicates(on), on=on, how="left", indicator=True)
    return hit.drop(columns="_merge") if (hit["_merge"] == "both").all() else None


def _load(p, name: str):
    return model_lib.Pool({name: p.models[name]}, device=p.device).load(name)


def paraphrase_items(p, items: pd.DataFrame, load=None) -> pd.DataFrame:
    """``items`` (``text``: the public source request) with requests and bodies A and B from
    ``frames.paraphraser`` and a ``paraphraser_note``; items
    whose paraphrases cannot be used are dropped (listed with their reason in ``paraphrases.parquet``).
    ``load(name)``: (model, tokenizer) of a model of the run (default: loaded here)."""
    fr = p.studies[NAME]
    pp = fr.paraphraser
    folder = study_dir(p.run_name, NAME)
    settings = {"model": pp.model, "temperature": float(pp.temperature), "max_new_tokens": int(pp.max_new_tokens),
                "seed": int(p.seed)}
    key = pd.DataFrame({"item_id": items["item_id"].values, "source_text": items["text"].values}).assign(**settings)
    got = _cached(folder / "paraphrases.parquet", key, ["item_id", "source_text", *settings])
    if got is None:
        model, tok = (load or (lambda n: _load(p, n)))(pp.model)
        texts = items[["item_id", "text"]].reset_index(drop=True)
        out = rewrite(model, tok, pp.model, texts, 2, pp.temperature, pp.max_new_tokens, p.seed,
                      store.ShardStore(folder / "shards" / "paraphrases"), NAME, p.generation.batch_rows)
        wide = out.pivot(index="item_id", columns="sample", values=["paraphrase", "note"])
        rows = []
        for item, source in zip(items["item_id"], items["text"]):
            a, b = wide.loc[item, ("paraphrase", 1)], wide.loc[item, ("paraphrase", 2)]
            note = usable(source, a, b, (wide.loc[item, ("note", 1)], wide.loc[item, ("note", 2)]))
            rows.append({"item_id": item, "source_text": source, **settings, "request_a": a, "request_b": b,
                         "note": note})
        got = pd.DataFrame(rows, columns=PARAPHRASE_COLUMNS)
        store.write_atomic(got, folder / "paraphrases.parquet")
    got = got.set_index("item_id")
    out = items.copy()
    for x in ("a", "b"):
        new = out["item_id"].map(got[f"request_{x}"])
        bodies = []
        for i, r in out.iterrows():
            body, request = r[f"paraphrase_{x}"], r[f"request_{x}"]
            if body != request and request not in body:
                raise ValueError(f"frames paraphraser: item {r['item_id']!r}: its request {x.upper()} is not part of "
                                 "its body in the items file, so its template cannot be kept around a new request")
            bodies.append(new[i] if body == request else body.replace(request, new[i], 1))
        out[f"paraphrase_{x}"] = bodies
        out[f"request_{x}"] = new
    out["paraphraser_note"] = out["item_id"].map(got["note"]).fillna("")
    kept = out[out["paraphraser_note"] == ""].reset_index(drop=True)
    if not len(kept):
        raise ValueError(f"{p.source_file}: frames.paraphraser: {pp.model} gave no usable pair of paraphrases for any "
                         f"of the {len(out)} drawn items (study folder's paraphrases.parquet: each item's reason)")
    return kept


def equivalence_scores(p, items: pd.DataFrame, load=None) -> pd.DataFrame:
    """``items`` with ``equivalence_llm`` (1-5, NaN when unparseable) and ``equivalence_llm_share`` from
    ``frames.equivalence_scorer`` (the wrapper and any template masked: the two requests only)."""
    fr = p.studies[NAME]
    name = fr.equivalence_scorer
    path = study_dir(p.run_name, NAME) / "equivalence_llm.parquet"
    key = items[["item_id", "request_a", "request_b"]].assign(model=name)
    got = _cached(path, key, ["item_id", "request_a", "request_b", "model"])
    if got is None:
        model, tok = (load or (lambda n: _load(p, n)))(name)
        judge = LlmJudge(model, tok, question="equivalence", name="llm_equivalence")
        verdicts = [judge.judge_one(a, b) for a, b in zip(items["request_a"], items["request_b"])]
        got = key.assign(equivalence_llm=[float(v) if v != "unparseable" else np.nan for v, _ in verdicts],
                         equivalence_llm_share=[s for _, s in verdicts])[SCORE_COLUMNS]
        store.write_atomic(got, path)
    got = got.set_index("item_id")
    return items.assign(equivalence_llm=items["item_id"].map(got["equivalence_llm"]).astype(float),
                        equivalence_llm_share=items["item_id"].map(got["equivalence_llm_share"]).astype(float))
