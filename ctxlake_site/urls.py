from django.contrib import admin
from django.urls import URLPattern, URLResolver, include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from ctxlake_site.export_api import ExportViewSet
from ctxlake_site.health_api import HealthView
from ctxlake_site.team_views import team

admin.site.site_url = "/"  # the admin's "View site" link: the team page

api_v1: list[URLPattern | URLResolver] = [
    path("health", HealthView.as_view(), name="health"),
    path("fleets/<str:fleet>/", include("fleet.urls")),
    path("fleets/<str:fleet>/", include("claims.urls")),
    path("fleets/<str:fleet>/export", ExportViewSet.as_view({"get": "export"}), name="export"),
]

urlpatterns = [
    path("", team, name="team"),
    path("admin/", admin.site.urls),
    path("api/v1/", include(api_v1)),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("api/auth/", include("rest_framework.urls")),  # staff login for the browsable API
]
