"""The kv study's design: which prompt conditions are prefilled and which policies decode each.

A condition is (role, filler_tokens, system prompt on/off); every prompt of a condition is
prefilled once and decoded under each of the condition's policies:

* main (harmful, filler = ``filler_tokens``, system on): full, sink_tail at every sink of
  ``sink_ablation`` (the sink dose-response; ``sink`` is the primary), the span arms of ``span_ablation``
  (``sink_span``: the primary sink and the system span kept, same budget; ``minus_span``: the full cache
  without the system span), snapkv at the same budget;
* filler ablation (harmful, each other filler length, system on): full, sink_tail;
* system-prompt ablation (harmful, main filler, system off): full, sink_tail;
* robustness (official HarmBench prompts, main filler, system on): full, sink_tail;
* MMLU-math (``mmlu_filler_tokens``, system on): full, sink_tail, snapkv, answered after a cue.
"""
from __future__ import annotations

from dataclasses import dataclass

from ... import retention
from .analysis import arm


@dataclass(frozen=True)
class Condition:
    role: str
    filler_tokens: int
    system_prompt: bool


def conditions(kv, roles: set[str]) -> list[Condition]:
    """The conditions to prefill, for the item roles present (harmful, harmful_official, mmlu)."""
    out = []
    if "harmful" in roles:
        fillers = [kv.filler_tokens] + [f for f in kv.filler_ablation if f != kv.filler_tokens]
        out += [Condition("harmful", f, True) for f in dict.fromkeys(fillers)]
        if kv.system_prompt_ablation:
            out.append(Condition("harmful", kv.filler_tokens, False))
    if "harmful_official" in roles:
        out.append(Condition("harmful_official", kv.filler_tokens, True))
    if "mmlu" in roles:
        out.append(Condition("mmlu", kv.mmlu_filler_tokens, True))
    return out


def policy(kv, name: str, sink: int | None = None, span: tuple[int, int] = (0, 0)) -> retention.RetentionPolicy:
    """One named retention policy with the study's settings (budget, sink, SnapKV window; a span arm's
    system span ``span``, the prompt's ``[system_start, system_end)``)."""
    if name == "sink_span":
        return retention.make(name, keep_ratio=kv.keep_ratio, sink=kv.sink, span_start=span[0], span_end=span[1])
    if name == "minus_span":
        return retention.make(name, span_start=span[0], span_end=span[1])
    if name == "full":
        return retention.make("full")
    if name == "sink_tail":
        return retention.make("sink_tail", keep_ratio=kv.keep_ratio, sink=kv.sink if sink is None else sink)
    if name == "snapkv":
        return retention.make("snapkv", keep_ratio=kv.keep_ratio, window=kv.snapkv_window, kernel=kv.snapkv_kernel)
    return retention.make(name, keep_ratio=kv.keep_ratio)


def policies(kv, role: str, filler_tokens: int, system_prompt: bool,
             span: tuple[int, int] = (0, 0)) -> list[retention.RetentionPolicy]:
    """The retention policies that decode one prompt of this condition (``span``: the prompt's system span,
    for the span arms)."""
    full, primary, snap = policy(kv, "full"), policy(kv, "sink_tail"), policy(kv, "snapkv")
    if role == "mmlu":
        return [full, primary, snap]
    main = role == "harmful" and filler_tokens == kv.filler_tokens and system_prompt
    if not main:
        return [full, primary]
    sinks = [policy(kv, "sink_tail", s) for s in dict.fromkeys([kv.sink] + kv.sink_ablation) if s != kv.sink]
    spans = [policy(kv, name, span=span) for name in kv.span_ablation] if filler_tokens == kv.filler_tokens else []
    return [full, primary, *sinks, *spans, snap]


def main_arms(kv) -> list[str]:
    """Every evicting arm of the main condition (harmful prompts, system prompt on) as ``arm@filler``:
    the sink ablation and SnapKV at the main filler, sink_tail at each other filler length; the
    confirmatory family is declared from these (``kv.confirmatory.family``)."""
    fillers = [kv.filler_tokens] + [f for f in kv.filler_ablation if f != kv.filler_tokens]
    return [f"{arm(pol.name, pol.sink, kv.sink)}@{f}" for f in dict.fromkeys(fillers)
            for pol in policies(kv, "harmful", f, True) if pol.name != "full"]
