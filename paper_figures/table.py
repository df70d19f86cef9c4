"""The verdict table of docs/findings.md, written from the figures' verdict files.

    python -m delaylab.paper_figures.table [--check] [--output DIR] [--findings docs/findings.md]

Every figure that judges a paper's claim writes ``<stem>.verdicts.json`` beside its text (one row
per claim judged: the claim's id and kind in :mod:`paper_figures.catalogue`, the figure's words
for what it judged, verdict, evidence, conditions; :class:`paper_figures._figure.Figure`). This
collects the files of ``paper_figures/output/``, checks each row against the catalogue (a known
id, the catalogue's kind: so a claim judged by two figures gets one test), and writes them as one
Markdown table, grouped by claim in the catalogue's order with its source, kind, margin and
reconstructions, between the markers ``<!-- verdicts:begin -->`` and ``<!-- verdicts:end -->`` of
docs/findings.md, so that no verdict there is typed by hand. ``--check`` writes nothing and exits 1
when the file differs from what it would write or a row disagrees with the catalogue (the test
suite runs it).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys

from delaylab.paper_figures import catalogue

BEGIN, END = "<!-- verdicts:begin -->", "<!-- verdicts:end -->"
HERE = os.path.dirname(os.path.abspath(__file__))


def rows(output_dir: str) -> list:
    """Every verdict row of ``output_dir``, each checked against the catalogue."""
    out = []
    for path in sorted(glob.glob(os.path.join(output_dir, "*.verdicts.json"))):
        with open(path) as fh:
            rs = json.load(fh, parse_constant=_no_constants)
        for r in rs:
            check_row(r, path)
        out.extend(rs)
    return out


def check_row(r: dict, where: str) -> None:
    """A row names a catalogued claim and was judged by that claim's kind of test."""
    if r.get("id") not in catalogue.CLAIMS:
        raise ValueError(f"{where}: row {r.get('claim')!r} names no catalogued claim (id {r.get('id')!r}); "
                         f"known: {sorted(catalogue.CLAIMS)}")
    want = catalogue.CLAIMS[r["id"]].kind
    if r.get("kind") != want:
        raise ValueError(f"{where}: claim {r['id']} was judged as {r.get('kind')!r}; the catalogue's kind is {want!r}")


def _no_constants(name):
    raise ValueError(f"non-finite number {name} in a verdict file")


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def table(rs: list) -> str:
    """One section per catalogued claim that some figure judged (catalogue order), then its rows."""
    lines = []
    for c in catalogue.CLAIMS.values():
        mine = [r for r in rs if r["id"] == c.id]
        if not mine:
            continue
        head = (f"**{_cell(c.words)}** (`{c.id}`). Source: {_cell(c.source)}; stated at {_cell(c.when)}. "
                f"Test: {c.kind}" + (f", margin {_cell(c.margin)}" if c.margin else "")
                + f", over {_cell(c.family)}"
                + (f" (family of {c.family_size}: each holds at level 1 − 0.05/{c.family_size})" if c.family_size > 1 else "")
                + ((". Between tuned methods: the verdict must agree at the tuned steps, "
                    + ("a common step and the tuned steps' grid neighbours" if c.common_step else
                       "and their grid neighbours (no common step: the arms' steps share no scale)"))
                   if c.tuned else "") + ".")
        if c.reconstructions:
            head += " Reconstructed: " + "; ".join(_cell(x) for x in c.reconstructions) + "."
        lines += ["", head, "", "| figure | as judged | verdict | evidence (intervals at the level stated, else 95%) | conditions |",
                  "|---|---|---|---|---|"]
        lines += [f"| `{_cell(r['stem'])}` | {_cell(r['claim'])} | **{_cell(r['verdict'])}** | {_cell(r['evidence'])} | "
                  f"{_cell(r['conditions'])} |" for r in mine]
    return "\n".join(lines[1:])


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
    try:
        rs = rows(args.output)
    except ValueError as err:
        print(f"{args.findings}: {err}", file=sys.stderr)
        return 1
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
