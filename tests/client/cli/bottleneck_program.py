"""A Python program of a known shape for `gpumux bottleneck`: through the
gpumux package (libgpumux underneath), 30 allocations of 4 KiB, 3 memsets
of the first (blocking, as torch), then a device synchronize. It knows
nothing of profiling; the daemon is $GPUMUX_ADDRESS's."""
import gpumux

buffers = [gpumux.allocate(4096) for _ in range(30)]
for value in (1, 2, 3):
    buffers[0].memset(value)
gpumux.synchronize()
print("python program done")
