"""`python -m ppomq.core.settings > docs/reference/settings.md`"""

from __future__ import annotations

from ppomq.core.settings.docs import settings_table

if __name__ == "__main__":
    print(settings_table(), end="")
