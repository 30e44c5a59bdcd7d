import os

from django.core.asgi import get_asgi_application

from ctxlake_site.env import load_settings_or_exit

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ctxlake_site.settings")
load_settings_or_exit()  # a bad setting: one line and exit 2, not a traceback
application = get_asgi_application()
