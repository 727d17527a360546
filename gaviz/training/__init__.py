"""The exact trainer and its parts: ``AccumulationTrainer`` (the window's loop in
the graph, with ``Model.fit``'s conventions), ``Accumulator`` (the same window
for your own loop or ``train_step``), and what a run reports.

The modules, from the top: ``trainer`` builds the window loop once from its
parts; ``window_loop`` is the graph code one call runs, from ``forward_backward``,
``window_cycle``, ``state`` and a ``rules.Rule`` (the window's arithmetic as
data, on ``window``'s pure functions); ``feeds``, ``sources``, ``fitting``,
``validation`` and ``call_size`` turn ``fit``'s data into graph calls and run
the epochs (``preprocessing``: a KerasHub task's preprocessor on them);
``objective``, ``row_losses``, ``own_loss``, ``added_loss``, ``row_means`` and ``compiling``
read the compiled model; ``checks``, ``batch_layers`` and ``sparse_gradients``
refuse or warn; ``history`` is what a run reports.
"""

from gaviz.training.accumulator import Accumulator
from gaviz.training.added_loss import InexactAddedLoss
from gaviz.training.flush_callback import FlushAtEpochEnd
from gaviz.training.history import History, NonFiniteUpdate, Update
from gaviz.training.row_losses import CoupledLoss
from gaviz.training.rules import EXACT, Rule
from gaviz.training.sparse_gradients import SparseGradientWarning
from gaviz.training.trainer import AccumulationTrainer
from gaviz.training.verification import NotExact, Verification, verify_loop

__all__ = ["AccumulationTrainer", "Accumulator", "CoupledLoss", "EXACT", "FlushAtEpochEnd", "History",
           "InexactAddedLoss", "NonFiniteUpdate", "NotExact", "Rule", "SparseGradientWarning",
           "Update", "Verification", "verify_loop"]
