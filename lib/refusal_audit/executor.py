"""Where generation runs: in this process (``local``, the default) or as Ray tasks (``ray``).

Every study calls ``generate`` instead of loading a model and calling ``generation.run`` itself.
``local`` loads the model once per run through the run's pool. ``ray`` cuts the prompts into groups
(``prefix_groups``: in token order, so that prompts sharing a prefix stay on one worker and the
engine reuses that prefix), runs one Ray task per group (one GPU each where the cluster has GPUs,
one CPU otherwise), each writing its rows into the run's shard store, and returns the rows in the
order ``local`` would. A worker keeps its last model loaded between tasks. Shards are written
atomically as batches finish, so a task whose worker dies is rerun (``max_retries``) and skips the
shards already written: nothing finished is lost, and a rerun of the stage does the same.

On a cluster, every node needs this package installed and the results folder on a shared file system
(the shard store is a folder). Judging stays in the driver process (see ``generate``'s callers).
"""
from __future__ import annotations

import math
import os
from collections.abc import Callable

import pandas as pd

from . import generation, models
from .config import ExecutorParams, ModelSpec
from .store import ShardStore

KILL_ENV = "REFUSAL_AUDIT_KILL_WORKER"  # tests: a file whose presence makes the next worker to write a shard die


def generate(p, pool: models.Pool, model_name: str, prompts: pd.DataFrame, policies_of: Callable,
             shards: ShardStore, decodings: list[generation.Decoding],
             answer_cue: tuple[list[int], list[str]] | None = None, carry: tuple[str, ...] = ()) -> pd.DataFrame:
    """``generation.run`` of ``model_name`` on ``prompts`` under ``p.executor`` (the core columns and the
    study's ``carry`` columns); the same table either way."""
    ex = p.executor
    if ex.kind == "local":
        model, tok = pool.load(model_name)
        return generation.run(model, tok, model_name, prompts, policies_of, shards, decodings, answer_cue,
                              batch_rows=p.generation.batch_rows, carry=carry)
    if not len(prompts):
        return pd.DataFrame(columns=generation.columns(carry))
    ray = connect(ex)
    gpus = ray.cluster_resources().get("GPU", 0)
    groups = prefix_groups(prompts, ex.num_workers or int(gpus or ray.cluster_resources().get("CPU", 1)))
    task = ray.remote(_run_group).options(num_gpus=1 if gpus else 0, num_cpus=1, max_retries=ex.max_retries)
    where = (pool.spec(model_name), getattr(pool, "device", "auto"))
    refs = [task.remote(where, model_name, prompts.iloc[g], policies_of, str(shards.folder), decodings, answer_cue,
                        p.generation.batch_rows, carry) for g in groups]
    # back to the local order: each prompt's rows (policy x decoding) stay together, prompts in table order
    per_prompt = [len(policies_of(row)) * (1 if answer_cue else len(decodings)) for _, row in prompts.iterrows()]
    position = [i for g in groups for i in g for _ in range(per_prompt[i])]
    out = pd.concat(ray.get(refs), ignore_index=True)
    return out.iloc[sorted(range(len(out)), key=position.__getitem__)].reset_index(drop=True)


def connect(ex: ExecutorParams):
    """The ``ray`` module, connected to ``ex.address``, else RAY_ADDRESS, else a new local instance
    (a connection already made in this process is reused)."""
    import ray  # lazy: ray, only for executor kind ray

    if not ray.is_initialized():
        start_ray(address=ex.address or os.environ.get("RAY_ADDRESS") or None, include_dashboard=False)
    return ray


STARTUP_TRIES = 4  # Ray waits 30 s (fixed in ray._private.node) for its raylet; a loaded 2-core machine can miss that


def start_ray(tries: int = STARTUP_TRIES, **init_args):
    """``ray.init(**init_args)``, tried again (at most ``tries`` times in all) when the node times out during
    startup: Ray's own wait for the raylet to register is a fixed 30 s, which a busy two-core machine can
    exceed while nothing is wrong. Any other error, and the last timeout, is raised as it is."""
    import ray  # lazy: ray, only for executor kind ray

    for attempt in range(1, tries + 1):
        try:
            return ray.init(**init_args)
        except Exception as err:  # Ray raises a bare Exception for this
            if "timed out during startup" not in str(err) or attempt == tries:
                raise
            ray.shutdown()
            print(f"ray: the node timed out during startup (try {attempt} of {tries}); starting it again", flush=True)


def prefix_groups(prompts: pd.DataFrame, n: int) -> list[list[int]]:
    """Positions of ``prompts`` in about ``n`` groups of at most ``ceil(len / n)`` prompts, in token order.
    A group ends where the next prompt shares no reusable prefix (``generation.MIN_SHARED_PREFIX``
    tokens, or all of the shorter prompt) if the next family fits no more, so prompts sharing a prefix
    stay on one worker; a family larger than a group is cut into consecutive runs."""
    ids = [tuple(map(int, x)) for x in prompts["input_ids"]]
    order = sorted(range(len(ids)), key=ids.__getitem__)
    families: list[list[int]] = []
    for prev, i in zip([None] + order, order):
        if prev is None or generation.shared_prefix(ids[prev], ids[i]) < min(
                generation.MIN_SHARED_PREFIX, len(ids[prev]), len(ids[i])):
            families.append([])
        families[-1].append(i)
    size = max(1, math.ceil(len(ids) / max(n, 1)))
    groups: list[list[int]] = [[]]
    for family in families:
        for start in range(0, len(family), size):
            piece = family[start:start + size]
            if len(groups[-1]) + len(piece) > size:
                groups.append([])
            groups[-1].extend(piece)
    return [g for g in groups if g]


# --- in the Ray worker ------------------------------------------------------------------------------------
_LOADED: dict[str, tuple] = {}  # this worker's model: one at a time (a GPU holds one), kept between tasks


def _model(where: tuple[ModelSpec, str], model_name: str):
    key = repr(where)
    if key not in _LOADED:
        _LOADED.clear()
        _LOADED[key] = models.Pool({model_name: where[0]}, device=where[1]).load(model_name)
    return _LOADED[key]


class _WorkerStore(ShardStore):
    """The run's shard store, with the tests' kill switch (``KILL_ENV``) after a shard is written."""

    def put(self, key: str, df: pd.DataFrame) -> None:
        super().put(key, df)
        armed = os.environ.get(KILL_ENV)
        if armed:
            try:
                os.unlink(armed)  # only one worker gets to remove it
            except FileNotFoundError:
                return
            with open(f"{armed}.killed", "w") as f:
                f.write(f"{key} {self.path(key).stat().st_mtime_ns}")
            os._exit(1)


def _run_group(where: tuple[ModelSpec, str], model_name: str, prompts: pd.DataFrame, policies_of: Callable,
               folder: str, decodings: list, answer_cue, batch_rows, carry) -> pd.DataFrame:
    """One Ray task: ``generation.run`` on one group, with the model (spec, device) ``where``."""
    model, tok = _model(where, model_name)
    return generation.run(model, tok, model_name, prompts, policies_of, _WorkerStore(folder), decodings, answer_cue,
                          batch_rows=batch_rows, carry=carry)
