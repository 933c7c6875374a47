"""Why a GPU test of the binding cannot run here (None when it can): shared by the test scripts."""

import flashgen


def gpu_reason(torch, torch_ok=True, no_torch="needs PyTorch"):
    """no_torch when torch is None or not torch_ok; else "no CUDA device", or why libflashgen cannot be found."""
    if torch is None or not torch_ok:
        return no_torch
    if not torch.cuda.is_available():
        return "no CUDA device"
    try:
        flashgen.library_path()
    except flashgen.LibraryNotFoundError as e:
        return "libflashgen not found: %s" % e
    return None
