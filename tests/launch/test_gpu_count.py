"""The local executor counts GPUs as torch does, without importing torch (NVIDIA's management
library through ctypes); a stand-in library built here plays NVML on machines without one."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from vlprobe.launch import executors

_FAKE_NVML = r"""
static int initialised = 0;
int nvmlInit_v2(void) { initialised = 1; return INIT_RESULT; }
int nvmlDeviceGetCount_v2(unsigned int *count) { if (!initialised) return 1; *count = COUNT; return 0; }
int nvmlShutdown(void) { initialised = 0; return 0; }
"""


def _fake_nvml(tmp_path: Path, count: int, init_result: int = 0) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the stand-in NVML library")
    src = tmp_path / "nvml.c"
    src.write_text(_FAKE_NVML.replace("INIT_RESULT", str(init_result)).replace("COUNT", str(count)))
    lib = tmp_path / f"libfake-nvml-{count}-{init_result}.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    return lib


def test_nvml_count(tmp_path: Path) -> None:
    assert executors._nvml_device_count(str(_fake_nvml(tmp_path, 3))) == 3
    assert executors._nvml_device_count(str(_fake_nvml(tmp_path, 3, init_result=9))) is None  # driver not loaded
    assert executors._nvml_device_count(str(tmp_path / "absent.so")) is None


def test_visible_gpus_from_nvml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lib = str(_fake_nvml(tmp_path, 2))
    real = executors._nvml_device_count
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(executors, "_nvml_device_count", lambda: real(lib))
    assert executors._visible_gpus() == ["0", "1"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-abc,1")
    assert executors._visible_gpus() == ["GPU-abc", "1"]


_COUNT = """
import sys
from vlprobe.launch.executors import _visible_gpus
print(_visible_gpus(), "torch" in sys.modules)
"""


@pytest.mark.skipif(any(Path(p).exists() for p in ("/dev/nvidiactl", "/dev/kfd"))
                    and executors._nvml_device_count() is None,
                    reason="a GPU device file without NVML: the count asks torch here, by design")
def test_counting_gpus_imports_no_torch() -> None:
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    done = subprocess.run([sys.executable, "-c", _COUNT], capture_output=True, text=True, env=env, check=True)
    gpus, torch_loaded = done.stdout.rsplit(" ", 1)
    assert torch_loaded.strip() == "False"
    if executors._nvml_device_count() is not None:  # a machine with NVIDIA's driver: torch counts the same
        import torch

        assert gpus == str([str(i) for i in range(torch.cuda.device_count())])
    else:
        assert gpus == "[]"
