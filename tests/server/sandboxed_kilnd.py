#!/usr/bin/python3
"""kilnd under deploy/kilnd.service's sandbox, without systemd: the unit's SystemCallFilter=
(groups expanded by `systemd-analyze syscall-filter`, other calls fail with its
SystemCallErrorNumber=), RestrictAddressFamilies= and MemoryDenyWriteExecute= (the kernel's
PR_SET_MDWE), read from the unit file itself. Catches a change that makes kilnd use a system call
or socket family the unit forbids, which would only fail on a node.

  sandboxed_kilnd.py --run-tests UNIT KILND TESTS [FILTER...]
      runs the Catch2 binary TESTS with a sandboxed kilnd (KILN_TEST_KILND); exits 77 (skipped)
      without python3-seccomp or systemd-analyze
  sandboxed_kilnd.py --exec UNIT KILND KILND-ARGS...   what that kilnd is
"""
import ctypes
import errno
import os
import shutil
import socket
import subprocess
import sys
import tempfile

PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN = 65, 1


def unit_values(unit_path, key):
    with open(unit_path) as f:
        return [line.split("=", 1)[1].strip() for line in f if line.startswith(key + "=")]


def expand(name, seen):
    if not name.startswith("@"):
        return {name}
    if name in seen:
        return set()
    seen.add(name)
    text = subprocess.run(["systemd-analyze", "syscall-filter", name], capture_output=True, text=True,
                          check=True).stdout
    out = set()
    for line in text.splitlines()[1:]:
        word = line.strip()
        if word and not word.startswith("#"):
            out |= expand(word, seen)
    return out


def exec_sandboxed(unit_path, kilnd, args):
    import seccomp
    allowed = set()
    for line in unit_values(unit_path, "SystemCallFilter"):
        deny = line.startswith("~")
        names = set().union(*(expand(n, set()) for n in line.lstrip("~").split()))
        allowed = allowed - names if deny else allowed | names
    error = unit_values(unit_path, "SystemCallErrorNumber") or ["EPERM"]
    families = [getattr(socket, f) for line in unit_values(unit_path, "RestrictAddressFamilies") for f in line.split()]
    filt = seccomp.SyscallFilter(defaction=seccomp.ERRNO(getattr(errno, error[-1])))
    for name in sorted(allowed - {"socket"}):
        try:
            filt.add_rule(seccomp.ALLOW, name)
        except (RuntimeError, ValueError):
            pass  # a name this libseccomp does not know: not callable here either
    for family in families:
        filt.add_rule(seccomp.ALLOW, "socket", seccomp.Arg(0, seccomp.EQ, family))
    if unit_values(unit_path, "MemoryDenyWriteExecute")[-1:] == ["yes"]:
        if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN, 0, 0, 0) != 0:
            sys.exit("sandboxed_kilnd: PR_SET_MDWE failed (errno %d): this kernel cannot refuse W+X memory"
                     % ctypes.get_errno())
    filt.load()  # kept across exec, as systemd's filter is
    os.execv(kilnd, [kilnd] + args)


def run_tests(unit_path, kilnd, tests, filters):
    try:
        import seccomp  # noqa: F401
    except ImportError:
        print("SKIPPED: python3-seccomp is not installed (apt-get install python3-seccomp)")
        return 77
    if shutil.which("systemd-analyze") is None:
        print("SKIPPED: systemd-analyze is not installed (Debian package systemd)")
        return 77
    # The tests start kilnd with a scrubbed environment: the paths go into a wrapper instead.
    with tempfile.TemporaryDirectory(prefix="kiln-sandbox-") as folder:
        wrapper = os.path.join(folder, "kilnd")
        with open(wrapper, "w") as f:
            f.write('#!/bin/sh\nexec /usr/bin/python3 "%s" --exec "%s" "%s" "$@"\n'
                    % (os.path.abspath(__file__), unit_path, kilnd))
        os.chmod(wrapper, 0o755)
        return subprocess.run([tests] + filters, env=dict(os.environ, KILN_TEST_KILND=wrapper)).returncode


if __name__ == "__main__":
    if sys.argv[1:2] == ["--run-tests"] and len(sys.argv) >= 5:
        sys.exit(run_tests(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]))
    if sys.argv[1:2] == ["--exec"] and len(sys.argv) >= 4:
        exec_sandboxed(sys.argv[2], sys.argv[3], sys.argv[4:])
    sys.exit(__doc__)
