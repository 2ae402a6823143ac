"""One rank of DDP training, as torchrun starts it: `python -m sgt_core.train.distributed <launch.json>`."""

import sys

from sgt_core.train.distributed.ranks import main

main(sys.argv[1:])
