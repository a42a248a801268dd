#!/usr/bin/env python3
"""The figures and names the docs quote from the code still match the code.

Usage: doc_claims.py SOURCE_DIR

Checks, each failing with the page, what it says and what the code says:
  - every row of CONSTANTS: the quantity the page quotes ("Rings are 1 MiB") equals the
    constexpr constant of that name, wherever under the source folders it is defined (a file
    may move; the name is the anchor);
  - README's list of the store's verbs is exactly Store's pure virtual methods;
  - every source path a page names in backticks (`comm/store/store.h`) exists;
  - every "`name` in `path`" names something that file contains;
  - every Note [Title] a page names is a Note in the sources;
  - no page tells the project's history: no issue numbers, working sessions or clock times
    (a measurement keeps its date, machine, commit and command; measurements.md has them).
A claim that needs a check is one row of CONSTANTS.
"""
import pathlib
import re
import sys

# (page, pattern whose one group captures the quantity as the page writes it, constant name,
#  a substring of the defining file's path, or "" when the name is defined once).
CONSTANTS = [
    ("docs/shared-memory.md", r"Rings are (\S+ \S+),", "kShmRingBytes", ""),
    ("docs/shared-memory.md", r"and every (\S+ \S+) within a long copy", "kPublishBytes", ""),
    ("docs/shared-memory.md", r"each up to (\S+ \S+), all", "kJoinBytes", ""),
    ("docs/shared-memory.md", r"\*\*Large messages\*\* \((\S+ \S+) and up\)",
     "kCopyFromSenderBytes", ""),
    ("docs/shared-memory.md", r"large frame \((\S+ \S+) and up\)", "kCopyFromSenderBytes", ""),
    ("docs/shared-memory.md", r"but into a (\S+ \S+)\s+piece", "kFoldPieceBytes", ""),
    ("docs/shared-memory.md", r"reduce_into\s+\((\S+ \S+), stays in L2\)", "kFoldPieceBytes", ""),
    ("docs/shared-memory.md", r"it first makes (\d+) passes", "kBusyPasses", ""),
    ("docs/shared-memory.md", r"After `kSpin` \((\S+ \S+)\)", "kSpin", "transport/"),
    ("docs/shared-memory.md", r"on its own (\d+)-byte cache line", "kCacheLine", ""),
    ("docs/ring-allreduce.md", r"`kDirectMaxBytes` \((\S+ \S+)\)", "kDirectMaxBytes", ""),
    ("docs/ring-allreduce.md", r"`kRecursiveDoublingMaxBytes` \((\S+ \S+)\)",
     "kRecursiveDoublingMaxBytes", ""),
    ("docs/ddp-buckets.md", r"`kFirstBucketBytes`, (\S+ \S+)\)", "kFirstBucketBytes", ""),
    ("README.md", r"the first bucket is (\S+ \S+),", "kFirstBucketBytes", ""),
    ("docs/device_collectives.md", r"in\s+chunks of (\S+ \S+) ", "kStagingChunkBytes", ""),
    ("docs/cuda.md", r"requests below (\S+ \S+) round up", "kSmallRequest", ""),
    ("docs/cuda.md", r"round up to (\S+ \S+),", "kSmallRound", ""),
    ("docs/cuda.md", r"larger ones to (\S+ \S+)\.", "kLargeRound", ""),
    ("docs/launcher.md", r"collective timeout \((\S+ \S+) by default\)",
     "kDefaultCollectiveTimeout", ""),
    ("docs/launcher.md", r"The last (\d+) lines of the traceback", "kMaxTracebackLines", ""),
    ("docs/launcher.md", r"or is over (\S+ \S+)\.", "kMaxHostfileBytes", ""),
    ("docs/launcher.md", r"A store holds at most (\S+ \S+) in", "kDefaultStoreMaxBytes", ""),
    ("docs/launcher.md", r"in at most ([\d,]+) keys", "kDefaultStoreMaxKeys", ""),
    ("docs/launcher.md", r"may send no frame over (\S+ \S+) ", "kMaxHelloBytes", ""),
    ("docs/launcher.md", r"at most ([\d,]+) such clients", "kMaxClientsBeforeHello", ""),
    ("docs/launcher.md", r"at most ([\d,]+) connections in all", "kDefaultStoreMaxConnections", ""),
    ("docs/measurements.md", r"Claim: up to (\S+ \S+) one direct exchange", "kDirectMaxBytes", ""),
    ("docs/measurements.md", r"; up to (\S+ \S+) recursive\s+doubling beats the ring",
     "kRecursiveDoublingMaxBytes", ""),
    ("docs/measurements.md", r"yielding the CPU for up to (\S+ \S+) before", "kSpin", "transport/"),
    ("docs/measurements.md", r"memory, (\d+) passes without a system call", "kBusyPasses", ""),
    ("docs/measurements.md", r"the clock read only every (\d+)\s+passes",
     "kPassesPerClockRead", ""),
    ("docs/measurements.md", r"messages through a (\S+ \S+) ring", "kShmRingBytes", ""),
    ("docs/measurements.md", r"and (\S+ \S+) is the best size for the pieces",
     "kFoldPieceBytes", ""),
    ("docs/measurements.md", r"Claim: from (\S+ \S+), one `process_vm_readv` copy",
     "kCopyFromSenderBytes", ""),
]

SOURCE_FOLDERS = ["comm", "core", "kernels", "nn", "apps", "bench"]
SOURCE_SUFFIXES = {".h", ".cpp", ".cu", ".cuh"}
# Top-level folders whose files a page may name in backticks.
TREE_FOLDERS = SOURCE_FOLDERS + ["tests", "scripts", "docs"]

BYTE_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
TIME_UNITS = {"ns": 1e-9, "µs": 1e-6, "us": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0}
# std::chrono types in a constant's declaration, as seconds per tick.
CHRONO_TICKS = {"nanoseconds": 1e-9, "microseconds": 1e-6, "milliseconds": 1e-3,
                "Milliseconds": 1e-3, "seconds": 1.0, "minutes": 60.0}


def parse_quantity(text):
    """'1 MiB' -> ('bytes', 1048576); '200 µs' -> ('time', 2e-4); '4,096' -> ('count', 4096)."""
    m = re.fullmatch(r"([\d,]+(?:\.\d+)?)(?: (\S+))?", text.strip())
    if not m:
        return None
    number = float(m.group(1).replace(",", ""))
    unit = m.group(2)
    if unit is None:
        return ("count", number)
    if unit in BYTE_UNITS:
        return ("bytes", number * BYTE_UNITS[unit])
    if unit in TIME_UNITS:
        return ("time", number * TIME_UNITS[unit])
    return None


def source_files(root):
    for folder in SOURCE_FOLDERS:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix in SOURCE_SUFFIXES and path.is_file():
                yield path


def definitions(root, name):
    """[(path, declaration, initialiser)] of every `constexpr ... name = x;` or `name{x};`."""
    pattern = re.compile(r"\bconstexpr\b([^;{}=()]*?)\b" + re.escape(name) +
                         r"\s*(?:=\s*([^;]+?)|\{([^;{}]*)\})\s*;")
    found = []
    for path in source_files(root):
        for m in pattern.finditer(path.read_text(errors="replace")):
            found.append((path, m.group(1), m.group(2) if m.group(2) is not None else m.group(3)))
    return found


def evaluate(root, declaration, expression, depth=0):
    """A constant's value: ('time', seconds) for std::chrono types, else ('count', number)."""
    text = declaration + " " + expression
    ticks = next((s for t, s in CHRONO_TICKS.items() if re.search(r"\b" + t + r"\b", text)), None)
    e = expression.replace("'", "")
    e = re.sub(r"std::chrono::", "", e)
    e = re.sub(r"\b(?:size_t|u?int(?:8|16|32|64)_t|int|unsigned)\s*[({]([^(){}]*)[)}]", r"(\1)", e)
    e = re.sub(r"\b(?:nanoseconds|microseconds|milliseconds|Milliseconds|seconds|minutes)\s*[({]",
               "(", e)
    e = re.sub(r"(?<=\d)(?:ull|ULL|ul|UL|u|U|ll|LL|l|L)\b", "", e)
    e = e.replace("{", "(").replace("}", ")")
    for other in set(re.findall(r"\bk[A-Z]\w*", e)):  # another constant: its value, recursively
        if depth > 4:
            raise ValueError(f"'{expression}' refers to constants too deeply")
        defs = definitions(root, other)
        if len(defs) != 1:
            raise ValueError(f"'{expression}' uses {other}, defined {len(defs)} times")
        kind, value = evaluate(root, defs[0][1], defs[0][2], depth + 1)
        if kind == "time":
            value /= ticks or 1.0
        e = re.sub(r"\b" + other + r"\b", repr(value), e)
    if not re.fullmatch(r"[\d\s.<>*+()-]*", e):
        raise ValueError(f"cannot evaluate '{expression}'")
    value = eval(e, {"__builtins__": {}})  # digits and operators only, checked above
    return ("time", value * ticks) if ticks else ("count", value)


def check_constants(root, errors):
    for page, pattern, name, hint in CONSTANTS:
        text = (root / page).read_text()
        m = re.search(pattern, text)
        if not m:
            errors.append(f"{page}: no longer says /{pattern}/ (the claim about {name}); "
                          "update the page or this table (tests/docs/doc_claims.py)")
            continue
        quoted = parse_quantity(m.group(1))
        if quoted is None:
            errors.append(f"{page}: '{m.group(1)}' is not a quantity this check reads")
            continue
        defs = [d for d in definitions(root, name) if hint in str(d[0].relative_to(root))]
        if not defs:
            where = f" in a '{hint}' path" if hint else ""
            errors.append(f"{page}: quotes {name}, which no constexpr under "
                          f"{', '.join(SOURCE_FOLDERS)} defines{where}")
            continue
        values = set()
        for path, declaration, expression in defs:
            try:
                values.add(evaluate(root, declaration, expression))
            except ValueError as e:
                errors.append(f"{path.relative_to(root)}: {name}: {e}")
        if len(values) > 1:
            where = ", ".join(str(d[0].relative_to(root)) for d in defs)
            errors.append(f"{name} has different values in {where}: give its row a path")
            continue
        if not values:
            continue
        kind, value = values.pop()
        want_kind = "count" if quoted[0] == "bytes" else quoted[0]
        if kind != want_kind or abs(value - quoted[1]) > 1e-9 * max(1.0, abs(value)):
            shown = f"{value:g} s" if kind == "time" else f"{value:g}"
            errors.append(f"{page}: says '{m.group(1)}' for {name}, the code has {shown} "
                          f"({defs[0][0].relative_to(root)})")


def check_store_verbs(root, errors):
    header = (root / "comm/store/store.h").read_text()
    verbs = re.findall(r"virtual\s+[\w:<>,\s]+?\b(\w+)\s*\([^;]*?\)\s*(?:const\s*)?=\s*0\s*;",
                       header, re.S)
    page = (root / "docs/README.md").read_text()
    m = re.search(r"`comm/store/store.h`: the verbs[^(]*\(([^)]*)\)", page)
    if not m:
        errors.append("docs/README.md: no longer lists store.h's verbs in parentheses")
        return
    listed = re.findall(r"`(\w+)`", m.group(1))
    if sorted(listed) != sorted(verbs):
        errors.append(f"docs/README.md: lists the store's verbs {listed}; store.h has {verbs}")


def pages(root):
    return [root / "README.md"] + sorted((root / "docs").glob("*.md"))


def check_named_files(root, errors):
    path_re = re.compile(r"`((?:" + "|".join(TREE_FOLDERS) + r")/[\w./-]+\.\w+)`")
    in_re = re.compile(r"`([A-Za-z_]\w*)` in `([\w./-]+)`")
    for page in pages(root):
        text = page.read_text()
        where = page.relative_to(root)
        for path in sorted(set(path_re.findall(text))):
            if "*" not in path and not (root / path).exists():
                errors.append(f"{where}: names `{path}`, which does not exist")
        for name, path in sorted(set(in_re.findall(text))):
            file = root / path
            if file.is_file() and not re.search(r"\b" + re.escape(name) + r"\b", file.read_text()):
                errors.append(f"{where}: says `{name}` is in `{path}`; it is not")


def check_notes(root, errors):
    sources = "\n".join(p.read_text(errors="replace") for p in source_files(root))
    for page in pages(root):
        for title in sorted(set(re.findall(r"Note \[([^\]]+)\]", page.read_text()))):
            if f"Note [{title}]" not in sources:
                errors.append(f"{page.relative_to(root)}: names Note [{title}], "
                              "which no source file has")


# Project history, which a reader of the pages cannot use and which goes stale.
HISTORY = [
    (r"\b[Ii]ssue \d+", "an issue number"),
    (r"\b(?:this|last|another|a later|an earlier) session\b|\bsessions were\b",
     "a working session"),
    # hh:mm, alone or as a range; hh:mm:ss (a log line's time stamp, a duration) is not one.
    (r"(?<![\d:])[0-2]\d:[0-5]\d(?:-[0-2]\d:[0-5]\d)?(?![\d:])", "a clock time"),
]


def check_history(root, errors):
    for page in pages(root):
        for number, line in enumerate(page.read_text().splitlines(), 1):
            for pattern, what in HISTORY:
                m = re.search(pattern, line)
                if m:
                    errors.append(f"{page.relative_to(root)}:{number}: '{m.group(0)}' is {what}; "
                                  "say what holds, with the date it was measured")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: doc_claims.py SOURCE_DIR")
    root = pathlib.Path(sys.argv[1]).resolve()
    errors = []
    for check in (check_constants, check_store_verbs, check_named_files, check_notes,
                  check_history):
        check(root, errors)
    for e in errors:
        print("FAIL:", e)
    print(f"{len(CONSTANTS)} quoted constants, the store's verbs, named files, notes, history: "
          + ("ok" if not errors else f"{len(errors)} claims drifted"))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
