"""_ops.py: the forward and backward as torch.library custom ops, so torch.compile traces through them.

    torch.ops.flashgen.fwd(q, k, v, causal, softmax_scale, return_lse, q_descale, k_descale, v_descale,
                           out_dtype, deterministic, stream) -> (o, lse)
    torch.ops.flashgen.bwd(q, k, v, o, lse, dout, causal, softmax_scale, deterministic, stream) -> (dq, dk, dv)

Each has a fake (meta) implementation giving its outputs' shapes, dtypes and strides (O like q, in the out
dtype; LSE fp32 [batch, heads_q, seqlen_q], or [0] when not asked for; dq, dk, dv like q, k, v), and the
forward has its backward registered (register_autograd), so torch.compile(fullgraph=True) of a model that
calls flashgen.attention has no graph break and its backward is traced too. The real implementations call
the library on PyTorch's current stream (stream None) as the eager binding does, so CUDA-graph capture
records the launches. stream: an int CUstream, or None for the current stream at run time.

Registered once, when PyTorch is importable: at `import flashgen` when torch was imported already, else on
the first flashgen.attention call (or flashgen.register_ops()); under torch.compile, import torch before
calling flashgen.attention for the first time, or call flashgen.register_ops() first.
"""

from typing import Optional, Tuple

import torch
from torch import Tensor

_FP8 = tuple(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, n))


def _out_dtype(q, out_dtype):
    if out_dtype is not None:
        return out_dtype
    return torch.bfloat16 if q.dtype in _FP8 else q.dtype


def _alloc_out(q, out_dtype):
    """O as the eager binding allocates it: empty_like(q) (q's layout) in q's dtype, else contiguous."""
    dt = _out_dtype(q, out_dtype)
    return torch.empty_like(q) if dt == q.dtype else torch.empty(tuple(q.shape), dtype=dt, device=q.device)


def _alloc_lse(q, return_lse):
    if return_lse and q.dim() == 4:
        b, sq, h, _ = q.shape
        return torch.empty((b, h, sq), dtype=torch.float32, device=q.device)
    return torch.empty((0,), dtype=torch.float32, device=q.device)


def _check_fwd_shapes(q, k, v):
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError("flashgen.attention: q, k, v must be [batch, seqlen, heads, head_dim], got %d, %d and %d "
                         "dims" % (q.dim(), k.dim(), v.dim()))


@torch.library.custom_op("flashgen::fwd", mutates_args=())
def fwd(q: Tensor, k: Tensor, v: Tensor, causal: bool, softmax_scale: Optional[float], return_lse: bool,
        q_descale: Optional[Tensor], k_descale: Optional[Tensor], v_descale: Optional[Tensor],
        out_dtype: Optional[torch.dtype], deterministic: bool, stream: Optional[int]) -> Tuple[Tensor, Tensor]:
    from . import _attention_direct
    lse = _alloc_lse(q, return_lse)
    o = _attention_direct(q, k, v, causal=causal, softmax_scale=softmax_scale, stream=stream,
                          lse=lse if return_lse else None, q_descale=q_descale,
                          k_descale=k_descale, v_descale=v_descale, out_dtype=out_dtype)
    return o, lse


@fwd.register_fake
def _fwd_fake(q, k, v, causal, softmax_scale, return_lse, q_descale, k_descale, v_descale, out_dtype,
              deterministic, stream):
    _check_fwd_shapes(q, k, v)
    return _alloc_out(q, out_dtype), _alloc_lse(q, return_lse)


@torch.library.custom_op("flashgen::bwd", mutates_args=())
def bwd(q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, dout: Tensor, causal: bool,
        softmax_scale: Optional[float], deterministic: bool, stream: Optional[int]) -> Tuple[Tensor, Tensor, Tensor]:
    from . import attention_backward
    return attention_backward(q, k, v, o, lse, dout, causal=causal, softmax_scale=softmax_scale,
                              deterministic=deterministic, stream=stream)


@bwd.register_fake
def _bwd_fake(q, k, v, o, lse, dout, causal, softmax_scale, deterministic, stream):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup_context(ctx, inputs, output):
    q, k, v, causal, softmax_scale, return_lse, _qd, _kd, _vd, _odt, deterministic, stream = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse)
    ctx.causal, ctx.scale, ctx.det, ctx.stream = causal, softmax_scale, deterministic, stream
    ctx.mark_non_differentiable(lse)


def _backward(ctx, do, dlse):
    q, k, v, o, lse = ctx.saved_tensors
    if lse.dim() != 3:
        raise RuntimeError("flashgen::fwd was called with return_lse=False, so it kept no LSE for the backward; "
                           "call it with return_lse=True (flashgen.attention does) when gradients are needed")
    dq, dk, dv = bwd(q, k, v, o, lse, do.contiguous(), ctx.causal, ctx.scale, ctx.det, ctx.stream)
    return dq, dk, dv, None, None, None, None, None, None, None, None, None


fwd.register_autograd(_backward, setup_context=_setup_context)

__all__ = ["fwd", "bwd"]
