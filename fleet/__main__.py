from __future__ import annotations

from fleet.cli import main

if __name__ == "__main__":
    main()
