from django.apps import AppConfig
from django.db.models.signals import post_delete, post_save
from django.utils.translation import gettext_lazy as _


class CatalogConfig(AppConfig):
    name = "apps.catalog"
    verbose_name = _("Catalog")

    def ready(self):
        from apps.catalog.models import AcceleratorModel, Flavor, FlavorFamily, Price, Region

        # Every way these rows are written (the operators' catalog editor, the admin, the host
        # agents' proposed families, seed_demo) shows at once in the reads kept whole.
        for model in (AcceleratorModel, FlavorFamily, Flavor, Region, Price):
            post_save.connect(_catalog_row_changed, sender=model, dispatch_uid="catalog-row")
            post_delete.connect(_catalog_row_changed, sender=model, dispatch_uid="catalog-row")


def _catalog_row_changed(sender, **kwargs):
    from apps.catalog.selectors import catalog_changed

    catalog_changed()
