"""bench/cudnn_fp8.py: cuDNN's own FP8 attention forward (the cuDNN frontend's sdpa_fp8 graph), the peer
for flashgen's FP8 kernels. torch's SDPA takes no FP8, so this goes through the `cudnn` Python package
(nvidia-cudnn-frontend 1.14.1, installed from its wheel), over the cuDNN library torch already loaded.

    op = CudnnFp8(torch, q8, k8, v8, qs, ks, vs, causal)   # builds the graph once (excluded from timing)
    op()                                                   # runs it; op.out is O in e4m3, [b, s, h, d]
    op.o_float()                                           # O dequantized to fp32

Inputs are [batch, seqlen, heads, head_dim] e4m3 tensors with per-tensor descales (fp32, one element), the
layout flashgen and bench/fp8.py use; cuDNN sees [b, h, s, d] views of the same memory. On Hopper cuDNN's
FP8 forward writes O in FP8 too: O is written as O * scale_o in e4m3; scale_o = 1 here (O stays within V's
range, below e4m3's 448). P is quantized as P * scale_s with scale_s = 256 (P <= 1; a power of two, so the
descale 1/256 is exact). Not quite like for like with flashgen's e4m3 rows in bench/fp8.py: cuDNN writes O in
e4m3 (half the bytes of flashgen's bf16 O) and computes two amax values, and it reads V row-major where
flashgen is given V already key-major.
"""
import math

P_SCALE = 256.0


def available():
    """(True, version) when the cudnn frontend imports, else (False, the reason)."""
    try:
        import cudnn
        return True, "cudnn frontend %s, backend %s" % (getattr(cudnn, "__version__", "?"), cudnn.backend_version())
    except Exception as e:  # noqa: BLE001 -- any import failure means "not available", said in the tables
        return False, "%s: %s" % (type(e).__name__, e)


class CudnnFp8:
    def __init__(self, torch, q8, k8, v8, qs, ks, vs, causal, attn_scale=None):
        import cudnn
        self.torch = torch
        b, s_q, h, d = q8.shape
        s_k = k8.shape[1]
        dev = q8.device
        self.handle = cudnn.create_handle()
        cudnn.set_stream(handle=self.handle, stream=torch.cuda.current_stream(dev).cuda_stream)
        e4m3, f32 = cudnn.data_type.FP8_E4M3, cudnn.data_type.FLOAT
        g = cudnn.pygraph(io_data_type=e4m3, intermediate_data_type=f32, compute_data_type=f32, handle=self.handle)

        def bhsd(x):  # [b, s, h, d] memory seen as [b, h, s, d]
            return [x.shape[0], x.shape[2], x.shape[1], x.shape[3]], [x.stride(0), x.stride(2), x.stride(1), x.stride(3)]
        tq, tk, tv = [g.tensor(name=n, dim=bhsd(x)[0], stride=bhsd(x)[1], data_type=e4m3)
                      for n, x in (("q", q8), ("k", k8), ("v", v8))]
        one = dict(dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=f32)
        sc = {n: g.tensor(name=n, **one) for n in ("dq", "dk", "dv", "ds", "ss", "so")}
        o, _, amax_s, amax_o = g.sdpa_fp8(
            q=tq, k=tk, v=tv, descale_q=sc["dq"], descale_k=sc["dk"], descale_v=sc["dv"], descale_s=sc["ds"],
            scale_s=sc["ss"], scale_o=sc["so"], is_inference=True,
            attn_scale=attn_scale if attn_scale is not None else 1.0 / math.sqrt(d), use_causal_mask=causal,
            name="sdpa_fp8")
        self.out = torch.empty((b, s_q, h, d), dtype=torch.float8_e4m3fn, device=dev)
        o.set_output(True).set_dim(bhsd(self.out)[0]).set_stride(bhsd(self.out)[1]).set_data_type(e4m3)
        self.amax = [torch.empty((1, 1, 1, 1), dtype=torch.float32, device=dev) for _ in range(2)]
        for t in (amax_s, amax_o):
            t.set_output(True).set_dim([1, 1, 1, 1]).set_stride([1, 1, 1, 1]).set_data_type(f32)
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        g.check_support()
        g.build_plans()
        scalar = lambda x: torch.full((1, 1, 1, 1), float(x), dtype=torch.float32, device=dev)
        self.scalars = {"dq": qs.reshape(1, 1, 1, 1).float().contiguous(), "dk": ks.reshape(1, 1, 1, 1).float().contiguous(),
                        "dv": vs.reshape(1, 1, 1, 1).float().contiguous(), "ds": scalar(1.0 / P_SCALE),
                        "ss": scalar(P_SCALE), "so": scalar(1.0)}
        self.pack = {tq: q8, tk: k8, tv: v8, o: self.out, amax_s: self.amax[0], amax_o: self.amax[1]}
        self.pack.update({sc[n]: self.scalars[n] for n in sc})
        self.workspace = torch.empty(max(1, g.get_workspace_size()), dtype=torch.uint8, device=dev)
        self.graph = g

    def __call__(self, i=0):
        self.graph.execute(self.pack, self.workspace, handle=self.handle)
        return self.out

    def o_float(self):
        return self.out.float()  # scale_o = 1

    def __del__(self):
        try:
            import cudnn
            cudnn.destroy_handle(self.handle)
        except Exception:  # noqa: BLE001 -- at interpreter exit the module may be gone already
            pass
