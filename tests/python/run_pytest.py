"""CTest's entry to the kiln package's pytest suite (tests/python/CMakeLists.txt).

    python3 run_pytest.py CHECKOUT TESTS_DIR

Exits 77 (CTest: skipped) when pytest or the kiln package is not installed, saying how to
install them; fails when the installed package was built from another checkout (its tests
would test other code); else runs pytest on TESTS_DIR and exits with its status."""
import os
import sys

SKIP = 77


def main(checkout, tests_dir):
    try:
        import pytest
    except ImportError:
        print("python_package: SKIPPED: pytest is not installed (python3 -m pip install pytest numpy)")
        return SKIP
    try:
        from kiln import _build_info
    except (ImportError, OSError) as e:  # OSError: an editable install whose checkout is gone
        print(f"python_package: SKIPPED: the kiln package is not installed ({e}); install it with "
              f"python3 -m pip install -e {checkout}/client/python --no-build-isolation")
        return SKIP
    if os.path.realpath(_build_info.CHECKOUT) != os.path.realpath(checkout):
        print(f"python_package: the installed kiln package was built from {_build_info.CHECKOUT}, not {checkout}: "
              f"reinstall it (python3 -m pip install -e {checkout}/client/python --no-build-isolation)")
        return 1
    return pytest.main([tests_dir, "-q"])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
