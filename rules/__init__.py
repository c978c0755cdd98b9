"""Rule catalogue of npu-migrate: data tables, one per family (see README)."""
