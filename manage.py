#!/usr/bin/env python
"""Django's command-line utility for ctxlake."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ctxlake_site.settings")
    from django.core.management import execute_from_command_line

    from ctxlake_site.env import load_settings_or_exit

    load_settings_or_exit()  # a bad setting: one line and exit 2, not two tracebacks
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
