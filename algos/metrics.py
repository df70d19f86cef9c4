"""Metrics read off an algorithm's final state: elastic averaging's failure detection (docs/theory.md §9.5)."""

from __future__ import annotations

import numpy as np

from delaylab.algos.elastic.core import EAState


def detection_auc(state: EAState) -> dict:
    """The ROC AUC of −a as a score for "this exchange follows a failure", over the delivered
    attempts in the trace (ties count one half); with the counts of both classes. NaN when a
    class is empty. Accepts a sweep's state (leading run axes): one AUC per run."""
    a = np.asarray(state.trace_a, np.float64)
    follows = np.asarray(state.trace_follows, bool)
    ok = np.asarray(state.trace_delivered, bool)
    filled = np.arange(a.shape[-1]) < np.asarray(state.attempts)[..., None]
    lead = a.shape[:-1]
    auc = np.full(lead, np.nan)
    pos_n = np.zeros(lead, int)
    neg_n = np.zeros(lead, int)
    for idx in np.ndindex(*lead):
        keep = filled[idx] & ok[idx]
        score = -a[idx][keep]
        lab = follows[idx][keep]
        pos, neg = score[lab], score[~lab]
        pos_n[idx], neg_n[idx] = pos.size, neg.size
        if pos.size and neg.size:
            auc[idx] = auc_of(pos, neg)
    return {"auc": auc, "positives": pos_n, "negatives": neg_n}


def auc_of(pos: np.ndarray, neg: np.ndarray) -> float:
    """P(score of a positive > score of a negative) + ½ P(tie), by ranks (Mann–Whitney U)."""
    allv = np.concatenate([pos, neg])
    order = np.argsort(allv, kind="mergesort")
    ranks = np.empty(allv.size)
    sorted_v = allv[order]
    # average ranks over ties
    i = 0
    while i < allv.size:
        j = i
        while j + 1 < allv.size and sorted_v[j + 1] == sorted_v[i]:
            j += 1
        ranks[order[i:j + 1]] = 0.5 * (i + j) + 1
        i = j + 1
    u = ranks[: pos.size].sum() - pos.size * (pos.size + 1) / 2
    return float(u / (pos.size * neg.size))
