"""A quick smoke run: fewer, smaller steps (``python train.py --experiment tiny``)."""

overrides = {"steps": 12, "save_steps": 4, "seq_len": 32, "lora.r": 4}
