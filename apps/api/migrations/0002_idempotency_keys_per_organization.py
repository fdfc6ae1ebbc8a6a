"""Idempotency keys belong to an organization, no longer to one API key: a record of an API key
("key:<id>") moves to its organization ("org:<id>"). Where two keys of one organization used the
same Idempotency-Key, the first record is kept (a retry replays the first answer). A record of
a key deleted since, or one still unfinished, is dropped (it would never be replayed)."""

from django.db import migrations


def to_organizations(apps, schema_editor):
    IdempotencyRecord = apps.get_model("api", "IdempotencyRecord")
    ApiKey = apps.get_model("tenants", "ApiKey")
    records = IdempotencyRecord.objects.filter(caller__startswith="key:").order_by("created_at", "pk")
    key_ids = {int(r.caller.split(":", 1)[1]) for r in records if r.caller[4:].isdigit()}
    organization_of = dict(ApiKey.objects.filter(pk__in=key_ids).values_list("pk", "organization_id"))
    taken = set(
        IdempotencyRecord.objects.filter(caller__startswith="org:").values_list("caller", "key")
    )
    for record in records:
        key_id = record.caller[4:]
        organization = organization_of.get(int(key_id)) if key_id.isdigit() else None
        caller = f"org:{organization}"
        if organization is None or record.status_code is None or (caller, record.key) in taken:
            record.delete()
            continue
        taken.add((caller, record.key))
        IdempotencyRecord.objects.filter(pk=record.pk).update(caller=caller)


class Migration(migrations.Migration):
    dependencies = [
        ("api", "0001_initial"),
        ("tenants", "0001_initial"),
    ]

    operations = [migrations.RunPython(to_organizations, migrations.RunPython.noop)]
