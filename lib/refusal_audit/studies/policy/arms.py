"""The guard arms: prompt classifiers on the project's MiniLM encoder, trained by the paper's routes.

**The guard.** all-MiniLM-L6-v2 (``refusal_audit.encoder``; 22.7M parameters, mean-pooled,
unit-norm sentence embedding) -> a body ``Linear(384, hidden) + GELU`` -> a head
``Linear(hidden, 4)`` over the four coarse classes (``rules.CLASSES``); binary unsafe = HARMFUL or
COMPOUND. The encoder is frozen in every route but LoRA, so each distinct text is embedded once
per process and every frozen-encoder arm trains on the same cached embeddings.

**The routes** (an arm = one ``ArmParams``: where policy A enters):

* hard labels: each training row's hard label is policy A's for a share ``hard_a`` of the rows
  (drawn under the arm's seed), policy B's for the rest (0 = B only, 1 = all A); the pool size is
  the same in every arm (the paper's pools differed, 8,489-144,744 rows, a confound it names);
* a teacher (``teacher: a|b``): a larger guard (``teacher.hidden``) trained on one policy's hard
  labels; the student adds Hinton's distillation term on its soft labels over the four classes,
  ``loss = (1 - alpha) * CE(hard) + alpha * tau^2 * KL(softmax(t / tau) || softmax(s / tau))``,
  tau = 4 (the paper's); both terms weigh a row by its hard label's balanced class weight
  (``kd.weighting: rows``, what the paper's class-balanced sampler does to both; ``hard``: the
  hard-label term only, measured in ``benchmarks/policy_distillation.py``);
* head-only recalibration (``recalibrate: head``): the ``base`` arm's model, body frozen, its head
  (hidden * 4 + 4 parameters: 516, 0.0023 % of encoder + guard at hidden 128) refitted by cross-entropy on
  a calibration set: a share ``calibration`` of the training rows under ``calibration_policy``'s
  labels;
* whole-model recalibration (``recalibrate: lora``): the same calibration set, but the encoder
  itself is fine-tuned too, through peft LoRA adapters on its attention (query, value), with body
  and head: "head-only vs whole model" on identical data. On CPU its calibration set is capped
  (``lora.max_rows``) and its epochs few; it needs its own forward passes over every text it scores.

The **last supervision signal** of an arm (the one nearest the output: the paper's explanatory
variable) is the calibration policy for a recalibrated arm, else the teacher's policy, else the
hard labels' policy (``mixed`` when they are mixed). Everything random (initialisation, batch order,
which rows carry A's labels, the calibration draw, dropout in LoRA) draws from the arm's seed: the
same seed gives the same model, bit for bit.
"""
from __future__ import annotations

import copy
import time
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch import nn
from torch.nn import functional as F

from ...encoder import encoder
from . import rules

CLASSES = rules.CLASSES
N_CLASSES = len(CLASSES)
UNSAFE_INDEX = [CLASSES.index(c) for c in sorted(rules.UNSAFE)]
BOUNDARY_INDEX = CLASSES.index("BOUNDARY_SAFE")


class Guard(nn.Module):
    """body (Linear + GELU) -> head (Linear to the four classes), over a sentence embedding."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(dim, hidden), nn.GELU())
        self.head = nn.Linear(hidden, N_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


@dataclass
class Fitted:
    """A trained guard: its model, the LoRA encoder when it has one, and its bookkeeping."""

    model: Guard
    encoder: nn.Module | None = None  # a LoRA-adapted copy of MiniLM (None: the shared frozen encoder)
    trained_params: int = 0
    total_params: int = 0
    seconds: float = 0.0
    n_calibration: int = 0  # rows of the calibration set (recalibrated arms)


def n_params(module: nn.Module, trainable_only: bool = False) -> int:
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)


def last_signal(arm) -> str:
    """``a``, ``b`` or ``mixed``: the supervision signal nearest the output (see the module doc)."""
    if arm.recalibrate != "none":
        return arm.calibration_policy
    if arm.teacher != "none":
        return arm.teacher
    return "a" if arm.hard_a == 1 else "b" if arm.hard_a == 0 else "mixed"


def route(arm) -> str:
    """A one-line description of an arm's route."""
    if arm.recalibrate == "head":
        return (f"head-only recalibration of {arm.base} on {arm.calibration:.0%} of the pool "
                f"under policy {arm.calibration_policy.upper()}")
    if arm.recalibrate == "lora":
        return (f"whole-model (LoRA encoder + body + head) recalibration of {arm.base} on {arm.calibration:.0%} "
                f"of the pool under policy {arm.calibration_policy.upper()}")
    hard = {0.0: "hard labels B", 1.0: "hard labels A"}.get(arm.hard_a, f"hard labels A on {arm.hard_a:.0%}, B on the rest")
    teacher = f", distilled from a policy-{arm.teacher.upper()} teacher" if arm.teacher != "none" else ""
    return hard + teacher


# --- training ------------------------------------------------------------------------------------------

def class_weights(y: np.ndarray) -> torch.Tensor:
    """Balanced class weights (n / (classes present * n_c)); a class with no row weighs 0."""
    counts = np.bincount(y, minlength=N_CLASSES).astype(float)
    present = counts > 0
    w = np.zeros(N_CLASSES)
    w[present] = len(y) / (present.sum() * counts[present])
    return torch.tensor(w, dtype=torch.float32)


def kd_loss(student: torch.Tensor, teacher: torch.Tensor, tau: float, weight: torch.Tensor | None = None) -> torch.Tensor:
    """tau^2 * KL(softmax(teacher / tau) || softmax(student / tau)), mean over rows (Hinton et al. 2015);
    with ``weight`` (one per row), the weighted mean (rows weighted as the hard-label term weighs them)."""
    kl = F.kl_div(F.log_softmax(student / tau, dim=1), F.log_softmax(teacher / tau, dim=1),
                  reduction="none", log_target=True).sum(1)
    mean = kl.mean() if weight is None else (weight * kl).sum() / weight.sum()
    return mean * tau * tau


def _batches(n: int, batch_size: int, gen: torch.Generator, lengths: torch.Tensor | None = None,
             window: int = 8) -> list[torch.Tensor]:
    """One epoch's minibatches under ``gen``: a random permutation cut into batches; with ``lengths``
    (texts), each window of ``window`` batches is sorted by length before it is cut and the batches
    are shuffled again, so a batch pads to similar lengths (an encoder pass costs its longest text)."""
    order = torch.randperm(n, generator=gen)
    if lengths is None:
        return [order[s:s + batch_size] for s in range(0, n, batch_size)]
    span = batch_size * window
    batches = []
    for s in range(0, n, span):
        chunk = order[s:s + span]
        chunk = chunk[torch.argsort(lengths[chunk], stable=True)]
        batches += [chunk[b:b + batch_size] for b in range(0, len(chunk), batch_size)]
    return [batches[i] for i in torch.randperm(len(batches), generator=gen).tolist()]


def _fit(forward, params, x, y: np.ndarray, *, epochs: int, lr: float, batch_size: int, seed: int,
         weight_decay: float = 0.0, soft: torch.Tensor | None = None, tau: float = 4.0, alpha: float = 0.0,
         kd_weighting: str = "rows") -> None:
    """Minibatch AdamW on class-weighted cross-entropy (+ the distillation term when ``soft``).
    ``x``: a tensor of inputs or a list of texts (``forward`` takes a slice of it). ``kd_weighting``:
    ``rows`` weighs each row's distillation term by its hard-label class weight too (what a
    class-balanced sampler does to both terms: the paper's recipe); ``hard``: the class weights on the
    hard-label term only (a rare hard class, e.g. B's GENERIC_SAFE on the copyright rows, then
    outweighs the teacher on exactly the rows where the two policies differ)."""
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    gen = torch.Generator().manual_seed(seed)
    target = torch.tensor(np.asarray(y), dtype=torch.long)
    weight = class_weights(y)
    n = len(y)
    lengths = None if isinstance(x, torch.Tensor) else torch.tensor([len(t) for t in x])
    for _ in range(epochs):
        for idx in _batches(n, batch_size, gen, lengths):
            logits = forward(x[idx] if isinstance(x, torch.Tensor) else [x[i] for i in idx.tolist()])
            loss = F.cross_entropy(logits, target[idx], weight=weight)
            if soft is not None:
                rows = weight[target[idx]] if kd_weighting == "rows" else None
                loss = (1 - alpha) * loss + alpha * kd_loss(logits, soft[idx], tau, rows)
            opt.zero_grad()
            loss.backward()
            opt.step()


def labels_of(policy_labels: pd.Series) -> np.ndarray:
    return policy_labels.map(CLASSES.index).to_numpy(dtype=np.int64)


def train_guard(x: torch.Tensor, y: np.ndarray, hidden: int, seed: int, opt, soft=None, tau=4.0, alpha=0.0,
                kd_weighting: str = "rows") -> Guard:
    """A fresh guard (initialised under ``seed``) trained on embeddings ``x`` and hard labels ``y``."""
    torch.manual_seed(seed)
    model = Guard(x.shape[1], hidden)
    _fit(model, list(model.parameters()), x, y, epochs=opt.epochs, lr=opt.lr, batch_size=opt.batch_size,
         seed=seed, weight_decay=opt.weight_decay, soft=soft, tau=tau, alpha=alpha, kd_weighting=kd_weighting)
    return model.eval()


def mixed_labels(train: pd.DataFrame, share_a: float, seed: int) -> np.ndarray:
    """Hard labels: policy A's on a share ``share_a`` of the rows (drawn under ``seed``), B's elsewhere."""
    n = len(train)
    take_a = np.zeros(n, dtype=bool)
    take_a[np.random.default_rng(seed).permutation(n)[:int(np.floor(share_a * n + 0.5))]] = True
    return np.where(take_a, labels_of(train["label_a"]), labels_of(train["label_b"]))


def calibration_rows(n: int, share: float, seed: int, cap: int = 0) -> np.ndarray:
    """Indices of the calibration set: a share of the training rows drawn under ``seed`` (at most ``cap``)."""
    k = max(1, int(np.floor(share * n + 0.5)))
    if cap:
        k = min(k, cap)
    return np.sort(np.random.default_rng(seed + 7919).permutation(n)[:k])


# --- the LoRA encoder -------------------------------------------------------------------------------------

class LoraEncoder(nn.Module):
    """A copy of the shared MiniLM with peft LoRA adapters, pooled and normalised as the shared encoder
    (mean over non-padding tokens, unit norm; truncation at the encoder's ``max_seq_length``)."""

    def __init__(self, r: int, alpha: int, dropout: float, targets: list[str]):
        super().__init__()
        from peft import LoraConfig, get_peft_model  # lazy: peft, loaded only by the LoRA route

        st = encoder()
        self.tokenizer = st.tokenizer
        self.max_length = st.max_seq_length
        base = copy.deepcopy(st[0].auto_model)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # peft asks a deprecated transformers property
            self.model = get_peft_model(base, LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout,
                                                          target_modules=targets, bias="none"))

    def forward(self, texts: list[str]) -> torch.Tensor:
        batch = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt")
        hidden = self.model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return F.normalize(pooled, p=2, dim=1)

    @torch.no_grad()
    def embed(self, texts: list[str], batch_size: int = 64) -> torch.Tensor:
        """Embeddings in eval mode, batched by length (less padding), in the input order."""
        self.eval()
        order = np.argsort([len(t) for t in texts], kind="stable")
        out = torch.empty(len(texts), self.model.config.hidden_size)
        for s in range(0, len(texts), batch_size):
            idx = order[s:s + batch_size]
            out[torch.as_tensor(idx)] = self([texts[i] for i in idx])
        return out


# --- one arm ------------------------------------------------------------------------------------------------

class Trainer:
    """Trains the arms of one run on one training pool, each model once per (route, seed): teachers
    and base arms are shared by the arms that need them."""

    def __init__(self, p_policy, train: pd.DataFrame, embed):
        self.s = p_policy
        self.train = train.reset_index(drop=True)
        self.embed = embed
        self.x = torch.as_tensor(np.asarray(embed(self.train["text"].tolist()), dtype=np.float32))
        self.arms = {a.name: a for a in p_policy.arms}
        self._teachers: dict[tuple[str, int], Guard] = {}
        self._fitted: dict[tuple[str, int], Fitted] = {}

    def teacher(self, policy: str, seed: int) -> Guard:
        key = (policy, seed)
        if key not in self._teachers:
            y = labels_of(self.train[f"label_{policy}"])
            self._teachers[key] = train_guard(self.x, y, self.s.teacher.hidden, seed + 104729, self.s.teacher)
        return self._teachers[key]

    def fit(self, name: str, seed: int) -> Fitted:
        """The arm ``name`` trained under ``seed`` (cached)."""
        key = (name, seed)
        if key in self._fitted:
            return self._fitted[key]
        arm = self.arms[name]
        start = time.perf_counter()
        if arm.recalibrate == "none":
            y = mixed_labels(self.train, arm.hard_a, seed)
            soft = None
            if arm.teacher != "none":
                teacher = self.teacher(arm.teacher, seed)
                with torch.no_grad():
                    soft = teacher(self.x)
            model = train_guard(self.x, y, self.s.student.hidden, seed, self.s.student, soft=soft,
                                tau=self.s.kd.tau, alpha=self.s.kd.alpha, kd_weighting=self.s.kd.weighting)
            fitted = Fitted(model, None, n_params(model), n_params(model) + self._encoder_params())
        else:
            base = self.fit(arm.base, seed)
            start = time.perf_counter()  # the base's own time is its own row
            fitted = self._recalibrate(arm, base, seed)
        fitted.seconds = time.perf_counter() - start
        self._fitted[key] = fitted
        return fitted

    def _encoder_params(self) -> int:
        return n_params(encoder())

    def _recalibrate(self, arm, base: Fitted, seed: int) -> Fitted:
        cap = self.s.lora.max_rows if arm.recalibrate == "lora" else 0
        rows = calibration_rows(len(self.train), arm.calibration, seed, cap)
        y = labels_of(self.train[f"label_{arm.calibration_policy}"].iloc[rows])
        model = copy.deepcopy(base.model).train()
        torch.manual_seed(seed)
        if arm.recalibrate == "head":
            for prm in model.body.parameters():
                prm.requires_grad_(False)
            h = self.s.head
            _fit(model, list(model.head.parameters()), self.x[torch.as_tensor(rows)], y, epochs=h.epochs, lr=h.lr,
                 batch_size=h.batch_size, seed=seed, weight_decay=h.weight_decay)
            trained = n_params(model.head)
            return Fitted(model.eval(), None, trained, n_params(model) + self._encoder_params(), n_calibration=len(rows))
        lo = self.s.lora
        enc = LoraEncoder(lo.r, lo.alpha, lo.dropout, list(lo.targets)).train()
        texts = self.train["text"].iloc[rows].tolist()
        params = [{"params": [q for q in enc.parameters() if q.requires_grad], "lr": lo.lr},
                  {"params": list(model.parameters()), "lr": lo.head_lr}]
        _fit(lambda batch: model(enc(batch)), params, texts, y, epochs=lo.epochs, lr=lo.lr,
             batch_size=lo.batch_size, seed=seed, weight_decay=0.0)
        trained = n_params(enc, trainable_only=True) + n_params(model)
        return Fitted(model.eval(), enc.eval(), trained, n_params(enc) + n_params(model), n_calibration=len(rows))

    @torch.no_grad()
    def predict(self, fitted: Fitted, texts: list[str]) -> np.ndarray:
        """Class probabilities (rows: texts, columns: ``CLASSES``)."""
        if fitted.encoder is None:
            x = torch.as_tensor(np.asarray(self.embed(texts), dtype=np.float32))
        else:
            x = fitted.encoder.embed(texts)
        return torch.softmax(fitted.model(x), dim=1).numpy()


def state_equal(a: Fitted, b: Fitted) -> bool:
    """Two trained guards with bit-identical parameters (LoRA adapters included)."""
    def tensors(f: Fitted):
        out = list(f.model.state_dict().values())
        if f.encoder is not None:
            out += [v for k, v in f.encoder.state_dict().items() if "lora_" in k]
        return out

    ta, tb = tensors(a), tensors(b)
    return len(ta) == len(tb) and all(torch.equal(x, y) for x, y in zip(ta, tb))
