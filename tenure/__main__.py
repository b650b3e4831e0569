"""Command line: ``python -m tenure cache info [--verbose]`` and ``python -m tenure cache clear``.

The cache directory is ``tenure.config.compiledir`` (set it with
``TENURE_FLAGS=compiledir=...``); each Python interpreter has its own
subdirectory of it, and these commands act on the current interpreter's.
``info`` also shows the size cap (``compiledir_max_size``).
"""

from __future__ import annotations

import argparse
import sys

from tenure import config
from tenure.linkers.c import cache


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    return args.run(args)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tenure",
                                     description="tenure maintenance commands")
    commands = parser.add_subparsers(title="commands", dest="command", required=True)
    cache_parser = commands.add_parser("cache", help="the cache of compiled C modules",
                                       description="the cache of compiled C modules")
    actions = cache_parser.add_subparsers(title="actions", dest="action", required=True)
    info_parser = actions.add_parser("info", help="show the cache directory and its entries")
    info_parser.add_argument("-v", "--verbose", action="store_true",
                             help="list every entry: name, key, size, age")
    info_parser.set_defaults(run=_info)
    clear_parser = actions.add_parser("clear", help="remove every entry")
    clear_parser.set_defaults(run=_clear)
    return parser


def _info(args) -> int:
    summary = cache.info()
    print(f"cache directory: {summary.directory}")
    print(f"entries: {summary.count}")
    print(f"total size: {format_size(summary.total_bytes)}")
    cap = config.compiledir_max_size
    print(f"size cap: {format_size(cap) if cap else 'none'} (compiledir_max_size; least "
          f"recently used entries beyond it are removed after builds)")
    if args.verbose:
        for entry in summary.entries:
            print(f"  {entry.name:<24} {entry.key[:16]}  {format_size(entry.size_bytes):>10}  "
                  f"{format_age(entry.age_s)}")
    return 0


def _clear(args) -> int:
    directory = cache.entries_dir()
    removed = cache.clear_entries()
    for entry in removed:
        print(f"removed {entry.name} {entry.key[:16]} ({format_size(entry.size_bytes)})")
    freed = sum(entry.size_bytes for entry in removed)
    noun = "entry" if len(removed) == 1 else "entries"
    print(f"removed {len(removed)} {noun} ({format_size(freed)}) from {directory}")
    return 0


def format_size(n_bytes: int) -> str:
    """``1536`` -> ``'1.5 KiB'``."""
    size = float(n_bytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def format_age(seconds: float | None) -> str:
    """``90`` -> ``'1 min ago'``; ``None`` (unknown) -> ``'age unknown'``."""
    if seconds is None:
        return "age unknown"
    for unit, length in (("day", 86400), ("h", 3600), ("min", 60)):
        if seconds >= length:
            count = int(seconds // length)
            plural = "s" if unit == "day" and count != 1 else ""
            return f"{count} {unit}{plural} ago"
    return f"{int(seconds)} s ago"


if __name__ == "__main__":
    sys.exit(main())
