"""Tensors on the virtual NPU: a wrapper tensor subclass computing on a CPU tensor inside.

``NPUTensor`` reports ``device='npu:N'`` to everything above the dispatcher's Python key
(autograd included); ``__torch_dispatch__`` unwraps the CPU tensors inside, runs the very same
aten operator on them and wraps the results. Because the CPU kernels run unchanged, an fp32
program computes bit for bit what it computes on the CPU.

Factory functions (``torch.randn(3, device="npu")``, ``x.to("npu")``, ``torch.tensor(...,
device="npu")``) reach the ``PrivateUse1`` dispatch key with no tensor argument; a backend
fallback for that key (``register_factories``) runs them on the CPU and wraps the result.

Device checks as on a real accelerator: every tensor argument of an operator must be on the
same device; a CPU tensor is accepted only when it has 0 dimensions (CUDA's rule for CPU
scalars), as the index of an indexing operator, or as the source/destination of a copy.
"""

from __future__ import annotations

import torch
from torch.utils._pytree import tree_flatten

from . import frames, memory

aten = torch.ops.aten
_NPU = "npu"


def _npu_device(index: int) -> torch.device:
    # torch 2.13's Python device guard knows one device (deviceCount() is 1, getDevice() is
    # index 0) and the autograd engine asserts on any other index: every virtual-device tensor
    # is on npu:0. ``index`` (the device asked for) still counts for the memory statistics.
    return torch.device(_NPU, 0)


class NPUTensor(torch.Tensor):
    """A tensor on ``npu:N``; the data lives in the CPU tensor ``_inner``."""

    _inner: torch.Tensor

    @staticmethod
    def __new__(cls, inner: torch.Tensor, index: int, requires_grad: bool = False):
        wrapper = torch.Tensor._make_wrapper_subclass(
            cls, inner.size(), strides=inner.stride(), storage_offset=inner.storage_offset(),
            dtype=inner.dtype, layout=inner.layout, device=_npu_device(index),
            requires_grad=requires_grad)
        wrapper._inner = inner
        wrapper._vnpu_memory = memory.track(inner, index)
        wrapper._vnpu_index = index
        return wrapper

    def __del__(self):
        memory.release(self.__dict__.get("_vnpu_memory"))

    __torch_function__ = torch._C._disabled_torch_function_impl

    def __repr__(self, *, tensor_contents=None):
        # As a device tensor prints: "tensor(..., device='npu:0')", not "NPUTensor(...".
        text = torch._tensor_str._str(self, tensor_contents=tensor_contents)
        name = type(self).__name__ + "("
        if not text.startswith(name):
            return text
        pad = " " * (len(name) - len("tensor("))
        return "tensor(" + text[len(name):].replace("\n" + " " * len(name),
                                                     "\n" + " " * len("tensor(")).replace(
            "\n" + pad + " " * len("tensor("), "\n" + " " * len("tensor("))

    def new_tensor(self, data, dtype=None, device=None, requires_grad=False, layout=None,
                   pin_memory=False):
        # (the C++ path of new_tensor cannot reach a Python kernel: built on the CPU, moved)
        out = torch.Tensor.new_tensor(self._inner, data, dtype=dtype, device="cpu")
        out = out.to(self.device if device is None else device)
        return out.requires_grad_(True) if requires_grad else out

    def __deepcopy__(self, memo):
        # (torch.Tensor.__deepcopy__ would rebuild it with set_ on a storage: not for wrappers;
        # views deep-copied together do not keep sharing their storage here)
        if id(self) in memo:
            return memo[id(self)]
        import copy

        with torch.no_grad():
            new = NPUTensor(self._inner.clone(), self.__dict__.get("_vnpu_index", 0),
                            requires_grad=self.requires_grad)
        memo[id(self)] = new
        if self.grad is not None:
            new.grad = copy.deepcopy(self.grad, memo)
        for key, value in self.__dict__.items():
            if key not in ("_inner", "_vnpu_memory", "_vnpu_index"):
                setattr(new, key, copy.deepcopy(value, memo))
        return new

    def data_ptr(self):
        # the address of the data inside: distinct tensors have distinct addresses, views of
        # one storage share it (code detecting shared weights compares these)
        return self._inner.data_ptr()

    def untyped_storage(self):
        return self._inner.untyped_storage()

    def tolist(self):
        return self._inner.tolist()

    def __format__(self, format_spec):
        if self.dim() == 0:
            return self.item().__format__(format_spec)
        return super().__format__(format_spec)


    def __reduce_ex__(self, protocol):
        # Saved as a plain tensor whose storage is tagged "npu:N" (see serialization.py), as a
        # real device tensor is: torch.load(..., map_location="cpu") gives a CPU tensor.
        plain = self._inner.detach()
        if self.requires_grad:
            plain.requires_grad_(True)
        return plain.__reduce_ex__(protocol)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.namespace in _COLLECTIVE_NAMESPACES:
            # collectives: the process group (distributed.py) unwraps the tensors itself
            with torch._C._ExcludeDispatchKeyGuard(_PYTHON_KEYS):
                return func(*args, **kwargs)
        handler = _SPECIAL.get(func)
        if handler is not None:
            return handler(func, args, kwargs)
        return _generic(func, args, kwargs)


_TENSOR_DATA = torch._C.TensorBase.data


def _get_data(self):
    return _TENSOR_DATA.__get__(self)


def _set_data(self, value):
    """``t.data = v``: as on a real device, ``v`` may be on another device than ``t``.

    ``set_data`` cannot turn a CPU tensor into a wrapper tensor (or back), so across the
    CPU/virtual-NPU boundary the two Python objects are swapped (torch.utils.swap_tensors) with
    a fresh alias of ``v`` that keeps ``t``'s requires_grad and Parameter-ness."""
    crossing = isinstance(value, NPUTensor) != isinstance(self, NPUTensor)
    if not crossing or not isinstance(value, torch.Tensor):
        if isinstance(self, NPUTensor) and isinstance(value, NPUTensor):
            _TENSOR_DATA.__set__(self, value)
            self._inner = value._inner
            return
        _TENSOR_DATA.__set__(self, value)
        return
    is_param = isinstance(self, torch.nn.Parameter)
    if isinstance(value, NPUTensor):
        fresh = NPUTensor(value._inner, 0, requires_grad=self.requires_grad)
    else:
        fresh = value.detach()
        fresh.requires_grad_(self.requires_grad)
    if is_param and type(self) is not torch.nn.Parameter:
        fresh._is_param = True
    if type(self) is torch.nn.Parameter:
        fresh = torch.nn.Parameter(fresh, requires_grad=self.requires_grad) \
            if not isinstance(fresh, NPUTensor) else fresh
        if isinstance(fresh, NPUTensor):
            fresh._is_param = True
    torch.utils.swap_tensors(self, fresh)


_C_GENERATOR = torch._C.Generator


def _is_npu_device(device) -> bool:
    if isinstance(device, torch.device):
        return device.type == _NPU
    return isinstance(device, str) and device.split(":")[0] == _NPU


class Generator(_C_GENERATOR):
    """``torch.Generator``: ``device="npu"`` gives a generator on the virtual NPU.

    Its numbers come from a CPU generator (the virtual device computes on the CPU); it reports
    ``device='npu:0'``. Not emulated: CUDA refuses a CPU generator for a random operator on the
    device; the virtual device accepts it (the kernel sees only the C++ generator, which does
    not tell the two apart)."""

    def __new__(cls, device="cpu"):
        return super().__new__(cls, "cpu" if _is_npu_device(device) else device)

    def __init__(self, device="cpu"):
        self._vnpu = _is_npu_device(device)

    @property
    def device(self):
        if self.__dict__.get("_vnpu"):
            return torch.device(_NPU, 0)
        return _C_GENERATOR.device.__get__(self)


_PIN_MEMORY = torch.Tensor.pin_memory


def _pin_memory(self, device=None):
    """Pinned host memory cannot be allocated from a Python backend: an ordinary contiguous
    copy (what pinning gives, minus the page locking)."""
    if isinstance(self, NPUTensor):
        return _PIN_MEMORY(self, device) if device is not None else _PIN_MEMORY(self)
    if self.device.type != "cpu":
        raise RuntimeError(f"cannot pin '{self.type()}' only dense CPU tensors can be pinned")
    return self.clone(memory_format=torch.contiguous_format)


def install_data_property() -> None:
    torch.Tensor.pin_memory = _pin_memory
    torch.Generator = Generator
    if not isinstance(torch.Tensor.__dict__.get("data"), property):
        torch.Tensor.data = property(_get_data, _set_data, doc=_TENSOR_DATA.__doc__)


def wrap(inner: torch.Tensor, index: int) -> NPUTensor:
    return NPUTensor(inner, index)


def note_user_frame(exc: BaseException) -> None:
    frames.add_note(exc, frames.user_frame_of_stack())


def _mixed_device_error(first: str, second: str) -> RuntimeError:
    exc = RuntimeError("Expected all tensors to be on the same device, but found at least two "
                       f"devices, {first} and {second}!")
    frames.add_note(exc, frames.user_frame_of_stack())
    return exc


_COLLECTIVE_NAMESPACES = ("c10d", "_c10d_functional", "_c10d_functional_autograd")
_PYTHON_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.Python) | torch._C.DispatchKeySet(
    torch._C.DispatchKey.PythonTLSSnapshot)

_CPU_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)

_INDEX_OPS = {aten.index.Tensor, aten.index_put.default, aten.index_put_.default,
              aten._index_put_impl_.default, aten._unsafe_index.Tensor,
              aten._unsafe_index_put.default}


def check_devices(leaves, skip_ids=()) -> int | None:
    """The common device index of the tensor leaves; raises as PyTorch does on a mismatch."""
    index = None
    first_other = None
    for leaf in leaves:
        if isinstance(leaf, NPUTensor):
            dev = leaf.device.index
            if index is None:
                index = dev
            elif dev != index:
                raise _mixed_device_error(f"npu:{index}", f"npu:{dev}")
        elif isinstance(leaf, torch.Tensor):
            if id(leaf) in skip_ids:
                continue
            if leaf.device.type == "cpu" and leaf.dim() == 0:
                continue  # a CPU scalar, accepted as on CUDA
            if first_other is None:
                first_other = leaf.device
    if first_other is not None and index is not None:
        raise _mixed_device_error(f"npu:{index}", str(first_other))
    return index


def _target_index(value, default: int):
    """None: keep ``default``; "cpu": a CPU result; an int: that npu index."""
    if value is None:
        return default
    device = torch.device(value) if isinstance(value, str) else value
    if isinstance(device, int):
        return device
    if device.type == "cpu":
        return "cpu"
    if device.type == _NPU:
        from . import device as device_state

        return device_state.index_of(device)
    raise RuntimeError(f"virtual NPU: cannot place a result on {device}")


def unwrap(leaf):
    if isinstance(leaf, NPUTensor):
        return leaf._inner
    if isinstance(leaf, torch.device) and leaf.type == _NPU:
        return torch.device("cpu")
    return leaf


class _Unwrapper:
    """One pass over an operator's arguments: unwraps, checks devices, remembers inputs."""

    __slots__ = ("index", "inputs", "other", "skip")

    def __init__(self, skip=()):
        self.index = None
        self.other = None
        self.inputs = {}
        self.skip = skip

    def __call__(self, x):
        if isinstance(x, NPUTensor):
            if self.index is None:
                self.index = x.device.index
            inner = x._inner
            self.inputs[id(inner)] = x
            return inner
        if isinstance(x, torch.Tensor):
            if self.other is None and id(x) not in self.skip and not (
                    x.device.type == "cpu" and x.dim() == 0):
                self.other = x.device
            return x
        if isinstance(x, (list, tuple)):
            return type(x)(self(y) for y in x) if x else x
        if isinstance(x, torch.device) and x.type == _NPU:
            return torch.device("cpu")
        return x

    def check(self):
        if self.other is not None and self.index is not None:
            raise _mixed_device_error(f"npu:{self.index}", str(self.other))


def _resized(wrapper, inner):
    """An ``out=``/``resize_`` kernel changed the shape of the data inside ``wrapper``."""
    try:  # give the wrapper the new sizes/strides with the CPU kernel of as_strided_
        with torch._C._ExcludeDispatchKeyGuard(_PYTHON_KEYS):
            aten.as_strided_.default.redispatch(_CPU_KEYS, wrapper, inner.shape, inner.stride(),
                                                inner.storage_offset())
        return wrapper
    except RuntimeError as exc:
        raise RuntimeError(
            f"virtual NPU: an operator resized an npu tensor in place ({tuple(wrapper.shape)} -> "
            f"{tuple(inner.shape)}), which the virtual device cannot do here; give out= tensors "
            "their final shape") from exc
    return wrapper


def _wrap_outputs(out, index, inputs):
    if isinstance(out, torch.Tensor):
        if isinstance(out, NPUTensor):
            return out
        same = inputs.get(id(out))
        if same is not None:  # an in-place/out= result: the caller's own tensor
            if same.shape != out.shape or same.stride() != out.stride():
                return _resized(same, out)
            return same
        return out if index == "cpu" else NPUTensor(out, index)
    if isinstance(out, (list, tuple)):
        return type(out)(_wrap_outputs(x, index, inputs) for x in out)
    return out


def _generic(func, args, kwargs):
    skip = ()
    if func in _INDEX_OPS:
        # indices may live on the CPU (as on CUDA)
        skip = {id(t) for t in tree_flatten(args[1])[0] if isinstance(t, torch.Tensor)}
    unwrapper = _Unwrapper(skip)
    inner_args = tuple(unwrapper(x) for x in args)
    inner_kwargs = {k: unwrapper(v) for k, v in kwargs.items()} if kwargs else kwargs
    unwrapper.check()
    index = unwrapper.index
    if index is None:  # only reached through a mode or a CPU-only call: run as is
        index = "cpu"
    device = kwargs.get("device") if kwargs else None
    if device is not None:
        index = _target_index(device, index)
    out = func(*inner_args, **inner_kwargs)
    return _wrap_outputs(out, index, unwrapper.inputs)


def _to_copy(func, args, kwargs):
    source = args[0]
    index = _target_index(kwargs.get("device"), source.device.index)
    inner_kwargs = dict(kwargs)
    inner_kwargs["device"] = torch.device("cpu")
    inner_kwargs.pop("non_blocking", None)
    inner_kwargs.pop("pin_memory", None)
    out = func(unwrap(source), **inner_kwargs)
    return out if index == "cpu" else NPUTensor(out, index)


def _copy(func, args, kwargs):
    dst, src = args[0], args[1]
    non_blocking = args[2] if len(args) > 2 else kwargs.get("non_blocking", False)
    if isinstance(dst, NPUTensor) and isinstance(src, NPUTensor) \
            and dst.device.index != src.device.index:
        pass  # cross-device copies are allowed, as on real devices
    unwrap(dst).copy_(unwrap(src), non_blocking=bool(non_blocking))
    return dst


def _local_scalar(func, args, kwargs):
    return func(unwrap(args[0]))


def _is_pinned(func, args, kwargs):
    return False


def _record_stream(func, args, kwargs):
    return None  # streams are synchronous on the virtual device


# CUDA-style fused RNN cells: PyTorch picks them for any accelerator's tensors (privateuse1
# included) and the CPU has no kernel for them; computed here from their definition.


def _lstm_cell(func, args, kwargs):
    input_gates, hidden_gates, cx = (unwrap(a) for a in args[:3])
    input_bias = unwrap(args[3]) if len(args) > 3 and args[3] is not None else None
    hidden_bias = unwrap(args[4]) if len(args) > 4 and args[4] is not None else None
    gates = input_gates + hidden_gates
    if input_bias is not None:
        gates = gates + input_bias
    if hidden_bias is not None:
        gates = gates + hidden_bias
    i, f, g, o = gates.chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx + i * g
    hy = o * cy.tanh()
    workspace = torch.cat([i, f, g, o], 1)
    index = args[0].device.index
    return NPUTensor(hy, index), NPUTensor(cy, index), NPUTensor(workspace, index)


def _lstm_cell_backward(func, args, kwargs):
    grad_hy, grad_cy, cx, cy, workspace = (unwrap(a) if a is not None else None
                                           for a in args[:5])
    has_bias = args[5] if len(args) > 5 else kwargs.get("has_bias", True)
    i, f, g, o = workspace.chunk(4, 1)
    tanh_cy = cy.tanh()
    gcx = torch.zeros_like(cy) if grad_cy is None else grad_cy.clone()
    if grad_hy is not None:
        gcx = gcx + grad_hy * o * (1 - tanh_cy * tanh_cy)
        d_o = grad_hy * tanh_cy * o * (1 - o)
    else:
        d_o = torch.zeros_like(o)
    d_i = gcx * g * i * (1 - i)
    d_f = gcx * cx * f * (1 - f)
    d_g = gcx * i * (1 - g * g)
    grad_gates = torch.cat([d_i, d_f, d_g, d_o], 1)
    grad_cx = gcx * f
    grad_bias = grad_gates.sum(0) if has_bias else None
    index = next(a for a in args[:5] if isinstance(a, NPUTensor)).device.index
    return (NPUTensor(grad_gates, index), NPUTensor(grad_cx, index),
            NPUTensor(grad_bias, index) if grad_bias is not None else None)


def _gru_cell(func, args, kwargs):
    input_gates, hidden_gates, hx = (unwrap(a) for a in args[:3])
    input_bias = unwrap(args[3]) if len(args) > 3 and args[3] is not None else None
    hidden_bias = unwrap(args[4]) if len(args) > 4 and args[4] is not None else None
    if input_bias is not None:
        input_gates = input_gates + input_bias
    if hidden_bias is not None:
        hidden_gates = hidden_gates + hidden_bias
    i_r, i_z, i_n = input_gates.chunk(3, 1)
    h_r, h_z, h_n = hidden_gates.chunk(3, 1)
    r = (i_r + h_r).sigmoid()
    z = (i_z + h_z).sigmoid()
    n = (i_n + r * h_n).tanh()
    hy = n + z * (hx - n)
    workspace = torch.cat([r, z, n, hx, h_n], 1)  # private layout, read by the backward below
    index = args[0].device.index
    return NPUTensor(hy, index), NPUTensor(workspace, index)


def _gru_cell_backward(func, args, kwargs):
    grad_hy, workspace = unwrap(args[0]), unwrap(args[1])
    has_bias = args[2] if len(args) > 2 else kwargs.get("has_bias", True)
    r, z, n, hx, h_n = workspace.chunk(5, 1)
    d_n = grad_hy * (1 - z) * (1 - n * n)
    d_z = grad_hy * (hx - n) * z * (1 - z)
    d_r = d_n * h_n * r * (1 - r)
    grad_input_gates = torch.cat([d_r, d_z, d_n], 1)
    grad_hidden_gates = torch.cat([d_r, d_z, d_n * r], 1)
    grad_hx = grad_hy * z
    index = args[0].device.index
    out = [grad_input_gates, grad_hidden_gates, grad_hx]
    out += [grad_input_gates.sum(0), grad_hidden_gates.sum(0)] if has_bias else [None, None]
    return tuple(NPUTensor(t, index) if t is not None else None for t in out)


def _fused_adam(func, args, kwargs):
    """``torch._fused_adam_`` / ``_fused_adamw_`` (``Adam(fused=True)``, which a program may pick
    on an accelerator): computed with the arithmetic of ``torch.optim``'s single-tensor Adam, in
    the same order, so that a migrated program that asks for the fused optimizer on the NPU path
    gives the same bits as its for-loop optimizer on the CPU. (Real NPU kernels round their own
    way; the virtual device does not model kernel numerics.) The optimizer has already added 1
    to each step; a found inf skips the update, as the fused kernels do."""
    params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps = (
        [unwrap(t) for t in group] for group in args[:6])
    checker = _Unwrapper()
    for group in args[:6]:
        checker(group)
    checker.check()
    decoupled = func._overloadpacket is aten._fused_adamw_
    lr = float(kwargs["lr"])
    beta1, beta2 = float(kwargs["beta1"]), float(kwargs["beta2"])
    weight_decay, eps = float(kwargs["weight_decay"]), float(kwargs["eps"])
    amsgrad, maximize = kwargs["amsgrad"], kwargs["maximize"]
    grad_scale, found_inf = unwrap(kwargs.get("grad_scale")), unwrap(kwargs.get("found_inf"))
    if found_inf is not None and float(found_inf) != 0.0:
        return None
    for i, param in enumerate(params):
        grad = grads[i]
        if grad_scale is not None:
            grad = grad / grad_scale
        if maximize:
            grad = -grad
        exp_avg, exp_avg_sq = exp_avgs[i], exp_avg_sqs[i]
        step = float(state_steps[i])
        if weight_decay != 0:
            if decoupled:
                param.mul_(1 - lr * weight_decay)
            else:
                grad = grad.add(param, alpha=weight_decay)
        exp_avg.lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        bias_correction1 = 1 - beta1 ** step
        bias_correction2 = 1 - beta2 ** step
        step_size = lr / bias_correction1
        bias_correction2_sqrt = bias_correction2 ** 0.5
        if amsgrad:
            torch.maximum(max_exp_avg_sqs[i], exp_avg_sq, out=max_exp_avg_sqs[i])
            denom = (max_exp_avg_sqs[i].sqrt() / bias_correction2_sqrt).add_(eps)
        else:
            denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
        param.addcdiv_(exp_avg, denom, value=-step_size)
    return None


_SPECIAL = {
    aten._fused_adam_.default: _fused_adam,
    aten._fused_adam_.tensor_lr: _fused_adam,
    aten._fused_adamw_.default: _fused_adam,
    aten._fused_adamw_.tensor_lr: _fused_adam,
    aten._thnn_fused_gru_cell.default: _gru_cell,
    aten._thnn_fused_gru_cell_backward.default: _gru_cell_backward,
    aten._thnn_fused_lstm_cell.default: _lstm_cell,
    aten._thnn_fused_lstm_cell_backward_impl.default: _lstm_cell_backward,
    aten._to_copy.default: _to_copy,
    aten.copy_.default: _copy,
    aten._local_scalar_dense.default: _local_scalar,
    aten.is_pinned.default: _is_pinned,
    aten.record_stream.default: _record_stream,
}


# ---------------------------------------------------------------------------------------------
# Factories: ops that reach the PrivateUse1 key (no tensor argument, device="npu").

_libs = []


def _factory_fallback(op, *args, **kwargs):
    from . import device as device_state

    device = kwargs.get("device")
    index = device_state.index_of(device) if device is not None else device_state.current_device()
    kwargs = dict(kwargs)
    if "device" in kwargs:
        kwargs["device"] = torch.device("cpu")
    kwargs.pop("pin_memory", None)
    unwrapper = _Unwrapper()
    inner_args = tuple(unwrapper(x) for x in args)
    inner_kwargs = {k: unwrapper(v) for k, v in kwargs.items()}
    unwrapper.check()
    out = op(*inner_args, **inner_kwargs)
    return _wrap_outputs(out, index, unwrapper.inputs)


def _factory_schemas():
    """aten factory overloads: a ``device`` argument and no Tensor argument (``out`` excluded)."""
    for schema in torch._C._jit_get_all_schemas():
        ns, _, name = schema.name.partition("::")
        if ns != "aten" or schema.overload_name.startswith("out") or name.endswith("_"):
            continue
        arguments = schema.arguments
        if not any(a.name == "device" for a in arguments):
            continue
        if any("Tensor" in str(a.type) for a in arguments):
            continue
        yield name if not schema.overload_name else f"{name}.{schema.overload_name}"


def _tensor_like(original):
    # torch.tensor / torch.as_tensor with an npu device: built on the CPU, then moved (the C++
    # path of these two functions cannot call a Python kernel for the PrivateUse1 key).
    def factory(data, *args, **kwargs):
        device = kwargs.get("device")
        if device is not None and torch.device(device).type == _NPU:
            kwargs["device"] = "cpu"
            requires_grad = kwargs.pop("requires_grad", False)
            out = original(data, *args, **kwargs).to(device)
            return out.requires_grad_(True) if requires_grad else out
        return original(data, *args, **kwargs)

    factory.__name__ = original.__name__
    factory.__doc__ = original.__doc__
    factory.__wrapped__ = original
    return factory


def register_factories() -> None:
    if _libs:
        return
    fallback = torch.library.Library("_", "IMPL")  # noqa: TOR901  (kept alive in _libs)
    fallback.fallback(_factory_fallback, "PrivateUse1")
    # Composite factories (eye, full, ...) would otherwise run on an empty NPU tensor whose
    # shape an ``out=`` kernel then changes: run each whole on the CPU instead.
    lib = torch.library.Library("aten", "IMPL")  # noqa: TOR901
    for qualname in sorted(set(_factory_schemas())):
        name, _, overload = qualname.partition(".")
        op = getattr(getattr(aten, name), overload or "default")

        def kernel(*args, _op=op, **kwargs):
            return _factory_fallback(_op, *args, **kwargs)

        try:
            lib.impl(qualname, kernel, "PrivateUse1")
        except RuntimeError:
            pass
    _libs.extend([fallback, lib])
    install_data_property()
    for name in ("tensor", "as_tensor"):
        setattr(torch, name, _tensor_like(getattr(torch, name)))
