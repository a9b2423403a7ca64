#!/usr/bin/python3
"""How this PyTorch dispatches aten operators, for the test that compares the
TorchScript and FX importers' tables (tests/torch/torchscript_import_test.cpp,
ImporterTables):

    aten_dispatch.py NAME...    (names without "aten::")

prints one line per name, "NAME KIND":
  composite  every overload is CompositeImplicitAutograd: PyTorch decomposes
             it before an FX graph exists (make_fx records what it calls)
  some       some overloads are; the others reach FX graphs as themselves
  kernel     no overload is: FX graphs record it
  jit_only   a TorchScript-only operator (aten::Int, aten::size, ...), not
             in the dispatcher: FX graphs hold Python values instead
  unknown    no operator of that name in this PyTorch
"""

import sys

import torch


def kind(name: str) -> str:
    schemas = torch._C._jit_get_schemas_for_operator("aten::" + name)
    if not schemas:
        return "unknown"
    composite = []
    for s in schemas:
        full = "aten::" + name + ("." + s.overload_name if s.overload_name else "")
        try:
            composite.append(torch._C._dispatch_has_kernel_for_dispatch_key(full, "CompositeImplicitAutograd"))
        except RuntimeError:  # registered with the JIT only
            pass
    if not composite:
        return "jit_only"
    return "composite" if all(composite) else "some" if any(composite) else "kernel"


def main(argv) -> int:
    for name in argv:
        print(name, kind(name))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
