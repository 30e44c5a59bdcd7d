import os

from django.core.wsgi import get_wsgi_application

from ctxlake_site.env import load_settings_or_exit

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ctxlake_site.settings")
load_settings_or_exit()  # a bad setting: one line and exit 2, not a traceback per worker
application = get_wsgi_application()
