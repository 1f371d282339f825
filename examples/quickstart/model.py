"""A small character-level GPT and its corpus, shared by ``train.py`` and ``evaluate.py``.

The corpus is the help text that ships with Python itself (``pydoc_data.topics``), so the
example needs no download and commits no data. The model is a minimal nanoGPT-style decoder:
token + position embeddings, pre-norm transformer blocks with causal self-attention, a tied
output head.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn as nn
from torch.nn import functional as F

VAL_FRACTION = 0.1


# --- corpus ------------------------------------------------------------------------------------


def load_corpus() -> str:
    """The stdlib's help topics, joined in sorted key order (deterministic across runs)."""
    from pydoc_data.topics import topics

    return "\n".join(topics[key] for key in sorted(topics))


@dataclass(frozen=True)
class Vocab:
    chars: str

    @classmethod
    def from_text(cls, text: str) -> Vocab:
        return cls("".join(sorted(set(text))))

    @property
    def size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> list[int]:
        index = {c: i for i, c in enumerate(self.chars)}
        return [index[c] for c in text]

    def decode(self, ids: list[int]) -> str:
        return "".join(self.chars[i] for i in ids)


def split_corpus(text: str, vocab: Vocab) -> tuple[torch.Tensor, torch.Tensor]:
    """Encode the corpus and split it: the first 90% trains, the last 10% validates."""
    data = torch.tensor(vocab.encode(text), dtype=torch.long)
    cut = int(len(data) * (1 - VAL_FRACTION))
    return data[:cut], data[cut:]


def get_batch(
    data: torch.Tensor, batch_size: int, block_size: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random windows of ``block_size`` chars and the same windows shifted by one."""
    starts = torch.randint(len(data) - block_size - 1, (batch_size,), generator=generator)
    x = torch.stack([data[i : i + block_size] for i in starts.tolist()])
    y = torch.stack([data[i + 1 : i + 1 + block_size] for i in starts.tolist()])
    return x, y


# --- model -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int
    block_size: int = 64
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    dropout: float = 0.0


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        assert cfg.n_embd % cfg.n_head == 0, "n_embd must be a multiple of n_head"
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.dropout = cfg.dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        # (b, t, c) -> (b, heads, t, head_dim)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0
        )
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, c))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.n_embd)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.n_embd, 4 * cfg.n_embd),
            nn.GELU(),
            nn.Linear(4 * cfg.n_embd, cfg.n_embd),
            nn.Dropout(cfg.dropout),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.pos_emb = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.head.weight = self.tok_emb.weight  # weight tying
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        t = idx.shape[1]
        if t > self.cfg.block_size:
            raise ValueError(
                f"sequence of {t} chars is longer than block_size {self.cfg.block_size}"
            )
        pos = torch.arange(t, device=idx.device)
        x = self.tok_emb(idx) + self.pos_emb(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss

    @torch.no_grad()
    def generate(
        self, idx: torch.Tensor, new_tokens: int, temperature: float = 0.8, generator=None
    ) -> torch.Tensor:
        """Sample ``new_tokens`` chars after the prompt ``idx`` (shape (1, t))."""
        for _ in range(new_tokens):
            logits, _ = self(idx[:, -self.cfg.block_size :])
            probs = F.softmax(logits[:, -1, :] / temperature, dim=-1)
            idx = torch.cat([idx, torch.multinomial(probs, 1, generator=generator)], dim=1)
        return idx


@torch.no_grad()
def estimate_loss(
    model: GPT, data: torch.Tensor, batch_size: int, batches: int, seed: int = 1234
) -> float:
    """Mean loss over ``batches`` fixed random windows (same windows every call)."""
    was_training = model.training
    model.eval()
    gen = torch.Generator().manual_seed(seed)
    losses = [
        model(*get_batch(data, batch_size, model.cfg.block_size, gen))[1].item()
        for _ in range(batches)
    ]
    model.train(was_training)
    return sum(losses) / len(losses)


def lr_at(step: int, *, lr: float, min_lr: float, warmup: int, total: int) -> float:
    """Linear warmup to ``lr``, then cosine decay to ``min_lr`` at ``total`` steps."""
    if step < warmup:
        return lr * (step + 1) / warmup
    if step >= total:
        return min_lr
    progress = (step - warmup) / max(1, total - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (lr - min_lr)


# --- the saved model (out/model/) ---------------------------------------------------------------


def save_model(model: GPT, vocab: Vocab, out_dir: Path) -> Path:
    """Write weights (safetensors when installed, else torch.save) and ``config.json``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    state.pop("head.weight", None)  # tied to tok_emb.weight
    try:
        from safetensors.torch import save_file

        weights = out_dir / "model.safetensors"
        save_file(state, str(weights))
    except ImportError:
        weights = out_dir / "model.pt"
        torch.save(state, weights)
    meta = {"gpt": asdict(model.cfg), "vocab": vocab.chars, "weights": weights.name}
    (out_dir / "config.json").write_text(json.dumps(meta, indent=2))
    return weights


def load_model(model_dir: Path) -> tuple[GPT, Vocab]:
    meta = json.loads((model_dir / "config.json").read_text())
    model = GPT(GPTConfig(**meta["gpt"]))
    weights = model_dir / meta["weights"]
    if weights.suffix == ".safetensors":
        from safetensors.torch import load_file

        state = load_file(str(weights))
    else:
        state = torch.load(weights, map_location="cpu", weights_only=True)
    state["head.weight"] = state["tok_emb.weight"]
    model.load_state_dict(state)
    model.eval()
    return model, Vocab(meta["vocab"])
