"""A pool's partner is kept by the partners app now (partners.PartnerPool, filled from this
column by partners' 0002)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("orchestration", "0011_workloads"),
        ("partners", "0002_partner_pool"),
    ]

    operations = [migrations.RemoveField(model_name="pool", name="partner")]
