"""bench/compare_bench.py: bench/compare.py's forward benchmark, class Bench: the torch modules and
flashgen loaded, the timing helpers, the fp32 references and the check (docs/numerics.md), one config
measured per run(). bench/compare_bwd.py's BwdBench extends it for --bwd.

    bench = Bench(args)            # compare.py's options: device, fg_log, flex, iters, warmup
    rows, check = bench.run(cfg)   # cfg: one of compare.py's configs(a)

Importing it needs no PyTorch; making a Bench needs PyTorch and a CUDA device. Used by bench/compare.py
and bench/fp8.py; not a script.
"""
import datetime
import math
import os
import platform
import statistics
import sys
import time
import warnings

from compare_protocol import IMPLS, LSE_ATOL, LSE_RTOL, flops
from compare_provenance import REPO, driver_info, git_info, provenance


def record_explain(row, text):
    """Puts flashgen's variant (the first line of fg_explain / fg_explain_bwd) and where its code came
    from (the "code:" line) into the result row."""
    lines = text.splitlines()
    row["variant"] = lines[0].replace("variant ", "", 1)
    row["code_from"] = next((ln.split(":", 1)[1].strip() for ln in lines if ln.strip().startswith("code:")), None)


def scores(qs, ks, r0, r1, s_q, scale, causal):
    """Scaled scores of query rows [r0, r1) of one (batch, head) slice in float32, the causal mask bottom-right
    aligned (query i sees keys j <= i + s_k - s_q)."""
    import torch
    sc = (qs[r0:r1] @ ks.T) * scale
    if causal:
        s_k = ks.shape[0]
        i = torch.arange(r0, r1, device=qs.device)[:, None]
        j = torch.arange(s_k, device=qs.device)[None, :]
        sc = sc.masked_fill(j > i + (s_k - s_q), float("-inf"))
    return sc


class Bench:
    """One run: the torch modules, flashgen, the timing helpers and the per-config measurements."""

    def __init__(self, args):
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
        self.torch, self.F, self.SDPBackend, self.sdpa_kernel = torch, F, SDPBackend, sdpa_kernel
        self.args = args
        self.dev = torch.device("cuda", args.device)
        torch.cuda.set_device(self.dev)
        # ref32 must be fp32 math, not TF32
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        props = torch.cuda.get_device_properties(self.dev)
        self.props = props
        self.l2 = int(getattr(props, "L2_cache_size", 0) or 0) or 60 * 2**20
        self.cycles_per_ms = self.calibrate_sleep()
        self.fg, self.fg_error = self.load_flashgen(args.fg_log)
        self.flex = None
        self.flex_error = None
        if args.flex:
            self.setup_flex()

    # ---------------------------------------------------------------- setup

    def load_flashgen(self, level):
        """(the flashgen module, None), or (None, why) when the binding or its library cannot load."""
        sys.path.insert(0, os.path.join(REPO, "python"))
        try:
            import flashgen
            flashgen.configure(log_level=level)
            flashgen.library_path()
            return flashgen, None
        except Exception as e:  # the library missing or unloadable: flashgen is n/a, the peers still run
            return None, "%s: %s" % (type(e).__name__, e)

    def setup_flex(self):
        """torch.compile(flex_attention) with static shapes, or self.flex_error saying why not."""
        torch = self.torch
        try:
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        except ImportError as e:
            self.flex_error = "torch.nn.attention.flex_attention is not importable: %s" % e
            return
        cfg = torch._dynamo.config
        # one static-shape compile per config: lift the recompile limits (their names changed over releases)
        for name in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit", "accumulated_recompile_limit"):
            if hasattr(cfg, name):
                setattr(cfg, name, 4096)
        self.flex = torch.compile(flex_attention, dynamic=False)
        self.create_block_mask = create_block_mask

    def calibrate_sleep(self):
        """GPU clock cycles per millisecond for torch.cuda._sleep, or None when it is unavailable."""
        torch = self.torch
        if not hasattr(torch.cuda, "_sleep"):
            return None
        torch.cuda._sleep(1000)
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        torch.cuda._sleep(20_000_000)
        b.record()
        torch.cuda.synchronize()
        ms = a.elapsed_time(b)
        return 20_000_000 / ms if ms > 0 else None

    def environment(self):
        """What the JSON records of this run: GPU, driver, versions, commit, options."""
        torch = self.torch
        drv, api = driver_info(self.args.device)
        commit, dirty = git_info()
        env = {
            "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "host": platform.node(),
            "gpu": torch.cuda.get_device_name(self.dev),
            "compute_capability": "%d.%d" % (self.props.major, self.props.minor),
            "sm_count": self.props.multi_processor_count,
            "l2_bytes": self.l2,
            "memory_bytes": self.props.total_memory,
            "driver": drv or "unknown (nvidia-smi not available)",
            "cuda_driver_api": api,
            "torch": torch.__version__,
            "torch_cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(),
            "python": platform.python_version(),
            "flashgen_version": self.fg.version if self.fg else None,
            "flashgen_library": self.fg.library_path() if self.fg else self.fg_error,
            "git_commit": commit,
            "git_dirty": dirty,
            **provenance(self.fg),
            "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
            "iters": self.args.iters,
            "warmup": self.args.warmup,
            "sleep_cycles_per_ms": self.cycles_per_ms,
        }
        if self.args.flex:
            try:
                import triton
                env["triton"] = triton.__version__
            except ImportError:
                env["triton"] = None
        return env

    # ---------------------------------------------------------------- timing

    def time_calls(self, fn, ncopies):
        """(median ms, all ms, host us per call) of fn(i) over --iters calls after --warmup calls, and after
        flashgen's background compiles end (a variant's first call runs a quick build until its optimized one
        replaces it: the optimized one is timed)."""
        torch, a = self.torch, self.args
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(a.warmup):
            fn(i % ncopies)
        host_us = (time.perf_counter() - t0) / max(a.warmup, 1) * 1e6
        if self.fg is not None:
            self.fg.wait_compiles()
        torch.cuda.synchronize()
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(a.iters)]
        if self.cycles_per_ms:
            # Keep the GPU busy while the host enqueues every timed call, so each event pair brackets
            # only GPU work, whatever the host's cost per call.
            sleep_ms = min(1000.0, 2.0 + 2.0 * a.iters * max(host_us, 50.0) / 1000.0)
            torch.cuda._sleep(int(sleep_ms * self.cycles_per_ms))
        for i in range(a.iters):
            events[i][0].record()
            fn((a.warmup + i) % ncopies)
            events[i][1].record()
        torch.cuda.synchronize()
        ms = [s.elapsed_time(e) for s, e in events]
        return statistics.median(ms), ms, host_us

    # ---------------------------------------------------------------- references

    def ref32_slice(self, q, k, v, causal, pairs):
        """fp32 math on upcast inputs for the (batch, head) pairs: {pair: (O [s, d], LSE [s])}."""
        torch = self.torch
        s_q, s_k, d = q.shape[1], k.shape[1], q.shape[3]
        scale = 1.0 / math.sqrt(d)
        chunk = max(1, (256 * 2**20) // (4 * s_k))
        out = {}
        for (bi, hi) in pairs:
            qs, ks, vs = q[bi, :, hi].float(), k[bi, :, hi].float(), v[bi, :, hi].float()
            o = torch.empty(s_q, d, device=q.device)
            lse = torch.empty(s_q, device=q.device)
            for r0 in range(0, s_q, chunk):
                r1 = min(s_q, r0 + chunk)
                sc = scores(qs, ks, r0, r1, s_q, scale, causal)
                lse[r0:r1] = torch.logsumexp(sc, dim=-1)
                o[r0:r1] = torch.softmax(sc, dim=-1) @ vs
                del sc
            out[(bi, hi)] = (o, lse)
        return out

    def sdpa(self, backend, q, k, v, causal):
        """SDPA under one backend on [b, h, s, d] views; raises RuntimeError with the backend's reasons."""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                with self.sdpa_kernel(backend):
                    return self.F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            except RuntimeError as e:
                why = [str(w.message).strip() for w in caught]
                raise RuntimeError("; ".join([str(e).strip().splitlines()[0]] + why)) from None

    # ---------------------------------------------------------------- one config

    def run(self, cfg):
        """Measures every implementation on one config: a list of result rows and the check record."""
        torch = self.torch
        b, s, h, d, causal = cfg["batch"], cfg["seqlen"], cfg["heads"], cfg["head_dim"], cfg["causal"]
        dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[cfg["dtype"]]
        set_bytes = 3 * b * s * h * d * 2
        ncopies = min(64, max(2, math.ceil(2 * self.l2 / set_bytes)))  # 2 for the protocol's 192 MiB sets
        gen = torch.Generator(device=self.dev)
        gen.manual_seed(1000 + s + d)
        copies = [tuple(torch.randn(b, s, h, d, device=self.dev, dtype=dt, generator=gen) for _ in range(3))
                  for _ in range(ncopies)]
        views = [tuple(x.transpose(1, 2) for x in c) for c in copies]  # [b, h, s, d] over the same memory
        rows = {impl: dict(cfg, implementation=impl, flops=flops(cfg), median_ms=None, tflops=None,
                           check="n/a", note="", ncopies=ncopies)
                for impl in IMPLS if impl != "flex" or self.args.flex}
        check = dict(cfg, status="n/a")

        # ---- outputs for the check (the first calls; compiles are timed here, not below)
        outs = {}
        q, k, v = copies[0]
        if self.fg is None:
            rows["flashgen"]["note"] = self.fg_error
        else:
            try:
                record_explain(rows["flashgen"], self.fg.explain(q, k, v, causal=causal))
                t0 = time.perf_counter()
                self.fg.prepare(q, k, v, causal=causal)
                rows["flashgen"]["prepare_s"] = round(time.perf_counter() - t0, 4)
                o = torch.full_like(q, float("nan"))
                lse = torch.empty(b, h, s, device=self.dev, dtype=torch.float32)
                self.fg.attention(q, k, v, causal=causal, out=o, lse=lse)
                torch.cuda.synchronize()
                outs["flashgen"] = (o, lse)
            except Exception as e:  # FlashgenError (the library's sentence) or a binding failure
                rows["flashgen"]["note"] = str(e) if isinstance(e, self.fg.FlashgenError) else "%s: %s" % (type(e).__name__, e)
        sdpa_inputs = {}  # impl -> the per-copy (q, k, v) it runs on
        for impl, backend in (("cudnn", self.SDPBackend.CUDNN_ATTENTION), ("fa2", self.SDPBackend.FLASH_ATTENTION)):
            try:
                t0 = time.perf_counter()
                outs[impl] = self.sdpa(backend, *views[0], causal)
                torch.cuda.synchronize()
                rows[impl]["first_call_s"] = round(time.perf_counter() - t0, 4)
                sdpa_inputs[impl] = views
            except RuntimeError as e:
                # Refused on the transposed views: try contiguous [b, h, s, d] copies before giving up.
                first = str(e)
                try:
                    contig = [tuple(x.contiguous() for x in c) for c in views]
                    outs[impl] = self.sdpa(backend, *contig[0], causal)
                    torch.cuda.synchronize()
                    sdpa_inputs[impl] = contig
                    rows[impl]["note"] = "ran on contiguous [b,h,s,d] copies; the transposed views were refused: " + first
                except RuntimeError as e2:
                    rows[impl]["note"] = "refused: " + first + (" | contiguous: " + str(e2) if str(e2) != first else "")
        if self.args.flex:
            self.flex_first_call(cfg, views, rows, outs)

        # ---- the check
        if "flashgen" in outs:
            check = self.check(cfg, copies[0], outs)
            rows["flashgen"]["check"] = "ok" if check["status"] == "ok" else "WRONG"
            if check["status"] != "ok":
                rows["flashgen"]["note"] = check["why"]
        for impl in ("cudnn", "fa2", "flex"):
            if impl in rows and impl in outs:
                rows[impl]["check"] = check.get("peer_status", {}).get(impl, "unchecked")

        # ---- timing
        fg_out = torch.empty_like(q)
        if "flashgen" in outs and rows["flashgen"]["check"] == "ok":
            fg = self.fg

            def call_fg(i):
                qi, ki, vi = copies[i]
                fg.attention(qi, ki, vi, causal=causal, out=fg_out)
            self.timed(rows["flashgen"], call_fg, ncopies)
        for impl, backend in (("cudnn", self.SDPBackend.CUDNN_ATTENTION), ("fa2", self.SDPBackend.FLASH_ATTENTION)):
            if impl not in outs:
                continue
            src = sdpa_inputs[impl]
            F = self.F
            with self.sdpa_kernel(backend):
                self.timed(rows[impl], lambda i: F.scaled_dot_product_attention(*src[i], is_causal=causal), ncopies)
        if "flex" in outs:
            bm = self._block_mask
            flex = self.flex
            self.timed(rows["flex"], lambda i: flex(*views[i], block_mask=bm), ncopies)
            self._block_mask = None
        for r in rows.values():
            if r["median_ms"]:
                r["tflops"] = r["flops"] / (r["median_ms"] * 1e-3) / 1e12
        return list(rows.values()), check

    def timed(self, row, fn, ncopies):
        """Times fn into row (median_ms, min/max, every time, host cost); a failure becomes the row's note."""
        try:
            med, all_ms, host_us = self.time_calls(fn, ncopies)
        except Exception as e:  # a failure while timing: the row says why, the sweep goes on
            row["note"] = (row["note"] + "; " if row["note"] else "") + "failed while timing: %s: %s" % (type(e).__name__, e)
            return
        row["median_ms"] = med
        row["min_ms"], row["max_ms"] = min(all_ms), max(all_ms)
        row["times_ms"] = [round(x, 5) for x in all_ms]
        row["host_us_per_call"] = round(host_us, 2)

    def flex_first_call(self, cfg, views, rows, outs):
        """Builds the BlockMask and compiles FlexAttention for this shape (timed as first_call_s)."""
        torch = self.torch
        self._block_mask = None
        if self.flex is None:
            rows["flex"]["note"] = self.flex_error
            return
        s = cfg["seqlen"]
        try:
            torch._dynamo.reset()  # static shapes: one compile per config; keep the guard list short
            t0 = time.perf_counter()
            if cfg["causal"]:
                def causal_mask(b, h, q_idx, kv_idx):
                    return q_idx >= kv_idx
                self._block_mask = self.create_block_mask(causal_mask, B=None, H=None, Q_LEN=s, KV_LEN=s,
                                                          device=self.dev)
            outs["flex"] = self.flex(*views[0], block_mask=self._block_mask)
            torch.cuda.synchronize()
            rows["flex"]["first_call_s"] = round(time.perf_counter() - t0, 3)
        except Exception as e:  # Triton/inductor refusals come as many exception types
            rows["flex"]["note"] = "refused: %s: %s" % (type(e).__name__, str(e).strip().splitlines()[0] if str(e).strip() else "")
            outs.pop("flex", None)

    def check(self, cfg, inputs, outs):
        """The tolerance rule (docs/numerics.md) on flashgen's output, against fp32 math on a slice (batch 0 / head 0 and
        the last batch / head), with SDPA FA2's output as the low-precision reference (else cuDNN's,
        else the kernel-precision math computed here); plus no NaN/Inf anywhere and the LSE."""
        torch = self.torch
        q, k, v = inputs
        b, h = cfg["batch"], cfg["heads"]
        pairs = sorted({(0, 0), (b - 1, h - 1)})
        ref = self.ref32_slice(q, k, v, cfg["causal"], pairs)
        o_fg, lse_fg = outs["flashgen"]
        rec = dict(cfg, slice="batch,head in %s, all rows" % (pairs,))
        nonfinite = int((~torch.isfinite(o_fg)).sum().item())
        rec["nonfinite"] = nonfinite

        def err(get):  # max |x - ref32| over the slice
            return max((get(bi, hi).float() - ref[(bi, hi)][0]).abs().max().item() for bi, hi in pairs)

        getters = {"flashgen": lambda bi, hi: o_fg[bi, :, hi]}
        for impl in ("cudnn", "fa2", "flex"):
            if impl in outs:
                o = outs[impl]  # [b, h, s, d]
                getters[impl] = (lambda o: lambda bi, hi: o[bi, hi])(o)
        errs = {impl: err(g) for impl, g in getters.items()}
        rec["err32"] = errs
        # the low-precision reference: FA2, else cuDNN, else the kernel-precision math (also when the
        # peer's own output is not finite, which would make any bound meaningless)
        lowp_from = next((i for i in ("fa2", "cudnn") if i in errs and math.isfinite(errs[i])), "math")
        if lowp_from == "math":
            lowp = self.lowp_err(q, k, v, cfg["causal"], pairs, ref)
        else:
            lowp = errs[lowp_from]
        rec["lowp_reference"], rec["err_lowp"] = lowp_from, lowp
        bound = 2 * lowp + 1e-5
        rec["bound"] = bound
        lse_err, lse_bad = 0.0, 0
        for bi, hi in pairs:
            r = ref[(bi, hi)][1]
            got = lse_fg[bi, hi]
            diff = (got - r).abs()
            lse_err = max(lse_err, diff.max().item())
            lse_bad += int(((diff > LSE_ATOL + LSE_RTOL * r.abs()) | ~torch.isfinite(got)).sum().item())
        rec["lse_err"], rec["lse_bad_rows"] = lse_err, lse_bad
        for impl in ("cudnn", "fa2"):
            if impl in outs:
                rec["maxdiff_" + impl] = (o_fg.float() - outs[impl].transpose(1, 2).float()).abs().max().item()
        why = []
        if nonfinite:
            why.append("%d NaN/Inf outputs (NaN-filled before the call: elements not written?)" % nonfinite)
        if errs["flashgen"] > bound:
            why.append("max|out-ref32| %.3g > bound %.3g (2 x %s's %.3g + 1e-5)" % (errs["flashgen"], bound, lowp_from, lowp))
        if lse_bad:
            why.append("%d LSE rows off by more than %g + %g|ref| (max %.3g)" % (lse_bad, LSE_ATOL, LSE_RTOL, lse_err))
        rec["status"] = "WRONG" if why else "ok"
        rec["why"] = "; ".join(why)
        rec["peer_status"] = {impl: ("ok" if e <= bound else "outside bound") for impl, e in errs.items() if impl != "flashgen"}
        if lowp_from in rec["peer_status"]:
            rec["peer_status"][lowp_from] = "reference"
        return rec

    def lowp_err(self, q, k, v, causal, pairs, ref):
        """max|ref_lowp - ref32| with ref_lowp computed here (P rounded to the dtype before P.V, the row
        sum from the unrounded P, O rounded), for when neither SDPA backend ran."""
        torch = self.torch
        s_q, s_k, d = q.shape[1], k.shape[1], q.shape[3]
        scale = 1.0 / math.sqrt(d)
        chunk = max(1, (256 * 2**20) // (4 * s_k))
        worst = 0.0
        for bi, hi in pairs:
            qs, ks, vs = q[bi, :, hi].float(), k[bi, :, hi].float(), v[bi, :, hi].float()
            for r0 in range(0, s_q, chunk):
                r1 = min(s_q, r0 + chunk)
                sc = scores(qs, ks, r0, r1, s_q, scale, causal)
                p = torch.exp(sc - sc.amax(dim=-1, keepdim=True))
                o = ((p.to(q.dtype).float() @ vs) / p.sum(dim=-1, keepdim=True)).to(q.dtype).float()
                worst = max(worst, (o - ref[(bi, hi)][0][r0:r1]).abs().max().item())
        return worst
