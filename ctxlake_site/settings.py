"""ctxlake settings: the only settings module, driven entirely by the environment.

Local defaults just work (embedded Postgres, a generated secret key kept under
$CTXLAKE_HOME); production sets SECRET_KEY, ALLOWED_HOSTS, DATABASE_URL and
CTXLAKE_HTTPS=true, and then `manage.py check --deploy` passes.
"""

from __future__ import annotations

import contextlib
import hashlib
import secrets
from pathlib import Path

import dj_database_url
import django_stubs_ext

from ctxlake_site import gunicorn_conf, object_store, paths
from ctxlake_site.env import (
    BadSetting,
    env_bool,
    env_choice,
    env_int,
    env_list,
    env_match,
    env_module,
    env_str,
)
from mcp_bridge import contract

django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent
CTXLAKE_HOME = paths.home()
CTXLAKE_CACHE_DIR = paths.cache_dir()
CTXLAKE_SPOOL_DIR = paths.spool_dir()
# Renders are stored in the database, which every web host serves; a worker also writes
# them into its CTXLAKE_CACHE_DIR for bridges on its own host (the single-host default).
# A worker host no bridge reads may turn that off.
CTXLAKE_LOCAL_CACHE = env_bool("CTXLAKE_LOCAL_CACHE", True)

# The text embedder for claims: a module with NAME, DIMS and embed(texts). Changing it
# leaves every claim marked with the old model until `manage.py reembed_claims --commit`.
CTXLAKE_EMBEDDER = env_module("CTXLAKE_EMBEDDER", "mcp_bridge.contract.embed")


def _local_secret_key() -> str:
    """A per-machine key, created once, so local sessions survive restarts."""
    key_file = CTXLAKE_HOME / "secret_key"
    if not key_file.exists():
        CTXLAKE_HOME.mkdir(parents=True, exist_ok=True)
        key_file.touch(mode=0o600)
        key_file.write_text(secrets.token_urlsafe(50))
    return key_file.read_text().strip()


DEBUG = env_bool("DEBUG", False)
SECRET_KEY = env_str("SECRET_KEY") or _local_secret_key()
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
for _origin in CSRF_TRUSTED_ORIGINS:
    if "://" not in _origin:
        raise BadSetting(
            "CSRF_TRUSTED_ORIGINS", env_str("CSRF_TRUSTED_ORIGINS"),
            "comma-separated origins with a scheme, e.g. https://ctxlake.example.com",
        )

# Behind TLS (a load balancer or a reverse proxy), turn on every secure-transport setting.
HTTPS = env_bool("CTXLAKE_HTTPS", False)
SECURE_SSL_REDIRECT = HTTPS
SESSION_COOKIE_SECURE = HTTPS
CSRF_COOKIE_SECURE = HTTPS
SECURE_HSTS_SECONDS = env_int("CTXLAKE_HSTS_SECONDS", 31_536_000 if HTTPS else 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = HTTPS
SECURE_HSTS_PRELOAD = HTTPS
if env_bool("CTXLAKE_BEHIND_PROXY", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_q",
    "fleet",
    "claims",
    "ctxlake_site",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "ctxlake_site.middleware.DatabaseUnavailableMiddleware",
]

ROOT_URLCONF = "ctxlake_site.urls"
WSGI_APPLICATION = "ctxlake_site.wsgi.application"
ASGI_APPLICATION = "ctxlake_site.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "ctxlake_site" / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]


# Connections a process keeps in a pool (psycopg_pool through Django's `pool` option),
# borrowed per request; 0: one persistent connection per thread (DB_CONN_MAX_AGE). gunicorn
# sets it in its workers (gunicorn_conf.raw_env), where threads outnumber connections.
CTXLAKE_DB_POOL = env_int("CTXLAKE_DB_POOL", 0, minimum=0)
#: How long a request waits for a pooled connection before it is answered 503.
DB_POOL_WAIT_SECS = 10


def _pooled(config: dict[str, object]) -> dict[str, object]:
    """`config` with a connection pool of CTXLAKE_DB_POOL when that is set.

    A pooled connection idle a while is checked before it is lent (CONN_HEALTH_CHECKS: one
    round trip; pooled_pg.check_when_idle), so a request after a database restart gets a
    live one; Django requires CONN_MAX_AGE 0.
    """
    if not CTXLAKE_DB_POOL:
        return config
    options = dict(config.get("OPTIONS") or {})  # type: ignore[call-overload]
    options["pool"] = {"min_size": 1, "max_size": CTXLAKE_DB_POOL, "timeout": DB_POOL_WAIT_SECS}
    return {**config, "OPTIONS": options, "CONN_MAX_AGE": 0, "CONN_HEALTH_CHECKS": True}


#: Times a connection runs one statement before it prepares it on the server, so that
#: Postgres parses and plans a repeated statement once per connection; it binds parameters
#: on the server to that end (ctxlake_site.pooled_pg.binding says why and what it measured).
#: 0: Django's defaults (client-side binding, nothing prepared), e.g. behind a
#: transaction-mode pooler that cannot keep prepared statements.
CTXLAKE_DB_PREPARE = env_int("CTXLAKE_DB_PREPARE", 5, minimum=0)


def _prepared(config: dict[str, object]) -> dict[str, object]:
    """`config` binding parameters on the server and preparing repeated statements."""
    if not CTXLAKE_DB_PREPARE:
        return config
    options = dict(config.get("OPTIONS") or {})  # type: ignore[call-overload]
    options.update(server_side_binding=True, prepare_threshold=CTXLAKE_DB_PREPARE)
    return {**config, "OPTIONS": options}


def _database() -> dict[str, object]:
    """DATABASE_URL when set; otherwise the embedded Postgres, started on first connection."""
    return _pooled(_prepared(_server()))


def _server() -> dict[str, object]:
    url = env_str("DATABASE_URL")
    if url:
        try:
            config = dj_database_url.parse(
                url, conn_max_age=env_int("DB_CONN_MAX_AGE", 60, minimum=0)
            )
        except ValueError:
            config = {}
        if config.get("ENGINE") != "django.db.backends.postgresql":
            raise BadSetting(
                "DATABASE_URL", url, "a postgres:// URL of a PostgreSQL with pgvector; "
                "unset it for the embedded server"
            )
        return {**config, "ENGINE": "ctxlake_site.pooled_pg"}  # Django's, its pool failing fast
    return {
        "ENGINE": "ctxlake_site.embedded_pg",
        "NAME": env_match(
            "CTXLAKE_DB_NAME", "ctxlake", r"[A-Za-z_][A-Za-z0-9_]{0,62}",
            "a database name: a letter or _, then up to 62 letters, digits or _",
        ),
        "USER": "postgres",
        "CONN_MAX_AGE": env_int("DB_CONN_MAX_AGE", 60, minimum=0),
    }


DATABASES = {"default": _database()}
# One test database per checkout, so test runs of different clones sharing the one embedded
# server (a CI clone, a second worktree) never drop each other's database.
DATABASES["default"]["TEST"] = {
    "NAME": "test_ctxlake_" + hashlib.sha256(str(BASE_DIR).encode()).hexdigest()[:8]
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# The database cache lets separate processes (doctor, the web, the cluster) see
# django-q2's cluster statistics: that is the worker heartbeat. "rendered-bodies" is each
# web process's own memory of rendered files it has read (fleet.body_memo says why).
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.db.DatabaseCache",
        "LOCATION": "ctxlake_cache",
    },
    "rendered-bodies": {
        "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
        "LOCATION": "ctxlake-rendered-bodies",
        "TIMEOUT": None,
        "OPTIONS": {"MAX_ENTRIES": 32},
    },
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(env_str("CTXLAKE_STATIC_ROOT") or CTXLAKE_HOME / "static")
# Hashed, compressed files once `collectstatic` has run (./ctxlake up runs it; so should a
# deploy); before that (tests, a fresh checkout) plain files found in the apps.
_COLLECTED = (STATIC_ROOT / "staticfiles.json").exists()
with contextlib.suppress(OSError):  # whitenoise warns on every request without it
    STATIC_ROOT.mkdir(parents=True, exist_ok=True)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"
        if _COLLECTED
        else "django.contrib.staticfiles.storage.StaticFilesStorage"
    },
}
# Rendered cache files' bodies: in Postgres by default; in an S3-compatible object store
# when CTXLAKE_S3_BUCKET is set (ctxlake_site/object_store.py, fleet/artifact_store.py).
_OBJECT_STORE = object_store.from_env()
if _OBJECT_STORE is not None:
    STORAGES["artifacts"] = _OBJECT_STORE.storage
CTXLAKE_S3_PREFIX = _OBJECT_STORE.prefix if _OBJECT_STORE is not None else ""
_STATIC_FINDERS = env_bool("CTXLAKE_STATIC_FINDERS", False)  # read always: a bad value fails
WHITENOISE_USE_FINDERS = not _COLLECTED or _STATIC_FINDERS
WHITENOISE_MANIFEST_STRICT = False  # a stale collection falls back to unhashed names

# Bodies past this are refused with 413 (by the API's parsers, and by Django elsewhere).
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("CTXLAKE_MAX_BODY_BYTES", 2_621_440, minimum=1024)
# How many live leases one agent may hold; a claim past it is refused (fleet.leases).
CTXLAKE_MAX_LIVE_LEASES_PER_AGENT = env_int("CTXLAKE_MAX_LIVE_LEASES_PER_AGENT", 500, minimum=1)
# Push (fleet/change_feed.py): long-polls waiting at once in one web process, and per API
# token in one process. A waiting long-poll holds a request thread, so by default only the
# threads gunicorn_conf sets aside for them wait and the rest keep serving REST.
CTXLAKE_LONGPOLL_WAITERS = env_int(
    "CTXLAKE_LONGPOLL_WAITERS", gunicorn_conf.longpoll_threads, minimum=1
)
CTXLAKE_LONGPOLL_PER_TOKEN = env_int("CTXLAKE_LONGPOLL_PER_TOKEN", 2, minimum=1)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "fleet.auth.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",  # staff, browsable API
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PARSER_CLASSES": ["fleet.api_parsers.BoundedJSONParser"],
    "DEFAULT_PAGINATION_CLASS": "ctxlake_site.api.FleetCursorPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_THROTTLE_CLASSES": ["ctxlake_site.api.TokenRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {
        "token": f"{env_int('CTXLAKE_API_RATE_PER_MINUTE', 1200, minimum=1)}/min",
    },
    "EXCEPTION_HANDLER": "ctxlake_site.api.exception_handler",
    "DEFAULT_METADATA_CLASS": None,  # OPTIONS is 405; /api/schema/ documents every endpoint
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "ctxlake API",
    "DESCRIPTION": (
        "Coordination and shared memory for fleets of AI coding agents. Every path is "
        "scoped to one fleet; a token sees only its own fleet (other fleets are 404)."
    ),
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # Swagger UI served from this server (drf-spectacular-sidecar), not a CDN: /api/docs/
    # works on machines without internet access.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "SCHEMA_PATH_PREFIX": r"/api/v1",
    "ENUM_NAME_OVERRIDES": {
        "ClaimStatusEnum": "claims.models.ClaimStatus",
        "HandoffStatusEnum": "fleet.models.HandoffStatus",
        "HandoffStateEnum": "fleet.models.HandoffState",
        "ScreenedKindEnum": "claims.release_views.KINDS",
        "ClaimEventKindEnum": "claims.models.EventKind",
    },
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "ctxlake_site.api_schema.add_error_responses",
    ],
}

# The broker: the same Postgres by default (the ORM broker); Redis when CTXLAKE_REDIS_URL is
# set, which is how several clusters on several hosts share one queue.
REDIS_URL = env_match(
    "CTXLAKE_REDIS_URL", "", r"(rediss?|unix)://\S+",
    "a redis://, rediss:// or unix:// URL; unset it for the ORM broker on Postgres",
)
Q_CLUSTER = {
    "name": "ctxlake",
    # the ORM broker's pusher waits on a NOTIFY rather than looking five times a second
    **({"redis": REDIS_URL} if REDIS_URL else {
        "orm": "default", "broker_class": "ctxlake_site.task_broker.ListeningORM"}),
    "workers": env_int("CTXLAKE_Q_WORKERS", 2, minimum=1),
    "timeout": 60,
    "retry": 90,  # must exceed timeout, or a slow task is retried while still running
    "max_attempts": 3,
    "catch_up": False,
    "cache": "default",
    # keep every result: django-q2's own bound reads all kept results for each one saved;
    # maintain_db prunes them by age instead (ctxlake_site/task_results.py)
    "save_limit": 0,
    "sync": env_bool("CTXLAKE_Q_SYNC", False),
    # The sentinel's loop: it saves the cluster's status each turn (several statements on
    # the database cache); django-q2 lets that status lapse after 3 s, so a turn stays below.
    # 2 s, not the default 0.5 s: a quarter of those writes and wake-ups on an idle cluster.
    "guard_cycle": 2,
}

# Every record is scrubbed on its way out (messages and tracebacks: ctxlake_site/logs.py);
# "django" is routed here too, replacing Django's own console and mail_admins handlers.
LOG_LEVEL = env_choice("CTXLAKE_LOG_LEVEL", "WARNING", contract.LOG_LEVELS)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    # While the embedded database is stopped on purpose: one line a minute, no tracebacks.
    # Every record (message and traceback) is scrubbed of secrets with the shared redactor.
    "filters": {
        "stopped_db": {"()": "ctxlake_site.embedded_pg.quiet.StoppedDatabaseFilter"},
        "scrub": {"()": "ctxlake_site.logs.ScrubFilter"},
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "filters": ["stopped_db", "scrub"]}
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        "django": {"handlers": ["console"], "propagate": False, "level": LOG_LEVEL},
        # at DEBUG botocore logs every request to the object store with its headers (the
        # scrubber masks the signature's credential): INFO at most for these three
        **{name: {"level": "INFO" if LOG_LEVEL == "DEBUG" else LOG_LEVEL}
           for name in ("botocore", "boto3", "s3transfer")},
    },
}
