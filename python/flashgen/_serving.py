"""The serving calls of the binding: packed variable-length batches, KV caches (dense or paged), decode, and
the merge of attention states. Shapes follow FlashAttention's flash_attn_varlen_func and
flash_attn_with_kvcache; the library checks every rule and its sentences come back as FlashgenError."""

import ctypes
import sys

from . import _capi, _mods, _tensors



def _pkg():
    """The flashgen package (its context, stream and error helpers), imported after this module."""
    return sys.modules[__package__]


def _int_ptr(x, name):
    """The device address of an int32 CUDA tensor (None: NULL). The library reads it on the device."""
    if x is None:
        return None
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(x, torch.Tensor):
        raise TypeError("%s must be an int32 torch tensor on the GPU" % name)
    if x.dtype != torch.int32 or x.device.type != "cuda":
        raise TypeError("%s must be an int32 CUDA tensor (got %s on %s)" % (name, x.dtype, x.device))
    if x.dim() == 1 and x.numel() > 1 and x.stride(0) != 1:
        raise TypeError("%s must be contiguous" % name)
    return x.data_ptr()


def _per_head_ptr(x, name, q):
    """The device address of a per-head fp32 array (sinks, alibi_slopes: a CUDA tensor [heads_q], contiguous),
    or None."""
    if x is None:
        return None
    torch = sys.modules.get("torch")
    heads = q.shape[-2]
    if torch is None or not isinstance(x, torch.Tensor) or x.dtype != torch.float32 or \
            x.device.type != "cuda" or x.dim() != 1 or x.shape[0] != heads or x.stride(0) != 1:
        raise TypeError("%s must be a contiguous float32 CUDA tensor of shape [heads_q] = [%d]" % (name, heads))
    return x.data_ptr()


def _out_like(torch, q, v):
    """An output for q's queries: q's layout and dtype, with V's head dim where it differs from Q's."""
    return torch.empty_like(q) if v.shape[-1] == q.shape[-1] else q.new_empty(tuple(q.shape[:-1]) + (v.shape[-1],))


def _set_mods(a, q, sinks=None, window_size=None, softcap=0.0, alibi_slopes=None, causal_top_left=False):
    """The model variants of a call into its FgVarlenArgs: attention sinks, a sliding window (left, right; -1 an
    unbounded side), a logit softcap (0: none), ALiBi slopes, and the causal mask's top-left alignment."""
    a.causal_top_left = int(bool(causal_top_left))
    a.sinks = _per_head_ptr(sinks, "sinks", q)
    a.alibi_slopes = _per_head_ptr(alibi_slopes, "alibi_slopes", q)
    a.softcap = float(softcap or 0.0)
    if window_size is not None:
        if len(tuple(window_size)) != 2:
            raise TypeError("window_size must be (left, right) in keys, -1 for an unbounded side; got %r"
                            % (window_size,))
        left, right = (int(x) for x in window_size)
        if (left, right) != (-1, -1):
            a.window, a.window_left, a.window_right = 1, left, right


def _kv_descales(pkg, a, q, k, views, cu_seqlens_q, k_descale, v_descale, dl_stream):
    """An FP8 KV cache's descales into a (k_descale, v_descale: a float32 tensor on k's device of shape [1] or
    [batch, heads_kv], or a number, made a one-element tensor on the launch stream). Returns the named Views and the
    tensors they view (alive until the launch is queued). ValueError with the rule for a descale beside 16-bit k and
    v, of another dtype, device or shape."""
    given = [(n, x) for n, x in (("k_descale", k_descale), ("v_descale", v_descale)) if x is not None]
    if not given:
        return []
    vk = views[1]
    if vk.dtype not in _tensors.FP8_DTYPES:
        raise ValueError("%s is given but k is %s; descale factors are for an FP8 KV cache (k and v float8_e4m3fn or "
                         "float8_e5m2)" % (given[0][0], getattr(k, "dtype", vk.dtype)))
    torch = pkg._torch()
    batch = cu_seqlens_q.shape[0] - 1 if cu_seqlens_q is not None else q.shape[0]
    heads_kv = vk.shape[-2]
    made = []
    for name, x in given:
        if isinstance(x, (int, float)) and not isinstance(x, bool):
            with pkg._on_launch_stream(dl_stream or 0, q.device):
                x = torch.full((1,), float(x), dtype=torch.float32, device=q.device)
        if not isinstance(x, torch.Tensor) or x.dtype != torch.float32 or x.device != q.device:
            raise ValueError("%s must be a float32 tensor on %s (the queries' device), or a number; got %s" %
                             (name, q.device, "%s on %s" % (x.dtype, x.device) if isinstance(x, torch.Tensor) else
                              type(x).__name__))
        if tuple(x.shape) not in ((1,), (batch, heads_kv)):
            raise ValueError("%s has shape %s; a descale is [1] (one for the tensor) or [batch, heads_kv] = [%d, %d] "
                             "(one per sequence and KV head)" % (name, list(x.shape), batch, heads_kv))
        vx = _tensors.view(x, name, dl_stream)
        setattr(a, name, vx.struct())
        made.append(((name, vx), x))
    return made


def _fp8_cache(k, v):
    """Whether k or v holds FP8 values (an FP8 KV cache; the library judges the pair)."""
    return any("float8" in str(getattr(x, "dtype", "")) for x in (k, v))


def _varlen_args(pkg, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, block_table, max_seqlen_q,
                 max_seqlen_k, causal, softmax_scale, num_splits, split_size, dl_stream, mods):
    """The FgVarlenArgs of a call, the Views of q, k, v and out (objects that must outlive it), and the named
    Views of the mod's aux arrays and an FP8 cache's descales (mods: _set_mods' keywords, mod, a checked
    _mods.ModCall or None, and k_descale, v_descale); the views list holds the descales' tensors after q, k, v, out."""
    a = _capi.FgVarlenArgs()
    _capi.lib().fg_varlen_args_init(ctypes.byref(a))
    views = [_tensors.view(x, n, dl_stream) for x, n in ((q, "q"), (k, "k"), (v, "v"), (out, "out"))]
    a.q, a.k, a.v, a.o = (x.struct() for x in views)
    mods = dict(mods)
    descales = _kv_descales(pkg, a, q, k, views, cu_seqlens_q, mods.pop("k_descale", None),
                            mods.pop("v_descale", None), dl_stream)
    views += [x for _, x in descales]
    if lse is not None:
        a.lse = _tensors.view(lse, "lse", dl_stream).struct()
    a.cu_seqlens_q = _int_ptr(cu_seqlens_q, "cu_seqlens_q")
    a.cu_seqlens_k = _int_ptr(cu_seqlens_k, "cu_seqlens_k")
    a.seqused_k = _int_ptr(seqused_k, "cache_seqlens")
    if block_table is not None:
        if block_table.dim() != 2 or (block_table.shape[1] > 1 and block_table.stride(1) != 1):
            raise TypeError("block_table must be [batch, max_pages] with its last dim contiguous")
        a.block_table = _int_ptr(block_table, "block_table")
        a.block_table_stride = block_table.stride(0)
        a.max_pages = block_table.shape[1]
    a.batch = (cu_seqlens_q.shape[0] - 1) if cu_seqlens_q is not None else 0
    a.max_seqlen_q = int(max_seqlen_q or 0)
    a.max_seqlen_k = int(max_seqlen_k or 0)
    a.softmax_scale = 0.0 if softmax_scale is None else float(softmax_scale)
    a.causal = int(bool(causal))
    a.num_splits = int(num_splits)
    a.split_size = int(split_size)
    mods.pop("trained", None)  # (the autograd path's note of the aux arrays it differentiates)
    call, mm = mods.pop("mod", None), mods.pop("mask_map", None)
    aux = _mods.set_mod(a, call)
    if mm is not None and call is not None:  # the lengths as the library sizes the map: the grid's longest, or dense
        dense_q, dense_k = q.dim() == 4, cu_seqlens_k is None
        keys = (k.shape[1] * (block_table.shape[1] if block_table is not None else 1)) if dense_k else max_seqlen_k
        _mods.set_mask_map(a, call, mm, cu_seqlens_q, cu_seqlens_k, q.shape[0] if dense_q else a.batch, q.shape[-2],
                           q.shape[1] if dense_q else max_seqlen_q, keys, q.device)
    _set_mods(a, q, **mods)
    return a, views, aux + [named for named, _ in descales]


def _run(pkg, q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, block_table, max_seqlen_q, max_seqlen_k, causal,
         softmax_scale, return_lse, out, lse, stream, num_splits, split_size, mods):
    torch = pkg._torch()
    handle = pkg._stream_handle(stream, q)
    dl_stream = handle or None
    if out is None:
        out = _out_like(torch, q, v)
    packed = q.dim() == 3
    if return_lse and lse is None:
        shape = (q.shape[1], q.shape[0]) if packed else (q.shape[0], q.shape[2], q.shape[1])
        lse = torch.empty(shape, dtype=torch.float32, device=q.device)
    a, views, aux = _varlen_args(pkg, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, block_table,
                                 max_seqlen_q, max_seqlen_k, causal, softmax_scale, num_splits, split_size, dl_stream,
                                 mods)
    ctx = pkg._context(pkg._device_for([("q", views[0]), ("k", views[1]), ("v", views[2]), ("out", views[3])] + aux,
                                       True, pkg._default_device()))
    lib = _capi.lib()
    _launch_with_workspace(pkg, torch, ctx, lib.fg_attention_fwd_varlen_workspace_size, lib.fg_attention_fwd_varlen,
                           a, q, handle)
    return (out, lse) if return_lse else out


def _launch_with_workspace(pkg, torch, ctx, size_fn, launch_fn, a, q, handle):
    """Asks size_fn for the call's workspace, allocates it 256-byte aligned on the launch stream (kept from
    reuse until the launch on `handle` has run when that is another stream), and launches."""
    size = ctypes.c_size_t(0)
    pkg._call(ctx, size_fn, ctypes.byref(a), ctypes.byref(size))
    ws = None
    if size.value:
        with pkg._on_launch_stream(handle, q.device):
            ws = torch.empty(size.value + 256, dtype=torch.uint8, device=q.device)
        a.workspace, a.workspace_size = (ws.data_ptr() + 255) // 256 * 256, size.value
    pkg._call(ctx, launch_fn, ctypes.byref(a), handle)
    if ws is not None and torch.cuda.current_stream(q.device).cuda_stream != handle:
        ws.record_stream(torch.cuda.ExternalStream(handle, device=q.device))


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=False,
                     softmax_scale=None, return_lse=False, out=None, lse=None, stream=None, seqused_k=None,
                     num_splits=0, split_size=0, deterministic=False, sinks=None, window_size=None, softcap=0.0,
                     alibi_slopes=None, causal_top_left=False, mod=None, mod_aux=None, mask_map=None, k_descale=None,
                     v_descale=None):
    """Attention over a batch of sequences of different lengths, packed (FlashAttention's
    flash_attn_varlen_func): q [total_q, heads_q, head_dim], k and v [total_k, heads_kv, head_dim], sequence b's
    queries rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1 (int32 CUDA tensors of batch + 1 offsets), its keys
    likewise. max_seqlen_q bounds every sequence's queries; max_seqlen_k (an upper bound, or 0) plans the
    split of keys. causal is bottom-right aligned per sequence; seqused_k (int32 [batch]) shortens each
    sequence's keys. A row that sees no key gets O = 0, LSE = -inf. Returns out [total_q, heads_q, head_dim],
    and with return_lse the fp32 LSE [heads_q, total_q]. num_splits (0: chosen) and split_size (keys a split
    takes, fixed: batch-invariant results) control the split of keys over CTAs; the workspace it needs is
    allocated on the launch stream. Training: when autograd is on and q, k or v requires grad, the call
    records for autograd and its backward runs attention_varlen_backward (deterministic: its mode); out=,
    lse=, seqused_k and the split arguments are not taken then; the model variants are (sinks that require grad
    get their gradient). sinks (an fp32 CUDA tensor [heads_q]): attention sinks, a logit per query head joining
    every row's softmax denominator (gpt-oss). v may have a head dim of its own (v.shape[-1]; out has it), in
    training too (DeepSeek's 192/128).
    window_size (left, right): a sliding window, query i (diagonal d = i + sk - sq) seeing keys d - left to
    d + right, -1 for an unbounded side (FlashAttention's convention; None or (-1, -1): none). softcap (> 0):
    logits become softcap * tanh(logit / softcap) (Gemma 2). alibi_slopes (an fp32 CUDA tensor [heads_q]):
    ALiBi, logit -= slope * |d - j|, after the softcap. causal_top_left (with causal): query i sees keys j <= i,
    the mask aligned to the top-left corner when sq != sk.
    mod (a flashgen.Mod, docs/mods.md): a custom score_mod, applied to each logit after the softcap and ALiBi, and/or
    mask_mod, hiding keys besides the causal and window limits (a row it leaves without a key gets O = 0, LSE =
    -inf); q and kv are positions within the sequence's queries and keys, from 0, b the sequence, h the query head.
    mod_aux: its aux arrays, a dict by name or a list in Mod.aux's order, each a contiguous CUDA tensor of the
    declared dtype (torch.float32 for f32, torch.int32 for i32) and rank; checked before anything is allocated
    (ValueError naming the array). Under autograd a mod's backward runs too (score_mod's derivative in dS), and an
    aux array declared 'trainable' that requires grad gets its gradient (summed by atomics: not with deterministic);
    one that requires grad without the declaration raises ValueError. mask_map: a flashgen.MaskMap to keep a mask's
    block map across calls (MaskMap says when it is refilled; the backward of a packed call reads its forward's).
    An FP8 KV cache: k and v both torch.float8_e4m3fn (or both float8_e5m2) beside float16/bfloat16 q, dequantized
    exactly in the kernel (head dims multiples of 32 up to 256; forward only). k_descale, v_descale: their descale
    factors (the dequantized K is k * k_descale), float32 tensors on q's device of shape [1] or [batch, heads_kv],
    or numbers; None means 1. A descale beside 16-bit k and v, or of another dtype, device or shape, raises
    ValueError; so does autograd with FP8 k and v."""
    pkg = _pkg()
    call = _mods.mod_call(mod, mod_aux, "attention_varlen")
    trained = _mods.grad_arrays(call)
    mods = dict(sinks=sinks, window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
                causal_top_left=causal_top_left, mask_map=mask_map)
    if pkg._needs_grad(q, k, v, sinks) or trained:
        if _fp8_cache(k, v) or k_descale is not None or v_descale is not None:
            raise ValueError("attention_varlen() with FP8 k and v (or descales) has no backward: an FP8 KV cache is "
                             "for inference (call it with autograd off)")
        if out is not None or lse is not None or seqused_k is not None or num_splits or split_size:
            raise TypeError("attention_varlen() with autograd takes no out=, lse=, seqused_k, num_splits or "
                            "split_size")
        rest = {key: val for key, val in mods.items() if key != "sinks"}
        rest["mod"] = call
        rest["trained"] = [i for i, _ in trained]  # (the backward runs with grad mode off: decided here)
        o, l = _varlen_function().apply(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                        bool(causal), softmax_scale, bool(deterministic), stream, sinks, rest,
                                        *[x for _, x in trained])
        return (o, l) if return_lse else o
    return _run(pkg, q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, None, max_seqlen_q, max_seqlen_k, causal,
                softmax_scale, return_lse, out, lse, stream, num_splits, split_size,
                dict(mods, mod=call, k_descale=k_descale, v_descale=v_descale))


def attention_varlen_backward(q, k, v, out, lse, dout, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                              causal=False, softmax_scale=None, deterministic=False, dq=None, dk=None, dv=None,
                              stream=None, sinks=None, window_size=None, softcap=0.0, alibi_slopes=None,
                              causal_top_left=False, mod=None, mod_aux_grad=None, mask_map=None, mask_map_ready=None):
    """The gradients (dq, dk, dv) of out = attention_varlen(q, k, v, ...) for dL/dout = dout, recomputed from the
    forward's out and lse ([heads_q, total_q], return_lse=True): the packed layouts of attention_varlen, causal
    bottom-right per sequence. v may have a head dim of its own (v.shape[-1], a multiple of 8 up to 256: DeepSeek's
    192/128), which out, dout and dv have. dq, dk, dv are allocated like q, k, v unless given; deterministic: bitwise-
    identical gradients from run to run (not with a window). The model variants (sinks, window_size, softcap,
    alibi_slopes, causal_top_left) must be the forward's, and its custom mod (mod: a checked ModCall, the Mod with its
    aux arrays); with sinks the result is (dq, dk, dv, dsink), dsink fp32 [heads_q]. mod_aux_grad: {index of a
    trainable aux array in the mod's order: an fp32 CUDA tensor of its shape}, written with that array's gradient.
    mask_map: a flashgen.MaskMap, as attention_varlen takes it (mask_map_ready=True: it holds this call's map, the
    forward's). The fp32 workspace is allocated on the launch stream."""
    pkg = _pkg()
    torch = pkg._torch()
    handle = pkg._stream_handle(stream, q)
    dl_stream = handle or None
    dq = torch.empty_like(q) if dq is None else dq
    dk = torch.empty_like(k) if dk is None else dk
    dv = torch.empty_like(v) if dv is None else dv
    a = _capi.FgVarlenBwdArgs()
    lib = _capi.lib()
    lib.fg_varlen_bwd_args_init(ctypes.byref(a))
    names = ("q", "k", "v", "o", "dout", "lse", "dq", "dk", "dv")
    views = [_tensors.view(x, n, dl_stream) for x, n in zip((q, k, v, out, dout, lse, dq, dk, dv), names)]
    for n, x in zip(names, views):
        setattr(a, n, x.struct())
    a.cu_seqlens_q = _int_ptr(cu_seqlens_q, "cu_seqlens_q")
    a.cu_seqlens_k = _int_ptr(cu_seqlens_k, "cu_seqlens_k")
    a.batch = cu_seqlens_q.shape[0] - 1
    a.max_seqlen_q, a.max_seqlen_k = int(max_seqlen_q), int(max_seqlen_k)
    a.softmax_scale = 0.0 if softmax_scale is None else float(softmax_scale)
    a.causal, a.deterministic = int(bool(causal)), int(bool(deterministic))
    _set_mods(a, q, sinks, window_size, softcap, alibi_slopes, causal_top_left)
    aux = _mods.set_mod(a, mod)
    _mods.set_mask_map(a, mod, mask_map, cu_seqlens_q, cu_seqlens_k, a.batch, q.shape[-2], max_seqlen_q, max_seqlen_k,
                       q.device, mask_map_ready)
    if mod_aux_grad:
        aux = aux + _mods.set_aux_grads(a, mod, mod_aux_grad)
    dsink = None
    if sinks is not None:
        dsink = torch.empty(q.shape[-2], dtype=torch.float32, device=q.device)
        a.dsink = dsink.data_ptr()
    ctx = pkg._context(pkg._device_for([(n, x) for n, x in zip(names, views)] + aux, True, pkg._default_device()))
    _launch_with_workspace(pkg, torch, ctx, lib.fg_attention_bwd_varlen_workspace_size, lib.fg_attention_bwd_varlen,
                           a, q, handle)
    return (dq, dk, dv) if dsink is None else (dq, dk, dv, dsink)


_VARLEN_FN = None


def _varlen_function():
    """attention_varlen's autograd.Function (made once torch is loaded): the forward keeps its LSE, the
    backward runs attention_varlen_backward."""
    global _VARLEN_FN
    if _VARLEN_FN is None:
        torch = _pkg()._torch()

        class VarlenAttention(torch.autograd.Function):
            @staticmethod
            def forward(ctx, q, k, v, cu_q, cu_k, max_q, max_k, causal, scale, deterministic, stream, sinks, mods,
                        *trained):  # trained: the aux arrays to differentiate (mods' ModCall holds them too)
                o, l = _run(_pkg(), q, k, v, cu_q, cu_k, None, None, max_q, max_k, causal, scale, True, None, None,
                            stream, 0, 0, dict(mods, sinks=sinks))
                ctx.save_for_backward(q, k, v, o, l, cu_q, cu_k, sinks)
                ctx.args = (max_q, max_k, causal, scale, deterministic, stream, mods)
                ctx.mark_non_differentiable(l)
                return o, l

            @staticmethod
            def backward(ctx, do, dlse):
                q, k, v, o, l, cu_q, cu_k, sinks = ctx.saved_tensors
                max_q, max_k, causal, scale, deterministic, stream, mods = ctx.args
                do = do.contiguous()
                shapes = None
                if cu_q is None:  # dense [batch, seqlen, heads, d]: the backward's packed form of the same rows
                    shapes = (q.shape, k.shape, v.shape)
                    b, max_q, max_k = q.shape[0], q.shape[1], k.shape[1]
                    cu_q = torch.arange(b + 1, dtype=torch.int32, device=q.device) * max_q
                    cu_k = torch.arange(b + 1, dtype=torch.int32, device=q.device) * max_k
                    q, k, v, o, do = (x.reshape((-1,) + tuple(x.shape[2:])) for x in (q, k, v, o, do))
                    l = l.permute(1, 0, 2).reshape(l.shape[1], -1)
                mods = dict(mods)
                trained, call = mods.pop("trained"), mods.get("mod")
                want = {i: torch.empty(call.arrays[i][1].shape, dtype=torch.float32, device=q.device)
                        for n, i in enumerate(trained) if ctx.needs_input_grad[13 + n]}
                g = attention_varlen_backward(q, k, v, o, l, do, cu_q, cu_k, max_q, max_k, causal, scale,
                                              deterministic, stream=stream, sinks=sinks, mod_aux_grad=want, **mods)
                if shapes is not None:
                    g = tuple(x.view(sh) for x, sh in zip(g[:3], shapes)) + tuple(g[3:])
                dsink = g[3] if sinks is not None and ctx.needs_input_grad[11] else None
                return ((g[0], g[1], g[2], None, None, None, None, None, None, None, None, dsink, None) +
                        tuple(want.get(i) for i in trained))

        _VARLEN_FN = VarlenAttention
    return _VARLEN_FN


def attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=None, block_table=None, causal=False,
                           softmax_scale=None, return_lse=False, out=None, lse=None, stream=None, cu_seqlens_q=None,
                           max_seqlen_q=None, max_seqlen_k=None, num_splits=0, split_size=0, sinks=None,
                           window_size=None, softcap=0.0, alibi_slopes=None, causal_top_left=False, mod=None,
                           mod_aux=None, k_descale=None, v_descale=None):
    """Attention of new queries over a KV cache (FlashAttention's flash_attn_with_kvcache), for decode
    and for prefill against a cache. q [batch, seqlen_q, heads_q, head_dim] (or packed [total_q, heads_q,
    head_dim] with cu_seqlens_q and max_seqlen_q); k_cache, v_cache [batch, capacity, heads_kv, head_dim], or
    paged [num_pages, page_size, heads_kv, head_dim] with block_table (int32 [batch, max_pages]: sequence b's
    pages in order; any page size, pages in any order). cache_seqlens (int32 [batch], required when paged): the
    keys in use. Query heads of one KV head are packed into one tile's rows, and keys are split over CTAs
    when the batch does not fill the GPU (num_splits 0: chosen; split_size: fixed boundaries). Returns out
    like q, and with return_lse the fp32 LSE ([batch, heads_q, seqlen_q], or [heads_q, total_q] packed). sinks,
    window_size, softcap, alibi_slopes, causal_top_left, mod and mod_aux: as attention_varlen takes them (a mod's q
    is the query's position among the keys, bottom-right aligned: a decode's one query is at cache_seqlens - 1).
    An FP8 cache (k_cache and v_cache float8_e4m3fn or float8_e5m2, token-major as caches keep them) with
    k_descale and v_descale: as attention_varlen takes them."""
    pkg = _pkg()
    call = _mods.mod_call(mod, mod_aux, "attention_with_kvcache")
    if block_table is not None and cache_seqlens is None:
        raise TypeError("a paged cache (block_table) needs cache_seqlens")
    if q.dim() == 3 and max_seqlen_q is None:
        raise TypeError("packed queries (3-d q with cu_seqlens_q) need max_seqlen_q")
    return _run(pkg, q, k_cache, v_cache, cu_seqlens_q, None, cache_seqlens, block_table, max_seqlen_q, max_seqlen_k,
                causal, softmax_scale, return_lse, out, lse, stream, num_splits, split_size,
                dict(sinks=sinks, window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
                     causal_top_left=causal_top_left, mod=call, k_descale=k_descale, v_descale=v_descale))


def explain_varlen(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, seqused_k=None, block_table=None,
                   max_seqlen_q=None, max_seqlen_k=None, causal=False, num_splits=0, split_size=0, sinks=None,
                   window_size=None, softcap=0.0, alibi_slopes=None, causal_top_left=False, mod=None, mod_aux=None,
                   k_descale=None, v_descale=None):
    """Which kernel attention_varlen / attention_with_kvcache would run for these arguments and why (variant,
    packing, splits, workspace, where its code comes from), as text; the model variants, a mod and an FP8 cache's
    descales as those calls take them (mod_aux may be left out: the plan does not depend on the arrays, so their
    declarations stand in)."""
    pkg = _pkg()
    call = _mods.mod_call(mod, mod_aux, "explain_varlen", describe=True)
    torch = pkg._torch()
    out = _out_like(torch, q, v)
    a, views, _ = _varlen_args(pkg, q, k, v, out, None, cu_seqlens_q, cu_seqlens_k, seqused_k, block_table,
                               max_seqlen_q, max_seqlen_k, causal, None, num_splits, split_size, None,
                               dict(sinks=sinks, window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
                                    causal_top_left=causal_top_left, mod=call, k_descale=k_descale,
                                    v_descale=v_descale))
    a.workspace = 256  # explain the plan of a call that gives a workspace
    ctx = pkg._context(pkg._device_for([("q", views[0])], False, pkg._default_device()))
    buf = ctypes.create_string_buffer(4096)
    pkg._call(ctx, _capi.lib().fg_explain_varlen, ctypes.byref(a), buf, len(buf))
    return buf.value.decode()


def merge_states(o_states, lse_states, out=None, lse=None, return_lse=True, stream=None):
    """Merges attention states computed over disjoint key sets, exactly: o_states [states, tokens, heads,
    head_dim] (fp32, fp16 or bf16), lse_states [states, tokens, heads] fp32 (natural log). O = sum_s w_s O_s /
    sum_s w_s with w_s = exp(LSE_s - max LSE), LSE = max + ln(sum w_s); states with LSE = -inf take no part.
    Returns out [tokens, heads, head_dim] (o_states' dtype unless out= is given) and the merged LSE
    [tokens, heads]."""
    pkg = _pkg()
    torch = pkg._torch()
    handle = pkg._stream_handle(stream, o_states)
    dl_stream = handle or None
    if out is None:
        out = torch.empty(o_states.shape[1:], dtype=o_states.dtype, device=o_states.device)
    if return_lse and lse is None:
        lse = torch.empty(o_states.shape[1:3], dtype=torch.float32, device=o_states.device)
    a = _capi.FgMergeArgs()
    _capi.lib().fg_merge_args_init(ctypes.byref(a))
    vs = _tensors.view(o_states, "o_states", dl_stream)
    a.o_states = vs.struct()
    a.lse_states = _tensors.view(lse_states, "lse_states", dl_stream).struct()
    a.o = _tensors.view(out, "out", dl_stream).struct()
    if lse is not None:
        a.lse = _tensors.view(lse, "lse", dl_stream).struct()
    ctx = pkg._context(pkg._device_for([("o_states", vs)], True, pkg._default_device()))
    pkg._call(ctx, _capi.lib().fg_merge_states, ctypes.byref(a), handle)
    return (out, lse) if return_lse else out


def set_check_inputs(on, device=None):
    """FG_OPTION_CHECK_INPUTS on the device's context: serving calls read their cu_seqlens, cache_seqlens and
    block_table back (a synchronization) and raise FlashgenError naming the first bad entry."""
    pkg = _pkg()
    ctx = pkg._context(pkg._default_device() if device is None else device)
    pkg._call(ctx, _capi.lib().fg_context_set_option, _capi.FG_OPTION_CHECK_INPUTS, int(bool(on)))
