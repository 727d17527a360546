"""The exact trainer and its parts: ``AccumulationTrainer`` (the window's loop in
the graph, with ``Model.fit``'s conventions), ``Accumulator`` (the same window
for your own loop or ``train_step``), and what a run reports.

``trainer`` builds its window loop from parts, in eight folders: ``window``
(one window's life, each decision made once for the trainer and the
Accumulator), ``loop`` (the trainer's graph call), ``data`` (fit's data as a
feed of passes), ``fit`` (fit's Python side: epochs, callbacks, history,
checks, compiling), ``loss`` (the loss as sums), ``own_loop`` (the
Accumulator and its callback), ``verify`` (is gaviz exact on this model) and
``cached`` (the cached window, for a loss that couples a batch's rows).
"""

from gaviz.training.cached.choice import CachedWindowUsed
from gaviz.training.cached.own_loop import cached_gradients
from gaviz.training.fit.history import History, NonFiniteUpdate, Update
from gaviz.training.loss.added_loss import InexactAddedLoss
from gaviz.training.loss.row_losses import CoupledLoss
from gaviz.training.loss.sparse_gradients import SparseGradientWarning
from gaviz.training.own_loop.accumulator import Accumulator
from gaviz.training.own_loop.flush_callback import FlushAtEpochEnd
from gaviz.training.trainer import AccumulationTrainer
from gaviz.training.verify.verification import NotExact, Verification, verify_loop
from gaviz.training.window.rules import EXACT, Rule

__all__ = ["AccumulationTrainer", "Accumulator", "CachedWindowUsed", "CoupledLoss", "EXACT",
           "FlushAtEpochEnd", "History", "cached_gradients",
           "InexactAddedLoss", "NonFiniteUpdate", "NotExact", "Rule", "SparseGradientWarning",
           "Update", "Verification", "verify_loop"]
