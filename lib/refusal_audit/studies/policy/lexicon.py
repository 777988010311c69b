"""The harm lexicon (``data/harm_lexicon/words.csv``): the words a keyword guard flags, and the lexical level of
every guard item the verdict matches its baselines on (``following.strata``).

A guard that flags a prompt when it holds any of a list of harm words follows no policy, yet the study's
disputed items differ in wording by direction (the A-stricter moderation texts are full of harm words, the
B-stricter requests hold none), so a rule that reads every pair against its group's baselines whatever their
wording names such a guard a follower of A. The verdict therefore reads each item against the undisputed items of
its own group **and lexical level**: no lexicon word, one, two or more (``LEVELS``); a guard keyed on words flags a
level's safe and unsafe items alike and gets no position. The calibration's lexicon guards
(``simulation.lexicon_profiles``) draw their word lists from the same file.

A word matches as a whole word, case-insensitively, with its common inflections (``kill``: kills, killed,
killing, killer; ``forge``: forged, forging; ``stab``: stabbed, stabbing).
"""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from ...paths import DATA_DIR

LEXICON_FILE = "harm_lexicon/words.csv"
HELD_OUT_FILE = "harm_lexicon/held_out.csv"  # harm words outside the lexicon (the calibration's held-out guards)
PUBLISHED_FILE = "keyword_lists/profanity_wordlist.txt"  # a published filter's list (better_profanity 0.7.0, MIT)
LICENCE = "MIT"
LEVELS = 3  # lexical levels: 0, 1, 2 or more distinct lexicon words in the prompt
# a keyword guard of the shape a reviewer sent through `make guard-verdict`: 48 words of the lexicon, from every
# category (the reviewer's own list is not in the repository; this one keeps the words that list named)
GUARD_48 = ("kill", "murder", "attack", "assault", "shoot", "stab", "torture", "kidnap", "violence", "threat",
            "terrorist", "bomb", "explosive", "gun", "weapon", "knife", "poison", "drug", "cocaine", "heroin", "meth",
            "overdose", "hack", "malware", "virus", "exploit", "phishing", "fraud", "scam", "fake", "forge",
            "counterfeit", "false", "pretend", "impersonate", "steal", "blackmail", "illegal", "crime", "sex",
            "porn", "nude", "rape", "suicide", "self-harm", "hate", "racist", "stalk")
RANDOM_WORDS = 40  # words per random keyword guard (the calibration's and the must-show's)


def _pattern(word: str) -> str:
    w = re.escape(word)
    alts = [w + r"(?:s|es|d|ed|ing|er|ers|ly)?"]
    if word.endswith("e"):
        alts.append(re.escape(word[:-1]) + r"(?:ing|ed|er|ers)")
    if word[-1] not in "aeiouy":
        alts.append(w + re.escape(word[-1]) + r"(?:ed|ing|er|ers)")
    return r"\b(?:" + "|".join(alts) + r")\b"


@lru_cache(maxsize=8)
def words(data_dir: str | None = None, name: str = LEXICON_FILE) -> tuple[str, ...]:
    """The lexicon's words, in file order (``data/harm_lexicon/words.csv``: ``word, category``; with
    ``name`` = ``HELD_OUT_FILE``, the held-out words)."""
    path = Path(data_dir or DATA_DIR) / name
    if not path.is_file():
        raise FileNotFoundError(f"{path}: the harm lexicon is missing (data/harm_lexicon/SOURCE.md)")
    table = pd.read_csv(path, dtype=str, keep_default_na=False)
    if list(table.columns) != ["word", "category"] or (table["word"].str.strip() == "").any():
        raise ValueError(f"{path}: expected columns word, category and no empty word; got {list(table.columns)}")
    if table["word"].duplicated().any():
        raise ValueError(f"{path}: word {table['word'][table['word'].duplicated()].iloc[0]!r} listed twice")
    return tuple(table["word"].str.strip().str.lower())


def held_out() -> tuple[str, ...]:
    """Harm words that are not in the lexicon (``data/harm_lexicon/held_out.csv``): the calibration's keyword
    guards whose words the verdict's lexical levels do not count."""
    return words(None, HELD_OUT_FILE)


@lru_cache(maxsize=2)
def published(data_dir: str | None = None) -> tuple[str, ...]:
    """A published keyword filter's words and phrases (``data/keyword_lists/profanity_wordlist.txt``)."""
    path = Path(data_dir or DATA_DIR) / PUBLISHED_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: the published keyword list is missing (data/keyword_lists/SOURCE.md)")
    return tuple(w.strip().lower() for w in path.read_text(encoding="utf-8").splitlines() if w.strip())


def phrase_flags(texts, phrases) -> np.ndarray:
    """A keyword guard of a published list: a text is unsafe when it holds any of ``phrases`` as a whole word or
    phrase, case-insensitively, as written (no inflections)."""
    single = {p for p in phrases if re.fullmatch(r"[\w']+", p)}
    multi = [re.compile(r"\b" + re.escape(p) + r"\b") for p in phrases if p not in single]
    out = []
    for t in texts:
        low = str(t).lower()
        out.append(bool(single & set(re.findall(r"[\w']+", low))) or any(m.search(low) for m in multi))
    return np.array(out, dtype=bool)


def hits(texts, vocabulary=None) -> np.ndarray:
    """Which word of ``vocabulary`` (default: the lexicon) each text holds (texts x words, bool)."""
    vocabulary = words() if vocabulary is None else tuple(vocabulary)
    compiled = [re.compile(_pattern(w), re.IGNORECASE) for w in vocabulary]
    texts = [str(t) for t in texts]
    return np.array([[bool(p.search(t)) for p in compiled] for t in texts], dtype=bool).reshape(len(texts),
                                                                                                len(compiled))


_LEVEL_OF: dict[str, int] = {}  # text -> level (every guard's verdict reads the same items)


def levels(texts) -> np.ndarray:
    """The lexical level of each text: how many distinct lexicon words it holds, capped at ``LEVELS`` - 1."""
    texts = [str(t) for t in texts]
    new = sorted({t for t in texts if t not in _LEVEL_OF})
    if new:
        _LEVEL_OF.update(zip(new, np.minimum(hits(new).sum(axis=1), LEVELS - 1).astype(int).tolist()))
    return np.array([_LEVEL_OF[t] for t in texts], dtype=int)


def keyword_flags(texts, vocabulary) -> np.ndarray:
    """A keyword guard's flags: a text is unsafe when it holds any word of ``vocabulary``."""
    return hits(texts, vocabulary).any(axis=1)


def random_lists(n: int, size: int, seed: int) -> list[tuple[str, ...]]:
    """``n`` keyword lists of ``size`` words each, drawn without replacement from the lexicon under ``seed``."""
    vocab = words()
    rng = np.random.default_rng(seed)
    return [tuple(vocab[i] for i in sorted(rng.choice(len(vocab), size, replace=False))) for _ in range(n)]


def rates(rows: pd.DataFrame, group: pd.Series) -> pd.DataFrame:
    """The harm-word rate of ``rows`` (``text`` and the columns of ``group``'s index): per group of rows,
    items, the share holding a lexicon word and the mean number of distinct words."""
    h = hits(rows["text"]).sum(axis=1)
    t = pd.DataFrame({"group": group.to_numpy(), "words": h, "any": h > 0})
    return t.groupby("group").agg(items=("words", "size"), with_harm_word=("any", "mean"),
                                  words_per_item=("words", "mean")).reset_index()
