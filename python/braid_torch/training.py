"""DDP communication hooks: fusion and compressed allreduce with error feedback.

The compressors are the C++ ones of ``include/braid/compress.hpp`` re-written in torch on top of
``torch.distributed`` collectives (any process group; the braid one is what they are made for),
step for step (docs/training.md):

* ``int8``   per block of ``block`` elements: scale = max|x| / 127, q = round-half-even(x * 127 /
  max|x|); the bucket is cut into ``world`` slices on block boundaries; ``all_to_all_single``
  sends slice s to rank s, which sums the dequantised slices in fp32 in rank order, re-quantises
  the sum and ``all_gather`` returns every slice to every rank. The rank owning a slice keeps
  the re-quantisation error of its sum in its residual.
* ``topk``   k = max(1, round(ratio * n)) largest magnitudes, ``all_gather`` of (int32 index,
  fp32 value) pairs, added in rank order.
* ``randk``  the same k indices on every rank from splitmix64 + Floyd's algorithm seeded with
  ``seed + step * 0x9E3779B97F4A7C15`` (bit-identical to ``kernels::sampleIndices``); an
  ``all_reduce`` of the k values; no indices on the wire.
* ``sign``   one bit per element (set when x >= 0) and a per-block scale (mean |x|), packed as in
  C++ (bit i % 8 of byte i / 8), ``all_gather``, decoded +-scale added in rank order.

Error feedback (on by default): per bucket, the residual is added to the gradient before
compression and afterwards holds what this rank's contribution left out. Differences from C++:
``int8``'s allgather pads every slice's packet to the largest one (torch's all_gather needs equal
sizes) and counts the padding in ``wire_bytes``; ``topk`` breaks ties as ``torch.topk`` does.

Usage::

    import braid_torch
    from braid_torch.training import CompressionState, compression_hook
    state = CompressionState("int8")            # or "topk:0.01", "randk:0.01", "sign"
    ddp.register_comm_hook(state, compression_hook)
    ...
    state.wire_bytes, state.dense_wire_bytes     # totals so far, bytes each rank sent

    from braid_torch.training import FusionState, fusion_hook
    ddp.register_comm_hook(FusionState(), fusion_hook)   # braid groups only

The fusion hook has no Python implementation of its own: FusionState holds a
``braid_torch.FusionBuffer``, i.e. the C++ ``braid::train::FusionBuffer`` over the braid group.
"""

import torch
import torch.distributed as dist

from . import FusionBuffer, _C, backend_of

__all__ = ["CompressionState", "compression_hook", "BraidCompressionState",
           "braid_compression_hook", "FusionState", "fusion_hook",
           "sample_indices", "parse_size", "dense_wire_bytes"]

_GOLDEN = 0x9E3779B97F4A7C15
_MASK = (1 << 64) - 1


def parse_size(text):
    """'65536', '64K', '4M', '1G' (binary multiples) -> bytes."""
    text = text.strip()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
    if mult != 1:
        text = text[:-1]
    value = int(text)
    if value < 0:
        raise ValueError(f"negative size {text!r}")
    return value * mult


def dense_wire_bytes(world, numel):
    """Bytes each rank sends in a bandwidth-optimal fp32 allreduce of numel elements."""
    return 0.0 if world <= 1 else 2.0 * (world - 1) / world * 4.0 * numel


def _splitmix64(state):
    state = (state + _GOLDEN) & _MASK
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return state, z ^ (z >> 31)


def sample_indices(seed, step, n, k):
    """k distinct indices of range(n), ascending, as braid::kernels::sampleIndices draws them."""
    k = min(k, n)
    state = (seed + step * _GOLDEN) & _MASK
    taken = set()
    for j in range(n - k, n):
        state, r = _splitmix64(state)
        t = r % (j + 1)
        taken.add(j if t in taken else t)
    return torch.tensor(sorted(taken), dtype=torch.int64)


def _k_for(ratio, n):
    if n == 0:
        return 0
    return min(n, max(1, int(round(ratio * n))))


def _round4(b):
    return (b + 3) // 4 * 4


def _quantize(x, block):
    """(scales fp32 [nb], q int8 [n]) of x per block, as kernels::quantizeInt8."""
    n = x.numel()
    nb = (n + block - 1) // block
    padded = torch.zeros(nb * block, dtype=torch.float32)
    padded[:n] = x
    blocks = padded.view(nb, block)
    m = blocks.abs().amax(dim=1)
    safe = torch.where(m == 0, torch.ones_like(m), m)
    inv = 127.0 / safe
    q = torch.round(blocks * inv[:, None]).clamp_(-127, 127)
    q[m == 0] = 0
    scales = torch.where(m == 0, torch.zeros_like(m), m / 127.0)
    return scales, q.to(torch.int8).view(-1)[:n]


def _dequantize(scales, q, block):
    n = q.numel()
    s = scales.repeat_interleave(block)[:n]
    return q.to(torch.float32) * s


def _encode_sign(x, block):
    n = x.numel()
    nb = (n + block - 1) // block
    padded = torch.zeros(nb * block, dtype=torch.float64)
    padded[:n] = x.abs().to(torch.float64)
    lens = torch.full((nb,), float(block), dtype=torch.float64)
    lens[-1] = n - (nb - 1) * block
    scales = (padded.view(nb, block).sum(dim=1) / lens).to(torch.float32)
    nbytes = (n + 7) // 8
    bits = torch.zeros(nbytes * 8, dtype=torch.uint8)
    bits[:n] = (x >= 0).to(torch.uint8)
    weights = torch.tensor([1, 2, 4, 8, 16, 32, 64, 128], dtype=torch.int32)
    packed = (bits.view(nbytes, 8).to(torch.int32) * weights).sum(dim=1).to(torch.uint8)
    return scales, packed


def _decode_sign(scales, packed, n, block):
    shifts = torch.arange(8, dtype=torch.int32)
    bits = ((packed.to(torch.int32)[:, None] >> shifts) & 1).view(-1)[:n]
    s = scales.repeat_interleave(block)[:n]
    return torch.where(bits == 1, s, -s)


def _as_bytes(t):
    return t.contiguous().view(torch.uint8) if t.numel() else torch.zeros(0, dtype=torch.uint8)


class CompressionState:
    """State of compression_hook: the method, per-bucket residuals and step counters, and the
    bytes sent so far.

    method: "none", "int8", "topk:RATIO", "randk:RATIO" or "sign" (as braid-perf --compress).
    """

    def __init__(self, method, process_group=None, error_feedback=True, block=256, seed=0x5EED):
        name, _, ratio = method.partition(":")
        if name not in ("none", "int8", "topk", "randk", "sign"):
            raise ValueError(f"unknown compression method {method!r}")
        if name in ("topk", "randk"):
            self.ratio = float(ratio) if ratio else 0.01
            if not 0.0 < self.ratio <= 1.0:
                raise ValueError(f"{method!r}: the ratio must be in (0, 1]")
        elif ratio:
            raise ValueError(f"{method!r}: {name} takes no ratio")
        self.method = name
        self.group = process_group
        self.error_feedback = error_feedback
        self.block = int(block)
        self.seed = int(seed)
        self.residuals = {}
        self.steps = {}
        self.wire_bytes = 0.0
        self.dense_wire_bytes = 0.0

    # -- the compressed sum of a flat fp32 tensor; returns the sum and this rank's residual ----
    def allreduce_sum(self, x, key=0):
        """Sum over the group of x (flat fp32), compressed; updates the residual of `key`."""
        world = dist.get_world_size(self.group)
        n = x.numel()
        self.dense_wire_bytes += dense_wire_bytes(world, n)
        if self.error_feedback:
            res = self.residuals.get(key)
            if res is None or res.numel() != n:
                res = torch.zeros(n, dtype=torch.float32)
            x = x + res
        if n == 0:
            return x
        out, residual = getattr(self, "_" + self.method)(x, world, key)
        if self.error_feedback:
            self.residuals[key] = residual
        return out

    def _none(self, x, world, key):
        x = x.clone()
        dist.all_reduce(x, group=self.group)
        self.wire_bytes += dense_wire_bytes(world, x.numel())
        return x, torch.zeros_like(x)

    def _int8(self, x, world, key):
        me = dist.get_rank(self.group)
        n, block = x.numel(), self.block
        nb = (n + block - 1) // block
        bounds = [min(nb * s // world * block, n) for s in range(world + 1)]
        packets, contrib = [], []
        for s in range(world):
            scales, q = _quantize(x[bounds[s]:bounds[s + 1]], block)
            contrib.append(_dequantize(scales, q, block))
            packets.append(self._packet(scales, q))
        residual = x - torch.cat(contrib)
        sizes = [p.numel() for p in packets]
        send = torch.cat(packets)
        recv = torch.empty(sizes[me] * world, dtype=torch.uint8)
        dist.all_to_all_single(recv, send, [sizes[me]] * world, sizes, group=self.group)
        mine = bounds[me + 1] - bounds[me]
        total = torch.zeros(mine, dtype=torch.float32)
        for r in range(world):
            scales, q = self._unpacket(recv[r * sizes[me]:(r + 1) * sizes[me]], mine, block)
            total += _dequantize(scales, q, block)
        scales, q = _quantize(total, block)
        requant = _dequantize(scales, q, block)
        residual[bounds[me]:bounds[me + 1]] += total - requant
        own = self._packet(scales, q)
        width = max(sizes)
        padded = torch.zeros(width, dtype=torch.uint8)
        padded[:own.numel()] = own
        gathered = [torch.empty(width, dtype=torch.uint8) for _ in range(world)]
        dist.all_gather(gathered, padded, group=self.group)
        out = torch.empty(n, dtype=torch.float32)
        for s in range(world):
            length = bounds[s + 1] - bounds[s]
            scales, q = self._unpacket(gathered[s], length, block)
            out[bounds[s]:bounds[s + 1]] = _dequantize(scales, q, block)
        alltoall = (world - 1) / world * float(sum(sizes))
        self.wire_bytes += alltoall + (world - 1) * float(width)
        return out, residual

    @staticmethod
    def _packet(scales, q):
        body = _as_bytes(q.view(torch.uint8) if q.numel() else q)
        pad = _round4(body.numel()) - body.numel()
        return torch.cat([_as_bytes(scales), body, torch.zeros(pad, dtype=torch.uint8)])

    @staticmethod
    def _unpacket(packet, length, block):
        nb = (length + block - 1) // block
        scales = packet[:4 * nb].clone().view(torch.float32)
        q = packet[4 * nb:4 * nb + length].clone().view(torch.int8)
        return scales, q

    def _topk(self, x, world, key):
        n = x.numel()
        k = _k_for(self.ratio, n)
        idx = torch.topk(x.abs(), k, sorted=False).indices.sort().values
        vals = x[idx]
        residual = x.clone()
        residual[idx] = 0
        packet = torch.cat([idx.to(torch.int32), vals.contiguous().view(torch.int32)])
        gathered = [torch.empty(2 * k, dtype=torch.int32) for _ in range(world)]
        dist.all_gather(gathered, packet, group=self.group)
        out = torch.zeros(n, dtype=torch.float32)
        for p in gathered:
            out.index_add_(0, p[:k].to(torch.int64), p[k:].clone().view(torch.float32))
        self.wire_bytes += (world - 1) * 8.0 * k
        return out, residual

    def _randk(self, x, world, key):
        n = x.numel()
        k = _k_for(self.ratio, n)
        step = self.steps.get(key, 0)
        self.steps[key] = step + 1
        idx = sample_indices(self.seed, step, n, k)
        vals = x[idx].clone()
        residual = x.clone()
        residual[idx] = 0
        dist.all_reduce(vals, group=self.group)
        out = torch.zeros(n, dtype=torch.float32)
        out[idx] = vals
        self.wire_bytes += dense_wire_bytes(world, k)
        return out, residual

    def _sign(self, x, world, key):
        n, block = x.numel(), self.block
        scales, bits = _encode_sign(x, block)
        residual = x - _decode_sign(scales, bits, n, block)
        packet = self._packet_sign(scales, bits)
        gathered = [torch.empty_like(packet) for _ in range(world)]
        dist.all_gather(gathered, packet, group=self.group)
        out = torch.zeros(n, dtype=torch.float32)
        nb = scales.numel()
        for p in gathered:
            s = p[:4 * nb].clone().view(torch.float32)
            out += _decode_sign(s, p[4 * nb:4 * nb + bits.numel()], n, block)
        self.wire_bytes += (world - 1) * float(packet.numel())
        return out, residual

    @staticmethod
    def _packet_sign(scales, bits):
        pad = _round4(bits.numel()) - bits.numel()
        return torch.cat([_as_bytes(scales), bits, torch.zeros(pad, dtype=torch.uint8)])


def _done(value):
    fut = torch.futures.Future()
    fut.set_result(value)
    return fut


def compression_hook(state, bucket):
    """DDP comm hook: the bucket's gradients averaged with state's compressor (fp32 buckets;
    others are all-reduced uncompressed). Runs the collectives before returning."""
    grad = bucket.buffer()
    world = dist.get_world_size(state.group)
    if grad.dtype != torch.float32:
        t = grad.clone()
        dist.all_reduce(t, group=state.group)
        return _done(t.div_(world))
    out = state.allreduce_sum(grad.detach().view(-1), key=bucket.index())
    return _done(out.div_(world).view_as(grad))


class BraidCompressionState:
    """State of braid_compression_hook: braid's C++ compressor (braid::train::Compressor,
    include/braid/compress.hpp) over a braid group, with per-bucket error feedback in C++.

    Unlike CompressionState (the Python rewrite, any process group, which runs the collectives
    before the hook returns), the hook only queues the bucket: braid's worker thread compresses
    it and runs the collectives in the group's issue order, and completes the hook's future, so
    compression and communication of one bucket overlap the backward pass of the next.

    method: "none", "int8", "topk:RATIO", "randk:RATIO" or "sign" (as braid-perf --compress).
    """

    def __init__(self, method, process_group=None, error_feedback=True, block=256, seed=0x5EED):
        self.group = process_group
        self._impl = _C.Compression(backend_of(process_group), method, bool(error_feedback),
                                    int(block), int(seed))

    @property
    def method(self):
        return self._impl.method

    def allreduce_async(self, tensor, key=0, op="avg"):
        """Queues the compressed allreduce of `tensor` (fp32, CPU, contiguous; in place) with the
        residual of `key`; returns a torch Future completed with [tensor] by braid's worker."""
        return self._impl.allreduce(tensor, int(key), op)

    @property
    def wire_bytes(self):
        """Bytes each rank sent so far (averaged over ranks), counted by the C++ compressor."""
        return self._impl.stats()["wire_bytes"]

    @property
    def dense_wire_bytes(self):
        """The same for uncompressed fp32 allreduces of the same buckets."""
        return self._impl.stats()["dense_wire_bytes"]

    @property
    def allreduces(self):
        """Compressed allreduces completed so far."""
        return self._impl.stats()["allreduces"]


def _first(fut):
    return fut.value()[0]


def braid_compression_hook(state, bucket):
    """DDP comm hook: the bucket's gradients averaged by braid's C++ compressor
    (BraidCompressionState) on braid's worker; returns before they are sent. Buckets other than
    fp32 are all-reduced (averaged) uncompressed."""
    grad = bucket.buffer()
    if grad.dtype != torch.float32:
        work = dist.all_reduce(grad, op=dist.ReduceOp.AVG, group=state.group, async_op=True)
        return work.get_future().then(_first)
    # DDP wants a Python value in the future: then() converts it (on braid's worker).
    return state.allreduce_async(grad.detach().view(-1), bucket.index(), "avg").then(
        lambda fut: fut.value()[0].view_as(grad))


class FusionState:
    """State of fusion_hook: a braid_torch.FusionBuffer (the C++ fusion buffer) that DDP's
    buckets go through, averaged, packed into few all-reduces.

    The buffer sends what is queued once ``threshold`` bytes are queued, once the oldest bucket
    waited ``cycle_time_ms`` (so buckets go out while the backward pass goes on), and at the
    last bucket of each step. threshold / cycle_time_ms default to BRAID_FUSION_THRESHOLD (64M)
    and BRAID_CYCLE_TIME (1 ms) (docs/env.md). Collective: construct it on every rank of the
    group (a braid group) at the same point, e.g. right after the DDP module.
    """

    def __init__(self, process_group=None, threshold=None, cycle_time_ms=None):
        self.group = process_group
        self.buffer = FusionBuffer(process_group, threshold_bytes=threshold,
                                   cycle_time_ms=cycle_time_ms)
        self.buckets = 0

    @property
    def threshold(self):
        return self.buffer.threshold_bytes

    @property
    def allreduces(self):
        """Data all-reduces the buffer issued so far (for all buckets together)."""
        return self.buffer.stats()["allreduces"]


def _value(fut):
    return fut.value()


def fusion_hook(state, bucket):
    """DDP comm hook: buckets are averaged in place through the C++ fusion buffer
    (FusionState); the last bucket of the step flushes it."""
    fut = state.buffer.add(bucket.buffer().detach(), "avg")
    state.buckets += 1
    if bucket.is_last():
        state.buffer.flush()
    # DDP wants a Python value in the future: then() converts it (on the buffer's thread).
    return fut.then(_value)
