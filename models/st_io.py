#!/usr/bin/python3
"""Minimal safetensors reader/writer in pure Python + torch.

Debian ships no `safetensors` package, so Kiln writes the format itself:

    [8 bytes]  N, little-endian uint64: length of the JSON header
    [N bytes]  JSON header, UTF-8, padded with spaces (0x20) to a multiple of 8
    [rest]     raw little-endian tensor data

Header: {"__metadata__": {str: str}, KEY: {"dtype": "F32", "shape": [..],
"data_offsets": [begin, end]}, ...}; offsets are relative to the start of the
data section, tensors are packed back to back with no holes.

What this writer fixes so that output is byte-for-byte reproducible:
  * header keys: "__metadata__" first (only if metadata is given), then the
    tensor keys in sorted order; compact JSON (no spaces) before the padding;
  * data order: by element size, largest first, then by key -- the same rule
    the reference implementation uses, so every tensor starts at an offset
    that is a multiple of its element size (the data section itself starts at
    8 + N, a multiple of 8).

Supported dtypes: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL.
"""

import json
import struct
from typing import Dict, Optional, Tuple

import torch

_TO_ST = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16",
    torch.bfloat16: "BF16", torch.int64: "I64", torch.int32: "I32",
    torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8", torch.bool: "BOOL",
}
_FROM_ST = {v: k for k, v in _TO_ST.items()}


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _raw_bytes(t: torch.Tensor) -> bytes:
    """The tensor's elements in row-major order as little-endian bytes."""
    t = t.detach().to("cpu").contiguous().reshape(-1)
    if t.numel() == 0:
        return b""
    # view(uint8) reinterprets the storage; x86/ARM hosts are little-endian.
    return t.view(torch.uint8).numpy().tobytes()


def serialize(tensors: Dict[str, torch.Tensor], metadata: Optional[Dict[str, str]] = None) -> bytes:
    """Serialize a dict of tensors (and optional string metadata) to bytes."""
    for k, t in tensors.items():
        if not isinstance(k, str):
            raise TypeError(f"safetensors keys must be str, got {k!r}")
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{k}: expected a tensor, got {type(t).__name__}")
        if t.dtype not in _TO_ST:
            raise TypeError(f"{k}: dtype {t.dtype} is not supported by st_io")
        if k == "__metadata__":
            raise ValueError("'__metadata__' is reserved")
    # Data layout: largest element size first, then key (keeps alignment).
    order = sorted(tensors, key=lambda k: (-_itemsize(tensors[k].dtype), k))
    entries, chunks, offset = {}, [], 0
    for k in order:
        t = tensors[k]
        data = _raw_bytes(t)
        entries[k] = {"dtype": _TO_ST[t.dtype], "shape": list(t.shape),
                      "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    header = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in sorted(metadata.items())}
    for k in sorted(entries):
        header[k] = entries[k]
    hbytes = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    hbytes += b" " * (-len(hbytes) % 8)
    return struct.pack("<Q", len(hbytes)) + hbytes + b"".join(chunks)


def save(path: str, tensors: Dict[str, torch.Tensor], metadata: Optional[Dict[str, str]] = None) -> None:
    """Write `tensors` to `path` in safetensors format."""
    with open(path, "wb") as f:
        f.write(serialize(tensors, metadata))


def deserialize(buf: bytes, where: str = "<bytes>") -> Tuple[Dict[str, torch.Tensor], Dict[str, str]]:
    """Parse a safetensors image; returns (tensors, metadata). Validates the
    header length, dtypes, shapes and offsets (contiguous, in bounds)."""
    if len(buf) < 8:
        raise ValueError(f"{where}: too short for a safetensors header")
    (n,) = struct.unpack("<Q", buf[:8])
    if n > len(buf) - 8:
        raise ValueError(f"{where}: header length {n} exceeds file size {len(buf)}")
    header = json.loads(buf[8:8 + n].decode("utf-8"))
    if not isinstance(header, dict):
        raise ValueError(f"{where}: header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    data = memoryview(buf)[8 + n:]
    tensors, spans = {}, []
    for k, info in header.items():
        dtype = _FROM_ST.get(info.get("dtype"))
        if dtype is None:
            raise ValueError(f"{where}: {k}: unsupported dtype {info.get('dtype')!r}")
        shape = [int(d) for d in info["shape"]]
        begin, end = (int(x) for x in info["data_offsets"])
        numel = 1
        for d in shape:
            if d < 0:
                raise ValueError(f"{where}: {k}: negative dimension in {shape}")
            numel *= d
        if end - begin != numel * _itemsize(dtype) or begin < 0 or end > len(data):
            raise ValueError(f"{where}: {k}: offsets {begin}..{end} do not fit shape {shape} "
                             f"{info['dtype']} in {len(data)} data bytes")
        spans.append((begin, end, k))
        raw = bytearray(data[begin:end])
        if numel == 0:
            t = torch.empty(shape, dtype=dtype)
        else:
            t = torch.frombuffer(raw, dtype=torch.uint8).view(dtype).reshape(shape).clone()
        tensors[k] = t
    # Packed back to back, covering the data section exactly.
    pos = 0
    for begin, end, k in sorted(spans):
        if begin != pos:
            raise ValueError(f"{where}: {k}: data starts at {begin}, expected {pos} (hole or overlap)")
        pos = end
    if pos != len(data):
        raise ValueError(f"{where}: {len(data) - pos} trailing bytes after the last tensor")
    return tensors, dict(metadata)


def load(path: str) -> Dict[str, torch.Tensor]:
    """Read all tensors of a safetensors file."""
    with open(path, "rb") as f:
        return deserialize(f.read(), path)[0]


def load_metadata(path: str) -> Dict[str, str]:
    """Read only the "__metadata__" map of a safetensors file."""
    with open(path, "rb") as f:
        return deserialize(f.read(), path)[1]
