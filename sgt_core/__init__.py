"""SGT: scalable sparse graph transformers (Spexphormer's two-stage method) as a library of plain stages."""

import os

# Intel MKL, which torch's x86 builds link, picks its kernels by the memory alignment of each call's
# buffers unless told otherwise, so on Intel CPUs the same seed trained a different network from run to
# run (Cora's hybrid preset, seed 3: three runs, three test accuracies). Strict conditional numerical
# reproducibility makes MKL's results depend only on the inputs and the thread count (the same seed then
# gave the same network in 10 of 12 runs on 2 threads, and in every run on one; the estimator's scores
# were identical in every run either way). MKL reads this when torch's library loads: it holds in every
# stage process, torchrun rank and `sgt` command, which import sgt_core first or inherit it, not in a
# process that loaded torch before importing sgt_core. Set MKL_CBWR yourself to choose otherwise. The
# remaining misses are MKL's own threading; MKL_NUM_THREADS=1 removes them but is left to the user, since
# it slows the train stage on large graphs considerably (docs/design-notes.md, "Repeatable arithmetic").
os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")

__version__ = "0.1.0"
