"""The gallery of deliberately broken trainers, and the measurements that name a
defect: ``PITFALLS`` (one record per classic mistake, in ``pitfalls``),
``compare_with_exact`` (``measure``), ``diagnose`` (``diagnosis``, which runs
``probes`` and reads the result against ``signatures``), ``batch_dependence``
(``batchnorm``) and ``measure_peak_memory`` (``memory``).
"""

from gaviz.gallery.batchnorm import BatchDependence, batch_dependence
from gaviz.gallery.diagnosis import Diagnosis, SubjectError, diagnose
from gaviz.gallery.measure import Comparison, compare_with_exact
from gaviz.gallery.memory import MemoryReport, measure_peak_memory
from gaviz.gallery.pitfalls import GALLERY, PITFALLS

__all__ = ["BatchDependence", "Comparison", "Diagnosis", "GALLERY", "MemoryReport", "PITFALLS",
           "SubjectError", "batch_dependence", "compare_with_exact", "diagnose",
           "measure_peak_memory"]
