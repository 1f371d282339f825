"""GPU inventory: NVML (through a fake pynvml module), CUDA_VISIBLE_DEVICES, declared fakes."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from corral import gpu
from corral.errors import BadInput

UUIDS = ["GPU-aaaa1111-0000", "GPU-bbbb2222-0000", "GPU-cccc3333-0000"]


class FakeNvml:
    """Stands in for the ``pynvml`` module: three GPUs, or failures where asked."""

    def __init__(self, names=("NVIDIA L40S", b"NVIDIA L40S", "NVIDIA A100-SXM4-80GB"), fail=""):
        self.names = list(names)
        self.fail = fail
        self.shutdowns = 0

    def _maybe(self, what):
        if self.fail == what:
            raise RuntimeError(f"NVML {what} failed")

    def nvmlInit(self):
        self._maybe("init")

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetCount(self):
        self._maybe("count")
        return len(self.names)

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, h):
        self._maybe("name")
        return self.names[h]

    def nvmlDeviceGetUUID(self, h):
        self._maybe("uuid")
        return UUIDS[h].encode()

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(total=(h + 1) * 1024 * 2**20, used=h * 100 * 2**20)

    def nvmlDeviceGetUtilizationRates(self, h):
        if h > 0:
            self._maybe("util")
        return SimpleNamespace(gpu=10 * h)


@pytest.fixture(autouse=True)
def driver(tmp_path, monkeypatch):
    """A machine with an NVIDIA driver (a device node stands in for it): NVML is asked."""
    node = tmp_path / "nvidiactl"
    node.touch()
    monkeypatch.setattr(gpu, "DRIVER_PATHS", (str(node),))
    return node


@pytest.fixture
def nvml(monkeypatch):
    fake = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    return fake


def test_without_a_driver_nvml_is_not_even_imported(driver, monkeypatch):
    driver.unlink()
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml())  # three GPUs, if it were asked
    monkeypatch.setattr(sys, "platform", "linux")
    assert gpu.detect({}) == [] and gpu.usage(environ={}) == []


def test_nvml_gpus_are_listed_with_short_names_memory_and_uuids(nvml):
    gpus = gpu.detect({})
    assert [(g.index, g.id, g.name, g.memory_mb) for g in gpus] == [
        (0, "0", "L40S", 1024),
        (1, "1", "L40S", 2048),
        (2, "2", "A100", 3072),
    ]
    assert [g.uuid for g in gpus] == UUIDS
    assert not any(g.fake for g in gpus)
    assert nvml.shutdowns == 1


def test_no_nvml_library_means_no_gpu(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import raises ImportError
    assert gpu.detect({}) == []
    assert gpu.usage(environ={}) == []


@pytest.mark.parametrize("where", ["init", "count", "name"])
def test_nvml_failing_anywhere_means_no_gpu(monkeypatch, where):
    fake = FakeNvml(fail=where)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert gpu.detect({}) == []
    assert fake.shutdowns == (0 if where == "init" else 1)


@pytest.mark.parametrize("where", ["init", "count"])
def test_usage_with_nvml_failing_is_empty(monkeypatch, where):
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(fail=where))
    assert gpu.usage(environ={}) == []


def test_a_driver_without_uuids_still_lists_gpus(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(fail="uuid"))
    assert [g.uuid for g in gpu.detect({})] == ["", "", ""]


@pytest.mark.parametrize(
    ("visible", "ids"),
    [
        ("", []),
        ("2,0", ["2", "0"]),
        (" 1 ", ["1"]),
        ("1,7,0", ["1"]),  # CUDA stops at the first invalid entry
        ("-1", []),
        ("0,0,1", ["0"]),  # a repeated entry ends the list too
        ("GPU-cccc3333-0000", ["GPU-cccc3333-0000"]),
        ("GPU-bbbb,0", ["GPU-bbbb2222-0000", "0"]),  # a unique UUID prefix is enough
        ("GPU-,1", []),  # an ambiguous prefix names no GPU
        ("MIG-1234", []),
    ],
)
def test_cuda_visible_devices_filters_like_cuda(nvml, visible, ids):
    gpus = gpu.detect({"CUDA_VISIBLE_DEVICES": visible})
    assert [g.id for g in gpus] == ids
    assert [g.index for g in gpus] == list(range(len(ids)))


def test_a_gpu_picked_by_uuid_keeps_its_model_and_memory(nvml):
    [g] = gpu.detect({"CUDA_VISIBLE_DEVICES": "GPU-cccc"})
    assert (g.index, g.name, g.memory_mb, g.uuid) == (0, "A100", 3072, UUIDS[2])


def test_a_declared_inventory_wins_over_nvml_and_is_not_filtered(nvml):
    gpus = gpu.detect({"CORRAL_FAKE_GPUS": "L40S:2,A100:1", "CUDA_VISIBLE_DEVICES": ""})
    assert [(g.id, g.name, g.fake) for g in gpus] == [
        ("0", "L40S", True),
        ("1", "L40S", True),
        ("2", "A100", True),
    ]


def test_the_declared_inventory_is_read_from_the_process_environment(monkeypatch):
    monkeypatch.setenv("CORRAL_FAKE_GPUS", "H100:3")
    assert [g.name for g in gpu.detect()] == ["H100"] * 3


@pytest.mark.parametrize(
    ("value", "names"),
    [
        ("L40S:2", ["L40S", "L40S"]),
        ("2", ["GPU", "GPU"]),
        (" L40S:1 , A100:1 ,", ["L40S", "A100"]),
        ("L40S:0", []),
    ],
)
def test_declared_inventories_parse(value, names):
    assert [g.name for g in gpu.parse_fake(value)] == names


@pytest.mark.parametrize("value", ["L40S:x", "L40S:-1", ":3", "L40S:2:1"])
def test_malformed_declared_inventories_name_the_variable(value):
    with pytest.raises(BadInput, match="CORRAL_FAKE_GPUS="):
        gpu.parse_fake(value)


def test_describe_summarises_models_in_order():
    assert gpu.describe(gpu.parse_fake("L40S:2,A100:1")) == "L40S x2, A100 x1"
    assert gpu.describe([]) == "no GPU"


def test_usage_reports_nvml_numbers_by_index_or_uuid(nvml):
    assert [(u.id, u.utilization_pct, u.memory_used_mb) for u in gpu.usage(environ={})] == [
        ("0", 0.0, 0),
        ("1", 10.0, 100),
        ("2", 20.0, 200),
    ]
    picked = gpu.usage(["1", UUIDS[2]], environ={})
    assert [(u.id, u.memory_total_mb) for u in picked] == [("1", 2048), (UUIDS[2], 3072)]


def test_usage_of_fake_gpus_is_zero_and_never_raises():
    assert [u.id for u in gpu.usage(["1"], environ={"CORRAL_FAKE_GPUS": "L40S:2"})] == ["1"]
    assert gpu.usage(environ={"CORRAL_FAKE_GPUS": "L40S:oops"}) == []


def test_usage_failing_midway_keeps_what_it_read(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(fail="util"))  # fails on GPU 1
    assert [u.id for u in gpu.usage(environ={})] == ["0"]


class RichNvml(FakeNvml):
    """Also reports temperature, processes and ECC counts (GPU 2 has no ECC: NotSupported)."""

    NVML_TEMPERATURE_GPU = 0
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
    NVML_VOLATILE_ECC = 0

    def nvmlDeviceGetTemperature(self, h, sensor):
        return 40 + 10 * h

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [SimpleNamespace(pid=100 + i) for i in range(h)]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h):
        return [SimpleNamespace(pid=100)] if h else []  # the same process: counted once

    def nvmlDeviceGetTotalEccErrors(self, h, error_type, counter):
        if h == 2:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return 3 * h if error_type == 1 else 10


def test_samples_read_temperature_processes_and_ecc_where_the_driver_reports_them(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", RichNvml())
    got = [
        (s.id, s.name, s.temperature_c, s.processes, s.ecc_uncorrected, s.ecc_corrected)
        for s in gpu.sample(environ={})
    ]
    assert got == [
        ("0", "L40S", 40.0, 0, 0, 10),
        ("1", "L40S", 50.0, 1, 3, 10),
        ("2", "A100", 60.0, 2, None, None),
    ]


def test_a_driver_without_those_readings_reports_none(nvml):
    s = gpu.sample(["1"], environ={})[0]
    assert (s.id, s.utilization_pct, s.memory_used_mb, s.memory_total_mb) == ("1", 10.0, 100, 2048)
    assert (s.temperature_c, s.processes, s.ecc_uncorrected) == (None, None, None)


def test_a_declared_inventory_file_gives_the_inventory_and_its_readings(tmp_path):
    path = tmp_path / "gpus.json"
    path.write_text(
        '{"gpus": [{"name": "H100", "memory_total_mb": 81559, "memory_used_mb": 512,'
        ' "utilization_pct": 42, "temperature_c": 71, "processes": 2, "ecc_uncorrected": 1},'
        ' {"name": "A100"}]}'
    )
    env = {"CORRAL_FAKE_GPUS": str(path)}
    assert [(g.id, g.name, g.memory_mb, g.fake) for g in gpu.detect(env)] == [
        ("0", "H100", 81559, True),
        ("1", "A100", 0, True),
    ]
    first, second = gpu.sample(environ=env)
    assert (first.utilization_pct, first.temperature_c, first.processes) == (42.0, 71.0, 2)
    assert (first.ecc_uncorrected, second.temperature_c, second.processes) == (1, None, 0)
    assert [(u.id, u.utilization_pct, u.memory_used_mb) for u in gpu.usage(environ=env)] == [
        ("0", 42.0, 512),
        ("1", 0.0, 0),
    ]
    path.write_text('[{"name": "H100", "utilization_pct": 5}]')  # read again on every sample
    assert [s.utilization_pct for s in gpu.sample(environ=env)] == [5.0]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not JSON"),
        ('{"gpus": {}}', "expected"),
        ('[{"name": "H100", "utilization_pct": 120}]', r"gpus\[0\]\.utilization_pct"),
        ('[{"name": "H100", "colour": "green"}]', r"gpus\[0\]\.colour"),
    ],
)
def test_a_bad_inventory_file_names_the_variable_the_file_and_the_field(tmp_path, content, message):
    path = tmp_path / "gpus.json"
    path.write_text(content)
    with pytest.raises(BadInput, match=f"CORRAL_FAKE_GPUS={path}.*{message}"):
        gpu.parse_fake(str(path))
    assert gpu.sample(environ={"CORRAL_FAKE_GPUS": str(path)}) == []


def test_a_missing_inventory_file_is_one_line():
    with pytest.raises(BadInput, match="cannot read the file"):
        gpu.parse_fake("/nonexistent/gpus.json")
