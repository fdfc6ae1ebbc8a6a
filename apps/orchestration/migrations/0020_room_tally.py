import django.db.models.deletion
from django.db import migrations, models

# The columns that tell one kind of room from another (RoomTally's, as on a node).
CLASS = "pool_id, room_cards, room_idle, vcpu_total, room_vcpu_held, ram_gb_total, room_ram_gb_held"
SCHEDULABLE = "health = 'healthy' AND NOT is_drained"

# What one statement changed, as (class, +1 or -1 a node) rows: its new rows (INSERT, UPDATE)
# and its old rows (UPDATE, DELETE), where schedulable.
ADDED = f"SELECT {CLASS}, 1 AS nodes FROM new_nodes WHERE {SCHEDULABLE}"
TAKEN = f"SELECT {CLASS}, -1 AS nodes FROM old_nodes WHERE {SCHEDULABLE}"
CHANGES = {
    "insert": (ADDED, "NEW TABLE AS new_nodes"),
    "update": (f"{ADDED} UNION ALL {TAKEN}", "NEW TABLE AS new_nodes OLD TABLE AS old_nodes"),
    "delete": (TAKEN, "OLD TABLE AS old_nodes"),
}

# Added to this backend's own rows (see RoomTally): nothing another transaction holds is
# waited for. A node whose room or state did not change adds nothing (telemetry, last seen).
FUNCTION = f"""
CREATE FUNCTION orchestration_room_tally_{{event}}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO orchestration_roomtally AS tally ({CLASS}, backend, nodes)
    SELECT {CLASS}, pg_backend_pid(), SUM(nodes) FROM ({{changes}}) changed
    GROUP BY {CLASS}
    HAVING SUM(nodes) <> 0
    ON CONFLICT ({CLASS}, backend) DO UPDATE SET nodes = tally.nodes + EXCLUDED.nodes;
    RETURN NULL;
END
$$;
CREATE TRIGGER orchestration_room_tally_{{event}} AFTER {{event}} ON orchestration_node
REFERENCING {{tables}} FOR EACH STATEMENT EXECUTE FUNCTION orchestration_room_tally_{{event}}();
"""

# Emptying the nodes' table (Django's flush truncates every table at once) empties the tally.
TRUNCATED = """
CREATE FUNCTION orchestration_room_tally_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM orchestration_roomtally;
    RETURN NULL;
END
$$;
CREATE TRIGGER orchestration_room_tally_truncate AFTER TRUNCATE ON orchestration_node
FOR EACH STATEMENT EXECUTE FUNCTION orchestration_room_tally_truncate();
"""

# The nodes there already, counted under the triggers' lock on the table: nothing is missed.
SEEDED = f"""
INSERT INTO orchestration_roomtally ({CLASS}, backend, nodes)
SELECT {CLASS}, 0, COUNT(*) FROM orchestration_node WHERE {SCHEDULABLE} GROUP BY {CLASS}
"""


def keep_tally(apps, schema_editor):
    """The triggers that keep RoomTally, and the tally of the nodes there: PostgreSQL only
    (SQLite counts the nodes)."""
    if schema_editor.connection.vendor != "postgresql":
        return
    for event, (changes, tables) in CHANGES.items():
        schema_editor.execute(FUNCTION.format(event=event, changes=changes, tables=tables))
    schema_editor.execute(TRUNCATED)
    schema_editor.execute(SEEDED)


def drop_tally(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for event in (*CHANGES, "truncate"):
        schema_editor.execute(
            f"DROP TRIGGER orchestration_room_tally_{event} ON orchestration_node;"
            f"DROP FUNCTION orchestration_room_tally_{event}()"
        )


class Migration(migrations.Migration):
    dependencies = [
        ("orchestration", "0019_card_idle_readings"),
    ]

    operations = [
        migrations.CreateModel(
            name="RoomTally",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("room_cards", models.PositiveSmallIntegerField()),
                ("room_idle", models.PositiveSmallIntegerField()),
                ("vcpu_total", models.PositiveIntegerField()),
                ("room_vcpu_held", models.PositiveIntegerField()),
                ("ram_gb_total", models.PositiveIntegerField()),
                ("room_ram_gb_held", models.PositiveIntegerField()),
                ("backend", models.IntegerField()),
                ("nodes", models.IntegerField()),
                (
                    "pool",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="+",
                        to="orchestration.pool",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=(
                            "pool",
                            "room_cards",
                            "room_idle",
                            "vcpu_total",
                            "room_vcpu_held",
                            "ram_gb_total",
                            "room_ram_gb_held",
                            "backend",
                        ),
                        name="room_tally_unique",
                    )
                ],
            },
        ),
        migrations.RunPython(keep_tally, drop_tally),
    ]
