"""Progress bars for the terminal that runs a stage, not for the notebook a person reads.

``make all`` executes the notebooks through papermill; it sets ``REFUSAL_AUDIT_PROGRESS`` to its own
standard error (``/proc/<pid>/fd/2``), and bars go there, with rows/s. Anywhere else (a test, an
interactive session) they go to this process's standard error.
"""
from __future__ import annotations

import os
import sys
from contextlib import contextmanager

from tqdm import tqdm

ENV = "REFUSAL_AUDIT_PROGRESS"


@contextmanager
def bar(total: int, desc: str, unit: str = "row", initial: int = 0):
    """A tqdm bar over ``total`` units, written to the terminal of the run (see above)."""
    target = os.environ.get(ENV)
    stream = open(target, "a", buffering=1) if target else sys.stderr  # append: never truncate a log file
    try:
        with tqdm(total=total, initial=initial, desc=desc, unit=unit, file=stream, dynamic_ncols=True,
                  mininterval=1.0) as b:
            yield b
    finally:
        if target:
            stream.close()
