"""`python -m npu_migrate` is the `npu-migrate` command."""

from .cli import main

main()
