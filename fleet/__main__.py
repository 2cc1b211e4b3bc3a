"""``python -m fleet``: the CLI. ``python -m fleet channel …`` (what every spawned session runs) goes
straight to the channel, without loading the rest of the CLI: one channel per agent stays small."""

from __future__ import annotations

import sys


def _main() -> None:
    if sys.argv[1:2] == ["channel"]:
        from fleet.channel import main as channel

        sys.exit(channel(sys.argv[2:]))
    from fleet.allocator import restart_for_the_daemon

    restart_for_the_daemon()  # before the CLI is imported: the restart costs an interpreter start only
    from fleet.cli import main

    main()


if __name__ == "__main__":
    _main()
