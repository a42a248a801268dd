# A script whose entry point PyTorch's @record decorates (what torchrun's docs ask for to get a
# traceback in the failure summary): rank 1 raises, rank 0 waits for the launcher to stop it.
# Under ringgrad-run the summary must show rank 1's exception and traceback, read from the
# TORCHELASTIC_ERROR_FILE the launcher gave it.
import os
import time

from torch.distributed.elastic.multiprocessing.errors import record


def load_batch(rank):
    raise ValueError(f"bad batch on rank {rank}")


@record
def main():
    rank = int(os.environ["RANK"])
    if rank == 1:
        load_batch(rank)
    time.sleep(60)


if __name__ == "__main__":
    main()
