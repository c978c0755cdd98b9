"""The ``hccl`` backend of torch.distributed on the virtual NPU: a gloo group underneath.

``dist.init_process_group("hccl")`` (or ``"cpu:gloo,npu:hccl"``) builds ``HCCLGroup``, a
process group written in Python that unwraps virtual-device tensors (their data are CPU
tensors) and runs the collective on a gloo group made with the same store, rank and size.
Registered for device ``npu`` only, as torch_npu does: a collective on a CPU tensor in a group
whose only backend is hccl fails in c10d, as on an Ascend host.

Implemented collectives: allreduce, allreduce_coalesced, broadcast, allgather,
_allgather_base (all_gather_into_tensor), allgather_into_tensor_coalesced, reduce_scatter,
_reduce_scatter_base (reduce_scatter_tensor), reduce, gather, scatter, alltoall_base, barrier,
send, recv. Each completes before it returns; the returned work is gloo's.
"""

from __future__ import annotations

from datetime import timedelta

import torch.distributed as dist

_registered = []


def _inner(tensor):
    inner = getattr(tensor, "_inner", None)
    if inner is None:
        # ProcessGroupHCCL takes NPU tensors only (a CPU tensor needs a gloo group)
        raise RuntimeError(f"hccl (virtual NPU): expected a tensor on npu, got one on "
                           f"{tensor.device}; collectives on CPU tensors need a gloo group "
                           f"(init_process_group(\"cpu:gloo,npu:hccl\"))")
    return inner


def _inner_list(tensors):
    return [_inner(t) for t in tensors]


def _inner_lists(lists):
    return [_inner_list(ts) for ts in lists]


class HCCLGroup(dist.ProcessGroup):
    """A Python process group for ``npu`` tensors over a gloo group."""

    def __init__(self, store, rank, size, timeout):
        super().__init__(rank, size)
        self._rank, self._size = rank, size
        self._gloo = dist.ProcessGroupGloo(store, rank, size, timeout)

    def getBackendName(self):
        return "hccl"

    def getRank(self):
        return self._rank

    def getSize(self):
        return self._size

    @staticmethod
    def _done(work):
        work.wait()
        return work

    def allreduce(self, tensors, opts=None):
        opts = opts or dist.AllreduceOptions()
        return self._done(self._gloo.allreduce(_inner_list(tensors), opts))

    def allreduce_coalesced(self, tensors, opts=None):
        opts = opts or dist.AllreduceCoalescedOptions()
        return self._done(self._gloo.allreduce_coalesced(_inner_list(tensors), opts))

    def broadcast(self, tensors, opts=None):
        opts = opts or dist.BroadcastOptions()
        return self._done(self._gloo.broadcast(_inner_list(tensors), opts))

    def allgather(self, output_tensors, input_tensors, opts=None):
        opts = opts or dist.AllgatherOptions()
        return self._done(self._gloo.allgather(_inner_lists(output_tensors),
                                               _inner_list(input_tensors), opts))

    def _allgather_base(self, output, input, opts=None):
        opts = opts or dist.AllgatherOptions()
        return self._done(self._gloo._allgather_base(_inner(output), _inner(input), opts))

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        opts = opts or dist.AllgatherOptions()
        return self._done(self._gloo.allgather_into_tensor_coalesced(
            _inner_list(outputs), _inner_list(inputs), opts))

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        return self._done(self._gloo.reduce_scatter(_inner_list(output_tensors),
                                                    _inner_lists(input_tensors), opts))

    def _reduce_scatter_base(self, output, input, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        return self._done(self._gloo._reduce_scatter_base(_inner(output), _inner(input), opts))

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        return self._done(self._gloo.reduce_scatter_tensor_coalesced(
            _inner_list(outputs), _inner_list(inputs), opts))

    def all_gather_single(self, output, input, opts=None):
        return self._allgather_base(output, input, opts)

    def reduce_scatter_single(self, output, input, opts=None):
        return self._reduce_scatter_base(output, input, opts)

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes,
                          opts=None):
        return self.alltoall_base(output, input, output_split_sizes, input_split_sizes, opts)

    def reduce(self, tensors, opts=None):
        opts = opts or dist.ReduceOptions()
        return self._done(self._gloo.reduce(_inner_list(tensors), opts))

    def gather(self, output_tensors, input_tensors, opts=None):
        opts = opts or dist.GatherOptions()
        return self._done(self._gloo.gather(_inner_lists(output_tensors),
                                            _inner_list(input_tensors), opts))

    def scatter(self, output_tensors, input_tensors, opts=None):
        opts = opts or dist.ScatterOptions()
        return self._done(self._gloo.scatter(_inner_list(output_tensors),
                                             _inner_lists(input_tensors), opts))

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        opts = opts or dist.AllToAllOptions()
        return self._done(self._gloo.alltoall_base(_inner(output), _inner(input),
                                                   output_split_sizes, input_split_sizes, opts))

    def barrier(self, opts=None):
        opts = opts or dist.BarrierOptions()
        return self._done(self._gloo.barrier(opts))

    def send(self, tensors, dst, tag):
        return self._done(self._gloo.send(_inner_list(tensors), dst, tag))

    def recv(self, tensors, src, tag):
        return self._done(self._gloo.recv(_inner_list(tensors), src, tag))

    def recv_anysource(self, tensors, tag):
        return self._done(self._gloo.recv_anysource(_inner_list(tensors), tag))


def _create(store, rank, size, timeout=timedelta(minutes=30)):
    return HCCLGroup(store, rank, size, timeout)


def register() -> None:
    if _registered or not dist.is_available():
        return
    if "hccl" not in dist.Backend.backend_list:
        dist.Backend.register_backend("hccl", _create, devices=["npu"])
    dist.is_hccl_available = lambda: True
    _registered.append(True)
