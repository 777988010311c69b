"""The report's first screen: each study's question in one line and its answers, one row per system for its
primary question, in short cells (the answer in a word, the estimate with its interval, the corrected p, the
simulated false-positive rate, the power or the smallest detectable effect, n) with the long sentences as the
cells' tooltips; the controls once per study; TESTBED marked; the study's headline figure beside it as a
thumbnail that links to the full figure further down the page. Built from ``stats/verdicts.csv`` alone
(``verdict_table.read``), so that the screen shows what the table holds whatever ran last.

Which rows a study shows: those it marks ``headline`` (``verdict.Verdict``), else its primary rows; a user's
system (role ``verdict.USER``) always.
"""
from __future__ import annotations

import base64
import html
import math
from pathlib import Path

import pandas as pd

from .verdict import PRIMARY, USER

MAX_CELL = 64  # characters a first-screen cell holds; a longer text is cut and shown whole in its tooltip
HEADERS = {"system": "the model or guard measured", "part": "the judge or part of the system the row is about",
           "answer": "the answer to the study's question", "estimate": "the estimate [95 % interval]",
           "p": "the corrected p-value", "fpr": "the verdict's simulated false-positive rate",
           "power": "power at a stated effect, or for a null answer the smallest detectable effect (MDE)",
           "n": "the units the estimate rests on"}
STYLE = (".screen{display:grid;grid-template-columns:1fr 1.18fr;gap:6px 8px;width:min(1376px,98vw);"
         "margin-left:calc(50% - min(688px,49vw))} "
         ".block{border:1px solid #bbb;padding:4px 8px;font-size:12px} .block h3{margin:2px 0;font-size:14px} "
         ".block p{margin:2px 0} .block table{font-size:10.5px;width:100%} .block td,.block th{padding:1px 4px} "
         ".thumb{float:right;margin-left:6px} .thumb img{width:150px;border:1px solid #ccc} "
         ".tb{background:#fff3cd;font-weight:bold;padding:0 2px;font-size:9px} .why{color:#a00} "
         ".role{color:#555;font-style:italic;font-size:9px} "
         ".first-screen td{white-space:nowrap} .first-screen td.wrap{white-space:normal}")


def short(text: str, limit: int = MAX_CELL) -> str:
    """``text`` up to its first parenthesis (or, when still longer than ``limit``, its first semicolon), cut to
    ``limit`` characters (an ellipsis says so)."""
    text = str(text)
    for stop in (" (", "; "):
        head = text.split(stop)[0]
        if head.strip() and (stop == " (" or len(text) > limit):
            text = head
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def cells(r: pd.Series) -> dict[str, tuple[str, str]]:
    """A first-screen row: column -> (the short cell, its tooltip), from a row of ``stats/verdicts.csv``."""
    system = short(str(r["system"]).replace(" (TESTBED)", ""), 40)  # its qualifier in the tooltip
    est = str(r["estimate"])
    if not _missing(r["effect"]):
        interval = "" if _missing(r["ci_low"]) or _missing(r["ci_high"]) else f" [{r['ci_low']:+.2f}, {r['ci_high']:+.2f}]"
        estimate = f"{r['effect']:+.2f}{interval}"
    else:
        estimate = short(est)
    if not _missing(r["power_rate"]):
        power = f"{r['power_rate']:.2f}"
    elif not _missing(r["mde"]):
        power = f"MDE {r['mde']:.2f}"
    else:
        power = "n/a"
    role = "" if r["role"] == PRIMARY else f" {r['role']}"  # a control or a user's system says so
    return {"system": (system + (" TESTBED" if r["testbed"] else "") + role, f"{r['system']}: {r['role']}"),
            "part": (short(r["label"]), str(r["label"])),
            "answer": (short(r["answer"], 30), str(r["answer"])),
            "estimate": (estimate, est),
            "p": ("n/a" if _missing(r["p"]) else "< 0.001" if r["p"] < 0.001 else f"{r['p']:.3g}", est),
            "fpr": ("n/a" if _missing(r["fpr_rate"]) else f"{r['fpr_rate']:.1%}", str(r["fpr"])),
            "power": (power, str(r["power"])),
            "n": ("n/a" if _missing(r["n"]) else f"{int(r['n'])}", str(r["empty_numbers"]) or est)}


def shown(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of one study's part of the table that its first screen shows (see the module's docstring)."""
    own = table[table["role"] != USER]
    pick = own[own["headline"]] if own["headline"].any() else own[own["role"] == PRIMARY]
    if not len(pick):
        pick = own
    return pd.concat([pick, table[table["role"] == USER]])


def _png(figures: Path, stem: str) -> str:
    """A run figure's PNG as base64 (the page is one file that opens offline), or "" where it has none."""
    png = figures / f"{stem}.png"
    return base64.b64encode(png.read_bytes()).decode() if stem and png.is_file() else ""


def _thumbnail(figures: Path, stem: str, study: str) -> str:
    data = _png(figures, stem)
    if not data:
        return ""
    return (f"<a class='thumb' href='#fig-{html.escape(study)}' title='{html.escape(stem)}: the full figure'>"
            f"<img alt='{html.escape(stem)}' src='data:image/png;base64,{data}'></a>")


def full_figures(figures: Path, heads: dict[str, str]) -> str:
    """The headline figures at full size, each with the anchor its thumbnail links to."""
    parts = []
    for study, stem in heads.items():
        data = _png(figures, stem)
        if data:
            parts.append(f"<h3 id='fig-{html.escape(study)}'>{html.escape(study)}: {html.escape(stem)}</h3>"
                         f"<img alt='{html.escape(stem)}' src='data:image/png;base64,{data}'>")
    return "".join(parts)


def controls_line(rows: pd.DataFrame) -> str:
    """The study's controls once, in one line (the same on every row of the study: its first row's)."""
    own = rows[rows["role"] != USER]
    own = own[own["headline"]] if own["headline"].any() else own  # a row's flags (a judge unvalidated) qualify it
    return str(own["controls_summary"].iloc[0] or own["controls"].iloc[0]) if len(own) else "not run"


def _system(text: str, r: pd.Series) -> str:
    """The system cell's markup: its name, then TESTBED and its role (a control, a user's system) as badges."""
    role = "" if r["role"] == PRIMARY else f" {r['role']}"
    name = text.removesuffix(role).removesuffix(" TESTBED")
    return (html.escape(name) + (" <span class='tb'>TESTBED</span>" if r["testbed"] else "")
            + (f" <span class='role'>{html.escape(role.strip())}</span>" if role else ""))


def block(study: str, question: str, rows: pd.DataFrame, controls: str, thumb: str) -> str:
    """One study's block of the first screen."""
    head = f"<h3>{html.escape(study)}: {html.escape(question)}</h3>"
    if not len(rows):
        return (f"<div class='block' data-study='{html.escape(study)}'>{head}<p class='why'>not computed: no row of "
                f"this study in stats/verdicts.csv (run make all STUDIES={html.escape(study)})</p></div>")
    pick = shown(rows)
    columns = [c for c in HEADERS if c != "part" or (pick["label"] != "").any()]
    th = "".join(f"<th title='{html.escape(HEADERS[c])}'>{html.escape(c)}</th>" for c in columns)
    body = ""
    for _, r in pick.iterrows():
        row = cells(r)
        tds = "".join(f"<td title='{html.escape(row[c][1])}'" + (" class='wrap'>" if c == "answer" else ">")
                      + (_system(row[c][0], r) if c == "system" else html.escape(row[c][0])) + "</td>" for c in columns)
        body += f"<tr data-role='{html.escape(r['role'])}'>{tds}</tr>"
    stamps = sorted(set(zip(rows["computed"], rows["commit"].str[:12])))
    when = "; ".join(f"{c or 'time not recorded'} at commit {k or 'unknown'}" for c, k in stamps)
    return (f"<div class='block' data-study='{html.escape(study)}'>{thumb}{head}"
            f"<p><b>controls</b>: {html.escape(controls)}</p>"
            f"<table class='first-screen' data-study='{html.escape(study)}'><thead><tr>{th}</tr></thead>"
            f"<tbody>{body}</tbody></table><p style='color:#666'>computed {html.escape(when)}</p></div>")


def render(table: pd.DataFrame, order: list[str], questions: dict[str, str], figures: Path, heads: dict[str, str]) -> str:
    """The first screen: a block per study of ``order`` (then any other study of ``table``), two to a row."""
    names = list(dict.fromkeys(list(order) + list(table["study"])))
    parts = []
    for name in names:
        rows = table[table["study"] == name]
        question = questions.get(name) or (str(rows["question"].iloc[0]) if len(rows) else "")
        parts.append(block(name, question, rows, controls_line(rows) if len(rows) else "",
                           _thumbnail(figures, heads.get(name, ""), name)))
    return f"<div class='screen'>{''.join(parts)}</div>"
