#!/usr/bin/python3
"""Layering check (docs/architecture.md, "Layers"): every arrow points down.

1. CMake: each braid_layer(name dir deps...) in CMakeLists.txt links only layers below it in
   the documented order.
2. Includes: a file under src/<layer>/ includes "<other>/..." only for <other> its own layer or
   one its CMake target reaches (the transitive closure of its links): nothing includes upward
   or sideways past its links.
3. Tools: a file under tools/ includes the public API (<braid/...>), tools/common, its own
   tool's files, or internal headers of a library listed below for that tool (by name).
   "common/x.hpp" is tools/common's when tools/common/x.hpp exists, else src/common's (the
   lowest layer), which a tool needs listed like any other.

Prints every violation and exits 1 if there is one; run from anywhere (.ci/run runs it).
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Bottom to top, as docs/architecture.md draws them.
ORDER = ["common", "kernels", "store", "bootstrap", "transport", "topology", "algo", "tuning", "sim",
         "core", "train"]
# Internal libraries a tool uses beside the public API, by name (tools/CMakeLists.txt links
# them through `braid`).
TOOL_INTERNALS = {
    "braid-info": {"algo", "core"},
    "braid-plan": {"topology", "tuning", "algo", "sim"},  # --simulate runs the algorithms
    "braid-perf": {"kernels"},
    "braid-run": {"common"},  # the job key (crypto.hpp), the descriptor owner (fd.hpp)
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_links():
    text = open(os.path.join(ROOT, "CMakeLists.txt")).read()
    links = {}
    for name, dir_, deps in re.findall(r"^braid_layer\((\w+)\s+(\w+)([^)]*)\)", text, re.M):
        links[dir_] = [d[len("braid_"):] for d in deps.split() if d.startswith("braid_")]
    return links


def closure(links, layer):
    seen, todo = set(), [layer]
    while todo:
        for d in links.get(todo.pop(), []):
            if d not in seen:
                seen.add(d)
                todo.append(d)
    return seen


def sources(top):
    for dirpath, _, files in os.walk(os.path.join(ROOT, top)):
        for f in sorted(files):
            if f.endswith((".hpp", ".cpp", ".h", ".cc")):
                yield os.path.join(dirpath, f)


def main():
    problems = []
    links = layer_links()
    for layer, deps in links.items():
        if layer not in ORDER:
            problems.append(f"CMakeLists.txt: layer {layer} is not in the documented order")
            continue
        for d in deps:
            if d in ORDER and ORDER.index(d) >= ORDER.index(layer):
                problems.append(f"CMakeLists.txt: braid_{layer} links braid_{d}, not below it")
    for path in sources("src"):
        rel = os.path.relpath(path, ROOT)
        layer = rel.split(os.sep)[1]
        allowed = closure(links, layer) | {layer}
        for inc in INCLUDE.findall(open(path, errors="replace").read()):
            top = inc.split("/")[0]
            if top in ORDER and top not in allowed:
                problems.append(f"{rel}: includes \"{inc}\" ({top} is not below {layer})")
    for path in sources("tools"):
        rel = os.path.relpath(path, ROOT)
        tool = rel.split(os.sep)[1]
        for inc in INCLUDE.findall(open(path, errors="replace").read()):
            top = inc.split("/")[0]
            if "/" not in inc or top == tool:
                continue  # the tool's own files
            if top == "common" and os.path.exists(os.path.join(ROOT, "tools", inc)):
                continue  # tools/common
            if top in ORDER and top in TOOL_INTERNALS.get(tool, set()):
                continue
            problems.append(f"{rel}: includes \"{inc}\" (not the public API nor a library "
                            f"listed for {tool} in scripts/check_layers.py)")
    for p in problems:
        print("layering:", p)
    if problems:
        return 1
    print(f"layering: ok ({len(links)} layers, src/ and tools/ includes follow them)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
