"""Bigger adapters on every attention projection, computed from the base config."""


def configure(cfg):
    cfg.lora.targets = ["q_proj", "k_proj", "v_proj", "o_proj"]
    cfg.lora.r = cfg.lora.r * 2
    cfg.lora.alpha = cfg.lora.r * 2
