"""The audit log names its park and organization by id, not by foreign key: the tenants sit a
floor above the core, and history is neither rewritten (SET_NULL) nor blocked by a deletion.
The columns and their rows stay as they are; only the foreign-key constraints go."""

from django.db import migrations, models

TENANTS = {"organization": "organization_id", "park": "park_id"}
INDEXES = {
    "organization_id": "operations__organiz_2e9c75_idx",
    "park_id": "operations__park_id_6f6f3c_idx",
}


def by_id(name: str, **column) -> models.BigIntegerField:
    return models.BigIntegerField(blank=True, null=True, verbose_name=name, **column)


class Migration(migrations.Migration):
    dependencies = [("core", "0001_initial")]

    operations = [
        *(
            migrations.RemoveIndex(model_name="auditevent", name=index)
            for index in INDEXES.values()
        ),
        *(
            migrations.AlterField(
                model_name="auditevent", name=name, field=by_id(name, db_column=column)
            )
            for name, column in TENANTS.items()
        ),
        *(
            migrations.RenameField(model_name="auditevent", old_name=name, new_name=column)
            for name, column in TENANTS.items()
        ),
        *(
            migrations.AlterField(model_name="auditevent", name=column, field=by_id(name))
            for name, column in TENANTS.items()
        ),
        *(
            migrations.AddIndex(
                model_name="auditevent",
                index=models.Index(fields=[column, "-created_at"], name=index),
            )
            for column, index in INDEXES.items()
        ),
    ]
