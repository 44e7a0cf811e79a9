"""Reads a folder of TensorBoard event files with TensorBoard's own reader and prints every
scalar as "tag step value", one per line. Exit code 1 if it finds no scalars.

  .venv/bin/python tests/tensorboard_read.py runs/05_ddp/tensorboard
"""
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    acc = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0})  # 0: keep every event
    acc.Reload()
    tags = acc.Tags()["scalars"]
    for tag in sorted(tags):
        for e in acc.Scalars(tag):
            print(f"{tag} {e.step} {e.value!r}")
    return 0 if tags else 1


if __name__ == "__main__":
    sys.exit(main())
