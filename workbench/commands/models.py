"""``workbench models``: the models of a searchable source of the source table (torchvision,
timm, cached Hugging Face repos), their weights and cache state."""

from __future__ import annotations

import argparse
import fnmatch
import json
import sys

from workbench.core.formatting import fmt_count
from workbench.core.models.sources import DEFAULT_SOURCE, SOURCES, search_models, source_of
from workbench.core.models.zoo import list_models


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("pattern", nargs="?", default="*", help="glob on model names, e.g. 'resnet*'")
    listed = [row for row in SOURCES.values() if row.searchable]
    p.add_argument("--source", choices=[row.key for row in listed], default=DEFAULT_SOURCE,
                   help="source to list: " + "; ".join(
                       f"{row.key}{' (default)' if row.key == DEFAULT_SOURCE else ''}: {row.description}" for row in listed))
    p.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    if args.source != DEFAULT_SOURCE:  # the default source lists its weights and sizes too
        return _run_source(args)
    infos = [m for m in list_models() if fnmatch.fnmatch(m.name, args.pattern)]
    if args.json:
        json.dump([m.__dict__ for m in infos], sys.stdout, indent=1)
        print()
        return 0
    if not infos:
        print(f"no model matches {args.pattern!r}", file=sys.stderr)
        return 1
    w = max(len(m.name) for m in infos)
    for m in infos:
        weights = ", ".join(f"{x}{' (cached)' if m.cached.get(x) else ''}" for x in m.weights) or "-"
        n = fmt_count(m.num_params) if m.num_params else "?"
        print(f"{m.name:<{w}}  {n:>6}  {m.input_size:>3}px  {weights}")
    return 0


def _run_source(args: argparse.Namespace) -> int:
    found = search_models(args.source, args.pattern)
    if args.json:
        json.dump([{"source": args.source, "name": n, "cached": c} for n, c in found], sys.stdout, indent=1)
        print()
        return 0
    if not found:
        empty = source_of(args.source).empty_names
        if empty is not None and not search_models(args.source, "*"):  # nothing to match: not a bad pattern
            print(empty(), file=sys.stderr)
            return 0
        print(f"no {args.source} model matches {args.pattern!r}", file=sys.stderr)
        return 1
    for name, cached in found:
        print(f"{args.source}:{name}{'  (cached)' if cached else ''}")
    return 0
