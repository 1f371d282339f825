"""A tiny synthetic detection dataset for ``yolo train`` (no download): 16 images of 64x64
pixels, each with one square of one class, and its ``data.yaml`` (paths relative to it, so the
folder can be shipped with a job's code).

``python ultralytics_data.py DIR`` (an interpreter with ultralytics, so with PIL and numpy);
then ``yolo train model=yolov8n.yaml data=DIR/data.yaml imgsz=64 ...``.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np
from PIL import Image


def main() -> None:
    root = Path(sys.argv[1]).resolve()
    images, labels = root / "images" / "train", root / "labels" / "train"
    images.mkdir(parents=True, exist_ok=True)
    labels.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    for i in range(16):
        pixels = np.full((64, 64, 3), 200, np.uint8)
        x, y = rng.randint(8, 40), rng.randint(8, 40)
        pixels[y : y + 16, x : x + 16] = (30, 60, 200)
        Image.fromarray(pixels).save(images / f"{i}.jpg")
        (labels / f"{i}.txt").write_text(f"0 {(x + 8) / 64:.4f} {(y + 8) / 64:.4f} 0.25 0.25\n")
    # no `path:`: the images are found beside data.yaml, wherever the folder travels
    (root / "data.yaml").write_text("train: images/train\nval: images/train\nnames:\n  0: square\n")


if __name__ == "__main__":
    main()
