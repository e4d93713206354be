#!/usr/bin/python3
"""Two Python processes share a tensor through gpumux, without a copy.

The producer (this script) allocates a shareable buffer, fills it through
numpy, and hands a share token to a consumer process it starts, which
imports the token and reads the same memory as a torch tensor (DLPack),
then writes its answer into it. Run against a gpumuxd ($GPUMUX_ADDRESS or
the default socket):  python3 examples/python/share_tensor.py
"""

import subprocess
import sys

import numpy as np

import gpumux

CONSUMER = """
import sys, gpumux, torch
weights = torch.from_dlpack(gpumux.import_buffer(sys.argv[1])).view(torch.float32)
print(f"consumer: {weights.numel()} floats, sum {weights.sum().item():.1f}")
weights *= 2                      # in place: the producer sees it
"""


def main():
    buffer = gpumux.allocate(1 << 20, shareable=True)
    weights = np.asarray(buffer).view(np.float32)
    weights[:] = 1.0
    token = buffer.share()
    subprocess.run([sys.executable, "-c", CONSUMER, token], check=True)
    print(f"producer: sum after the consumer {float(weights.sum()):.1f}")


if __name__ == "__main__":
    main()
