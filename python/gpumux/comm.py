"""torch.cuda.comm over gpumuxd: copies and sums across the daemon's devices.

The functions have torch.cuda.comm's names, signatures and rules; the
daemon does the work (with NCCL where it has it) and checks the arguments
with PyTorch's messages, raised as gpumux's exceptions (InvalidArgumentError
is both the RuntimeError and the ValueError torch raises). They run on the
default connection, on the calling thread's current stream of each device
taking part, and return once the work is queued there, as torch's do.

A tensor is an array whose memory lies in a live gpumux.Buffer of this
process: the Buffer itself (uint8, shape (nbytes,)); a numpy array or CPU
torch tensor viewing a host-backend Buffer (numpy.frombuffer(buffer, ...),
torch.frombuffer, torch.from_numpy, and contiguous slices and reshapes of
them); a CUDA torch tensor or any object with __cuda_array_interface__
whose memory lies in a CUDA Buffer. Tensors must be C-contiguous: where
torch would copy a non-contiguous tensor first, gpumux raises
InvalidArgumentError, since a copy would not lie in gpumux memory.

Results come back in the first input's kind: numpy arrays viewing a new
Buffer (which they keep alive through .base), torch tensors over it
(torch.frombuffer on the host backend, DLPack on CUDA), a whole new Buffer
for Buffer inputs (a numpy view, or on CUDA an object with
__cuda_array_interface__, for a part of one), and objects with
__cuda_array_interface__ for such inputs. Where torch returns an input or an
`out` tensor itself, the very same object comes back. gather to "cpu" (or
-1) returns a numpy array or CPU torch tensor in this process's memory.

What differs from torch: dense tensors only (no sparse ones), and only in
gpumux memory; "CPU" tensors of torch's rules are host-memory arrays
outside the daemon, which only gather's destination names.
"""

import sys as _sys
import warnings as _warnings

from . import _C
from ._core import _device_index, _lazy_client

__all__ = ["broadcast", "broadcast_coalesced", "reduce_add", "reduce_add_coalesced", "scatter",
           "gather"]

_INVALID_ARGUMENT = 3  # absl::StatusCode::kInvalidArgument
_DEFAULT_BUFFER_SIZE = 10485760


def _invalid(message):
    return _C._error_for_code(_INVALID_ARGUMENT, message)


class _Tensor:
    """An argument found in gpumux memory: the object the caller passed, its
    kind, and where it lies."""

    __slots__ = ("obj", "kind", "buffer", "offset", "dtype", "shape", "device")

    def __init__(self, obj, kind, buffer, offset, dtype, shape, device):
        self.obj, self.kind, self.buffer, self.offset = obj, kind, buffer, offset
        self.dtype, self.shape, self.device = dtype, tuple(shape), device

    def described(self):
        """As gpumux._C's calls take a tensor."""
        return (self.buffer, self.offset, self.dtype, list(self.shape), self.device)


def _located(obj, kind, address, nbytes, dtype, shape, what):
    buffer = _C._find_buffer(address, nbytes)
    if buffer is None:
        if nbytes == 0:  # no elements: nothing to find, the current device
            return _Tensor(obj, kind, None, 0, dtype, shape, _lazy_client().current_device())
        raise _invalid(
            f"{what} is not in gpumux memory: its {nbytes} bytes at 0x{address:x} lie in no live "
            f"gpumux.Buffer of this process (allocate with gpumux.allocate and view the buffer)")
    return _Tensor(obj, kind, buffer, address - buffer.ptr, dtype, shape, buffer.device)


def _not_contiguous(what):
    return _invalid(f"{what} is not contiguous: gpumux.comm takes C-contiguous tensors only "
                    f"(copy it into contiguous gpumux memory first)")


def _tensor(obj, what):
    """`obj` as a _Tensor, or TypeError / InvalidArgumentError saying why not."""
    if isinstance(obj, _C.Buffer):
        return _Tensor(obj, "buffer", obj, 0, "uint8", (obj.nbytes,), obj.device)
    torch = _sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        if obj.layout != torch.strided:
            raise _invalid(f"{what} is a {obj.layout} tensor: gpumux.comm takes dense tensors only")
        if not obj.is_contiguous():
            raise _not_contiguous(what)
        dtype = str(obj.dtype).rpartition(".")[2]
        return _located(obj, "torch", obj.data_ptr(), obj.numel() * obj.element_size(), dtype,
                        obj.shape, what)
    numpy = _sys.modules.get("numpy")
    if numpy is not None and isinstance(obj, numpy.ndarray):
        if not obj.flags.c_contiguous:
            raise _not_contiguous(what)
        return _located(obj, "numpy", obj.__array_interface__["data"][0], obj.nbytes,
                        obj.dtype.name, obj.shape, what)
    interface = getattr(obj, "__cuda_array_interface__", None)
    if isinstance(interface, dict):
        import numpy
        dtype = numpy.dtype(interface["typestr"])
        shape = tuple(interface["shape"])
        strides = interface.get("strides")
        if strides is not None and tuple(strides) != _c_strides(shape, dtype.itemsize):
            raise _not_contiguous(what)
        count = 1
        for size in shape:
            count *= size
        return _located(obj, "cuda", interface["data"][0], count * dtype.itemsize, dtype.name,
                        shape, what)
    raise TypeError(
        f"{what} must be a tensor in gpumux memory (a gpumux.Buffer, a numpy array or torch "
        f"tensor viewing one, or an object with __cuda_array_interface__), not "
        f"{type(obj).__name__}")


def _c_strides(shape, itemsize):
    strides, step = [], itemsize
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def _tensors(objs, what):
    return [_tensor(obj, f"{what}[{i}]") for i, obj in enumerate(objs)]


class _CudaArray:
    """CUDA memory in a gpumux.Buffer, by __cuda_array_interface__ (version
    3): what gpumux.comm returns for inputs that were such objects. It keeps
    the Buffer alive."""

    def __init__(self, buffer, offset, dtype, shape):
        self.buffer, self.offset, self.dtype, self.shape = buffer, offset, dtype, shape

    @property
    def __cuda_array_interface__(self):
        import numpy
        base = self.buffer.__cuda_array_interface__  # the daemon's queued work done first
        return {"shape": self.shape, "typestr": numpy.dtype(self.dtype).str,
                "data": (base["data"][0] + self.offset, False), "strides": None, "version": 3,
                "stream": None}

    def __repr__(self):
        return f"<gpumux.comm._CudaArray {self.dtype}{list(self.shape)} in {self.buffer!r}>"


def _count(shape):
    count = 1
    for size in shape:
        count *= size
    return count


def _make(like, buffer, offset, dtype, shape):
    """A result of `like`'s kind over `buffer` (None: no elements)."""
    count = _count(shape)
    kind = like.kind
    if kind == "buffer":
        if buffer is not None and offset == 0 and dtype == "uint8" and count == buffer.nbytes:
            return buffer
        kind = "numpy" if buffer is None or hasattr(buffer, "__array_interface__") else "cuda"
    if kind == "numpy":
        import numpy
        if buffer is None or count == 0:
            return numpy.empty(shape, dtype)
        return numpy.frombuffer(buffer, dtype, count, offset).reshape(shape)
    if kind == "torch":
        import torch
        torch_dtype = getattr(torch, dtype)
        if buffer is None or count == 0:
            return torch.empty(shape, dtype=torch_dtype, device=like.obj.device)
        if hasattr(buffer, "__array_interface__"):  # host memory
            return torch.frombuffer(buffer, dtype=torch_dtype, count=count, offset=offset).view(shape)
        import torch.utils.dlpack
        nbytes = count * torch.empty((), dtype=torch_dtype).element_size()
        flat = torch.utils.dlpack.from_dlpack(buffer)
        return flat[offset:offset + nbytes].view(torch_dtype).view(shape)
    return _CudaArray(buffer, offset, dtype, shape)


def _results(results, likes, as_is=()):
    """The native results as objects: likes[i] gives result i its kind; a
    result that is exactly one of `as_is` (torch returns it itself) is that
    object."""
    objects = []
    for i, (buffer, offset, dtype, shape, _device, owned) in enumerate(results):
        shape = tuple(shape)
        same = None
        if not owned:
            for t in as_is:
                if (t.buffer is buffer and t.offset == offset and t.dtype == dtype
                        and t.shape == shape):
                    same = t.obj
                    break
        objects.append(same if same is not None else _make(likes[i], buffer, offset, dtype, shape))
    return objects


def _device_arg(device):
    """A device as torch's _get_device_index reads it; ints pass as they are
    (the daemon says what is wrong with a negative one)."""
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    return _device_index(device)


def broadcast(tensor, devices=None, *, out=None):
    """torch.cuda.comm.broadcast(tensor, devices=None, *, out=None): copies of
    `tensor` on `devices`, or into each `out` tensor.

    Exactly one of `devices` and `out` is given. Returns a tuple with one
    tensor per device, `tensor` itself on its own device; with `out`, the
    `out` tensors themselves, which must have the tensor's shape and dtype.
    """
    if not ((devices is None) ^ (out is None)):
        raise _invalid("Exactly one of 'devices' and 'out' must be specified, but got "
                       "devices={} and out={}".format(devices, out))
    source = _tensor(tensor, "tensor")
    client = _lazy_client()
    if devices is not None:
        devices = [_device_arg(d) for d in devices]
        results = _C._broadcast(client, source.described(), devices)
        return tuple(_results(results, [source] * len(results), [source]))
    outs = _tensors(out, "out")
    results = _C._broadcast_out(client, source.described(), [o.described() for o in outs])
    return tuple(_results(results, outs, outs))


def broadcast_coalesced(tensors, devices, buffer_size=_DEFAULT_BUFFER_SIZE):
    """torch.cuda.comm.broadcast_coalesced(tensors, devices, buffer_size=10485760):
    `tensors`, all on devices[0], copied to every device, small ones sent
    together in chunks of at most `buffer_size` bytes.

    Returns one list per device, in the order of `devices`, of one tensor
    per input in the input order; devices[0]'s list holds the inputs
    themselves.
    """
    devices = [_device_arg(d) for d in devices]
    inputs = _tensors(tensors, "tensors")
    results = _C._broadcast_coalesced(_lazy_client(), [t.described() for t in inputs], devices,
                                      buffer_size)
    n = len(inputs)
    objects = _results(results, [inputs[i % n] for i in range(len(results))], inputs)
    return [objects[i:i + n] for i in range(0, len(objects), n)] if n else [[] for _ in devices]


def reduce_add(inputs, destination=None):
    """torch.cuda.comm.reduce_add(inputs, destination=None): the elementwise
    sum of `inputs` (equal shapes and dtype, one of them on `destination`,
    default the current device) in a new tensor on `destination`. A single
    input is returned as is."""
    destination = None if destination is None else _device_arg(destination)
    tensors = _tensors(inputs, "inputs")
    results = _C._reduce_add(_lazy_client(), [t.described() for t in tensors], destination)
    return _results(results, tensors[:1] * len(results), tensors)[0]


def reduce_add_coalesced(inputs, destination=None, buffer_size=_DEFAULT_BUFFER_SIZE):
    """torch.cuda.comm.reduce_add_coalesced(inputs, destination=None, buffer_size=10485760):
    `inputs` holds one list of tensors per device; returns a tuple with the
    sum of each position across the lists, on `destination` (default: the
    current device), small tensors summed together in chunks of at most
    `buffer_size` bytes."""
    destination = None if destination is None else _device_arg(destination)
    lists = [_tensors(tensors, f"inputs[{g}]") for g, tensors in enumerate(inputs)]
    results = _C._reduce_add_coalesced(_lazy_client(), [[t.described() for t in ts] for ts in lists],
                                       destination, buffer_size)
    # Result i sums position i of every list (the daemon checked the lists).
    return tuple(_results(results, lists[0], [t for ts in lists for t in ts]))


def scatter(tensor, devices=None, chunk_sizes=None, dim=0, streams=None, *, out=None):
    """torch.cuda.comm.scatter(tensor, devices=None, chunk_sizes=None, dim=0, streams=None, *, out=None):
    `tensor` split along `dim` (tensor.chunk(len(devices), dim), or
    `chunk_sizes`) with chunk i copied to devices[i], on streams[i] where
    given (a gpumux.Stream of that device). A chunk that stays on the
    tensor's device is a view of it. With `out`, the chunks are copied into
    the `out` tensors, which are returned; `devices` and `chunk_sizes` must
    then not be given. Returns a tuple.
    """
    source = _tensor(tensor, "tensor")
    streams = None if streams is None else list(streams)
    client = _lazy_client()
    if out is None:
        devices = [_device_arg(d) for d in devices]
        if chunk_sizes is not None:
            chunk_sizes = list(chunk_sizes)
        results = _C._scatter(client, source.described(), devices, chunk_sizes, dim, streams)
        return tuple(_results(results, [source] * len(results)))
    if devices is not None:
        raise _invalid("'devices' must not be specified when 'out' is specified, but "
                       "got devices={}".format(devices))
    if chunk_sizes is not None:
        raise _invalid("'chunk_sizes' must not be specified when 'out' is specified, "
                       "but got chunk_sizes={}".format(chunk_sizes))
    outs = _tensors(out, "out")
    results = _C._scatter_out(client, source.described(), [o.described() for o in outs], dim,
                              streams)
    return tuple(_results(results, outs, outs))


def _is_host(destination):
    if isinstance(destination, str):
        return destination.partition(":")[0] == "cpu"
    return getattr(destination, "type", None) == "cpu" and hasattr(destination, "index")


def _gathered_shape(tensors, dim):
    """The shape gather gives, where the arguments are right (the daemon
    says what is wrong otherwise)."""
    if not tensors:
        return ()
    first = tensors[0].shape
    d = dim + len(first) if dim < 0 else dim
    if not 0 <= d < len(first) or any(len(t.shape) != len(first) for t in tensors):
        return first
    return first[:d] + (sum(t.shape[d] for t in tensors),) + first[d + 1:]


def _gather_to_host(client, tensors, dim):
    import numpy
    shape = _gathered_shape(tensors, dim)
    dtype = tensors[0].dtype if tensors else "float32"
    torch = _sys.modules.get("torch") if tensors and tensors[0].kind == "torch" else None
    if torch is not None:
        result = torch.empty(shape, dtype=getattr(torch, dtype))
        dst = result.reshape(-1).view(torch.uint8).numpy()
    else:
        result = dst = numpy.empty(shape, dtype)
    gathered = _C._gather_to_host(client, [t.described() for t in tensors], dst, dim)
    if tuple(gathered[0][3]) != tuple(shape):
        raise _C._error_for_code(13, f"gather to the host: the daemon gathered shape "
                                     f"{tuple(gathered[0][3])}, not the expected {tuple(shape)}")
    return result


def gather(tensors, dim=0, destination=None, *, out=None):
    """torch.cuda.comm.gather(tensors, dim=0, destination=None, *, out=None):
    `tensors` concatenated along `dim` (equal shapes but for `dim`) in a new
    tensor on `destination`: a device (default: the current one), or "cpu"
    (-1, deprecated, too) for this process's host memory, a numpy array or
    CPU torch tensor. With `out`, into `out`, which is returned;
    `destination` must then not be given."""
    inputs = _tensors(tensors, "tensors")
    client = _lazy_client()
    if out is None:
        if isinstance(destination, int) and destination == -1:
            _warnings.warn(
                'Using -1 to represent CPU tensor is deprecated. Please use a '
                'device object or string instead, e.g., "cpu".', stacklevel=2)
        if (isinstance(destination, int) and destination == -1) or _is_host(destination):
            return _gather_to_host(client, inputs, dim)
        destination = None if destination is None else _device_arg(destination)
        results = _C._gather(client, [t.described() for t in inputs], dim, destination)
        return _results(results, inputs[:1])[0]
    if destination is not None:
        raise _invalid("'destination' must not be specified when 'out' is specified, but "
                       "got destination={}".format(destination))
    target = _tensor(out, "out")
    results = _C._gather_out(client, [t.described() for t in inputs], target.described(), dim)
    return _results(results, [target], [target])[0]
