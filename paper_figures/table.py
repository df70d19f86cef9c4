"""The verdict table of docs/findings.md, written from the figures' verdict files.

    python -m delaylab.paper_figures.table [--check] [--output DIR] [--findings docs/findings.md]

Every figure that judges a paper's claim writes ``<stem>.verdicts.json`` beside its text (one row
per claim: claim, verdict, evidence, conditions; :class:`paper_figures._figure.Figure`). This
collects the files of ``paper_figures/output/`` and writes them as one Markdown table between the
markers ``<!-- verdicts:begin -->`` and ``<!-- verdicts:end -->`` of docs/findings.md, so that no
verdict there is typed by hand. ``--check`` writes nothing and exits 1 when the file differs from
what it would write (the test suite runs it).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys

BEGIN, END = "<!-- verdicts:begin -->", "<!-- verdicts:end -->"
HERE = os.path.dirname(os.path.abspath(__file__))


def rows(output_dir: str) -> list:
    out = []
    for path in sorted(glob.glob(os.path.join(output_dir, "*.verdicts.json"))):
        with open(path) as fh:
            out.extend(json.load(fh, parse_constant=_no_constants))
    return out


def _no_constants(name):
    raise ValueError(f"non-finite number {name} in a verdict file")


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def table(rs: list) -> str:
    lines = ["| figure | claim | verdict | evidence (95% intervals) | conditions |", "|---|---|---|---|---|"]
    lines += [f"| `{_cell(r['stem'])}` | {_cell(r['claim'])} | **{_cell(r['verdict'])}** | {_cell(r['evidence'])} | "
              f"{_cell(r['conditions'])} |" for r in rs]
    return "\n".join(lines)


def render(document: str, rs: list) -> str:
    if document.count(BEGIN) != 1 or document.count(END) != 1 or document.index(BEGIN) > document.index(END):
        raise ValueError(f"the findings file must hold the markers {BEGIN} and {END} once each, in that order")
    head, rest = document.split(BEGIN)
    _, tail = rest.split(END)
    return f"{head}{BEGIN}\n{table(rs)}\n{END}{tail}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--output", default=os.path.join(HERE, "output"), help="the figures' folder")
    ap.add_argument("--findings", default=os.path.join(os.path.dirname(HERE), "docs", "findings.md"),
                    help="the file whose markers hold the table (default: docs/findings.md)")
    ap.add_argument("--check", action="store_true", help="exit 1 if the file's table is not up to date")
    args = ap.parse_args(argv)
    with open(args.findings) as fh:
        old = fh.read()
    rs = rows(args.output)
    new = render(old, rs)
    if args.check:
        if new != old:
            print(f"{args.findings}: the verdict table differs from {args.output}/*.verdicts.json; "
                  "run python -m delaylab.paper_figures.table", file=sys.stderr)
            return 1
        return 0
    if new != old:
        with open(args.findings, "w") as fh:
            fh.write(new)
    print(f"{args.findings}: {len(rs)} verdict rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
