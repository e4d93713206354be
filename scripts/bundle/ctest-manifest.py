#!/usr/bin/python3
"""Turns `ctest --show-only=json-v1` output into the bundle's test manifest.

Usage: ctest-manifest.py JSON BUILD_DIR SOURCE_DIR MANIFEST_OUT EXES_OUT [LABEL]

MANIFEST_OUT gets one line per enabled test, four TAB-separated fields:
  NAME  TIMEOUT  ENV  COMMAND
TIMEOUT is ctest's TIMEOUT property in whole seconds (0 when unset). ENV is the
ENVIRONMENT property as shell-quoted KEY=VALUE words, or "-" when empty.
COMMAND is the test command as shell-quoted words; its executable is reduced to
its basename (run-gpu-check runs it from the bundle's bin/). In arguments and
environment values, paths into SOURCE_DIR/testdata become
../share/gpumux/testdata/..., and paths to executables in BUILD_DIR become
./NAME; any other reference to the source or build tree draws a warning,
because it will not exist on the GPU machine.

EXES_OUT gets the absolute paths of the build-tree executables the manifest
needs, one a line.
"""
import json
import math
import os
import shlex
import sys


def warn(msg):
    print(f"gpu-check: warning: {msg}", file=sys.stderr)


def is_elf(path):
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def main():
    if len(sys.argv) not in (6, 7):
        sys.exit(__doc__)
    json_path, build, source, manifest_out, exes_out = sys.argv[1:6]
    label = sys.argv[6] if len(sys.argv) == 7 else "gpu"
    build = os.path.realpath(build)
    source = os.path.realpath(source)
    testdata = os.path.join(source, "testdata")

    with open(json_path) as f:
        info = json.load(f)

    exes = []  # build-tree executables to bundle, in first-seen order

    def need_exe(path):
        if path not in exes:
            exes.append(path)

    def under(path, root):
        return path == root or path.startswith(root + os.sep)

    def rewrite_path(value, test):
        """Rewrites one path-like value; returns it unchanged if not a path."""
        if not value.startswith("/"):
            return value
        real = os.path.realpath(value)
        if under(real, testdata) or under(value, testdata):
            base = real if under(real, testdata) else value
            return "../share/gpumux/testdata" + base[len(testdata):]
        if under(value, build) or under(real, build):
            if is_elf(real) and os.access(real, os.X_OK):
                need_exe(real)
                return "./" + os.path.basename(real)
            warn(f"test {test}: '{value}' is in the build tree and is not bundled")
        elif under(value, source) or under(real, source):
            warn(f"test {test}: '{value}' is in the source tree and is not bundled")
        return value

    def rewrite_word(word, test):
        # Handles both "/abs/path" and "--flag=/abs/path" / "KEY=/abs/path".
        if word.startswith("/"):
            return rewrite_path(word, test)
        key, eq, value = word.partition("=")
        if eq and value.startswith("/"):
            return key + "=" + rewrite_path(value, test)
        return word

    lines = []
    names = set()
    for test in info.get("tests", []):
        name = test.get("name", "")
        props = {p["name"]: p["value"] for p in test.get("properties", [])}
        if props.get("DISABLED"):
            continue
        if label not in props.get("LABELS", []):
            continue  # `ctest -L` is a regex; keep only exact label matches
        if not name or any(c in name for c in "\t\n"):
            sys.exit(f"gpu-check: test name {name!r} cannot go in the manifest")
        if name in names:
            sys.exit(f"gpu-check: duplicate test name {name!r}")
        names.add(name)
        command = test.get("command") or []
        if not command:
            warn(f"test {name} has no command (was its executable built?); left out")
            continue
        exe = command[0]
        real = os.path.realpath(exe)
        if under(real, build) or under(exe, build):
            if not is_elf(real):
                sys.exit(f"gpu-check: test {name}: {exe} is not a built executable")
            need_exe(real)
        args = [rewrite_word(a, name) for a in command[1:]]
        env = [rewrite_word(e, name) for e in props.get("ENVIRONMENT", [])]
        if props.get("ENVIRONMENT_MODIFICATION"):
            warn(f"test {name}: ENVIRONMENT_MODIFICATION is not carried into the bundle")
        timeout = props.get("TIMEOUT") or 0
        timeout = int(math.ceil(float(timeout)))
        cmd = shlex.join([os.path.basename(exe)] + args)
        env_field = shlex.join(env) if env else "-"
        lines.append(f"{name}\t{timeout}\t{env_field}\t{cmd}\n")

    with open(manifest_out, "w") as f:
        f.writelines(lines)
    with open(exes_out, "w") as f:
        f.writelines(e + "\n" for e in exes)
    print(f"gpu-check: {len(lines)} test(s) labelled '{label}' in the manifest, "
          f"{len(exes)} test executable(s)", file=sys.stderr)


if __name__ == "__main__":
    main()
