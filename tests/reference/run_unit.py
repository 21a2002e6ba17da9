"""Runs one python unittest module of this folder for ctest: skip (77) when torch is missing
on a developer machine, failure when env CI is set (see compare_logits.require_torch)."""
import importlib
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_logits  # noqa: E402

if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: run_unit.py MODULE (e.g. test_kda_naive)")
    compare_logits.require_torch()
    import torch
    torch.set_num_threads(int(os.environ.get("WASTE_ORACLE_THREADS", "2")))
    suite = unittest.defaultTestLoader.loadTestsFromModule(importlib.import_module(sys.argv[1]))
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    sys.exit(0 if result.wasSuccessful() else 1)
