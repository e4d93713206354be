"""torch.cuda.random over the daemon's per-session Philox generators.

States are bytes (16: seed then offset, little-endian u64); set_rng_state
also takes a torch ByteTensor or anything with the buffer protocol.
"""

from ._core import _device_index, _lazy_client, _lazy_seed_call

__all__ = ["get_rng_state", "get_rng_state_all", "set_rng_state", "set_rng_state_all",
           "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed"]


def _state_bytes(state):
    if isinstance(state, bytes):
        return state
    numpy = getattr(state, "numpy", None)
    if callable(numpy):  # a torch tensor
        return numpy().tobytes()
    return bytes(memoryview(state))


def _seed_int(value):
    seed = int(value)
    if not -0x8000_0000_0000_0000 <= seed <= 0xFFFF_FFFF_FFFF_FFFF:
        raise RuntimeError("Overflow when unpacking long")  # torch's words
    if seed < 0:
        seed &= 0xFFFF_FFFF_FFFF_FFFF  # as torch wraps negative seeds
    return seed


def get_rng_state(device="cuda"):
    """torch.cuda.get_rng_state(device='cuda'): the generator state of the device, as bytes."""
    return _lazy_client().get_rng_state(_device_index(device))


def get_rng_state_all():
    """torch.cuda.get_rng_state_all(): one state per device."""
    return list(_lazy_client().get_rng_state_all())


def set_rng_state(new_state, device="cuda"):
    """torch.cuda.set_rng_state(new_state, device='cuda'). InvalidArgumentError
    "RNG state is wrong size" unless 16 bytes (or 8: the seed alone)."""
    _lazy_client().set_rng_state(_state_bytes(new_state), _device_index(device))


def set_rng_state_all(new_states):
    """torch.cuda.set_rng_state_all(new_states): one state per device, in order."""
    _lazy_client().set_rng_state_all([_state_bytes(s) for s in new_states])


# The seeding functions below do not connect: before the default connection
# is made they wait for it, and where no daemon ever answers they are
# silently ignored, as torch.cuda's wait for CUDA's initialisation
# (gpumux._core._lazy_seed_call).


def manual_seed(seed):
    """torch.cuda.manual_seed(seed): seeds the current device's generator."""
    seed = _seed_int(seed)
    _lazy_seed_call("seed", lambda client: client.manual_seed(seed, None))


def manual_seed_all(seed):
    """torch.cuda.manual_seed_all(seed): seeds every device's generator."""
    seed = _seed_int(seed)
    _lazy_seed_call("seed_all", lambda client: client.manual_seed_all(seed))


def seed():
    """torch.cuda.seed(): a non-deterministic seed for the current device,
    returned (None while it waits for the default connection)."""
    return _lazy_seed_call("seed", lambda client: client.seed(None))


def seed_all():
    """torch.cuda.seed_all(): one fresh non-deterministic seed on every
    device, returned (None while it waits for the default connection)."""
    return _lazy_seed_call("seed_all", lambda client: client.seed_all())


def initial_seed():
    """torch.cuda.initial_seed(): the current device's last seed."""
    return _lazy_client().initial_seed(None)
