"""Serve the trained quickstart model over HTTP (a corral service stage).

    python serve.py --port 8000          # after train.py: the model in out/model/

``GET /health`` answers ``{"ok": true}`` once the model is loaded; ``GET /generate?prompt=The
&chars=200`` (or ``POST /generate`` with ``{"prompt", "chars", "seed"}``) answers
``{"prompt", "text"}``, a sampled continuation. Standard library HTTP, one request at a time.
"""

from __future__ import annotations

print("quickstart: serving", flush=True)

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from http.server import BaseHTTPRequestHandler, HTTPServer  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402
from urllib.parse import parse_qs, urlsplit  # noqa: E402

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model import load_model  # noqa: E402

MAX_CHARS = 2000


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument(
        "--model", default=os.path.join(os.environ.get("QUICKSTART_OUT_DIR", "out"), "model")
    )
    p.add_argument("--threads", type=int, default=int(os.environ.get("QUICKSTART_THREADS", "2")))
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    model, vocab = load_model(Path(args.model))
    model.eval()

    def generate(prompt: str, chars: int, seed: int) -> str:
        known = "".join(c for c in prompt if c in vocab.chars) or vocab.chars[0]
        gen = torch.Generator().manual_seed(seed)
        ids = torch.tensor([vocab.encode(known)], dtype=torch.long)
        with torch.no_grad():
            out = model.generate(ids, max(1, min(MAX_CHARS, chars)), generator=gen)
        return vocab.decode(out[0].tolist())

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _generate(self, params: dict[str, Any]) -> None:
            try:
                prompt = str(params.get("prompt", "The "))
                chars, seed = int(params.get("chars", 200)), int(params.get("seed", 1337))
            except (TypeError, ValueError):
                return self._answer(400, {"error": "chars and seed must be integers"})
            self._answer(200, {"prompt": prompt, "text": generate(prompt, chars, seed)})

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            if url.path == "/health":
                return self._answer(200, {"ok": True})
            if url.path == "/generate":
                return self._generate({k: v[-1] for k, v in parse_qs(url.query).items()})
            self._answer(404, {"error": "try /generate?prompt=The"})

        def do_POST(self) -> None:
            if urlsplit(self.path).path != "/generate":
                return self._answer(404, {"error": "POST /generate"})
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                params = json.loads(raw or b"{}")
            except ValueError:
                return self._answer(400, {"error": "the body must be JSON"})
            self._generate(params if isinstance(params, dict) else {})

        def log_message(self, format: str, *a: Any) -> None:
            print("quickstart: " + format % a, flush=True)

    server = HTTPServer((args.host, args.port), Handler)
    print(f"quickstart: model from {args.model}, on http://{args.host}:{args.port}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
