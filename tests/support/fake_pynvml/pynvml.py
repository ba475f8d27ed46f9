"""``pynvml`` for a real agent subprocess on this GPU-less machine (put this folder first on PYTHONPATH):
``nvml_fake`` with $FAKE_NVML_GPUS GPUs, their readings overridden from the JSON file $FAKE_NVML_STATE."""

import json
import os
import sys
from pathlib import Path

# tests/support itself: nvml_fake alone, not the support package (which would load pytest into the agent)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from nvml_fake import fake_nvml  # noqa: E402


def _state() -> dict:
    path = os.environ.get("FAKE_NVML_STATE")
    return json.loads(Path(path).read_text() or "{}") if path and Path(path).exists() else {}


globals().update({k: v for k, v in vars(fake_nvml(int(os.environ.get("FAKE_NVML_GPUS", "8")), state=_state)).items()
                  if not k.startswith("__")})
