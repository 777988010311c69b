"""Command line: ``python -m refusal_audit {check,plan,run,generate,judge,audit,confusion,kv-humans,figures} ...`` (driven by the Makefile)."""
from __future__ import annotations

import argparse
import sys
import time

from . import config


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="refusal_audit", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="validate a params file and its inputs; no work is done")
    c.add_argument("params")
    pl = sub.add_parser("plan", help="the grid of a params file per study and model, and an estimate of its cost")
    pl.add_argument("params")
    pl.add_argument("--gpu", default="h100", help="the accelerator of the GPU-hours estimate (see plan.GPUS)")
    r = sub.add_parser("run", help="check, then execute the numbered notebooks into results/<run_name>/")
    r.add_argument("params")
    r.add_argument("--studies", default="", help="a subset of the params file's studies, e.g. kv,frames (default: all)")
    g = sub.add_parser("generate", help="replies to your own prompts (CSV: prompt[, id, system])")
    g.add_argument("--prompts", required=True)
    g.add_argument("--model", required=True, help="a model name from params, a Hugging Face id, or a local path")
    g.add_argument("--run", required=True)
    g.add_argument("--params", default="params/default.yaml")
    g.add_argument("--policies", default="full,sink_tail,snapkv")
    g.add_argument("--filler", type=int, default=0)
    j = sub.add_parser("judge", help="judge replies produced elsewhere (CSV: prompt, reply[, id]) or a generations.parquet")
    j.add_argument("--replies", required=True)
    j.add_argument("--run", required=True)
    j.add_argument("--params", default="params/default.yaml")
    a = sub.add_parser("audit", help="which evaluation prompts are in a training pool (CSV: prompt[, id] each)")
    a.add_argument("--pool", required=True)
    a.add_argument("--eval", required=True)
    a.add_argument("--run", required=True)
    a.add_argument("--threshold", type=float, default=0.7, help="near-duplicate: character 3-gram Jaccard >= this")
    a.add_argument("--semantic", action="store_true", help="also MiniLM cosine >= 0.85 (slower)")
    k = sub.add_parser("confusion", help="the confusion study on your own clusters (CSV: cluster_id, prompt[, id])")
    k.add_argument("--clusters", required=True)
    k.add_argument("--models", default="", help="comma-separated model names from params, Hugging Face ids or local paths")
    k.add_argument("--model", default="", help="one model (an alias of --models)")
    k.add_argument("--decisions", default="", help="CSV (id, decision ACCEPT/REJECT): skip generation, decisions only")
    k.add_argument("--pairs", default="",
                   help="CSV (id_a, id_b, label same/different): known labels of pairs of clusters")
    k.add_argument("--run", required=True)
    k.add_argument("--params", default="params/default.yaml")
    gi = sub.add_parser("guard-items", help="every prompt a guard must score for the policy study's verdict (CSV: id, prompt, benchmark)")
    gi.add_argument("--out", required=True)
    gi.add_argument("--scope", default="benchmark", help="benchmark (the clean benchmark split) or all (every row "
                    "of the pool: a guard never trained on the arms' pool)")
    gi.add_argument("--params", default="params/default.yaml")
    gv = sub.add_parser("guard-verdict", help="which policy a guard follows, from its answers (CSV: id, verdict or p_unsafe[, guard])")
    gv.add_argument("--verdicts", required=True)
    gv.add_argument("--run", required=True)
    gv.add_argument("--guard", default="", help="the guard's name (a file without a guard column), or the one guard to read")
    gv.add_argument("--params", default="params/default.yaml")
    fg = sub.add_parser("figures", help="publish a finished run's figures into the repository's figures/ (with their provenance)")
    fg.add_argument("--run", default="default")
    kh = sub.add_parser("kv-humans", help="filled kv annotation sheets against the run's judges (stats/kv/human_agreement.csv)")
    kh.add_argument("--sheets", default="", help="comma-separated filled sheets (default: those in the run's annotation folder)")
    kh.add_argument("--run", default="", help="the run's name (default: the params file's run_name)")
    kh.add_argument("--params", default="params/default.yaml")
    args = ap.parse_args(argv)

    from . import pipeline  # heavy imports only after the arguments parse

    start = time.time()
    try:
        if args.cmd == "check":  # for the machine the file is meant for: what this one lacks is a note
            from . import models

            p = config.load(args.params)
            pool = models.Pool(p.models, missing_ok=True, device=p.device)
            pipeline.preflight(p, pool)
            from . import families

            families.check_params(p, pool)  # each model's architecture and chat template, where it is local
            for note in dict.fromkeys(pool.notes):
                print(f"{args.params}: note: {note}")
            print(f"{args.params}: ok" + (" (on a machine with what the notes name)" if pool.notes else ""))
        elif args.cmd == "plan":
            from . import plan

            print(plan.report(config.load(args.params), args.gpu))
        elif args.cmd == "run":
            pipeline.run_notebooks(args.params, args.studies)
        elif args.cmd == "generate":
            out = pipeline.generate_user(args.prompts, args.model, args.run, args.params,
                                         args.policies.split(","), args.filler)
            print(f"wrote {out}")
        elif args.cmd == "audit":
            from .contamination import audit_files
            from .paths import run_dir

            out = audit_files(args.pool, args.eval, run_dir(args.run) / "contamination", threshold=args.threshold,
                              semantic=args.semantic)
            print("wrote " + ", ".join(str(p) for p in out.values()))
        elif args.cmd == "confusion":
            from .studies.confusion import run_user_clusters

            names = [m for m in (args.models or args.model).split(",") if m.strip()]
            folder = run_user_clusters(args.clusters, names, args.run, args.params, args.decisions or None,
                                       pairs_csv=args.pairs or None)
            print(f"wrote {folder}")
        elif args.cmd in ("guard-items", "guard-verdict"):
            from .studies import policy

            if args.cmd == "guard-items":
                print(f"wrote {policy.write_guard_items(args.params, args.out, args.scope or 'benchmark')}")
            else:
                for line in policy.guard_verdict_files(args.verdicts, args.run, args.params, args.guard or None):
                    print(line)
                print(f"wrote results/{args.run}/guard_verdict.csv, guard_scores.csv, guard_verdict.png")
        elif args.cmd == "kv-humans":
            from .studies.kv import humans

            for line in humans.run(args.sheets, args.run, args.params):
                print(line)
        elif args.cmd == "figures":
            from . import published
            from .paths import run_dir

            print(f"wrote {published.publish(run_dir(args.run))}")
        elif args.cmd == "judge":
            out = pipeline.judge_user(args.replies, args.run, args.params)
            print(f"wrote {out}")
    except (config.ParamsError, ValueError, FileNotFoundError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{args.cmd}: {time.time() - start:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
