"""The harm lexicon (``data/harm_lexicon/words.csv``): the words a keyword guard flags, and the lexical level of
every guard item the verdict matches its baselines on (``following.strata``).

A guard that flags a prompt when it holds any of a list of harm words follows no policy, yet the study's
disputed items differ in wording by direction (the A-stricter moderation texts are full of harm words, the
B-stricter requests hold none), so a rule that reads every pair against its group's baselines whatever their
wording names such a guard a follower of A. The verdict therefore reads each item against the undisputed items of
its own group **and lexical level**: no lexicon word, one, two or more (``LEVELS``); a guard keyed on words flags a
level's safe and unsafe items alike and gets no position. The calibration's lexicon guards
(``simulation.lexicon_profiles``) draw their word lists from the same file. The lexicon itself (its files, the
whole-word matching with inflections, random lists) is the shared ``refusal_audit.lexicon``, which the confusion
study's trigger-word guards read too; this module adds what the policy verdict needs and passes the rest on.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ...lexicon import (
    HELD_OUT_FILE,
    LEXICON_FILE,
    LICENCE,
    PUBLISHED_FILE,
    held_out,
    hits,
    keyword_flags,
    phrase_flags,
    published,
    random_lists,
    words,
)

LEVELS = 3  # lexical levels: 0, 1, 2 or more distinct lexicon words in the prompt
# a keyword guard of the shape a reviewer sent through `make guard-verdict`: 48 words of the lexicon, from every
# category (the reviewer's own list is not in the repository; this one keeps the words that list named)
GUARD_48 = ("kill", "murder", "attack", "assault", "shoot", "stab", "torture", "kidnap", "violence", "threat",
            "terrorist", "bomb", "explosive", "gun", "weapon", "knife", "poison", "drug", "cocaine", "heroin", "meth",
            "overdose", "hack", "malware", "virus", "exploit", "phishing", "fraud", "scam", "fake", "forge",
            "counterfeit", "false", "pretend", "impersonate", "steal", "blackmail", "illegal", "crime", "sex",
            "porn", "nude", "rape", "suicide", "self-harm", "hate", "racist", "stalk")
RANDOM_WORDS = 40  # words per random keyword guard (the calibration's and the must-show's)
__all__ = ["GUARD_48", "HELD_OUT_FILE", "LEVELS", "LEXICON_FILE", "LICENCE", "PUBLISHED_FILE", "RANDOM_WORDS", "held_out",
           "hits", "keyword_flags", "levels", "phrase_flags", "published", "random_lists", "rates", "words"]


_LEVEL_OF: dict[str, int] = {}  # text -> level (every guard's verdict reads the same items)


def levels(texts) -> np.ndarray:
    """The lexical level of each text: how many distinct lexicon words it holds, capped at ``LEVELS`` - 1."""
    texts = [str(t) for t in texts]
    new = sorted({t for t in texts if t not in _LEVEL_OF})
    if new:
        _LEVEL_OF.update(zip(new, np.minimum(hits(new).sum(axis=1), LEVELS - 1).astype(int).tolist()))
    return np.array([_LEVEL_OF[t] for t in texts], dtype=int)


def rates(rows: pd.DataFrame, group: pd.Series) -> pd.DataFrame:
    """The harm-word rate of ``rows`` (``text`` and the columns of ``group``'s index): per group of rows,
    items, the share holding a lexicon word and the mean number of distinct words."""
    h = hits(rows["text"]).sum(axis=1)
    t = pd.DataFrame({"group": group.to_numpy(), "words": h, "any": h > 0})
    return t.groupby("group").agg(items=("words", "size"), with_harm_word=("any", "mean"),
                                  words_per_item=("words", "mean")).reset_index()
