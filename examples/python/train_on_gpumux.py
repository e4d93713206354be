#!/usr/bin/python3
"""A PyTorch training loop on gpumux's allocator (CUDA PyTorch 2.0 or later).

Every CUDA allocation of PyTorch comes from gpumuxd, so operators see this
process's memory (`gpumux stats`, /metrics) and the daemon reclaims it if the
process dies.

  python3 examples/python/train_on_gpumux.py
"""

import torch

import gpumux.torch


def main():
    gpumux.torch.use_gpumux_allocator()  # before the first CUDA allocation
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                                torch.nn.Linear(4096, 10)).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    inputs = torch.randn(256, 1024, device="cuda")
    labels = torch.randint(0, 10, (256,), device="cuda")
    for step in range(20):
        loss = torch.nn.functional.cross_entropy(model(inputs), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 5 == 0:
            print(f"step {step}: loss {loss.item():.4f}")
    stats = gpumux.torch.memory_stats(torch.cuda.current_device())
    print(f"gpumux: {stats['allocated_bytes.all.current']} bytes allocated, "
          f"peak {stats['allocated_bytes.all.peak']}")


if __name__ == "__main__":
    main()
