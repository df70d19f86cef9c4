"""The committed figure outputs are what the code draws from their stored data: every text (the
findings, the CSV and the verdict rows) is regenerated from its `.npz` and compared byte for byte,
every figure text has its `.npz`, and every measured number docs/findings.md states outside its
generated table is one a figure's regenerated text states."""

import glob
import os
import re

import pytest

from delaylab import paper_figures

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "paper_figures", "output")
TEXTS = sorted(os.path.basename(p)[:-4] for p in glob.glob(os.path.join(OUT, "*.txt")))


def _figure_of(stem: str):
    """(figure, data) whose stored `<stem>.npz` this is."""
    path = os.path.join(OUT, f"{stem}.npz")
    for name in paper_figures.FIGURES:
        fig = paper_figures.figure(name)
        if isinstance(fig.stem, str) and fig.stem != stem:
            continue
        try:
            data = fig.load(path)
        except (KeyError, ValueError, TypeError):
            continue
        if fig.file_stem(data) == stem:
            return fig, data
    raise AssertionError(f"no figure draws {path}")


@pytest.mark.parametrize("stem", TEXTS)
def test_every_figure_text_is_regenerated_from_its_stored_data(stem):
    assert os.path.isfile(os.path.join(OUT, f"{stem}.npz")), (
        f"{stem}.txt has no {stem}.npz beside it: its numbers cannot be checked against stored data")
    fig, data = _figure_of(stem)
    for name, content in fig.texts(data).items():
        with open(os.path.join(OUT, name), "rb") as fh:
            assert fh.read() == content, (f"{name} differs from what {fig.name} draws from {stem}.npz; redraw it: "
                                          f"delaylab figure {fig.name} --redraw {os.path.join(OUT, stem)}.npz --out {OUT}")


NUMBER = re.compile(r"(?<![\w.])[−+-]?\d+\.\d+")


def _numbers(text: str) -> set:
    return {m.group(0).replace("−", "-").lstrip("+") for m in NUMBER.finditer(text)}


def test_findings_doc_states_only_numbers_the_figures_state():
    """Outside its generated table, docs/findings.md may state a measured number (one with a
    decimal point) only where some figure's stored text states it too: a number typed there and
    not regenerated is how a doc goes stale after a rerun."""
    with open(os.path.join(ROOT, "docs", "findings.md")) as fh:
        doc = fh.read()
    head, rest = doc.split("<!-- verdicts:begin -->")
    _, tail = rest.split("<!-- verdicts:end -->")
    stated = set()
    for p in glob.glob(os.path.join(OUT, "*.txt")) + glob.glob(os.path.join(OUT, "*.verdicts.json")):
        with open(p) as fh:
            stated |= _numbers(fh.read())
    missing = sorted(_numbers(head + tail) - stated)
    assert not missing, f"docs/findings.md states numbers no figure text states: {missing}"


def test_readme_figure_list_states_no_result():
    """The README's figure list asks each figure's question and states no answer (no verdict word,
    no measured number): its answers live in docs/findings.md's generated table, where a rerun
    rewrites them."""
    with open(os.path.join(ROOT, "README.md")) as fh:
        readme = fh.read()
    figures = readme.split("## Figures", 1)[1].split("\n## ", 1)[0]
    for word in ("holds", "does not hold", "inconclusive", "not found", "no effect"):
        assert word not in figures.lower(), f"the README's figure list states a result: {word!r}"
    with open(os.path.join(ROOT, "paper_figures", "catalogue.py")) as fh:
        settings = _numbers(fh.read())  # a set-up's parameters (Dirichlet 0.1), as the catalogue names them
    assert not _numbers(figures) - settings, f"the README's figure list states numbers: {sorted(_numbers(figures))}"
