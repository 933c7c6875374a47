"""bench/compare_bwd.py: bench/compare.py --bwd's benchmark, class BwdBench: flashgen's attention_backward
against SDPA's cuDNN and FlashAttention-2 backward, each from its own forward's outputs (retained, so only
the backward kernels run in the timed calls); dQ, dK, dV checked against fp32 autograd through attention
math on a slice with the 3x rule, as compare.py's module doc says under --bwd.

    bench = BwdBench(args)         # as compare_bench.Bench; args.deterministic picks flashgen's mode
    rows, check = bench.run(cfg)

Used by bench/compare.py; not a script.
"""
import math
import time

from compare_bench import Bench, record_explain
from compare_protocol import flops


class BwdBench(Bench):
    """--bwd: the backward pass of each implementation, after its own forward (see the module doc)."""

    def run(self, cfg):
        torch, F = self.torch, self.F
        b, s, h, d, causal = cfg["batch"], cfg["seqlen"], cfg["heads"], cfg["head_dim"], cfg["causal"]
        dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[cfg["dtype"]]
        ncopies = min(8, max(2, math.ceil(2 * self.l2 / (4 * b * s * h * d * 2))))
        gen = torch.Generator(device=self.dev)
        gen.manual_seed(2000 + s + d)
        copies = [tuple(torch.randn(b, s, h, d, device=self.dev, dtype=dt, generator=gen) for _ in range(4))
                  for _ in range(ncopies)]  # q, k, v, dO
        impls = ("flashgen", "cudnn", "fa2")
        rows = {i: dict(cfg, implementation=i, flops=flops(cfg), median_ms=None, tflops=None, check="n/a", note="",
                        ncopies=ncopies) for i in impls}
        grads, timers = {}, {}
        if self.fg is None:
            rows["flashgen"]["note"] = self.fg_error
        else:
            try:
                fg = self.fg
                state = []
                for q, k, v, do in copies:
                    o, lse = fg.attention(q, k, v, causal=causal, return_lse=True)
                    state.append((q, k, v, o, lse, do, torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)))
                q, k, v, o, lse, do, dq, dk, dv = state[0]
                record_explain(rows["flashgen"], fg.explain_backward(q, k, v, o, lse, do, causal=causal,
                                                                     deterministic=self.args.deterministic))
                for g in (dq, dk, dv):
                    g.fill_(float("nan"))  # every element must be written
                t0 = time.perf_counter()
                grads["flashgen"] = fg.attention_backward(q, k, v, o, lse, do, causal=causal, deterministic=self.args.deterministic,
                                        dq=dq, dk=dk, dv=dv)
                torch.cuda.synchronize()
                rows["flashgen"]["first_call_s"] = round(time.perf_counter() - t0, 4)

                def call_fg(i):
                    q, k, v, o, lse, do, dq, dk, dv = state[i]
                    fg.attention_backward(q, k, v, o, lse, do, causal=causal, deterministic=self.args.deterministic,
                                        dq=dq, dk=dk, dv=dv)
                timers["flashgen"] = call_fg
            except Exception as e:
                rows["flashgen"]["note"] = str(e) if isinstance(e, self.fg.FlashgenError) else "%s: %s" % (type(e).__name__, e)
        for impl, backend in (("cudnn", self.SDPBackend.CUDNN_ATTENTION), ("fa2", self.SDPBackend.FLASH_ATTENTION)):
            try:
                graphs = []
                for q, k, v, do in copies:
                    leaves = [x.detach().requires_grad_() for x in (q, k, v)]
                    with self.sdpa_kernel(backend):
                        o = F.scaled_dot_product_attention(*(x.transpose(1, 2) for x in leaves), is_causal=causal)
                    graphs.append((o, leaves, do.transpose(1, 2)))
                o, leaves, dov = graphs[0]
                grads[impl] = torch.autograd.grad(o, leaves, dov, retain_graph=True)
                torch.cuda.synchronize()
                timers[impl] = (lambda gs: lambda i: torch.autograd.grad(gs[i][0], gs[i][1], gs[i][2], retain_graph=True))(graphs)
            except RuntimeError as e:
                rows[impl]["note"] = "refused: " + str(e).strip().splitlines()[0]
        check = dict(cfg, status="n/a")
        if "flashgen" in grads:
            check = self.check_bwd(cfg, copies[0], grads)
            rows["flashgen"]["check"] = "ok" if check["status"] == "ok" else "WRONG"
            if check["status"] != "ok":
                rows["flashgen"]["note"] = check["why"]
                timers.pop("flashgen", None)
        for impl in ("cudnn", "fa2"):
            if impl in grads:
                rows[impl]["check"] = check.get("peer_status", {}).get(impl, "unchecked")
        for impl, fn in timers.items():
            self.timed(rows[impl], fn, ncopies)
        for r in rows.values():
            if r["median_ms"]:
                r["tflops"] = r["flops"] / (r["median_ms"] * 1e-3) / 1e12
        return list(rows.values()), check

    def check_bwd(self, cfg, inputs, grads):
        """dQ, dK, dV of flashgen against fp32 autograd through attention math on (batch, head) slices
        (batch 0 / head 0 and the last ones), 3x FA2's (else cuDNN's) error as the bound; no NaN/Inf."""
        torch = self.torch
        q, k, v, do = inputs
        b, h, s, d = cfg["batch"], cfg["heads"], cfg["seqlen"], cfg["head_dim"]
        pairs = sorted({(0, 0), (b - 1, h - 1)})
        names = ("dq", "dk", "dv")
        errs = {impl: [0.0, 0.0, 0.0] for impl in grads}
        for bi, hi in pairs:
            leaves = [x[bi, :, hi].float().requires_grad_() for x in (q, k, v)]
            sc = (leaves[0] @ leaves[1].T) / math.sqrt(d)
            if cfg["causal"]:
                i = torch.arange(s, device=q.device)[:, None]
                j = torch.arange(s, device=q.device)[None, :]
                sc = sc.masked_fill(j > i, float("-inf"))
            o = torch.softmax(sc, dim=-1) @ leaves[2]
            ref = torch.autograd.grad(o, leaves, do[bi, :, hi].float())
            del sc, o
            for impl, g in grads.items():
                for n in range(3):
                    x = g[n][bi, :, hi]  # every implementation's gradients are [b, s, h, d]
                    errs[impl][n] = max(errs[impl][n], (x.float() - ref[n]).abs().max().item())
        rec = dict(cfg, slice="batch,head in %s" % (pairs,), err32={i: dict(zip(names, e)) for i, e in errs.items()})
        lowp_from = next((i for i in ("fa2", "cudnn") if i in errs and all(math.isfinite(x) for x in errs[i])), None)
        why = []
        nonfinite = sum(int((~torch.isfinite(g)).sum().item()) for g in grads["flashgen"])
        if nonfinite:
            why.append("%d NaN/Inf gradient elements (NaN-filled before the call: elements not written?)" % nonfinite)
        if lowp_from is None:
            why.append("no SDPA backward ran: no low-precision reference for the bound")
        else:
            rec["lowp_reference"] = lowp_from
            for n, name in enumerate(names):
                bound = 3 * errs[lowp_from][n] + 1e-5
                rec["bound_" + name] = bound
                if errs["flashgen"][n] > bound:
                    why.append("%s: max|grad-ref32| %.3g > 3 x %s's %.3g + 1e-5" % (name, errs["flashgen"][n], lowp_from,
                                                                                   errs[lowp_from][n]))
        rec["status"] = "WRONG" if why else "ok"
        rec["why"] = "; ".join(why)
        rec["peer_status"] = {i: "reference" if i == lowp_from else "unchecked" for i in grads if i != "flashgen"}
        return rec
