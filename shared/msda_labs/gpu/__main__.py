"""Small commands around the GPU stages (used by the kit's CI and by people):

    python -m msda_labs.gpu labs                 built labs that have a gpu stage, one per line
    python -m msda_labs.gpu where [LAB]          "local" or "modal", else how to enable one (exit 2)
    python -m msda_labs.gpu expect-full FILE...  exit 1 unless every grade JSON has full marks

The harness that proves the stages on a GPU machine is ``python -m msda_labs.gpu.prove``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _labs(ns) -> int:
    from msda_labs.course.manifest import find_manifest, load_manifest

    manifest = load_manifest(ns.manifest or find_manifest())
    for lab in manifest.labs:
        if lab.built and lab.has_gpu:
            print(lab.id)
    return 0


def _where(ns) -> int:
    from msda_labs.gpu.where import main

    return main([ns.lab] if ns.lab else [])


def _expect_full(ns) -> int:
    bad = 0
    for name in ns.files:
        path = Path(name)
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            print(f"{path}: unreadable ({exc})")
            bad += 1
            continue
        score, top = data.get("score"), data.get("max_score")
        full = isinstance(top, int) and top > 0 and score == top
        print(f"{path}: {data.get('lab')} {score}/{top} {'full marks' if full else 'NOT FULL'}")
        if not full:
            bad += 1
            for ex in data.get("exercises", []):
                for test in ex.get("tests", []):
                    if test.get("status") != "passed":
                        print(f"    {ex.get('id')} {test.get('name')}: {test.get('status')}: "
                              f"{test.get('message', '')[:300]}")
    return 1 if bad or not ns.files else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m msda_labs.gpu", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("labs", help="built labs with a gpu stage")
    p.add_argument("--manifest", type=Path, help="classroom.yml (default: found from here)")
    p.set_defaults(func=_labs)
    p = sub.add_parser("where", help="where a GPU stage would run")
    p.add_argument("lab", nargs="?")
    p.set_defaults(func=_where)
    p = sub.add_parser("expect-full", help="check grade JSON files for full marks")
    p.add_argument("files", nargs="*")
    p.set_defaults(func=_expect_full)
    ns = parser.parse_args(argv)
    return ns.func(ns)


if __name__ == "__main__":
    sys.exit(main())
