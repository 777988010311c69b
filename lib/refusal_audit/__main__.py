"""Command line: ``python -m refusal_audit {check,run,generate,judge} ...`` (driven by the Makefile)."""
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
    r = sub.add_parser("run", help="check, then execute the numbered notebooks into results/<run_name>/")
    r.add_argument("params")
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
    args = ap.parse_args(argv)

    from . import pipeline  # heavy imports only after the arguments parse

    start = time.time()
    try:
        if args.cmd == "check":
            pipeline.preflight(config.load(args.params))
            print(f"{args.params}: ok")
        elif args.cmd == "run":
            pipeline.run_notebooks(args.params)
        elif args.cmd == "generate":
            out = pipeline.generate_user(args.prompts, args.model, args.run, args.params,
                                         args.policies.split(","), args.filler)
            print(f"wrote {out}")
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
