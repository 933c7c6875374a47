"""bench/mods.py: custom score and mask mods (docs/mods.md) against FlexAttention, in one process with the protocol
of bench/serving.py (CUDA events around runs of 5 back-to-back calls, warm-up first, the median of the runs).

Each example of the shipped set runs as a flashgen mod (flashgen.attention_varlen on dense [b, s, h, d] tensors,
mod= and mod_aux=) and as FlexAttention (torch.compile(flex_attention), dynamic=False) with the equivalent
score_mod / mask_mod and a BlockMask from create_block_mask: bf16, batch 2, 8k tokens, 16 heads at head_dim 128 (32
at 64). As the BlockMask is built once, flashgen keeps a mask's block map across the calls in a flashgen.MaskMap (the
first call fills it; --per-call-map classifies at every call). The outputs are compared first (max |difference| under 2e-2), then timed; FLOPs count every key (the
ratio is what matters). Also printed:
  first call   flashgen's first call of a new mod in a fresh disk cache (trace, generate, NVRTC, load, run)
               against FlexAttention's first call (Triton's compile), each measured once, in milliseconds;
  bias cost    each mod's forward against flashgen's own call without a mod (causal as the example);
  backward     with --backward, the gradients (dq, dk, dv through autograd, the graph kept: the backward's
               kernels alone) of each side, their dq compared (relative max |difference| under 2e-2) and timed.

  --tiers      the JIT's two tiers on (FLASHGEN_JIT_TIERS=1): the first call runs the quick build, the timed calls
               the optimized one (bench/compare_bench.py waits for it after the warm-up)

    python3 bench/mods.py [--dims 64 128] [--iters 20] [--only NAME ...] [--backward] [--per-call-map] [--tiers]
"""

import argparse
import math
import os
import sys
import tempfile
import time

import torch

if "--tiers" in sys.argv[1:]:
    os.environ["FLASHGEN_JIT_TIERS"] = "1"  # read when flashgen makes its context
sys.path.insert(0, __file__.rsplit("/", 1)[0])
sys.path.insert(0, __file__.rsplit("/", 2)[0] + "/python")
import flashgen  # noqa: E402
from serving import check, timed  # noqa: E402

B, N = 2, 8192


def examples(h, dev):
    """(name, causal, lua text, aux dict, flex score_mod or None, flex mask_mod or None) for h heads."""
    slopes = torch.tensor([2 ** (-8 * (i + 1) / h) for i in range(h)], device=dev)
    table = (torch.arange(h * 129, device=dev, dtype=torch.float32).reshape(h, 129) % 17) * 0.02 - 0.15
    t5 = (torch.arange(h * 32, device=dev, dtype=torch.float32).reshape(h, 32) % 11) * 0.03 - 0.15
    doc = (torch.arange(N, device=dev, dtype=torch.int32) // 1000).repeat(B, 1).contiguous()
    prefix = torch.tensor([1024, 3000], dtype=torch.int32, device=dev)
    blocks = (torch.rand(N // 128, N // 128, generator=torch.Generator(device="cpu").manual_seed(1)) < 0.5)
    blocks = (blocks | torch.eye(N // 128, dtype=torch.bool)).to(torch.int32).to(dev).contiguous()

    def t5_bucket(q, kv):
        rel = kv - q
        a = rel.abs()
        far = 8 + torch.floor(torch.log(a.float().clamp(min=1) / 8.0) / math.log(16.0) * 8.0 + 1e-3).to(torch.int32)
        return torch.where(rel > 0, 16, 0) + torch.where(a < 8, a, torch.clamp(far, max=15))

    return [
        ("alibi", True, "aux = { slopes = fg.aux('f32', 1) }\n"
         "score_mod = function(s, b, h, q, kv) return s - fg.load(slopes, h) * fg.abs(q - kv) end\n",
         {"slopes": slopes}, lambda s, b, hh, q, kv: s - slopes[hh] * (q - kv).abs(), None),
        ("softcap", True, "score_mod = function(s, b, h, q, kv) return 30.0 * fg.tanh(s / 30.0) end\n",
         {}, lambda s, b, hh, q, kv: 30.0 * torch.tanh(s / 30.0), None),
        ("bias table", True, "aux = { bias = fg.aux('f32', 2) }\n"
         "score_mod = function(s, b, h, q, kv) return s + fg.load(bias, h, fg.min(fg.max(kv - q, -64), 64) + 64) end\n",
         {"bias": table}, lambda s, b, hh, q, kv: s + table[hh, (kv - q).clamp(-64, 64) + 64], None),
        ("t5 buckets", False, "aux = { t5 = fg.aux('f32', 2) }\n"
         "score_mod = function(s, b, h, q, kv)\n"
         "  local rel = kv - q\n  local a = fg.abs(rel)\n"
         "  local far = 8 + fg.floor(fg.log(fg.float(a) / 8.0) / 2.772588722239781 * 8.0 + 1e-3)\n"
         "  return s + fg.load(t5, h, fg.where(fg.gt(rel, 0), 16, 0) + fg.where(fg.lt(a, 8), a, fg.min(far, 15)))\n"
         "end\n",
         {"t5": t5}, lambda s, b, hh, q, kv: s + t5[hh, t5_bucket(q, kv)], None),
        ("document", False, "aux = { doc = fg.aux('i32', 2) }\n"
         "mask_mod = function(b, h, q, kv) return fg.eq(fg.load(doc, b, q), fg.load(doc, b, kv)) end\n",
         {"doc": doc}, None, lambda b, hh, q, kv: doc[b, q] == doc[b, kv]),
        ("prefix-lm", False, "aux = { prefix = fg.aux('i32', 1) }\n"
         "mask_mod = function(b, h, q, kv) return fg.or_(fg.le(kv, q), fg.lt(kv, fg.load(prefix, b))) end\n",
         {"prefix": prefix}, None, lambda b, hh, q, kv: (kv <= q) | (kv < prefix[b])),
        ("window 1k", False, "mask_mod = function(b, h, q, kv) return fg.and_(fg.le(kv, q), fg.gt(kv, q - 1024)) end\n",
         {}, None, lambda b, hh, q, kv: (kv <= q) & (kv > q - 1024)),
        ("block sparse", False, "aux = { blocks = fg.aux('i32', 2) }\n"
         "mask_mod = function(b, h, q, kv) return fg.eq(fg.load(blocks, q // 128, kv // 128), 1) end\n",
         {"blocks": blocks}, None, lambda b, hh, q, kv: blocks[q // 128, kv // 128] == 1),
    ]


def failure(e):
    """A peer's exception as a table cell: its last non-empty line, cut to 80 characters."""
    why = [x for x in str(e).splitlines() if x.strip()]
    return why[-1][:80] if why else type(e).__name__


def backward_row(name, iters, qkv, ours, theirs):
    """One backward table row: ours(q, k, v) and theirs(q, k, v) (FlexAttention on [b, h, s, d] views, its output
    back in [b, s, h, d]) differentiated for one dout, the graphs kept, their dq compared, then each timed."""
    xs = [x.detach().requires_grad_() for x in qkv]
    do = torch.randn_like(qkv[0])
    grads = []
    for f, views in ((ours, lambda: xs), (theirs, lambda: [x.transpose(1, 2) for x in xs])):
        try:
            o = f(views())
            g = lambda o=o: torch.autograd.grad(o, xs, do, retain_graph=True)  # noqa: E731 (o bound now)
            grads.append((g, g()[0]))
        except Exception as e:  # noqa: BLE001 (a peer's failure is reported in the row)
            return "| %s | failed: %s |" % (name, failure(e))
    (gf, dq_f), (gx, dq_x) = grads
    scale = max(1.0, dq_x.float().abs().max().item())
    err = (dq_f.float() - dq_x.float()).abs().max().item() / scale
    if not err < 2e-2:
        raise SystemExit("flashgen %s dq differs from FlexAttention's by %g (relative)" % (name, err))
    tb, tx = timed(gf, iters), timed(gx, iters)
    return "| %s | %.0f us | %.0f us | %.2f |" % (name, tb, tx, tx / tb)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dims", type=int, nargs="*", default=[64, 128])
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--only", nargs="*", default=None)
    p.add_argument("--backward", action="store_true", help="also time the gradients against FlexAttention's")
    p.add_argument("--tiers", action="store_true", help="the JIT's two tiers on (FLASHGEN_JIT_TIERS=1)")
    p.add_argument("--per-call-map", dest="keep_map", action="store_false",
                   help="classify a mask's blocks at every call (no flashgen.MaskMap kept across the calls)")
    a = p.parse_args()
    dev = torch.device("cuda")
    torch._dynamo.config.recompile_limit = 256  # each example's mod is a new function: past the limit Flex runs eager
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        flex = torch.compile(flex_attention, dynamic=False)
    except Exception as e:  # noqa: BLE001 (any import or compile setup failure is reported, not fatal)
        flex, why = None, str(e).splitlines()[0]
    print("# %s, torch %s, FlexAttention %s" % (torch.cuda.get_device_name(), torch.__version__,
                                                "yes" if flex else "no (%s)" % why))
    os.environ.setdefault("FLASHGEN_CACHE_DIR", tempfile.mkdtemp(prefix="fgmods-"))
    for d in a.dims:
        h = 2048 // d
        q, k, v = (torch.randn(B, N, h, d, device=dev, dtype=torch.bfloat16) for _ in range(3))
        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))  # FlexAttention's [b, h, s, d]
        plain_c = lambda causal: flashgen.attention_varlen(q, k, v, None, None, N, N, causal=causal)  # noqa: E731
        t_plain = {c: timed(lambda: plain_c(c), a.iters) for c in (False, True)}
        print("## bf16, batch %d, %dk tokens, %d heads, head_dim %d" % (B, N // 1024, h, d))
        print("| mod | flashgen | FlexAttention | flashgen / Flex | first call: flashgen / Flex (ms) | / flashgen without |")
        print("|---|---|---|---|---|---|")
        back = []
        for name, causal, text, aux, score, mask in examples(h, dev):
            if a.only and name not in a.only:
                continue
            t0 = time.perf_counter()
            m = flashgen.Mod(text, name=name.replace(" ", "_") + ".lua")
            mm = flashgen.MaskMap()  # a mask's block map kept across the calls, as Flex's BlockMask is built once
            fg = lambda: flashgen.attention_varlen(q, k, v, None, None, N, N, causal=causal, mod=m,  # noqa: E731
                                                   mod_aux=aux, mask_map=mm if a.keep_map else None)
            out = fg()
            torch.cuda.synchronize()
            first_fg = (time.perf_counter() - t0) * 1e3
            t = timed(fg, a.iters)
            row = "| %s | %.0f us |" % (name, t)
            if flex is None:
                print(row + " - | - | %.0f / - | %.3f |" % (first_fg, t / t_plain[causal]))
                continue
            fmask = mask
            if causal:
                fmask = (lambda b, hh, qq, kv: kv <= qq) if mask is None else (lambda b, hh, qq, kv: (kv <= qq) & mask(b, hh, qq, kv))
            t0 = time.perf_counter()
            try:  # Triton may find no config that fits (a failure of FlexAttention's, reported in the row)
                bm = create_block_mask(fmask, B, None, N, N, device=dev) if fmask else None
                fl = lambda: flex(qt, kt, vt, score_mod=score, block_mask=bm)  # noqa: E731
                ref = fl()
                torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001
                print(row + " failed: %s | - | %.0f / - | %.3f |" % (failure(e), first_fg, t / t_plain[causal]))
                continue
            first_flex = (time.perf_counter() - t0) * 1e3
            check("flashgen %s vs FlexAttention" % name, out, ref.transpose(1, 2))
            tf = timed(fl, a.iters)
            print(row + " %.0f us | %.2f | %.0f / %.0f | %.3f |" % (tf, tf / t, first_fg, first_flex, t / t_plain[causal]))
            if a.backward:
                back.append(backward_row(name, a.iters, (q, k, v), lambda x: flashgen.attention_varlen(
                    *x, None, None, N, N, causal=causal, mod=m, mod_aux=aux), lambda x: flex(
                    *x, score_mod=score, block_mask=bm).transpose(1, 2)))
            m.close()
        if back:
            print("\n## backward: bf16, batch %d, %dk tokens, %d heads, head_dim %d" % (B, N // 1024, h, d))
            print("| mod | flashgen | FlexAttention | flashgen / Flex |")
            print("|---|---|---|---|")
            print("\n".join(back))


if __name__ == "__main__":
    main()
