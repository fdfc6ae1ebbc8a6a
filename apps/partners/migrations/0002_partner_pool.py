"""Which partner owns a pool is kept by the partners app (`PartnerPool`), where it was a
foreign key of orchestration's Pool up to partners: no foreign key points up a floor."""

import django.db.models.deletion
from django.db import migrations, models


def move_ownership(apps, schema_editor):
    Pool = apps.get_model("orchestration", "Pool")
    PartnerPool = apps.get_model("partners", "PartnerPool")
    PartnerPool.objects.bulk_create(
        PartnerPool(pool_id=pool, partner_id=partner)
        for pool, partner in Pool.objects.filter(partner__isnull=False).values_list(
            "pk", "partner_id"
        )
    )
    _checked_now(schema_editor)


def move_it_back(apps, schema_editor):
    Pool = apps.get_model("orchestration", "Pool")
    PartnerPool = apps.get_model("partners", "PartnerPool")
    for pool, partner in PartnerPool.objects.values_list("pool_id", "partner_id"):
        Pool.objects.filter(pk=pool).update(partner_id=partner)
    _checked_now(schema_editor)


def _checked_now(schema_editor):
    """PostgreSQL checks the rows' new foreign keys at COMMIT; the migration alters the tables
    after, which it refuses while those checks are pending: run them now."""
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("SET CONSTRAINTS ALL IMMEDIATE")


class Migration(migrations.Migration):
    dependencies = [
        ("orchestration", "0011_workloads"),
        ("partners", "0001_initial"),
    ]

    operations = [
        migrations.CreateModel(
            name="PartnerPool",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "partner",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="owned_pools",
                        to="partners.partner",
                        verbose_name="partner",
                    ),
                ),
                (
                    "pool",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="partner_pool",
                        to="orchestration.pool",
                        verbose_name="pool",
                    ),
                ),
            ],
            options={
                "verbose_name": "partner's pool",
                "verbose_name_plural": "partners' pools",
            },
        ),
        migrations.RunPython(move_ownership, move_it_back),
    ]
