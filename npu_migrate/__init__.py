"""npu-migrate: rewrite CUDA-only PyTorch code so it runs on Ascend NPUs and unchanged on CUDA/CPU."""

__version__ = "0.1.0"
