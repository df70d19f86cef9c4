"""One module per reproduced figure, each following the figure protocol of
:mod:`paper_figures._figure` (a frozen preset type, ``compute``, ``plot``, ``findings``, ``rows``,
and ``FIGURE``). :func:`figure` gives a figure by its command-line name; ``FIGURES`` lists them
without importing their modules (for ``delaylab figure --help``)."""

from __future__ import annotations

import importlib

from delaylab.paper_figures._figure import Figure, MixedConvolution, Parts, format_seconds

# name -> (module, one line)
FIGURES = {
    "r1": ("delaylab.paper_figures.r1_bias_toy", "bias toy: x against simulated time, vanilla / Rescaled / γ ∝ 1/τ (Fig. A)"),
    "r2": ("delaylab.paper_figures.r2_implicit_weights", "implicit weights of 5 step rules on 4 τ profiles"),
    "r3": ("delaylab.paper_figures.r3_noise_floor", "noise floors against γ and σ, vanilla and Rescaled, with V σ²/(4Γ)"),
    "r4": ("delaylab.paper_figures.r4_time_to_eps", "time to ‖∇F‖² ≤ ε for 7 methods, with the heterogeneous lower bound"),
    "r5": ("delaylab.paper_figures.r5_mnist", "MNIST-format MLP, n = 100, Dirichlet 0.1: Rescaled, Malenia, Ringleader, IA²SGD, vanilla"),
    "deahes": ("delaylab.paper_figures.deahes", "DEAHES-O Figs. 4-5: elastic averaging with AdaHessian under failures, P ∈ {4, 8}, τ ∈ {1, 2, 4}"),
    "deahes-readings": ("delaylab.paper_figures.deahes_readings",
                        "which reading of DEAHES-O reproduces the paper: readings × failure models × semantics"),
    "hetero-specialisation": ("delaylab.paper_figures.hetero_specialisation",
                              "do fast workers specialise by layer? CKA / gradient alignment against the compute ratio"),
    "hetero-divergence": ("delaylab.paper_figures.hetero_divergence",
                          "stragglers' representation divergence, with and without staleness weighting"),
    "hetero-difficulty": ("delaylab.paper_figures.hetero_difficulty",
                          "slow jobs and workers against their examples' difficulty, durations independent of the data"),
    "hetero-local-models": ("delaylab.paper_figures.hetero_local_models",
                            "do fast workers specialise when workers keep models of their own? EASGD, async local SGD, "
                            "FedAsync, read after the local steps"),
    "hetero-frontier": ("delaylab.paper_figures.hetero_frontier",
                        "accuracy and time to target against heterogeneity, five schemes at their best step size"),
    "hetero-mitigation": ("delaylab.paper_figures.hetero_mitigation",
                          "one mitigation at a time: throughput, final loss, specialisation index"),
    "wallclock": ("delaylab.paper_figures.wallclock",
                  "a real Ray run against its exact replay, and the fixed-computation and server models fitted to it, "
                  "in seconds"),
    "server-timing": ("delaylab.paper_figures.server_timing",
                      "real Ray workers against fixed computation and the fitted server model: update shares and "
                      "the limit, by worker count and job scale"),
    "async-vs-minibatch": ("delaylab.paper_figures.async_vs_minibatch",
                           "asynchronous against minibatch SGD on real Ray workers, one 100× slower, beside the "
                           "fitted server model's and fixed computation's predictions"),
    "bias-networks": ("delaylab.paper_figures.bias_networks",
                      "vanilla ASGD's frequency-weighted bias on an MLP and a CNN, non-i.i.d. shards, against theory"),
    "r6": ("delaylab.paper_figures.r6_homogeneous", "homogeneous data: Rescaled vs vanilla (noise floor τ_A/τ_H), median/IQR over seeds"),
}


def figure(name: str) -> Figure:
    """The figure ``name`` (its module's ``FIGURE``)."""
    if name not in FIGURES:
        raise ValueError(f"unknown figure {name!r}; allowed: {sorted(FIGURES)}")
    fig = importlib.import_module(FIGURES[name][0]).FIGURE
    if not isinstance(fig, Figure) or fig.name != name:
        raise TypeError(f"{FIGURES[name][0]}.FIGURE must be the paper_figures.Figure named {name!r}")
    return fig


__all__ = ["FIGURES", "Figure", "MixedConvolution", "Parts", "figure", "format_seconds"]
