"""Prompt construction: chat-template rendering with an exact-length neutral filler.

A prompt is its token ids. The kv prompt is ``system safety text`` (optional) as the system turn,
and ``filler + "\\n\\n" + query`` as the user turn, rendered by ``chat.render`` (the model's own chat
template; its rules for a template without a system role and a base model without a template).
The filler is the neutral text in ``data/filler/neutral.txt`` (repeated as needed) cut to exactly
``filler_tokens`` tokens of the model's own tokenizer: the ids are spliced into the rendered
template, so the count is exact by construction and ``prompt_tokens`` is the true length.

``prompts`` columns: prompt_id, item_id, study, role, filler_tokens, system_prompt, frame, paraphrase,
query, text, input_ids, prompt_tokens. A study builds the query text (its frames, paraphrases, answer
formats); this module renders it.
"""
from __future__ import annotations

import hashlib

import pandas as pd

from . import chat
from .paths import DATA_DIR

FILLER_FILE = DATA_DIR / "filler" / "neutral.txt"
_SENTINEL = "\x00FILLER\x00"


def filler_ids(tokenizer, n_tokens: int, offset: int = 0) -> list[int]:
    """Exactly ``n_tokens`` token ids of neutral prose, from token ``offset`` of the (repeated) text."""
    text = FILLER_FILE.read_text()
    ids = tokenizer.encode(text, add_special_tokens=False)
    offset %= len(ids)
    reps = -(-(n_tokens + offset) // len(ids)) if n_tokens else 0
    return (ids * reps)[offset:offset + n_tokens] if reps else []


def render_ids(tokenizer, system: str | None, query: str, filler_tokens: int = 0, filler_offset: int = 0) -> list[int]:
    """Token ids of the chat-formatted prompt ``[system] / filler + query / assistant turn`` (the filler
    from token ``filler_offset`` of the neutral text; the studies use 0)."""
    if filler_tokens < 0:
        raise ValueError(f"filler_tokens must be >= 0, got {filler_tokens}")
    user = f"{_SENTINEL}\n\n{query}" if filler_tokens else query
    text = chat.render(tokenizer, chat.turn(system, user))
    if not filler_tokens:
        return tokenizer.encode(text, add_special_tokens=False)
    if text.count(_SENTINEL) != 1:
        raise chat.RenderError(f"the chat template does not render the user text exactly once (found the filler's "
                               f"place {text.count(_SENTINEL)} times): the filler cannot be exact")
    before, after = text.split(_SENTINEL)
    return (tokenizer.encode(before, add_special_tokens=False) + filler_ids(tokenizer, filler_tokens, filler_offset)
            + tokenizer.encode(after, add_special_tokens=False))


def system_span(tokenizer, system: str, query: str, filler_tokens: int = 0) -> tuple[int, int]:
    """Token positions ``[start, end)`` of the system text in ``render_ids(tokenizer, system, query,
    filler_tokens)`` (the text itself, without the template's role markers): the span whose retention
    after eviction the kv study measures."""
    user = f"{_SENTINEL}\n\n{query}" if filler_tokens else query
    text = chat.render(tokenizer, chat.turn(system, user))
    at = text.find(system.strip())
    if at < 0 or (filler_tokens and text.find(_SENTINEL) < at):
        raise chat.RenderError("the chat template does not render the system text before the user turn")
    start = len(tokenizer.encode(text[:at], add_special_tokens=False))
    return start, len(tokenizer.encode(text[:at + len(system.strip())], add_special_tokens=False))


def prompt_id(*parts) -> str:
    """A short stable id for a prompt built from ``parts``."""
    return hashlib.sha256("\x1f".join(map(str, parts)).encode()).hexdigest()[:16]


def build_prompts(items: pd.DataFrame, tokenizer, conditions: list[tuple[int, str | None]],
                  context_window: int | None = None, max_new_tokens: int = 0) -> pd.DataFrame:
    """One prompt per item and (filler_tokens, system) condition. The query is the item's ``query``
    column when it has one, else its ``text``; ``frame`` and ``paraphrase``, where the items have them,
    pass through and enter the prompt's id.

    Raises before returning anything if a prompt would not fit the context window.
    """
    rows = []
    for _, item in items.iterrows():
        query = item["query"] if "query" in item and isinstance(item["query"], str) else item["text"]
        frame, paraphrase = item.get("frame"), item.get("paraphrase")
        for filler, system in conditions:
            ids = render_ids(tokenizer, system, query, filler)
            if context_window and len(ids) + max_new_tokens > context_window:
                raise ValueError(f"item {item['item_id']!r}: {len(ids)} prompt tokens (filler {filler}) + "
                                 f"{max_new_tokens} new tokens exceed the model's context window of {context_window}")
            identity = [item["item_id"], filler, system or ""] + [x for x in (frame, paraphrase) if isinstance(x, str)]
            rows.append({
                "prompt_id": prompt_id(*identity), "item_id": item["item_id"],
                "study": item["study"], "role": item["role"], "filler_tokens": filler,
                "system_prompt": bool(system), "frame": frame, "paraphrase": paraphrase, "query": query,
                "text": tokenizer.decode(ids), "input_ids": ids, "prompt_tokens": len(ids),
            })
    return pd.DataFrame(rows).drop(columns=[c for c in ("frame", "paraphrase") if c not in items])
