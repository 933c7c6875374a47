#!/usr/bin/env python3
"""python/tests/test_bench.py: the parts of bench/compare.py that need no GPU or PyTorch (--redraw),
bench/ab.py, and fgbench's refusals.

    python3 python/tests/test_bench.py
"""
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMPARE = os.path.join(REPO, "bench", "compare.py")
AB_PY = os.path.join(REPO, "bench", "ab.py")


def row(impl, dtype, d, causal, seqlen, tflops, check="ok"):
    return {"implementation": impl, "dtype": dtype, "head_dim": d, "causal": causal, "seqlen": seqlen,
            "batch": 16384 // seqlen, "heads": 2048 // d, "tflops": tflops, "median_ms": 1.0, "check": check,
            "run": 0}


class Redraw(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="fg-test-bench-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def run_compare(self, *args):
        return subprocess.run([sys.executable, COMPARE] + list(args), capture_output=True, text=True, timeout=120)

    def test_redraw_prints_the_table_and_draws_the_charts(self):
        rows = []
        for s, (fg, cu, fa) in ((2048, (400.0, 500.0, 200.0)), (8192, (600.0, 500.0, 300.0))):
            rows += [row("flashgen", "bf16", 128, False, s, fg), row("cudnn", "bf16", 128, False, s, cu),
                     row("fa2", "bf16", 128, False, s, fa)]
        rows.append(row("flashgen", "bf16", 64, True, 2048, 100.0, check="WRONG"))
        rows.append(row("fa2", "bf16", 64, True, 2048, 90.0))
        with open(os.path.join(self.dir, "compare.json"), "w") as f:
            json.dump({"schema": 1, "runs": [{"gpu": "Test GPU"}], "results": rows, "checks": []}, f)
        r = self.run_compare("--redraw", self.dir)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        # 400/500 = 0.80 and 400/200 = 2.00 at 2k; 1.20 and 2.00 at 8k; geomeans sqrt(0.8 * 1.2) and 2.00
        self.assertTrue(any(l.split()[:4] == ["bf16", "128", "none", "2048"] and l.split()[-2:] == ["0.80", "2.00"]
                            for l in lines), r.stdout)
        self.assertTrue(any(l.startswith("geomean") and l.split()[-2:] == ["0.98", "2.00"] for l in lines), r.stdout)
        self.assertTrue(any("WRONG" in l and l.split()[:2] == ["bf16", "64"] for l in lines), r.stdout)
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            return
        for name in ("fwd_d128_bf16.png", "fwd_d64_bf16.png"):
            path = os.path.join(self.dir, name)
            self.assertTrue(os.path.getsize(path) > 1000, name)

    def test_redraw_reads_a_gzipped_record(self):
        rows = [row("flashgen", "bf16", 128, False, 2048, 400.0), row("cudnn", "bf16", 128, False, 2048, 500.0),
                row("fa2", "bf16", 128, False, 2048, 200.0)]
        with gzip.open(os.path.join(self.dir, "compare.json.gz"), "wt") as f:
            json.dump({"schema": 1, "runs": [{"gpu": "Test GPU"}], "results": rows, "checks": []}, f)
        r = self.run_compare("--redraw", self.dir)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(any(l.split()[:4] == ["bf16", "128", "none", "2048"] and l.split()[-2:] == ["0.80", "2.00"]
                            for l in r.stdout.splitlines()), r.stdout)

    def test_deterministic_needs_bwd(self):
        r = self.run_compare("--deterministic", "--redraw", self.dir)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--deterministic", r.stderr)

    def test_redraw_refuses_a_directory_without_results(self):
        r = self.run_compare("--redraw", self.dir)
        self.assertEqual(r.returncode, 1)
        self.assertIn("compare.json", r.stderr)
        with open(os.path.join(self.dir, "compare.json"), "w") as f:
            json.dump({"schema": 99, "runs": [], "results": []}, f)
        r = self.run_compare("--redraw", self.dir)
        self.assertEqual(r.returncode, 1)
        self.assertIn("not a compare.py result", r.stderr)


class ABCompare(unittest.TestCase):
    """bench/ab.py over two A/B pairs, one run's record gzipped (ab.py reads .gz records as well)."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="fg-test-ab-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def write(self, name, fg, gz=False):
        os.makedirs(os.path.join(self.dir, name))
        rows = []
        for s, t in zip((512, 2048), fg):
            rows += [row("flashgen", "bf16", 64, False, s, t), row("cudnn", "bf16", 64, False, s, 400.0),
                     row("fa2", "bf16", 64, False, s, 200.0)]
        data = {"schema": 1, "runs": [{"gpu": "Test GPU"}], "results": rows, "checks": []}
        path = os.path.join(self.dir, name, "compare.json")
        with (gzip.open(path + ".gz", "wt") if gz else open(path, "w")) as f:
            json.dump(data, f)
        return os.path.join(self.dir, name)

    def test_geomean_and_ranges(self):
        # B/A: 1.10 and 1.00 in the first pair, 1.20 and 1.00 in the second
        dirs = [self.write("a1", (100.0, 400.0)), self.write("b1", (110.0, 400.0), gz=True),
                self.write("a2", (100.0, 400.0)), self.write("b2", (120.0, 400.0))]
        r = subprocess.run([sys.executable, AB_PY] + dirs, capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        out = r.stdout
        self.assertIn("B/A geomean %.4f over 4 pairs" % ((1.1 * 1.2) ** 0.25), out)
        self.assertIn("d 64  512: 1.100-1.200; 2048: 1.000-1.000", out)

    def test_odd_number_of_runs_refused(self):
        r = subprocess.run([sys.executable, AB_PY, self.write("a1", (1.0, 1.0))], capture_output=True, text=True,
                           timeout=60)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("even number", r.stderr)


class Fgbench(unittest.TestCase):
    """tools/fgbench.c (built by `ninja` as build/fgbench): what it refuses before any device work."""
    EXE = os.path.join(REPO, "build", "fgbench")

    def test_refuses_an_emulated_arch(self):
        if not os.path.exists(self.EXE):
            self.skipTest("build/fgbench is not built (run ninja)")
        for mode in ("speed", "jit"):
            env = dict(os.environ, FLASHGEN_EMULATE_ARCH="80")
            r = subprocess.run([self.EXE, mode], capture_output=True, text=True, timeout=60, env=env)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn("fgbench %s: FLASHGEN_EMULATE_ARCH=80 is set" % mode, r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
