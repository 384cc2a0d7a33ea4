"""deepselect-rt: exact, deterministic top-k for LLM serving, from torch, JAX, CuPy or NumPy.

CUDA kernels ship as source and are compiled on first use with NVRTC into a per-machine cache
(``deepselect-rt warmup`` precompiles). See docs/contract.md for the exact behaviour.
"""

from .api import check_nan, get_stride_requirement, ragged_topk, topk
from .errors import BackendUnavailableError, CompileError, NaNInputError

__version__ = "0.1.0"

__all__ = ["topk", "ragged_topk", "check_nan", "get_stride_requirement", "NaNInputError", "BackendUnavailableError",
           "CompileError", "__version__"]
