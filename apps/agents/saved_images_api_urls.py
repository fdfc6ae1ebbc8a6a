"""`/api/v1/saved-images/` (`saved_images_api`), included by portal/urls.py before the partner
API's routes."""

from rest_framework.routers import SimpleRouter

from apps.agents.saved_images_api import SavedImageViewSet

router = SimpleRouter()
router.register("", SavedImageViewSet, basename="saved-image")

app_name = "saved_images_api"
urlpatterns = router.urls
