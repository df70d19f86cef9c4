"""Algorithms as pure functions (see :mod:`algos.base` for the protocol)."""

from delaylab.algos.asgd import (
    ASGDState,
    asgd,
    asgd_with_step_rule,
    clipped_asgd,
    constant_step,
    delay_adaptive_asgd,
    delay_adaptive_step,
    inverse_tau_asgd,
    inverse_tau_step,
    rescaled_asgd,
    rescaled_step,
    staleness_aware_asgd,
    staleness_aware_step,
)
from delaylab.algos.base import Algorithm, Event, Server, Worker, algorithm, gradient_job, handed_model
from delaylab.algos.corrections import Correction, clipped, clipping, server_correction
from delaylab.algos.fedstrag import fedstrag, fedstrag_history
from delaylab.algos.mitigation import fedasync, hierarchical_sgd, staleness_weight, staleness_weighted_asgd
from delaylab.algos.grouped import groups_by_speed, gsp
from delaylab.algos.async_local import async_local_sgd, dylu_local_steps, local_adamw_job, local_sgd_job
from delaylab.algos.local_steps import LocalSteps
from delaylab.algos.periodic import a_edit_local_steps, dpro_sm_like_local_steps, edit, fedshift, local_sgd, palsgd
from delaylab.algos.rounds import malenia_sgd, point_and_gradient_job, rennala_sgd, ringleader_asgd
from delaylab.algos.sync import minibatch_sgd
from delaylab.algos.wbsp import slowest_worker as wbsp_slowest_worker
from delaylab.algos.wbsp import wbsp
from delaylab.algos.tables import fedbuff_asgd, ia2sgd, ringmaster_asgd

__all__ = [
    "Correction",
    "clipped",
    "clipping",
    "server_correction",
    "Algorithm",
    "Server",
    "Worker",
    "algorithm",
    "handed_model",
    "ASGDState",
    "Event",
    "asgd",
    "asgd_with_step_rule",
    "async_local_sgd",
    "fedstrag",
    "fedstrag_history",
    "LocalSteps",
    "local_sgd_job",
    "local_adamw_job",
    "dylu_local_steps",
    "clipped_asgd",
    "constant_step",
    "delay_adaptive_asgd",
    "delay_adaptive_step",
    "dpro_sm_like_local_steps",
    "a_edit_local_steps",
    "edit",
    "fedasync",
    "fedshift",
    "local_sgd",
    "palsgd",
    "fedbuff_asgd",
    "ia2sgd",
    "inverse_tau_asgd",
    "inverse_tau_step",
    "malenia_sgd",
    "point_and_gradient_job",
    "rennala_sgd",
    "ringleader_asgd",
    "gradient_job",
    "groups_by_speed",
    "gsp",
    "hierarchical_sgd",
    "minibatch_sgd",
    "rescaled_asgd",
    "rescaled_step",
    "ringmaster_asgd",
    "staleness_aware_asgd",
    "staleness_aware_step",
    "staleness_weight",
    "staleness_weighted_asgd",
    "wbsp",
    "wbsp_slowest_worker",
]
