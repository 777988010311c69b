"""Command line: ``python -m refusal_audit {check,plan,run,generate,judge,audit,figures} ...`` and each study's
own commands (``Study.commands``: ``confusion``, ``guard-items``, ``guard-verdict``, ``kv-humans``), driven by the
Makefile."""
from __future__ import annotations

import argparse
import sys
import time

from . import config, families, judges, models, own, papers, pipeline, plan, published, studies
from .contamination import audit_files
from .errors import ParamsError
from .paths import run_dir


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
    o = sub.add_parser("own", help="a params file for your own model (a .gguf file, a folder or a hub id), from the "
                                   "default params without its controls (docs/own_model.md)")
    o.add_argument("--model", required=True)
    o.add_argument("--out", default="params/own.yaml")
    fg = sub.add_parser("figures", help="publish a finished run's figures into the repository's figures/ (with their "
                                        "provenance)")
    fg.add_argument("--run", default="default")
    commands, owners = {}, {}  # each study's own commands (Study.commands): a user's route into that study
    for name in studies.REGISTRY:
        for cmd, command in studies.get(name).commands.items():
            sc = sub.add_parser(cmd, help=f"{name}: {command.help}")
            for flags, kwargs in command.arguments:
                sc.add_argument(*flags, **kwargs)
            commands[cmd], owners[cmd] = command, name
    args = ap.parse_args(argv)

    start = time.time()
    try:
        if args.cmd == "check":  # for the machine the file is meant for: what this one lacks is a note
            p = config.load(args.params)
            bad = papers.check()  # the papers' numbers the report prints beside the run's
            if bad:
                raise ParamsError("published numbers: " + "; ".join(bad))
            families.check_sources(p)  # before any model is loaded or a GGUF file converted
            pool = models.Pool(p.models, missing_ok=True, device=p.device)
            pipeline.preflight(p, pool)
            families.check_params(p, pool)  # each model's architecture and chat template, where it is local
            size = lambda m: f"{plan.size(p.models[m]).params_b:g}B"  # noqa: E731
            for line in judges.registry.describe(p, size):
                print(f"{args.params}: {line}")   # every judge the run uses: model, size, validation status
            for name in p.studies:   # a study's other LLM roles (a paraphraser, a scorer): model, size, status
                for role, m, status in studies.get(name).model_roles(p):
                    print(f"{args.params}: {name} {role}: {m} ({p.models[m].source}, {size(m)}); validation: {status}")
            for note in dict.fromkeys(pool.notes):
                print(f"{args.params}: note: {note}")
            print(f"{args.params}: ok" + (" (on a machine with what the notes name)" if pool.notes else ""))
        elif args.cmd == "plan":
            print(plan.report(config.load(args.params), args.gpu))
        elif args.cmd == "run":
            pipeline.run_notebooks(args.params, args.studies)
        elif args.cmd == "generate":
            out = pipeline.generate_user(args.prompts, args.model, args.run, args.params,
                                         args.policies.split(","), args.filler)
            print(f"wrote {out}")
        elif args.cmd == "audit":
            out = audit_files(args.pool, args.eval, run_dir(args.run) / "contamination", threshold=args.threshold,
                              semantic=args.semantic)
            print("wrote " + ", ".join(str(p) for p in out.values()))
        elif args.cmd in commands:
            for line in commands[args.cmd].run(args):
                print(line)
            given = vars(args)
            if given.get("run") and given.get("params"):  # what the user brought joins the run's verdict table
                for line in pipeline.add_user_rows(owners[args.cmd], given["run"], given["params"]):
                    print(line)
        elif args.cmd == "own":
            print(f"wrote {own.write(args.model, args.out)}")
        elif args.cmd == "figures":
            print(f"wrote {published.publish(run_dir(args.run))}")
        elif args.cmd == "judge":
            out = pipeline.judge_user(args.replies, args.run, args.params)
            print(f"wrote {out}")
    except (ParamsError, ValueError, FileNotFoundError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{args.cmd}: {time.time() - start:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
