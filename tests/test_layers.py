"""test_layers.py: the layers hold.

Each source file may include only headers of its own layer and of the
layers below it (common -> codegen -> driver, store, space -> tuner ->
client, api, fleet -> daemon -> tools), always by their path from the project
root; and the shared library the embedding API ships holds none of the
tuner's internals (evaluator, compile pipeline, search, tune) nor the
store's maintenance (gc, import, export).

Usage: test_layers.py SOURCE_ROOT LIBTUNED_SO
"""
import os
import re
import subprocess
import sys

BELOW = {
    "common": {"common"},
    "codegen": {"common", "codegen"},
    "driver": {"common", "codegen", "driver"},
    "store": {"common", "codegen", "store"},
    "space": {"common", "codegen", "space"},
    "tuner": {"common", "codegen", "driver", "store", "space", "tuner"},
    "client": {"common", "codegen", "client"},
    "api": {"common", "codegen", "driver", "store", "space", "client", "api"},
    "fleet": {"common", "codegen", "store", "fleet"},
    "daemon": {"common", "codegen", "driver", "store", "space", "tuner", "client", "fleet",
               "daemon"},
    "tools": {"common", "codegen", "driver", "store", "space", "tuner", "client", "api",
              "fleet", "daemon", "tools"},
}

# Symbols libtuned must not carry: it never tunes or maintains the store.
FORBIDDEN = re.compile(r"\b(tuned__evaluator_\w+|tuned__eval_\w+|tuned__compile_\w+|"
                       r"tuned__search_\w+|tuned__tune\w*|tuned__store_gc|"
                       r"tuned__store_import|tuned__store_export)\b")


def layer_of(path):
    """The layer a project path belongs to, or None (tests, bench, ...)."""
    if path.startswith("src/tuner/"):
        name = os.path.basename(path)
        return "space" if name.startswith(("space.", "policy.")) else "tuner"
    if path.startswith("cache/"):
        return "store"
    if path.startswith("tools/"):
        return "tools"
    m = re.match(r"src/(\w+)/", path)
    return m.group(1) if m else None


def check_includes(root):
    failures = []
    inc = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
    for top in ("src", "cache", "tools"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in files:
                if not f.endswith((".c", ".h")):
                    continue
                path = os.path.relpath(os.path.join(dirpath, f), root)
                layer = layer_of(path)
                if layer is None:
                    continue
                with open(os.path.join(root, path), encoding="utf-8") as fh:
                    text = fh.read()
                for target in inc.findall(text):
                    if target == "tuned.h":
                        continue
                    if ".." in target.split("/") or not os.path.exists(os.path.join(root, target)):
                        failures.append(f"{path}: includes \"{target}\", not a path from the root")
                        continue
                    other = layer_of(target)
                    if other is not None and other not in BELOW[layer]:
                        failures.append(f"{path} ({layer}) includes {target} ({other}): upward")
    return failures


def check_library(so):
    out = subprocess.run(["nm", so], capture_output=True, text=True, check=True).stdout
    return [f"{os.path.basename(so)} holds {m}" for m in sorted(set(FORBIDDEN.findall(out)))]


def main():
    root, so = sys.argv[1], sys.argv[2]
    failures = check_includes(root) + check_library(so)
    # The check itself must be able to fail: a planted upward include and a
    # planted symbol are both caught.
    if layer_of("cache/best.c") != "store" or "tuner" in BELOW["store"]:
        failures.append("the layer table lost the store/tuner order")
    if layer_of("src/fleet/client.c") != "fleet" or "fleet" in BELOW["store"] \
            or "daemon" in BELOW["fleet"]:
        failures.append("the layer table lost the store/fleet/daemon order")
    if not FORBIDDEN.search("0000 t tuned__store_gc") or FORBIDDEN.search("0000 T tuned_softmax"):
        failures.append("the symbol pattern does not tell internals from the API")
    for f in failures:
        print("FAIL:", f)
    print(f"layers: {len(failures)} problem(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
