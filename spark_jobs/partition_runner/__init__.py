"""One partition: replay what is committed, enrich the rest, snapshot while running.

On start the runner takes the partition's best manifest, replays its segments, skips the
input to the manifest's offset (keeping the rows of the pending entries) and restores the
pending entries into the operator. While the operator runs, a snapshot is cut every
``snapshot_interval`` seconds (or when ``snapshot_max_rows`` outputs wait): the operator's
pending entries, its input offset and the outputs since the last epoch are taken at one
instant, between two outputs, and written in a worker thread while calls stay in flight.

Records given to the operator are row *indexes*, not rows: a manifest then holds only
small integers and enrichment values, never input data, and a restored index finds its
row again because the partition's input is deterministic (same rows, same order).

Memory is bounded by the operator's capacity (rows it holds), one input batch and the
segment buffer, whatever the partition size.

The parts, one job each (``runner.py`` wires them for one attempt):

==================  ==============================================================
``replay.py``       the committed segments of the manifest resumed from
``input.py``        the input as row indexes and watermarks; rows held by index
``outage.py``       transient failures held back until they prove an outage
``budget.py``       the run's request budget: claims from its ledger, records it stopped
``epoch.py``        output rows and batches since the last cut
``stats.py``        the counters a manifest carries across attempts
``committer.py``    writing a cut (segments, then the manifest) one at a time
==================  ==============================================================
"""

from .epoch import ATTEMPTS_COLUMN, ERROR_COLUMN
from .outage import ApiOutageError
from .runner import PartitionRunner
from .task import PartitionTask

__all__ = ["ATTEMPTS_COLUMN", "ERROR_COLUMN", "ApiOutageError", "PartitionRunner", "PartitionTask"]
