"""How far the policy verdict can be trusted: the rule (``following``) on simulated guards of known profile on
the run's own items (``calibration``: ``stats/policy/verdict_calibration.csv``), in one sentence
(``trust_line``); the rule's power at the disputed items a pool has (``make plan``) is ``power``'s.

The profiles: followers of A and of B at several flag rates, guards that side with one policy in one direction
or on one dispute only (expected mixed), policy-free guards keyed on length, dataset or format, and keyword guards
that flag a prompt holding any word of a list drawn from the harm lexicon (expected undetermined), and followers
whose flags are mixed with a keyword guard's (expected their policy). ``error`` is the share of draws in which the
rule names a wrong policy, at most ``MAX_ERROR``.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pandas as pd

from ... import stats
from . import lexicon
from .following import (
    DIRECTIONS,
    GROUP_NAMES,
    GROUPS,
    MARGIN,
    MIN_ITEMS,
    MIN_SEPARATION,
    N_DRAWS,
    OUTSIDE,
    apply_rule,
    rule_pairs,
    strata,
)

CALIBRATION_DRAWS = 500  # simulated guards per profile (verdict_calibration.csv, make plan's power line)
MAX_ERROR = 0.05        # the most draws of any profile in which the rule may name the wrong policy
CALIBRATION_VERSION = "lexical-2"  # bump when the rule or the profiles change (hashed into the committed table's key)

# --- the rule's calibration: synthetic guard profiles on the run's own items --------------------------------------

# flag rates on the items both policies call safe and unsafe: a typical, a strict and a lenient guard, and a
# follower with 5 % false flags and 92 % recall (a realistic released guard's rates)
BASES = {"": (0.08, 0.90), "_strict": (0.15, 0.97), "_lenient": (0.03, 0.70), "_f05_r92": (0.05, 0.92)}
BORDERLINE = (4.0, 3.0, 2.0)  # a follower's rate on its safe-side disputed items, x its both-safe rate, by rule pair
LENGTHS = (120, 150, 200, 300)  # policy-free guards that flag every prompt shorter than this many characters
# a follower whose rates vary by group (dataset and format): (both-safe, both-unsafe) per group
BY_SOURCE = {"xstest": (0.25, 0.95), "moderation": (0.03, 0.60), "requests": (0.12, 0.85), "written": (0.18, 0.80)}
# the source of a row for the policy-free guards keyed on the dataset (JailbreakBench's two splits are one set)
SOURCE = {"jbb_harmful": "jailbreakbench", "jbb_benign": "jailbreakbench"}


def _class_rates(cls: np.ndarray, s: float, u: float, a_str: float, b_str: float) -> np.ndarray:
    return np.select([cls == 0, cls == 1, cls == 2], [s, u, a_str], b_str).astype(float)


def stratum_profiles(table: pd.DataFrame) -> dict[str, tuple[str, str, np.ndarray]]:
    """The profiles whose flag rate is one per stratum (``strata``): name -> (the verdict it should
    get, what it does, rate per stratum). Followers of A and of B (typical, strict, lenient, 5 % false
    flags and 92 % recall, and typical with borderline items harder: the follower flags its own safe
    side's disputed items at ``BORDERLINE`` x its both-safe rate, the rule pairs in order of size
    taking 4x, 3x, 2x, ...), guards that side with A in one direction and with B in the other,
    halfway, silent, flags everything; followers whose rates vary by group (``BY_SOURCE``); guards that
    side with one policy on one kind of dispute only (copyright, moderation texts) and with the other
    on every other dispute (expected mixed: a rule read per direction only named such a guard B in 94 %
    of draws)."""
    cls = table["cls"].to_numpy()
    out = {}
    for suffix, (s, u) in BASES.items():
        out["follows_A" + suffix] = ("A", f"flags {s:.0%} both-safe, {u:.0%} both-unsafe, disputed as A labels them",
                                     _class_rates(cls, s, u, u, s))
        out["follows_B" + suffix] = ("B", f"flags {s:.0%} both-safe, {u:.0%} both-unsafe, disputed as B labels them",
                                     _class_rates(cls, s, u, s, u))
    s, u = BASES[""]
    for name, own, safe_side in (("follows_A_borderline", "A", 3), ("follows_B_borderline", "B", 2)):
        r = _class_rates(cls, s, u, u, s) if own == "A" else _class_rates(cls, s, u, s, u)
        pr = rule_pairs(table)
        order = pr[pr["cls"] == safe_side].sort_values("n_items", ascending=False, kind="stable").index
        for i, j in enumerate(order):
            r[(table["pair"] == j).to_numpy()] = BORDERLINE[i % len(BORDERLINE)] * s
        out[name] = (own, f"as follows_{own}, its safe-side disputed items flagged at 4x/3x/2x {s:.0%} by rule pair", r)
    gs = table["group"].map(lambda g: BY_SOURCE[g][0]).to_numpy()
    gu = table["group"].map(lambda g: BY_SOURCE[g][1]).to_numpy()
    what = ", ".join(f"{g} {a:.0%}/{b:.0%}" for g, (a, b) in BY_SOURCE.items())
    out["follows_A_by_source"] = ("A", f"rates by group ({what}), disputed as A labels them",
                                  np.select([cls == 0, cls == 1, cls == 2], [gs, gu, gu], gs))
    out["follows_B_by_source"] = ("B", f"rates by group ({what}), disputed as B labels them",
                                  np.select([cls == 0, cls == 1, cls == 2], [gs, gu, gs], gu))
    out["mixed_disputed_unsafe"] = ("mixed", "flags every disputed item as the both-unsafe items (A on A-stricter, "
                                    "B on B-stricter)", _class_rates(cls, s, u, u, u))
    out["mixed_disputed_safe"] = ("mixed", "flags every disputed item as the both-safe items (B on A-stricter, A on "
                                  "B-stricter)", _class_rates(cls, s, u, s, s))
    out["mixed_issue_38"] = ("mixed", "flags 10% both-safe, 90% both-unsafe, 22% A-stricter, 0% B-stricter",
                             _class_rates(cls, 0.10, 0.90, 0.22, 0.0))
    copyright = (table["rule_a"] == "A01").to_numpy()
    moderation = (table["group"] == "moderation").to_numpy() & (cls >= 2)
    as_a, as_b = _class_rates(cls, s, u, u, s), _class_rates(cls, s, u, s, u)
    for what, m in (("copyright", copyright), ("moderation", moderation)):
        out[f"A_on_{what}_only"] = ("mixed", f"as A on the {what} disputes, as B on every other",
                                    np.where(m, as_a, as_b))
        out[f"B_on_{what}_only"] = ("mixed", f"as B on the {what} disputes, as A on every other",
                                    np.where(m, as_b, as_a))
    out["halfway"] = ("undetermined", "flags every disputed item halfway between its both-safe and both-unsafe rates",
                      _class_rates(cls, s, u, (s + u) / 2, (s + u) / 2))
    out["silent"] = ("undetermined", "flags nothing", _class_rates(cls, 0, 0, 0, 0))
    out["flags_everything"] = ("undetermined", "flags everything", _class_rates(cls, 1, 1, 1, 1))
    return out


def item_profiles(rows: pd.DataFrame, draws: int, seed: int) -> dict[str, tuple[str, str, np.ndarray]]:
    """Policy-free guards whose flags follow the text's length, dataset or format, not its labels (a
    guard keyed on them must not read as a policy): name -> (``undetermined``, what it does, flag
    probability per row, or per draw and row). Length: every prompt shorter than ``LENGTHS`` characters,
    and a logistic in log length (half at 150); dataset: one rate per source (``SOURCE``), fixed, and
    drawn afresh for each simulated guard (uniform); format: one rate for moderation texts and one for
    requests, fixed and drawn afresh."""
    length = rows["text"].astype(str).str.len().to_numpy()
    source = rows["dataset"].map(lambda d: SOURCE.get(d, d)).to_numpy()
    posts = (rows["dataset"] == "openai_moderation").to_numpy()
    rng = np.random.default_rng(seed)
    out = {f"length_under_{t}": ("undetermined", f"flags every prompt shorter than {t} characters",
                                 (length < t).astype(float)) for t in LENGTHS}
    out["length_logistic"] = ("undetermined", "flags with probability 1 / (1 + (length / 150)^3)",
                              1 / (1 + (length / 150.0) ** 3))
    names, code = np.unique(source, return_inverse=True)
    fixed = np.linspace(0.15, 0.9, len(names))
    out["dataset_rates"] = ("undetermined", "one flag rate per dataset (" + ", ".join(
        f"{n} {r:.0%}" for n, r in zip(names, fixed)) + ")", fixed[code])
    out["dataset_rates_random"] = ("undetermined", "one flag rate per dataset, uniform, drawn afresh for each guard",
                                   rng.random((draws, len(names)))[:, code])
    out["format_rates"] = ("undetermined", "flags 20% of moderation texts and 80% of requests",
                           np.where(posts, 0.2, 0.8))
    r = rng.random((draws, 2))
    out["format_rates_random"] = ("undetermined", "one flag rate for moderation texts and one for requests, uniform, "
                                  "drawn afresh for each guard", np.where(posts[None, :], r[:, :1], r[:, 1:]))
    return out


def lexicon_profiles(rows: pd.DataFrame, draws: int, seed: int) -> dict[str, tuple[str, str, np.ndarray]]:
    """Keyword guards (a prompt is flagged when it holds any word of a list from the harm lexicon,
    ``lexicon``), which follow no policy, and followers mixed with one, which follow theirs: name ->
    (expected verdict, what it does, flag probability per row, or per draw and row). The lists: every
    word; the 48 words of ``lexicon.GUARD_48``; 20 and ``lexicon.RANDOM_WORDS`` words drawn afresh for
    each simulated guard; a random list with noise (flags 90 % of its matches and 5 % of the rest); harm
    words the lexicon does not hold (``lexicon.held_out``: all 40, and 20 drawn afresh); a published
    profanity filter's list (``lexicon.published``). The
    mixtures: a follower of A or B (5 % false flags, 92 % recall) that also flags every match of a
    random list (``or``), and one whose every verdict comes from the list or from the follower at even
    odds (``half``)."""
    rng = np.random.default_rng(seed)
    h, vocab = lexicon.hits(rows["text"]), lexicon.words()
    n_words = len(vocab)

    def random(size: int, hit: np.ndarray = h) -> np.ndarray:
        pick = np.zeros((draws, hit.shape[1]), dtype=bool)
        for d in range(draws):
            pick[d, rng.choice(hit.shape[1], size, replace=False)] = True
        return ((pick.astype(np.float32) @ hit.T.astype(np.float32)) > 0).astype(float)

    out = {"lexicon_all": ("undetermined", f"flags every prompt holding any of the {n_words} lexicon words",
                           h.any(axis=1).astype(float)),
           "lexicon_48": ("undetermined", "flags every prompt holding any of 48 lexicon words (lexicon.GUARD_48)",
                          h[:, [vocab.index(w) for w in lexicon.GUARD_48]].any(axis=1).astype(float))}
    for size in (20, lexicon.RANDOM_WORDS):
        out[f"lexicon_random{size}"] = ("undetermined", f"flags every prompt holding any of {size} lexicon words "
                                        "drawn afresh for each guard", random(size))
    out["lexicon_noisy"] = ("undetermined", f"flags 90% of the prompts holding any of {lexicon.RANDOM_WORDS} random "
                            "lexicon words and 5% of the rest", 0.05 + 0.85 * random(lexicon.RANDOM_WORDS))
    other = lexicon.hits(rows["text"], lexicon.held_out())
    out["held_out_all"] = ("undetermined", f"flags every prompt holding any of {other.shape[1]} harm words that are "
                           "not in the lexicon (data/harm_lexicon/held_out.csv)", other.any(axis=1).astype(float))
    out["held_out_random20"] = ("undetermined", "flags every prompt holding any of 20 held-out harm words drawn afresh "
                                "for each guard", random(20, other))
    out["published_profanity"] = ("undetermined", "flags every prompt holding a word of a published profanity filter's "
                                  "list (data/keyword_lists/, better_profanity 0.7.0)",
                                  lexicon.phrase_flags(rows["text"], lexicon.published()).astype(float))
    cls = stats.policy_class(rows["unsafe_a"], rows["unsafe_b"])
    s, u = BASES["_f05_r92"]
    for own, rates in (("A", (s, u, u, s)), ("B", (s, u, s, u))):
        follower = np.array(rates)[cls][None, :]
        words = random(lexicon.RANDOM_WORDS)
        out[f"lexicon_or_follows_{own}"] = (own, f"a follower of {own} ({s:.0%} / {u:.0%}) that also flags every prompt "
                                            f"holding any of {lexicon.RANDOM_WORDS} random lexicon words",
                                            1 - (1 - follower) * (1 - words))
        out[f"lexicon_half_follows_{own}"] = (own, f"each verdict from a follower of {own} ({s:.0%} / {u:.0%}) or "
                                              f"from {lexicon.RANDOM_WORDS} random lexicon words, at even odds",
                                              0.5 * follower + 0.5 * random(lexicon.RANDOM_WORDS))
    return out


def simulate(table: pd.DataFrame, p: np.ndarray, draws: int, alpha: float, seed: int) -> stats.PolicyVerdict:
    """The verdicts of ``draws`` simulated guards that flag each item of stratum j independently with
    probability ``p[j]``, every item answered."""
    rng = np.random.default_rng(seed)
    n = table["n_items"].to_numpy()
    k = rng.binomial(n, p, size=(draws, len(n)))
    return apply_rule(table, k, n, alpha, seed + 1)


def simulate_items(table: pd.DataFrame, idx: np.ndarray, p: np.ndarray, draws: int, alpha: float,
                   seed: int) -> stats.PolicyVerdict:
    """As ``simulate``, each row flagged with its own probability ``p`` (rows, or draws x rows)."""
    rng = np.random.default_rng(seed)
    use = idx >= 0
    p = np.broadcast_to(p, (draws, len(idx)))[:, use]
    onehot = (idx[use][:, None] == np.arange(len(table))[None, :]).astype(float)
    k = (rng.random(p.shape) < p).astype(float) @ onehot
    return apply_rule(table, k, table["n_items"].to_numpy(), alpha, seed + 1)


def _true_positions(table: pd.DataFrame, p: np.ndarray) -> np.ndarray:
    """The direction positions (2,) of a guard with stratum rates ``p`` (``stats.matched_positions``);
    NaN for a direction with a group whose true separation is under ``MIN_SEPARATION`` (no position
    is then the right answer, and there is no position to cover)."""
    n, cls, grp = table["n_items"].to_numpy(), table["cls"].to_numpy(), table["grp"].to_numpy()
    pr = rule_pairs(table)
    pos, sep, pn = stats.matched_positions(np.asarray(p, dtype=float), n, cls, grp, table["lev"].to_numpy(),
                                           table["pair"].to_numpy(), len(GROUP_NAMES), lexicon.LEVELS, len(pr))
    weak = [(sep[grp[(cls == c) & (n > 0)]] < MIN_SEPARATION).any() for c in (2, 3)]
    return np.where(weak, np.nan, stats.direction_positions(pos, pn, pr["cls"].to_numpy()))


def calibration(rows: pd.DataFrame, alpha: float, seed: int, draws: int = CALIBRATION_DRAWS) -> pd.DataFrame:
    """The verdict rule on ``draws`` simulated guards of every profile (``stratum_profiles``,
    ``item_profiles``) on ``rows``: the share of each verdict, ``error`` (the share naming a wrong
    policy: the other one, or any for a profile that follows none; at most ``MAX_ERROR``), ``power``
    (the share of the expected verdict) and, for a profile with fixed rates, the **coverage** of each
    direction's interval (the share of draws whose interval holds the profile's true position, among the
    draws in which every group of that direction gives positions)."""
    table, idx = strata(rows)
    found = {k: (*v, "stratum") for k, v in stratum_profiles(table).items()}
    found.update({k: (*v, "item") for k, v in item_profiles(rows, draws, seed).items()})
    found.update({k: (*v, "item") for k, v in lexicon_profiles(rows, draws, seed + 1).items()})
    out = []
    for i, (name, (expected, what, p, kind)) in enumerate(found.items()):
        if kind == "stratum":
            v, truth = simulate(table, p, draws, alpha, seed + 2 * i), _true_positions(table, p)
        else:
            v = simulate_items(table, idx, p, draws, alpha, seed + 2 * i)
            truth = np.full(2, np.nan)
            if np.ndim(p) == 1:
                use = idx >= 0
                rate = np.bincount(idx[use], weights=p[use], minlength=len(table)) / table["n_items"].to_numpy()
                truth = _true_positions(table, rate)
        share = {c: float((v.verdict == j).mean()) for j, c in enumerate(stats.VERDICT_CODES)}
        wrong = share["B"] if expected == "A" else share["A"] if expected == "B" else share["A"] + share["B"]
        cover = {}
        for j, dname in enumerate(DIRECTIONS):
            # the draws whose direction rests on every group the true position does (a group the rule did not
            # place in a draw leaves a different estimand)
            groups = np.unique(table.loc[(table["cls"] == 2 + j) & (table["n_items"] > 0), "grp"])
            ok = ~np.isnan(v.position[:, j]) & v.placed[:, groups].all(axis=1)
            cover[f"coverage_{dname}"] = (float(((v.lo[ok, j] <= truth[j]) & (truth[j] <= v.hi[ok, j])).mean())
                                          if np.isfinite(truth[j]) and ok.any() else np.nan)
        out.append({"profile": name, "expected": expected, "description": what, "draws": draws,
                    "n_a_stricter": int(table.loc[table["cls"] == 2, "n_items"].sum()),
                    "n_b_stricter": int(table.loc[table["cls"] == 3, "n_items"].sum()),
                    **{f"share_{c}": share[c] for c in stats.VERDICT_CODES},
                    "error": wrong, "power": share[expected], "error_ok": wrong <= MAX_ERROR,
                    "true_pos_a_stricter": truth[0], "true_pos_b_stricter": truth[1], **cover})
    return pd.DataFrame(out)


# the committed calibration of the default run (its simulation takes longer than make all may spend)
CALIBRATION_FILE = Path(__file__).resolve().parents[4] / "benchmarks" / "policy_verdict_calibration.csv"


def calibration_key(rows: pd.DataFrame, alpha: float, seed: int, draws: int) -> str:
    """What a calibration table was simulated on: the rule's constants, alpha, seed, draws and the
    guard items (ids, texts, datasets, labels and rule pairs), hashed."""
    cols = ["item_id", "text", "dataset", "benchmark", "unsafe_a", "unsafe_b", "rule_a", "rule_b"]
    rule = repr((MARGIN, MIN_ITEMS, MIN_SEPARATION, N_DRAWS, OUTSIDE, sorted(GROUPS.items()), lexicon.words(),
                 CALIBRATION_VERSION))
    data = rows[cols].astype(str).sort_values("item_id").to_csv(index=False)
    return f"{hashlib.sha256((rule + data).encode()).hexdigest()[:16]}-a{alpha}-s{seed}-d{draws}"


def run_calibration(rows: pd.DataFrame, alpha: float, seed: int, draws: int) -> pd.DataFrame:
    """The calibration of a run: ``benchmarks/policy_verdict_calibration.csv`` where it was simulated
    on these items under this rule (``calibration_key``; ~30 s of simulation that make all need not
    repeat: ``python benchmarks/policy_verdict_calibration.py`` rewrites it), else ``calibration``."""
    key = calibration_key(rows, alpha, seed, draws)
    if CALIBRATION_FILE.is_file():
        table = pd.read_csv(CALIBRATION_FILE)
        if "key" in table and (table["key"] == key).all():
            return table
    return calibration(rows, alpha, seed, draws).assign(key=key)


def trust_line(cal: pd.DataFrame) -> str:
    """"How far this verdict can be trusted", from a calibration table, in one sentence."""
    if cal is None or cal.empty:
        return "How far this verdict can be trusted: no calibration table (run the policy study's analyse stage)."
    follow = cal[cal["expected"].isin(["A", "B"])]
    other = cal[~cal["expected"].isin(["A", "B"])]
    worst = cal.loc[cal["error"].idxmax()]
    cov = cal[[c for c in cal.columns if c.startswith("coverage_")]]
    cov_txt = (f"; the direction intervals hold the profiles' true positions in {np.nanmin(cov.to_numpy()):.0%} to "
               f"{np.nanmax(cov.to_numpy()):.0%} of draws" if cov.size and np.isfinite(cov.to_numpy()).any() else "")
    words = cal[cal["profile"].str.startswith(("lexicon_", "held_out_", "published_"))]
    words_txt = ""
    if not words.empty:
        w = words.loc[words["error"].idxmax()]
        words_txt = (f"; over the {len(words)} keyword-guard profiles (harm-lexicon, held-out and published word "
                     f"lists, and followers mixed with them) the worst is {w['error']:.1%} ({w['profile']})")
    return (f"How far this verdict can be trusted ({int(cal['draws'].iloc[0])} simulated guards per profile, "
            f"{len(cal)} profiles, on these {int(cal['n_a_stricter'].iloc[0])} A-stricter and "
            f"{int(cal['n_b_stricter'].iloc[0])} B-stricter items, `verdict_calibration.csv`): the worst wrong-policy "
            f"rate over all profiles is {worst['error']:.1%} ({worst['profile']}; "
            f"{'within' if bool(cal['error_ok'].all()) else 'NOT within'} {MAX_ERROR:.0%} in every profile){words_txt}; it names "
            "the followed policy for " + ", ".join(f"{r.profile} {r.power:.0%}" for r in follow.itertuples())
            + "; it gives the expected mixed / undetermined for "
            + ", ".join(f"{r.profile} {r.power:.0%}" for r in other.itertuples()) + cov_txt + ".")
