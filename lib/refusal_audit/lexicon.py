"""The harm lexicon (``data/harm_lexicon/``): words a keyword guard flags, matched as whole words with their common
inflections, and random word lists drawn from it. A guard that rejects a prompt holding any word of such a list
follows no intent and no policy, yet where its words survive paraphrase it refuses whole clusters of a meaning;
the studies use the lexicon to keep such a guard from being read as the effect they measure.

A word matches as a whole word, case-insensitively, with its common inflections (``kill``: kills, killed,
killing, killer; ``forge``: forged, forging; ``stab``: stabbed, stabbing).
"""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from .paths import DATA_DIR

LEXICON_FILE = "harm_lexicon/words.csv"
HELD_OUT_FILE = "harm_lexicon/held_out.csv"  # harm words outside the lexicon (calibration guards of other words)
PUBLISHED_FILE = "keyword_lists/profanity_wordlist.txt"  # a published filter's list (better_profanity 0.7.0, MIT)
LICENCE = "MIT"


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
    """Harm words that are not in the lexicon (``data/harm_lexicon/held_out.csv``): keyword guards built from words
    the lexicon does not count."""
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


def keyword_flags(texts, vocabulary) -> np.ndarray:
    """A keyword guard's flags: a text is flagged when it holds any word of ``vocabulary``."""
    return hits(texts, vocabulary).any(axis=1)


def random_lists(n: int, size: int, seed: int, vocabulary=None) -> list[tuple[str, ...]]:
    """``n`` keyword lists of ``size`` words each, drawn without replacement from ``vocabulary`` (default: the
    lexicon) under ``seed``."""
    vocab = words() if vocabulary is None else tuple(vocabulary)
    rng = np.random.default_rng(seed)
    return [tuple(vocab[i] for i in sorted(rng.choice(len(vocab), size, replace=False))) for _ in range(n)]
