"""`pip install .` at the repository root: the same package as `pip install ./python` (python/setup.py)."""
import os
import runpy

HERE = os.path.dirname(os.path.abspath(__file__))
runpy.run_path(os.path.join(HERE, "python", "setup.py"), run_name="flashgen_setup")["main"](
    os.path.join(HERE, "python"), HERE)
