"""What torch reports as its NCCL, and which libnccl this process has really mapped."""

import ctypes

import torch

print("torch", torch.__version__, "cuda", torch.version.cuda, "cuda.is_available()", torch.cuda.is_available())
try:
    print("torch.cuda.nccl.version():", torch.cuda.nccl.version())
except Exception as exc:  # noqa: BLE001
    print("torch.cuda.nccl.version() raised:", type(exc).__name__, exc)
maps = sorted({line.split()[-1] for line in open("/proc/self/maps") if "libnccl" in line})  # noqa: PTH123, SIM115
print("libnccl mapped (/proc/self/maps):", maps)
for path in maps:
    code = ctypes.c_int(0)
    ctypes.CDLL(path).ncclGetVersion(ctypes.byref(code))
    print(f"  {path}: ncclGetVersion -> {code.value}")
