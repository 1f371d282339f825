"""Line parsers for a stage's ``progress`` pattern: one per preset, and one for a custom regex.

A parser gets one log line at a time (a line ends at ``\\n`` or at a progress bar's ``\\r``,
ANSI colours already removed) and returns a :class:`Reading` when the line says something
about progress, else None. Parsers keep what earlier lines told them (a table header, the
total number of steps, the training bar's total); :mod:`corral.agent.log_progress` fills a
reading's missing step and total from the ones before it.

Steps of the epoch-based tools (Lightning, Ultralytics) count batches over the whole run:
``epoch * batches_per_epoch + batch``, with ``total = epochs * batches_per_epoch`` when the
number of epochs is printed, so the percentage and the ETA cover the whole run.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Protocol

from corral.wire.progress_patterns import KNOWN_GROUPS, PRESETS, compile_custom

Number = int | float


@dataclass
class Reading:
    step: Number | None = None
    total: Number | None = None
    loss: Number | None = None
    epoch: Number | None = None
    metrics: dict[str, Number] = field(default_factory=dict)

    def has_values(self) -> bool:
        """Carries a loss or a metric (worth sending to the trackers), not only a position."""
        return self.loss is not None or bool(self.metrics)


class LineParser(Protocol):
    """``parse`` one line; a parser that holds a reading back for a later line also has
    ``flush() -> Reading | None``, called at the end of the output."""

    def parse(self, line: str) -> Reading | None: ...


_NUMBER = re.compile(
    r"[-+]?(?:nan|inf(?:inity)?|(?:\d[\d,]*(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)", re.IGNORECASE
)


def number(text: object) -> Number | None:
    """The number ``text`` starts with (units after it, thousands commas and quotes are
    ignored: ``"37.89GiB(39.89%)"`` -> 37.89, ``"1,234"`` -> 1234), or None."""
    if isinstance(text, bool):
        return None
    if isinstance(text, (int, float)):
        return text
    if not isinstance(text, str):
        return None
    found = _NUMBER.match(text.strip().strip("'\""))
    if not found:
        return None
    raw = found.group(0).replace(",", "")
    try:
        if re.fullmatch(r"[-+]?\d+", raw):
            return int(raw)
        return float(raw)
    except ValueError:
        return None


def metric_name(text: str) -> str:
    """``"grad norm"`` -> ``"grad_norm"``; ``"tok/sec"`` stays."""
    return re.sub(r"\s+", "_", text.strip()).lower()


# --- HF Trainer -------------------------------------------------------------------------------

#: A tqdm bar with a known total: ``<desc>: 45%|████▌     | 45/100 [00:01<00:02, 25.00it/s]``
#: (``desc`` and its colon are absent from a bar without a description; a ``bar_format``
#: may leave out the percentage and the bar).
_TQDM = re.compile(r"(?P<desc>[^|]*?)\s*(?:\d+%\|[^|]*\|)?\s*(?P<n>\d+)/(?P<total>\d+) \[")
_DICT = re.compile(r"\{'[^{}]*\}")


class HfParser:
    """The Trainer's tqdm bar (``  12/100 [00:03<00:20,  4.2it/s]``) gives step/total; the dicts
    the Trainer prints (``{'loss': 2.31, 'learning_rate': 5e-05, 'epoch': 0.5}``, numbers or
    quoted numbers as transformers 5 prints them) give loss, epoch and metrics.

    The Trainer's bars have no description: a bar with one is another library's (datasets'
    ``Map: 100%|...| 1840/1840 [..., 3.2k examples/s]``, ``Running tokenizer on dataset``,
    ``Loading checkpoint shards``, transformers' own ``Writing model shards``) and is left out.
    Of the bars without one, the first total seen is the training's: the evaluation bars (another
    total) are left out too.

    A dict's step is the one of the bar's next redraw. The Trainer prints its dicts with
    ``tqdm.write``, which redraws the bar (its current step) right after the dict, whereas the
    redraw before it can be several steps old (tqdm redraws at most every 0.1 s). Once the
    training's bar is known, a dict is held until that redraw (or the next dict, or the end)."""

    def __init__(self) -> None:
        self._total: int | None = None
        self._held: Reading | None = None  # a dict waiting for the bar's next redraw

    def parse(self, line: str) -> Reading | None:
        found = _DICT.search(line)
        position = self._bar(line[: found.start()] if found else line)
        if not found:
            if position is None or self._held is None:
                return position
            held, self._held = self._held, None
            held.step, held.total = position.step, position.total
            return held
        reading = self._dict(found.group(0))
        if reading is None:
            return position
        if self._total is None:  # no bar (yet, or disable_tqdm): the dict as it comes
            return reading
        earlier, self._held = self._held, reading
        return earlier or position

    def flush(self) -> Reading | None:
        held, self._held = self._held, None
        return held

    def _bar(self, text: str) -> Reading | None:
        bars = [bar for bar in _TQDM.finditer(text) if not bar.group("desc").strip()]
        if not bars:
            return None
        bar = bars[-1]  # the last redraw in the text
        total = int(bar.group("total"))
        if self._total is None:
            self._total = total
        if total != self._total:
            return None
        return Reading(step=int(bar.group("n")), total=total)

    def _dict(self, text: str) -> Reading | None:
        try:
            data = ast.literal_eval(text)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return None
        if not isinstance(data, dict):
            return None
        reading = Reading()
        for key, raw in data.items():
            value = number(raw)
            if value is None or not isinstance(key, str):
                continue
            if key == "loss":
                reading.loss = value
            elif key == "epoch":
                reading.epoch = value
            else:
                reading.metrics[key] = value
        return reading if reading.has_values() or reading.epoch is not None else None


# --- nanoGPT ----------------------------------------------------------------------------------

_NANOGPT_ITER = re.compile(
    r"^iter (?P<step>\d+): loss (?P<loss>\S+?), time (?P<time>\S+?)ms(?:, mfu (?P<mfu>\S+?)%)?"
)
_NANOGPT_EVAL = re.compile(
    r"^step (?P<step>\d+): train loss (?P<train>\S+?), val loss (?P<val>\S+)"
)
_NANOGPT_MAX = re.compile(r"^(?:Overriding: )?max_iters = (?P<total>\d+)\s*$")


class NanoGptParser:
    """``iter 100: loss 2.3456, time 12.34ms, mfu 12.34%``, the eval line ``step 250: train
    loss 2.1234, val loss 2.3456`` and, for the total, ``Overriding: max_iters = 5000``."""

    def parse(self, line: str) -> Reading | None:
        found = _NANOGPT_ITER.match(line)
        if found:
            metrics = {"time_ms": number(found.group("time"))}
            if found.group("mfu") is not None:
                metrics["mfu"] = number(found.group("mfu"))
            return Reading(
                step=int(found.group("step")),
                loss=number(found.group("loss")),
                metrics={k: v for k, v in metrics.items() if v is not None},
            )
        found = _NANOGPT_EVAL.match(line)
        if found:
            metrics = {
                "train_loss": number(found.group("train")),
                "val_loss": number(found.group("val")),
            }
            return Reading(
                step=int(found.group("step")),
                metrics={k: v for k, v in metrics.items() if v is not None},
            )
        found = _NANOGPT_MAX.match(line)
        if found:
            return Reading(total=int(found.group("total")))
        return None


# --- PyTorch Lightning ------------------------------------------------------------------------

_LIGHTNING = re.compile(
    r"^Epoch (?P<epoch>\d+)(?:/(?P<last>-?\d+))?:.*?(?P<n>\d+)/(?P<per>\d+) \[(?P<post>[^\]]*)\]"
)
#: Lightning's Rich bar (its default when ``rich`` is importable), a row as Rich draws it:
#: ``Epoch 2/9  ━━━━━━━╺━━━━ 45/100 0:00:01 • 0:00:02 25.00it/s v_num: 0.000 train_loss: 0.123``
_LIGHTNING_RICH = re.compile(
    r"^Epoch (?P<epoch>\d+)(?:/(?P<last>-?\d+))?\s+[━╸╺\s]*\s(?P<n>\d+)/(?P<per>\d+)\s"
    r"(?P<post>.*)$"
)
_PAIR = re.compile(r"([A-Za-z_][\w/.\-]*)=([^,\]]+)")
_RICH_PAIR = re.compile(r"([A-Za-z_][\w/.\-]*): (\S+)")
_LOSS_KEYS = ("loss", "train_loss", "train_loss_step", "train/loss")


class LightningParser:
    """The tqdm bar ``Epoch 0:  45%|████▌     | 45/100 [00:01<00:02, 25.00it/s, v_num=0,
    loss=0.123]`` (``Epoch 0/9:`` where the bar shows the last epoch: 10 epochs) and the Rich
    bar ``Epoch 0/9  ━━━━╺━━━ 45/100 0:00:01 • 0:00:02 25.00it/s v_num: 0.000 loss: 0.123``
    with the pairs it wraps onto the lines below it on a narrow console; ``v_num`` is left
    out. The Rich bar draws nothing on a non-terminal before the end of the run: the agent
    runs a ``progress: lightning`` stage with ``TTY_COMPATIBLE=1`` and a wide ``COLUMNS``
    (:data:`corral.wire.progress_patterns.PRESET_ENV`) so that Rich draws it as it goes."""

    def __init__(self) -> None:
        #: the values of the last row of the Rich bar and of the lines it wrapped onto so far
        #: (None when the line before was no such row)
        self._wrapped: str | None = None

    def parse(self, line: str) -> Reading | None:
        found = _LIGHTNING.match(line)
        pairs = _PAIR
        if not found:
            found, pairs = _LIGHTNING_RICH.match(line), _RICH_PAIR
        if not found:
            if self._wrapped is not None and line.startswith(" " * 8):  # wrapped onto this line
                self._wrapped += " " + line.strip()
                return _values(_RICH_PAIR.findall(self._wrapped), Reading())
            self._wrapped = None
            return None
        self._wrapped = found.group("post") if pairs is _RICH_PAIR else None
        epoch, n, per = int(found.group("epoch")), int(found.group("n")), int(found.group("per"))
        total = None
        last = found.group("last")
        if last is not None and int(last) >= 0:
            total = (int(last) + 1) * per
        reading = Reading(step=epoch * per + n, total=total, epoch=epoch)
        return _values(pairs.findall(found.group("post")), reading)


def _values(pairs: list[tuple[str, str]], reading: Reading) -> Reading | None:
    """``reading`` with the bar's ``name=value`` pairs: the loss and the metrics."""
    for key, raw in pairs:
        value = number(raw)
        if value is not None and key != "v_num":
            reading.metrics[key] = value
    reading.loss = next((reading.metrics.pop(k) for k in _LOSS_KEYS if k in reading.metrics), None)
    if reading.step is None and not reading.has_values():
        return None
    return reading


# --- Ultralytics ------------------------------------------------------------------------------

_YOLO_ROW = re.compile(
    r"^\s*(?P<epoch>\d+)/(?P<epochs>\d+)\s+(?P<mem>[\d.]+(?:e[-+]?\d+)?[KMGT]?)\s+(?P<rest>.*)$"
)
#: The bar after a row's colon: tqdm's ``45%|████▌     | 8/18 [...]`` (8.3 and before) or
#: Ultralytics' own ``45% ━━━━━╸────── 8/18 3.1it/s 2.6s<3.2s`` (8.4).
_BAR_COUNT = re.compile(r"\d+%\s*(?:\|[^|]*\||[━─╸╺]*)\s*(?P<n>\d+)/(?P<total>\d+)(?:\s|$)")
_YOLO_ALL = re.compile(r"^\s*all\s+\d+\s+\d+\s+(?P<values>.+?)\s*$")


class UltralyticsParser:
    """The training table: its header (``Epoch GPU_mem box_loss cls_loss dfl_loss Instances
    Size``) names the columns of the rows (``1/100  2.1G  1.234  2.345  1.456  12  640: 45%
    ━━━━━╸────── 8/18 3.1it/s 2.6s<3.2s`` with 8.4's own bar, ``...  640: 45%|..| 8/18 [...]``
    with tqdm's before it; values as ``%.4g`` prints them, ``6.39e-05`` too); ``loss`` is the
    sum of the ``*_loss`` columns. Validation's ``all`` row gives
    the metrics its header names (``box_P``, ``box_R``, ``box_mAP50``, ``box_mAP50-95``)."""

    def __init__(self) -> None:
        self._columns: list[str] = []
        self._val_columns: list[str] = []
        #: batches per epoch, once a row's bar said it
        self._per: int | None = None

    def parse(self, line: str) -> Reading | None:
        words = line.split()
        if "Epoch" in words and "GPU_mem" in words:
            self._columns = words[words.index("Epoch") + 2 :]
            return None
        if words[:1] == ["Class"] and "Instances" in words:
            self._val_columns = _val_names(line.split(":")[0].split()[3:])
            return None
        found = _YOLO_ROW.match(line)
        if found and self._columns:
            return self._row(found)
        found = _YOLO_ALL.match(line)
        if found and self._val_columns:
            values = [number(v) for v in found.group("values").split()]
            if None in values:  # not the table's row
                return None
            metrics = {
                k: v for k, v in zip(self._val_columns, values, strict=False) if v is not None
            }
            return Reading(metrics=metrics) if metrics else None
        return None

    def _row(self, found: re.Match[str]) -> Reading | None:
        table, _, bar = found.group("rest").partition(":")
        values = [number(v) for v in table.split()]
        metrics = {
            name: value
            for name, value in zip(self._columns, values, strict=False)
            if value is not None and name.endswith("_loss")
        }
        epoch, epochs = int(found.group("epoch")), int(found.group("epochs"))
        count = _BAR_COUNT.search(bar)
        step: int | None
        total: int | None
        if count:
            n, per = int(count.group("n")), int(count.group("total"))
            self._per = per
            step, total = (epoch - 1) * per + n, epochs * per
        elif self._per:  # a row without its bar: the epoch's start, in batches still
            step, total = (epoch - 1) * self._per, epochs * self._per
        elif ":" in found.group("rest") and not bar.strip():
            # a row read before its bar was written (the first one after a resume, say): its
            # position comes with the bar; an epoch number here would read as a step far back
            step = total = None
        else:  # a table without bars: epochs are the steps
            step, total = epoch, epochs
        loss = sum(metrics.values()) if metrics else None
        return Reading(step=step, total=total, loss=loss, epoch=epoch, metrics=metrics)


def _val_names(tokens: list[str]) -> list[str]:
    """``['Box(P', 'R', 'mAP50', 'mAP50-95)']`` -> ``['box_P', 'box_R', 'box_mAP50', ...]``."""
    names, prefix = [], ""
    for token in tokens:
        if "(" in token:
            prefix, token = token.split("(", 1)
            prefix = prefix.lower() + "_"
        names.append(prefix + token.strip("()"))
    return names


# --- torchtitan -------------------------------------------------------------------------------

_TITAN_STEP = re.compile(r"\bstep:\s*(?P<step>\d+)\s+(?P<rest>.*)$")
_TITAN_PAIR = re.compile(r"(\w+):\s*(\S+)")
_TITAN_TOTAL = re.compile(r"Training starts at step \d+.*?total steps (?P<total>\d+)")


class TorchtitanParser:
    """``step:  10  loss:  7.1234  grad_norm:  1.2  memory: 11.11GiB(11.70%)  tps: 1,234
    tflops: 12.34  mfu: 1.23%`` (after its logger's prefix); the total from ``Training starts at
    step 1, ..., total steps 1000 (warmup 200)``. A validation line (``Validation ... step: 10
    loss: 2.3``) gives ``val_loss`` and the like."""

    def parse(self, line: str) -> Reading | None:
        found = _TITAN_STEP.search(line)
        if found:
            reading = Reading(step=int(found.group("step")))
            validation = "validat" in line[: found.start()].lower()
            for key, raw in _TITAN_PAIR.findall(found.group("rest")):
                value = number(raw)
                if value is None:
                    continue
                if validation:
                    reading.metrics[f"val_{key}"] = value
                elif key == "loss":
                    reading.loss = value
                else:
                    reading.metrics[key] = value
            return reading
        found = _TITAN_TOTAL.search(line)
        if found:
            return Reading(total=int(found.group("total")))
        return None


# --- nanochat ---------------------------------------------------------------------------------

_NANOCHAT = re.compile(r"^step (?P<step>\d+)/(?P<total>\d+)(?: \([\d.]+%\))?(?P<rest>(?: \|.*)?)$")
_NANOCHAT_EVAL = re.compile(r"^Step (?P<step>\d+) \| Validation bpb: (?P<bpb>\S+)")


class NanochatParser:
    """``step 00100/01000 (10.00%) | loss: 3.123456 | lrm: 1.00 | dt: 123.45ms | tok/sec:
    123,456 | mfu: 12.34 | total time: 1.23m`` and ``Step 00250 | Validation bpb: 1.2345``."""

    def parse(self, line: str) -> Reading | None:
        found = _NANOCHAT.match(line)
        if found:
            reading = Reading(step=int(found.group("step")), total=int(found.group("total")))
            for part in found.group("rest").split("|"):
                key, sep, raw = part.partition(":")
                value = number(raw) if sep else None
                if value is None:
                    continue
                name = metric_name(key)
                if name == "loss":
                    reading.loss = value
                else:
                    reading.metrics[name] = value
            return reading
        found = _NANOCHAT_EVAL.match(line)
        if found:
            bpb = number(found.group("bpb"))
            if bpb is not None:
                return Reading(step=int(found.group("step")), metrics={"val_bpb": bpb})
        return None


# --- a custom regex ---------------------------------------------------------------------------


class RegexParser:
    """The spec's own regex, searched in every line: named groups ``step``, ``total``,
    ``loss`` and ``epoch`` are those, any other named group is a metric."""

    def __init__(self, pattern: str):
        self._pattern = compile_custom(pattern)

    def parse(self, line: str) -> Reading | None:
        found = self._pattern.search(line)
        if not found:
            return None
        reading = Reading()
        for name, raw in found.groupdict().items():
            value = number(raw)
            if value is None:
                continue
            if name in KNOWN_GROUPS:
                setattr(reading, name, value)
            else:
                reading.metrics[name] = value
        if reading.step is None and reading.total is None and not reading.has_values():
            return None
        return reading


_PRESET_PARSERS: dict[str, type] = {
    "hf": HfParser,
    "nanogpt": NanoGptParser,
    "lightning": LightningParser,
    "ultralytics": UltralyticsParser,
    "torchtitan": TorchtitanParser,
    "nanochat": NanochatParser,
}
assert set(_PRESET_PARSERS) == set(PRESETS)


def make_parser(progress: str) -> LineParser:
    """The parser for a plan's ``progress`` value (a preset name or a regex)."""
    preset = _PRESET_PARSERS.get(progress)
    if preset is not None:
        parser: LineParser = preset()
        return parser
    return RegexParser(progress)
