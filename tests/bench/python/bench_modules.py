"""Loads a module of bench/ by its path (bench/decode and bench/sampling are script folders, not
packages), as bench/compare_torch.py does."""
import importlib.util
import os

BENCH_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "bench")


def load(relative_path):
    name = "bench_" + relative_path.replace("/", "_").removesuffix(".py")
    spec = importlib.util.spec_from_file_location(name, os.path.join(BENCH_DIR, relative_path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
