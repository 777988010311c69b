"""Chat rendering: one function turns a study's messages into a model's prompt text, for every family.

Rules (every study renders through ``render``; ``prompts.render_ids`` splices the exact filler into it):

1. A tokenizer with a chat template: the template renders the messages, with the generation prompt.
2. A template without a system role (it raises on one, like Gemma 2's ``System role not supported``,
   or renders without the system text) gets the system text folded into the first user turn:
   ``system + "\\n\\n" + user`` (Gemma's own guidance: put instructions in the first user turn).
3. A tokenizer without a chat template (a base model) gets the plain-text format ``BASE_FORMAT``:
   the BOS token when the tokenizer has one, the system text and a blank line (when given), then
   ``User: <text>`` and ``Assistant: <text>`` turns separated by blank lines, ending in ``Assistant:``.
   Only studies that declare ``base_models`` accept a base model (``families.check_params`` refuses it
   elsewhere: their conditions need a chat turn).
"""
from __future__ import annotations

from jinja2.exceptions import TemplateError

BASE_FORMAT = "{bos}[{system}\\n\\n]User: {user}\\n\\nAssistant:"
BASE_ROLES = {"user": "User", "assistant": "Assistant"}
FOLD_SEPARATOR = "\n\n"
PROBE_QUERY = "Explain how a town library organises its catalogue."  # what make check renders for every model


class RenderError(ValueError):
    """A template that cannot render a study's messages, even with the system text folded."""


def has_template(tokenizer) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def fold_system(messages: list[dict]) -> list[dict]:
    """The messages with the system text moved to the start of the first user turn."""
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    rest = [dict(m) for m in messages if m["role"] != "system"]
    if system:
        first = next((m for m in rest if m["role"] == "user"), None)
        if first is None:
            raise RenderError("a system text with no user turn to fold it into")
        first["content"] = system + FOLD_SEPARATOR + first["content"]
    return rest


def plain_text(tokenizer, messages: list[dict], add_generation_prompt: bool = True) -> str:
    """``BASE_FORMAT``: the rendering of a model without a chat template."""
    parts = [m["content"] for m in messages if m["role"] == "system"]
    for m in messages:
        if m["role"] != "system":
            if m["role"] not in BASE_ROLES:
                raise RenderError(f"role {m['role']!r} has no plain-text form (expected system, user or assistant)")
            parts.append(f"{BASE_ROLES[m['role']]}: {m['content']}")
    text = "\n\n".join(parts)
    if add_generation_prompt:
        text += "\n\nAssistant:"
    return (tokenizer.bos_token or "") + text


def _template(tokenizer, messages, add_generation_prompt, kwargs) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt,
                                         **kwargs)


def render(tokenizer, messages: list[dict], add_generation_prompt: bool = True, **template_kwargs) -> str:
    """The prompt text of ``messages`` (dicts with role and content) under the rules above."""
    if not has_template(tokenizer):
        return plain_text(tokenizer, messages, add_generation_prompt)
    systems = [m["content"] for m in messages if m["role"] == "system"]
    if systems:
        try:
            text = _template(tokenizer, messages, add_generation_prompt, template_kwargs)
            if all(s.strip() in text for s in systems):
                return text
        except TemplateError:
            pass  # the template has no system role: fold it
        messages = fold_system(messages)
    try:
        return _template(tokenizer, messages, add_generation_prompt, template_kwargs)
    except TemplateError as e:
        raise RenderError(f"the chat template cannot render the messages (roles "
                          f"{[m['role'] for m in messages]}): {e}") from None


def turn(system: str | None, user: str) -> list[dict]:
    """The messages of one user turn, with the system turn first when ``system`` is given."""
    return ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
