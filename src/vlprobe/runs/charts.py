"""How an experiment's results are drawn (``probe plot``, ``probe report``).

Each experiment's declaration names its :class:`Chart` (``Experiment(..., chart=Chart(...))``,
:mod:`vlprobe.runs.declare`); :func:`chart_for` looks it up by the experiment named in a
CSV. Three kinds:

* ``layers`` — layer curves: per panel (stream, pooling, subset) the target and the control
  over layers, each the mean over seeds with its min–max band over seeds, 95% item-bootstrap
  intervals as error bars where the run has them, a chance line where the task has one, and the
  model's layer kinds (embed / self / lang / rel / cross / joint) shaded behind;
* ``bars`` — a score per category with its 95% interval: categories are the metrics
  (Winoground text / image / group; recall@k) or the subsets (SugarCrepe, VALSE); one panel per
  subset or per metric;
* ``lambda`` — variant similarity: a score against λ, one line per aggregation, one panel per
  metric;
* ``gaps`` — bias-gap: per subset the histogram of each blind scorer's per-item gaps (read from the
  run's ``<run>.items.csv``), and a panel of bars of each scorer's (and each VLM run's) share
  right per subset.

Percent metrics are drawn on a fixed 0–100 axis.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vlprobe.registry import EXPERIMENTS
from vlprobe.validation import InputError

__all__ = ["NO_MARGIN", "WINOGROUND_CHANCE", "Chart", "chart_for", "chart_of", "charted_experiments"]


@dataclass(frozen=True)
class Chart:
    """How an experiment's tidy rows are drawn.

    Attributes
    ----------
    kind : {"layers", "bars", "lambda", "gaps"}
    metrics : tuple of str
        The metrics drawn by default (the first one the CSV holds, for ``layers``; every one it
        holds, in this order, for ``bars`` and ``lambda``).
    subsets : tuple of str or None
        Subsets drawn by default (None: every subset the CSV holds that is not a tag subset,
        i.e. has no ``=``).
    categories : {"metric", "subset"}
        ``bars``: what the bars of a panel stand for (the other one makes the panels).
    chance : dict of str to float
        Chance level of a metric, in its unit (a dotted line).
    split : str or None
        The split drawn by default (None: the first the CSV holds).
    panel : str
        ``layers``: the tidy column that, with the stream and the subset, makes a panel
        (``pooling``; ``probe`` where one run holds several probes or position groups).
    floor : float or None
        ``layers``: the lower end of a non-percent axis (None: the data's, for metrics that can
        be negative, such as an information gain).
    reference : str or None
        ``layers``: the ``probe`` of rows drawn as a horizontal line instead of a curve (the
        unedited model's score beside the edited layers').
    missing : dict of str to str
        ``layers``: what a layer without a value means, per metric (``separable_margin``: no
        case separable there, the margin being a mean over the separable cases); such layers are
        marked on the axis and the legend says this.
    """

    kind: str
    metrics: tuple[str, ...]
    subsets: tuple[str, ...] | None = ("all",)
    categories: str = "metric"
    chance: dict[str, float] = field(default_factory=dict)
    split: str | None = None
    panel: str = "pooling"
    floor: float | None = 0.0
    reference: str | None = None
    missing: dict[str, str] = field(default_factory=dict)


#: What a layer without a separability margin means (the margin is a mean over the separable
#: cases): separability's chart and the testbed's comparison figure say it in their legends.
NO_MARGIN = "no case separable at that layer (no margin)"
#: Chance of Winoground's scores under random scores: text and image 1/4, group 1/6.
WINOGROUND_CHANCE = {"text": 25.0, "image": 25.0, "group": 100.0 / 6.0}


def chart_of(experiment: str) -> Chart | None:
    """The chart its declaration gives a registered experiment (``Experiment.chart``); None for a
    name that is not registered (``compare`` results) or an experiment without one."""
    if experiment not in EXPERIMENTS:
        return None
    return getattr(EXPERIMENTS.get(experiment), "chart", None)


def charted_experiments() -> list[str]:
    """The registered experiments that have a chart, sorted."""
    return [name for name in EXPERIMENTS.names() if chart_of(name) is not None]


def chart_for(experiment: str, what: str) -> Chart:
    """The chart of ``experiment``; ``what`` names the file in the error.

    Raises
    ------
    InputError
        The experiment has no chart.
    """
    chart = chart_of(experiment)
    if chart is None:
        raise InputError(
            f"csv: {what} holds {experiment} results, which have no chart "
            f"(charts exist for {', '.join(charted_experiments())})"
        )
    return chart
